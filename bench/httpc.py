"""A tiny keep-alive HTTP/1.1 client on asyncio streams, for benchmark setup only (loopback).

Only what the Queue Manager answers needs: responses framed by Content-Length. Every helper here is
bounded (a timeout per request, a fixed count of requests).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar
from urllib.parse import urlsplit

import orjson

UA = "qm-bench/1.0"
TIMEOUT = 10.0
IDLE_REOPEN = 3.0
T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run on uvloop when it is installed (the clients should cost as little CPU as possible)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


class Conn:
    def __init__(self, host: str, port: int, headers: dict[str, str] | None = None, source: str = "") -> None:
        self.host, self.port = host, port
        self.source = source  # the local address to connect from ('' the system's choice)
        self.extra = {"User-Agent": UA, **(headers or {})}
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.last_used = 0.0

    async def open(self) -> Conn:
        local = (self.source, 0) if self.source else None
        opening = asyncio.open_connection(self.host, self.port, local_addr=local)
        self.reader, self.writer = await asyncio.wait_for(opening, TIMEOUT)
        self.last_used = time.monotonic()
        return self

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except OSError:
                pass
            self.writer = None

    async def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        return await asyncio.wait_for(self._request(method, path, body, headers), TIMEOUT)

    async def _request(self, method: str, path: str, body: Any, headers: dict[str, str] | None) -> tuple[int, bytes]:
        if self.writer is not None and time.monotonic() - self.last_used > IDLE_REOPEN:
            await self.close()  # uvicorn closes a keep-alive connection idle for 5 s
        if self.writer is None:
            await self.open()
        assert self.reader is not None and self.writer is not None
        raw = b"" if body is None else (body if isinstance(body, bytes) else orjson.dumps(body))
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}"]
        for k, v in {**self.extra, **(headers or {})}.items():
            lines.append(f"{k}: {v}")
        if body is not None:
            lines.append("Content-Type: application/json")
            lines.append(f"Content-Length: {len(raw)}")
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + raw)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        status = int(status_line.split(" ", 2)[1])
        length = 0
        for line in header_lines:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        data = await self.reader.readexactly(length) if length else b""
        self.last_used = time.monotonic()
        return status, data

    async def json(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        status, data = await self.request(method, path, body, headers)
        return status, (orjson.loads(data) if data else None)


def split_url(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


async def fan_out(
    host: str,
    port: int,
    jobs: Iterable[tuple[str, str, Any]],
    concurrency: int = 32,
    headers: dict[str, str] | None = None,
    source: str = "",
) -> list[tuple[int, Any]]:
    """Run (method, path, body) jobs over ``concurrency`` keep-alive connections (from ``source``, when
    given); results in job order."""
    todo = list(enumerate(jobs))
    results: list[tuple[int, Any]] = [(0, None)] * len(todo)
    it = iter(todo)

    async def worker() -> None:
        conn = await Conn(host, port, headers, source).open()
        try:
            for i, (method, path, body) in it:
                results[i] = await conn.json(method, path, body)
        finally:
            await conn.close()

    await asyncio.gather(*(worker() for _ in range(min(concurrency, max(1, len(todo))))))
    return results


async def fill(
    host: str, port: int, room_id: str, count: int, concurrency: int = 64, deadline_s: float = 180.0
) -> dict[str, Any]:
    """POST /api/join exactly ``count`` times over ``concurrency`` keep-alive connections (bounded in time)."""
    body = orjson.dumps({"roomId": room_id})
    left = [count]
    statuses: dict[str, int] = {}
    stop_at = time.monotonic() + deadline_s

    async def worker() -> None:
        conn = await Conn(host, port).open()
        try:
            while left[0] > 0 and time.monotonic() < stop_at:
                left[0] -= 1
                status, _ = await conn.request("POST", "/api/join", body)
                statuses[str(status)] = statuses.get(str(status), 0) + 1
        finally:
            await conn.close()

    t0 = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    seconds = time.monotonic() - t0
    sent = sum(statuses.values())
    return {"sent": sent, "statuses": statuses, "seconds": round(seconds, 2), "rps": round(sent / seconds, 1)}
