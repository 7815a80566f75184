"""Live-stream frames written straight to the connection (http/direct.py) and the broadcaster's use of them.

The server runs uvicorn's httptools protocol: these tests run a real one on loopback, so an upgrade of
uvicorn that changes its cycle's shape fails here instead of quietly sending every frame through ASGI.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn

from queue_manager.http.direct import chunked_cycle, write_chunk
from queue_manager.services.sse import Broadcaster, Stream


class _Probe:
    """An ASGI app: a chunked response, two frames through the direct writer, then the end through send."""

    def __init__(self) -> None:
        self.cycle: Any = None
        self.before_start: Any = None
        self.paused_answer: bool | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        self.before_start = chunked_cycle(send)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        self.cycle = cycle = chunked_cycle(send)
        if scope["method"] == "GET" and cycle is not None:
            assert write_chunk(cycle, b"data: one\n\n")
            assert write_chunk(cycle, b"data: two\n\n")
            cycle.flow.write_paused = True  # the client's reading is behind: the writer declines
            self.paused_answer = write_chunk(cycle, b"data: never\n\n")
            cycle.flow.write_paused = False
        await send({"type": "http.response.body", "body": b"", "more_body": False})


@pytest.fixture
async def probe() -> AsyncIterator[tuple[_Probe, int]]:
    app = _Probe()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, http="httptools", log_level="error", lifespan="on")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:  # noqa: ASYNC110 - uvicorn says it is up only through this flag
        await asyncio.sleep(0.01)
    try:
        yield app, port
    finally:
        server.should_exit = True
        await task
        sock.close()


async def _exchange(port: int, method: str) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"{method} /events HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
    data = await reader.read()
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return data


async def test_uvicorn_chunked_cycle_takes_the_chunks_send_would_write(
    probe: tuple[_Probe, int],
) -> None:
    app, port = probe
    raw = await _exchange(port, "GET")
    assert app.before_start is None  # no cycle to write on before the response has started
    assert app.cycle is not None
    assert app.paused_answer is False
    head, _, body = raw.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower()
    assert body == b"b\r\ndata: one\n\n\r\nb\r\ndata: two\n\n\r\n0\r\n\r\n"


async def test_a_head_request_is_not_written_directly(probe: tuple[_Probe, int]) -> None:
    app, port = probe
    await _exchange(port, "HEAD")
    assert app.cycle is None


async def test_another_send_is_not_written_directly() -> None:
    async def send(message: Any) -> None:
        return None

    assert chunked_cycle(send) is None


class _Task:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


async def test_a_frame_the_connection_declines_goes_through_send_and_a_failed_compose_ends_the_stream() -> None:
    b = Broadcaster()
    sent: list[bytes] = []
    written: list[bytes] = []
    accept = [False]

    async def send(message: Any) -> None:
        sent.append(message["body"])

    async def step() -> bool:
        raise AssertionError("the step path is for the refresh deadline only")

    class Flow:
        @property
        def write_paused(self) -> bool:
            return not accept[0]

    class Transport:
        def write(self, data: bytes) -> None:
            written.append(data)

    class Cycle:
        disconnected = False
        response_complete = False
        flow = Flow()
        transport = Transport()

    frames = iter([b"data: 1\n\n", b"data: 2\n\n", None])
    task: Any = _Task()
    s = Stream("r", send, step, task, compose=lambda: next(frames), cycle=Cycle())
    b.add(s, None)
    loop = asyncio.get_running_loop()
    b.wake(s, loop.time())  # declined: sent by a task through send
    assert s.pending is not None
    await s.pending
    assert sent == [b"data: 1\n\n"] and not written and s.pending is None
    accept[0] = True
    b.wake(s, loop.time())  # taken at once: no task
    assert s.pending is None and written == [b"9\r\ndata: 2\n\n\r\n"]
    b.wake(s, loop.time())  # the store refused (None): the stream ends
    assert s.ending and task.cancelled
    b.remove(s)
