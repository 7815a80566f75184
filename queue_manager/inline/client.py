"""The upstream HTTP/1.1 client: a keep-alive pool per origin, httptools parsing, flow control both ways.

Why not a general client library: the proxy needs four things at once that are awkward to bolt on to
one — the SSRF rule checked on the address actually connected to on every new connection, bodies
streamed both ways with backpressure and nothing buffered beyond a small window, the response head
handed over as raw byte pairs (no re-casing, no merging, no decompression), and low per-request cost.
llhttp (through httptools, already what our server parses with) does the parsing; this module only
moves bytes.

One :class:`Upstream` is one TCP (or TLS) connection carrying one exchange at a time. The pool keeps
idle connections per origin for ``IDLE_SEC`` (below the common 5 s keep-alive of app servers, so a
reused connection is rarely one the app is closing at that moment).
"""

from __future__ import annotations

import asyncio
import collections
import socket
import ssl
import time
from dataclasses import dataclass, field
from typing import Protocol, cast

import httptools

from queue_manager import ssrf
from queue_manager.engine.origins import url_host

IDLE_SEC = 3.0
IDLE_PER_ORIGIN = 256
READ_HIGH_WATER = 256 * 1024  # response bytes held before reading from the origin pauses


@dataclass(frozen=True, slots=True)
class Origin:
    scheme: str
    host: str
    port: int
    authority: str = field(init=False, compare=False)  # host:port, an IPv6 host in brackets
    key: str = field(init=False, compare=False)  # scheme://host:port, the pool's key (made once)

    def __post_init__(self) -> None:
        object.__setattr__(self, "authority", f"{url_host(self.host)}:{self.port}")
        object.__setattr__(self, "key", f"{self.scheme}://{self.authority}")


class UpstreamError(Exception):
    """The origin failed; ``phase`` says where (connect, refused, timeout, response, body)."""

    def __init__(self, phase: str, message: str) -> None:
        super().__init__(message)
        self.phase = phase


class Sink(Protocol):
    """Who an exchange in callback mode reports to (the inline fast path's :class:`~.relay.Relay`)."""

    def upstream_head(self, conn: Upstream) -> None: ...
    def upstream_body(self, data: bytes) -> None: ...
    def upstream_done(self, conn: Upstream) -> None: ...
    def upstream_failed(self, conn: Upstream, err: UpstreamError) -> None: ...
    def upstream_writable(self, ok: bool) -> None: ...
    def upstream_flush(self) -> None: ...


class Upstream(asyncio.Protocol):
    """One connection to an origin, parsing one response at a time.

    Two ways to run an exchange: awaited (:meth:`begin`, then :meth:`response_head` and :meth:`read`,
    used by the ASGI path and the health probe) or in callback mode (:meth:`begin_sink`: the head, each
    body piece, the end and any failure are handed to a :class:`Sink` as they are parsed, nothing held).
    """

    def __init__(self, origin: Origin) -> None:
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.peer = ""
        self.closed = False
        self.idle_since = 0.0
        self._loop = asyncio.get_running_loop()
        self._write_ok: asyncio.Event = asyncio.Event()
        self._write_ok.set()
        self._parser: httptools.HttpResponseParser | None = None
        self.sink: Sink | None = None
        self._paused = False
        self._head_only = False
        self.complete = False
        self._error: UpstreamError | None = None
        self._chunks: collections.deque[bytes] = collections.deque()
        self._reset_exchange(head_only=False)

    # ---------------------------------------------------------------- exchange state

    def _reset_exchange(self, head_only: bool, sink: Sink | None = None) -> None:
        # the parser carries over from a cleanly finished exchange; after a HEAD (no body read) it cannot
        if self._parser is None or self._head_only or not self.complete or self._error is not None:
            self._parser = httptools.HttpResponseParser(self)
        if self._paused and self.transport is not None and not self.closed:
            self.transport.resume_reading()
        self.sink = sink
        self._head_only = head_only
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.keep_alive = False
        self.length: int | None = None
        self.head_done = False
        if sink is None:
            self._head: asyncio.Future[None] | None = self._loop.create_future()
            self._chunks = collections.deque()
            self._data = asyncio.Event()
        else:  # nothing awaits a callback-mode exchange: no future, no event, no buffer
            self._head = None
            self._data = NO_EVENT
        self._buffered = 0
        self.complete = False
        self._error = None
        self._paused = False
        self._until_close = False
        self.got_bytes = False

    # ---------------------------------------------------------------- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transport is not the asyncio class
        peer = transport.get_extra_info("peername")
        self.peer = str(peer[0]) if peer else ""
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.got_bytes = True
        if self.complete or self._parser is None:
            return  # bytes after a complete response (none expected without pipelining)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass
        except httptools.HttpParserError as exc:
            self._fail(UpstreamError("response" if not self.head_done else "body", f"bad response: {exc}"))
            if self.transport is not None:
                self.transport.close()
            return
        sink = self.sink
        if sink is not None:
            sink.upstream_flush()  # what this read produced, in one write to the visitor

    def eof_received(self) -> bool | None:
        if not self.complete and self.head_done and self._until_close:
            self.keep_alive = False
            self._finish()  # a read-until-close body ends here
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._write_ok.set()
        if not self.complete:
            if not self.head_done:
                self._fail(UpstreamError("response", "the origin closed the connection before answering"))
            else:
                # a body without a length ends with the connection; anything else is cut short
                if self._until_close and self._error is None:
                    self.keep_alive = False
                    self._finish()
                else:
                    self._fail(UpstreamError("body", "the origin closed the connection mid-response"))

    def pause_writing(self) -> None:
        self._write_ok.clear()
        if self.sink is not None:
            self.sink.upstream_writable(False)

    def resume_writing(self) -> None:
        self._write_ok.set()
        if self.sink is not None:
            self.sink.upstream_writable(True)

    @property
    def write_paused(self) -> bool:
        return not self._write_ok.is_set()

    # ---------------------------------------------------------------- httptools callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        parser = self._parser
        assert parser is not None
        status = parser.get_status_code()
        if 100 <= status < 200 and status != 101:
            self.headers = []  # an interim answer (100 Continue, 103 Early Hints): wait for the final one
            return
        self.status = status
        self.keep_alive = parser.should_keep_alive()
        self.length = None
        chunked = False
        for k, v in self.headers:
            if k == b"content-length":
                self.length = int(v) if v.isascii() and v.isdigit() else None
            elif k == b"transfer-encoding" and b"chunked" in v.lower():
                chunked = True
        # neither a length nor chunked: the body ends when the connection does (HTTP/1.0 style)
        self._until_close = self.length is None and not chunked
        self.head_done = True
        no_body = self._head_only or status in (204, 304)
        sink = self.sink
        if sink is not None:
            sink.upstream_head(self)
        elif self._head is not None and not self._head.done():
            self._head.set_result(None)
        if no_body:
            self._finish()

    def on_body(self, body: bytes) -> None:
        if self.complete:
            return
        if self.sink is not None:
            self.sink.upstream_body(body)
            return
        self._chunks.append(body)
        self._buffered += len(body)
        self._data.set()
        if self._buffered > READ_HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def on_message_complete(self) -> None:
        if self.status:  # not the end of an interim answer
            self._finish()

    def _finish(self) -> None:
        if self.complete:
            return
        self.complete = True
        sink = self.sink
        if sink is not None:
            sink.upstream_done(self)
            return
        self._data.set()

    def _fail(self, err: UpstreamError) -> None:
        first = self._error is None
        if first:
            self._error = err
        sink = self.sink
        if sink is not None:
            if first:
                sink.upstream_failed(self, err)
            return
        if self._head is not None and not self._head.done():
            self._head.set_exception(err)
            self._head.exception()  # retrieved: never "exception was never retrieved"
        self._data.set()

    # ---------------------------------------------------------------- the exchange API

    def begin(self, head: bytes, head_only: bool) -> None:
        self._reset_exchange(head_only)
        self.write(head)

    def begin_sink(self, sink: Sink, head: bytes, head_only: bool) -> None:
        """Start an exchange in callback mode: ``sink`` hears the response as it is parsed."""
        self._reset_exchange(head_only, sink)
        self.write(head)

    def pause_reading(self) -> None:
        if not self._paused and self.transport is not None and not self.closed:
            self._paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self._paused and self.transport is not None and not self.closed:
            self._paused = False
            self.transport.resume_reading()

    def write(self, data: bytes) -> None:
        if self.transport is None or self.closed:
            raise UpstreamError("response", "the connection to the origin is closed")
        self.transport.write(data)

    async def drain(self) -> None:
        if not self._write_ok.is_set():
            await self._write_ok.wait()
        if self.closed and not self.complete and self._error is not None and not self.head_done:
            raise self._error

    async def response_head(self) -> None:
        assert self._head is not None, "an awaited exchange (begin), not a callback one"
        await self._head

    async def read(self) -> bytes | None:
        """The next body chunk, or None at the end of the response."""
        while True:
            if self._chunks:
                chunk = self._chunks.popleft()
                self._buffered -= len(chunk)
                if self._paused and self._buffered <= READ_HIGH_WATER // 4 and self.transport is not None:
                    self._paused = False
                    self.transport.resume_reading()
                if len(self._chunks) > 8:  # many small pieces: hand them over in one send
                    parts = [chunk]
                    while self._chunks:
                        parts.append(self._chunks.popleft())
                    self._buffered = 0
                    chunk = b"".join(parts)
                return chunk
            if self.complete:
                return None
            if self._error is not None:
                raise self._error
            self._data.clear()
            await self._data.wait()

    def take_all(self) -> bytes:
        """Every body byte received so far, at once (used when the response is already complete)."""
        body = b"".join(self._chunks)
        self._chunks.clear()
        self._buffered = 0
        return body

    @property
    def reusable(self) -> bool:
        return self.complete and self.keep_alive and not self.closed and self._error is None

    def close(self) -> None:
        self.closed = True
        self.sink = None
        if self.transport is not None:
            self.transport.close()


class _NoEvent:
    """Stands in for an Event nothing waits on: callback-mode exchanges, the fast path's cycles."""

    def set(self) -> None:
        pass

    def clear(self) -> None:
        pass

    async def wait(self) -> None:  # pragma: no cover - never awaited in callback mode
        raise RuntimeError("callback-mode exchanges are not awaited")


NO_EVENT: asyncio.Event = cast(asyncio.Event, _NoEvent())


class Pool:
    """Idle keep-alive connections per origin; every new connection passes the SSRF rule."""

    def __init__(self, *, allow_private: bool, connect_timeout: float) -> None:
        self.allow_private = allow_private
        self.connect_timeout = connect_timeout
        self._idle: dict[str, list[Upstream]] = {}
        self._tls: ssl.SSLContext | None = None
        self.connections_opened = 0
        self.resolver = _resolve  # replaceable in tests of DNS rebinding (a real resolver function)

    def _tls_context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = ssl.create_default_context()
        return self._tls

    def take_idle(self, origin: Origin) -> Upstream | None:
        idle = self._idle.get(origin.key)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.idle_since < IDLE_SEC:
                return conn
            conn.close()
        return None

    def put_back(self, conn: Upstream) -> None:
        conn.sink = None
        if not conn.reusable:
            conn.close()
            return
        idle = self._idle.setdefault(conn.origin.key, [])
        if len(idle) >= IDLE_PER_ORIGIN:
            conn.close()
            return
        conn.idle_since = time.monotonic()
        idle.append(conn)

    def close_all(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()

    async def _resolve_allowed(self, origin: Origin) -> list[str]:
        """The origin's addresses, every one allowed by the SSRF rule (a name with any private answer is refused)."""
        try:
            addresses = await asyncio.wait_for(self.resolver(origin.host, origin.port), self.connect_timeout)
        except TimeoutError as exc:
            raise UpstreamError("timeout", f"resolving {origin.host} timed out") from exc
        except OSError as exc:
            raise UpstreamError("connect", f"{origin.host} does not resolve: {exc}") from exc
        if not addresses:
            raise UpstreamError("connect", f"{origin.host} does not resolve")
        for address in addresses:
            self._check(origin, address)
        return list(addresses)

    async def connect(self, origin: Origin) -> Upstream:
        """A new connection: resolve, refuse any private answer, connect, check the connected address."""
        loop = asyncio.get_running_loop()
        addresses = await self._resolve_allowed(origin)
        last: Exception | None = None
        for address in addresses:
            tls = self._tls_context() if origin.scheme == "https" else None
            try:
                _, proto = await asyncio.wait_for(
                    loop.create_connection(
                        lambda: Upstream(origin),
                        address,
                        origin.port,
                        ssl=tls,
                        server_hostname=origin.host if tls is not None else None,
                    ),
                    self.connect_timeout,
                )
            except TimeoutError as exc:
                last = UpstreamError("timeout", f"connecting to {origin.key} timed out")
                last.__cause__ = exc
                continue
            except OSError as exc:
                last = UpstreamError("connect", f"connecting to {origin.key} failed: {exc.strerror or exc}")
                continue
            try:
                self._check(origin, proto.peer or address)  # the address actually connected to
            except ssrf.OriginRefused:
                proto.close()
                raise
            self.connections_opened += 1
            return proto
        assert last is not None
        raise last

    async def connect_socket(self, origin: Origin) -> socket.socket:
        """A plain connected socket (for a WebSocket relay) under exactly the same rule as :meth:`connect`."""
        loop = asyncio.get_running_loop()
        addresses = await self._resolve_allowed(origin)
        last: UpstreamError | None = None
        for address in addresses:
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                await asyncio.wait_for(loop.sock_connect(sock, (address, origin.port)), self.connect_timeout)
            except TimeoutError:
                sock.close()
                last = UpstreamError("timeout", f"connecting to {origin.key} timed out")
                continue
            except OSError as exc:
                sock.close()
                last = UpstreamError("connect", f"connecting to {origin.key} failed: {exc.strerror or exc}")
                continue
            try:
                self._check(origin, str(sock.getpeername()[0]))
            except ssrf.OriginRefused:
                sock.close()
                raise
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.connections_opened += 1
            return sock
        assert last is not None
        raise last

    def tls_context(self) -> ssl.SSLContext:
        return self._tls_context()

    def _check(self, origin: Origin, address: str) -> None:
        ssrf.check(origin.host, address, self.allow_private)


async def _resolve(host: str, port: int) -> list[str]:
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    seen: list[str] = []
    for info in infos:
        address = str(info[4][0])
        if address not in seen:
            seen.append(address)
    return seen
