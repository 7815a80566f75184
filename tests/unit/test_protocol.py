"""The coalescing httptools protocol: one write per small response, streams never held back.

A real uvicorn server (our protocol class) on an ephemeral loopback port, a raw socket client. The
transport is wrapped only to count ``write`` calls — what the protocol exists to reduce.
"""

from __future__ import annotations

import asyncio
import inspect
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

import pytest
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from queue_manager.http.protocol import CoalescingCycle, CoalescingHttpToolsProtocol

Message = MutableMapping[str, Any]
WRITES: list[bytes] = []
GATE: dict[str, asyncio.Event] = {}


class _Counting:
    def __init__(self, real: asyncio.Transport) -> None:
        self.real = real

    def write(self, data: bytes) -> None:
        WRITES.append(bytes(data))
        self.real.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


class _CountingProtocol(CoalescingHttpToolsProtocol):
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.transport = _Counting(transport)  # type: ignore[assignment]


async def _app(
    scope: Message, receive: Callable[[], Awaitable[Message]], send: Callable[[Message], Awaitable[None]]
) -> None:
    if scope["type"] != "http":
        return
    path = scope["path"]
    if path == "/small":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]})
        await send({"type": "http.response.body", "body": b"hello"})
    elif path == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await GATE["head_seen"].wait()  # the client must see the head before any body exists
        await send({"type": "http.response.body", "body": b"one", "more_body": True})
        await GATE["one_seen"].wait()  # ...and the first chunk before the second is sent
        await send({"type": "http.response.body", "body": b"two", "more_body": False})


@pytest.fixture
async def server() -> AsyncIterator[int]:
    WRITES.clear()
    GATE.clear()
    GATE["head_seen"] = asyncio.Event()
    GATE["one_seen"] = asyncio.Event()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(_app, http=_CountingProtocol, lifespan="off", log_level="warning", access_log=False)
    config.load()
    srv = uvicorn.Server(config)
    srv.lifespan = config.lifespan_class(config)
    await srv.startup(sockets=[sock])  # listening once this returns
    yield sock.getsockname()[1]
    await srv.shutdown(sockets=[sock])


async def _read_until(reader: asyncio.StreamReader, marker: bytes) -> bytes:
    data = b""
    while marker not in data:
        chunk = await reader.read(65536)
        assert chunk, f"connection closed before {marker!r}; got {data!r}"
        data += chunk
    return data


async def test_small_response_is_one_write_and_keep_alive_still_works(server: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server)
    for _ in range(2):
        writer.write(b"GET /small HTTP/1.1\r\nhost: x\r\n\r\n")
        data = await _read_until(reader, b"hello")
        assert data.startswith(b"HTTP/1.1 200 OK\r\n") and data.endswith(b"\r\n\r\nhello")
    writer.close()
    assert len(WRITES) == 2, WRITES  # stock uvicorn: 4 (a head and a body per response)
    assert all(w.startswith(b"HTTP/1.1 200") and w.endswith(b"hello") for w in WRITES)


async def test_head_request_still_gets_its_head(server: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server)
    writer.write(b"HEAD /small HTTP/1.1\r\nhost: x\r\n\r\n")
    data = await _read_until(reader, b"\r\n\r\n")
    assert data.startswith(b"HTTP/1.1 200 OK\r\n") and b"content-length: 5" in data
    writer.close()


async def test_a_stream_shows_its_head_and_each_chunk_without_waiting_for_the_next(server: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server)
    writer.write(b"GET /stream HTTP/1.1\r\nhost: x\r\n\r\n")
    head = await _read_until(reader, b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"transfer-encoding: chunked" in head
    GATE["head_seen"].set()
    first = await _read_until(reader, b"3\r\none\r\n")
    assert b"two" not in first
    GATE["one_seen"].set()
    await _read_until(reader, b"3\r\ntwo\r\n0\r\n\r\n")
    writer.close()


def test_the_hooked_uvicorn_internals_keep_their_shape() -> None:
    # if uvicorn renames or reshapes these, the protocol would silently stop coalescing (or break)
    assert list(inspect.signature(HttpToolsProtocol._start_asgi_task).parameters) == ["self", "cycle", "app"]
    assert inspect.iscoroutinefunction(RequestResponseCycle.send)
    assert "__slots__" not in RequestResponseCycle.__dict__  # the class swap needs a plain instance dict
    assert "transport" in inspect.signature(RequestResponseCycle.__init__).parameters
    source = inspect.getsource(RequestResponseCycle.send)
    assert "self.transport.write(" in source and "self.transport" in inspect.getsource(RequestResponseCycle.receive)
    assert issubclass(CoalescingCycle, RequestResponseCycle)
