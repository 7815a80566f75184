"""The hot lane: one pipelined connection for the store's per-request commands (room scripts, HGET).

redis-py's asyncio client costs ~37 us of CPU per command here (pool checkout and release, retry
wrapper, observability hooks, a stream writer and reader per connection). Every visitor request on
STORE=valkey makes one or two such commands, so that was most of a door check's CPU (103-109 us in
process, against 45-55 us through this lane). The lane writes the commands of one event-loop
iteration in one write on one connection and matches replies to callers in order (RESP answers in
order), parsing with hiredis.

Same errors as redis-py, so ``errors.translate`` and the breaker see no difference: error replies
become redis-py's exception classes (``NoScriptError``, ``OutOfMemoryError``, …); a lost connection
fails every command in flight with ``ConnectionError``; a reply that does not come within the URL's
``socket_timeout`` fails them with ``TimeoutError`` and drops the connection. A command that finds
the connection already gone is sent on a new one; a command written before the connection was lost
fails with ConnectionError and is not sent again (redis-py would retry it, and a room script whose
reply was lost may have run), and a timeout is not retried either.
``submit`` tells the two apart for a caller that can send a command elsewhere: an error it raises means
nothing was written; an error from the future it returns means the command may have run.

Only plain ``redis://`` URLs get a lane, and plain ``redis+cluster://`` ones a lane per master
(``cluster_lane.py``); TLS and unix sockets keep using redis-py for everything.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from typing import Any

import hiredis
from redis import exceptions as rx
from redis._parsers.base import BaseParser
from redis.asyncio.connection import parse_url

WATCH_EVERY_SEC = 0.25  # how often the oldest command in flight is compared with socket_timeout


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.reader = hiredis.Reader()
        self.pending: collections.deque[tuple[float, asyncio.Future[Any]]] = collections.deque()
        self.transport: asyncio.Transport | None = None
        self.closed: BaseException | None = None
        self.abort_reason: BaseException | None = None
        self.out: list[bytes] = []  # packed commands not yet written

    def flush(self) -> None:
        out, self.out = self.out, []
        if out and self.transport is not None and self.closed is None:
            self.transport.write(b"".join(out) if len(out) > 1 else out[0])

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's TCPTransport is not an asyncio.Transport

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        while True:
            try:
                reply = self.reader.gets()
            except hiredis.ProtocolError as exc:
                self.abort(rx.InvalidResponse(f"Valkey sent an unreadable reply: {exc}"))
                return
            if reply is False:
                return
            if not self.pending:  # nobody asked: the stream is out of step
                self.abort(rx.InvalidResponse("Valkey sent a reply nobody asked for"))
                return
            _, future = self.pending.popleft()
            if future.done():  # the caller gave up (cancelled): its reply is dropped, order is kept
                continue
            if isinstance(reply, hiredis.ReplyError):
                future.set_exception(BaseParser.parse_error(str(reply)))  # type: ignore[no-untyped-call]
            else:
                future.set_result(reply)

    def abort(self, reason: BaseException) -> None:
        self.abort_reason = reason
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        reason = self.abort_reason or rx.ConnectionError(f"Connection to Valkey lost{': ' + str(exc) if exc else ''}.")
        self.closed = reason
        while self.pending:
            _, future = self.pending.popleft()
            if not future.done():
                future.set_exception(_copy(reason))


def _copy(exc: BaseException) -> BaseException:
    """A fresh exception per waiter (one instance raised in many tasks would chain their tracebacks)."""
    return type(exc)(*exc.args)


class ValkeyLane:
    """One connection, commands pipelined; ``execute(*args)`` answers what redis-py would."""

    def __init__(
        self,
        host: str,
        port: int,
        db: int = 0,
        *,
        username: str | None = None,
        password: str | None = None,
        socket_timeout: float | None = None,
        connect_timeout: float | None = None,
    ) -> None:
        self.host, self.port, self.db = host, port, db
        self.name = f"{host}:{port}"
        self.username, self.password = username, password
        self.socket_timeout = socket_timeout
        self.connect_timeout = connect_timeout if connect_timeout is not None else socket_timeout
        self._proto: _Protocol | None = None
        self._connecting: asyncio.Future[_Protocol] | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self._closed = False

    @classmethod
    def for_url(cls, url: str) -> ValkeyLane | None:
        """A lane for a plain ``redis://host:port/db`` URL (its timeouts and credentials), else None."""
        if not url.startswith("redis://"):
            return None
        try:
            opts = parse_url(url)
        except ValueError:
            return None
        if set(opts) - {"host", "port", "db", "username", "password", "socket_timeout", "socket_connect_timeout"}:
            return None  # an option only redis-py knows: leave it all to redis-py
        return cls(
            str(opts.get("host") or "localhost"),
            int(opts.get("port") or 6379),
            int(opts.get("db") or 0),
            username=opts.get("username"),
            password=opts.get("password"),
            socket_timeout=_seconds(opts.get("socket_timeout")),
            connect_timeout=_seconds(opts.get("socket_connect_timeout")),
        )

    async def execute(self, *args: Any) -> Any:
        return await (await self.submit(*args))

    async def submit(self, *args: Any) -> asyncio.Future[Any]:
        """Queue the command for writing and hand back the future of its reply.

        An error raised here (``ConnectionError``, ``TimeoutError`` while connecting) means the command
        was not sent; an error from the future means it may have been."""
        proto = await self._connection()
        try:
            return self._send(proto, args)
        except rx.ConnectionError:
            # known gone before anything was written (a restart, an idle close): on a new connection.
            # A command that was written and then lost its connection is not sent again: a script
            # may have run, and its reply (the events to journal) is gone with the connection.
            return self._send(await self._connection(), args)

    @property
    def connected(self) -> bool:
        """Whether the lane holds an open connection (it opens one on the next command otherwise)."""
        return self._proto is not None and self._proto.closed is None

    async def close(self) -> None:
        self._closed = True
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
            self._watchdog = None
        proto, self._proto = self._proto, None
        if proto is not None and proto.transport is not None:
            proto.transport.close()

    # ------------------------------------------------------------------ internals

    def _send(self, proto: _Protocol, args: tuple[Any, ...]) -> asyncio.Future[Any]:
        if proto.closed is not None or proto.transport is None:
            raise _copy(proto.closed or rx.ConnectionError("Connection to Valkey closed."))
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        packed = _pack(args)
        proto.pending.append((loop.time(), future))
        proto.out.append(packed)
        if len(proto.out) == 1:  # the commands of this loop iteration leave in one write
            loop.call_soon(proto.flush)
        return future

    async def _connection(self) -> _Protocol:
        proto = self._proto
        if proto is not None and proto.closed is None:
            return proto
        if self._closed:
            raise rx.ConnectionError("The Valkey lane is closed.")
        if self._connecting is None:
            self._connecting = asyncio.ensure_future(self._connect())
        connecting = self._connecting
        try:
            return await asyncio.shield(connecting)
        finally:
            if connecting.done() and self._connecting is connecting:
                self._connecting = None

    async def _connect(self) -> _Protocol:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, proto = await loop.create_connection(_Protocol, self.host, self.port)
                setup: list[asyncio.Future[Any]] = []
                if self.password is not None:
                    auth = ("AUTH", self.username, self.password) if self.username else ("AUTH", self.password)
                    setup.append(self._send(proto, auth))
                if self.db:
                    setup.append(self._send(proto, ("SELECT", self.db)))
                try:
                    for step in setup:
                        await step
                except rx.ResponseError as exc:  # AUTH or SELECT refused: a connection that cannot be used
                    if proto.transport is not None:
                        proto.transport.close()
                    raise rx.ConnectionError(f"Valkey refused the connection setup: {exc}") from exc
        except TimeoutError as exc:
            raise rx.TimeoutError(f"Timeout connecting to Valkey at {self.host}:{self.port}.") from exc
        except OSError as exc:
            raise rx.ConnectionError(f"Error connecting to Valkey at {self.host}:{self.port}: {exc}") from exc
        self._proto = proto
        if self.socket_timeout and (self._watchdog is None or self._watchdog.done()):
            self._watchdog = asyncio.ensure_future(self._watch())
        return proto

    async def _watch(self) -> None:
        """Drop the connection when its oldest command has waited longer than socket_timeout."""
        assert self.socket_timeout
        loop = asyncio.get_running_loop()
        while not self._closed:
            await asyncio.sleep(min(WATCH_EVERY_SEC, self.socket_timeout / 4))
            proto = self._proto
            if proto is None or proto.closed is not None or not proto.pending:
                continue
            sent_at, _ = proto.pending[0]
            if loop.time() - sent_at > self.socket_timeout:
                proto.abort(rx.TimeoutError("Timeout reading from Valkey."))


def _seconds(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


def _pack(args: tuple[Any, ...]) -> bytes:
    try:
        packed: bytes = hiredis.pack_command(args)
    except TypeError as exc:
        raise rx.DataError(str(exc)) from exc
    return packed
