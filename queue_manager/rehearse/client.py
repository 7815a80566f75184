"""A lean keep-alive HTTP/1.1 client for the visitors' requests of a rehearsal (join, status, door check).

A general client spends a millisecond or more of Python on each request; a rehearsal makes hundreds a
second from one process, and a client that cannot keep up makes the surge smaller than asked. This one
writes the request in one buffer and reads a ``Content-Length`` or chunked answer, on a pool of at most
``size`` connections to one origin (http or https); a request waits for a free connection, never for a
timer. Anything it does not understand is an error the caller counts.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit

TIMEOUT_SEC = 30.0


class WireError(Exception):
    """The exchange failed (connection refused or lost, a timeout, an answer that is not HTTP/1.1)."""


@dataclass(slots=True)
class Answer:
    status: int
    body: bytes


class _Conn:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    def close(self) -> None:
        self.writer.close()


class Pool:
    """At most ``size`` keep-alive connections to the origin of ``base`` (``http://host:port``)."""

    def __init__(self, base: str, size: int) -> None:
        url = urlsplit(base)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"{base!r} is not an http(s) URL")
        self.host = url.hostname
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self.tls = ssl.create_default_context() if url.scheme == "https" else None
        default = 443 if self.tls else 80
        shown = f"[{self.host}]" if ":" in self.host else self.host
        self.authority = shown if self.port == default else f"{shown}:{self.port}"
        self.size = size
        self.open = 0
        self.idle: list[_Conn] = []
        self.waiters: asyncio.Queue[_Conn | None] = asyncio.Queue()
        self.waiting = 0

    async def _take(self) -> _Conn | None:
        """An idle connection, or None: open a new one (the count is already taken for it)."""
        if self.idle:
            return self.idle.pop()
        if self.open < self.size:
            self.open += 1
            return None
        self.waiting += 1
        try:
            return await self.waiters.get()
        finally:
            self.waiting -= 1

    def _give(self, conn: _Conn | None) -> None:
        """Hand a connection back (None: it was closed, its place is free again)."""
        if self.waiting:  # None: the waiter opens a new one in the closed one's place
            self.waiters.put_nowait(conn)
            return
        if conn is None:
            self.open -= 1
        else:
            self.idle.append(conn)

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
    ) -> Answer:
        if params:
            path = f"{path}?{urlencode(params)}"
        lines = [f"{method} {path} HTTP/1.1\r\nHost: {self.authority}\r\n"]
        for name, value in (headers or {}).items():
            lines.append(f"{name}: {value}\r\n")
        if body is not None:
            lines.append(f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n")
        lines.append("\r\n")
        raw = "".join(lines).encode("latin-1") + (body or b"")
        conn = await self._take()
        for attempt in (1, 2):  # a kept-alive connection the server closed meanwhile is retried once, fresh
            fresh = conn is None
            try:
                if conn is None:
                    reader, writer = await asyncio.wait_for(
                        asyncio.open_connection(self.host, self.port, ssl=self.tls), TIMEOUT_SEC
                    )
                    conn = _Conn(reader, writer)
                conn.writer.write(raw)
                answer, keep = await asyncio.wait_for(_read(conn.reader), TIMEOUT_SEC)
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, TimeoutError) as exc:
                if conn is not None:
                    conn.close()
                conn = None
                if fresh or attempt == 2 or isinstance(exc, TimeoutError):
                    self._give(None)
                    raise WireError(type(exc).__name__) from exc
                continue
            if keep:
                self._give(conn)
            else:
                conn.close()
                self._give(None)
            return answer
        raise AssertionError("unreachable")

    def close(self) -> None:
        for conn in self.idle:
            conn.close()
        self.idle.clear()


async def _read(reader: asyncio.StreamReader) -> tuple[Answer, bool]:
    head = await reader.readuntil(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
        raise ValueError("not an HTTP/1.1 answer")
    status = int(parts[1])
    length: int | None = None
    chunked = False
    keep = parts[0] == "HTTP/1.1"
    for line in header_lines:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name == "content-length":
            length = int(value)
        elif name == "transfer-encoding" and "chunked" in value.lower():
            chunked = True
        elif name == "connection":
            keep = value.strip().lower() != "close"
    if chunked:
        body = bytearray()
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")  # no trailers are sent to us
                break
            body += await reader.readexactly(size)
            await reader.readexactly(2)
        return Answer(status, bytes(body)), keep
    if length is None:
        return Answer(status, await reader.read()), False
    return Answer(status, await reader.readexactly(length)), keep
