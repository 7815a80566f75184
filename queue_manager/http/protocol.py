"""uvicorn's httptools protocol, writing a response's head together with its first body chunk.

Stock uvicorn calls ``transport.write`` once for the head (``http.response.start``) and once per body
message: two send syscalls for every small response. Here the head bytes are held back until the first
``http.response.body`` of the same response and go out in the same write. Nothing is held for long: if
no body message follows within the same event-loop turn (a stream that starts and then waits), the head
is flushed on the next turn by itself, and a body chunk is never held at all.

It hooks two uvicorn internals (``HttpToolsProtocol._start_asgi_task`` and
``RequestResponseCycle.send``/``.transport``); ``tests/unit/test_protocol.py`` fails if their shape
changes, and ``pyproject.toml`` pins the uvicorn range it was checked against.
"""

from __future__ import annotations

import asyncio

from uvicorn._types import ASGI3Application, ASGISendEvent
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle


class _HeadCapture:
    """Stands in for the transport while uvicorn renders a response head: keeps the bytes."""

    __slots__ = ("data",)

    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += data


class _HeadJoiner:
    """Stands in for the transport during the first body message: its first write carries the head."""

    __slots__ = ("held", "real")

    def __init__(self, real: asyncio.Transport, held: bytes) -> None:
        self.real = real
        self.held: bytes | None = held

    def flush(self) -> None:
        if self.held is not None:
            self.real.write(self.held)
            self.held = None

    def write(self, data: bytes) -> None:
        held = self.held
        if held is None:
            self.real.write(data)
        else:
            self.held = None
            self.real.write(held + data)

    def close(self) -> None:
        self.flush()
        self.real.close()

    def is_closing(self) -> bool:
        return self.real.is_closing()


class CoalescingCycle(RequestResponseCycle):
    """A request/response cycle whose head shares a write with the first body chunk."""

    held_head: bytes | None = None

    async def send(self, message: ASGISendEvent) -> None:
        held = self.held_head
        if held is None:
            if message["type"] != "http.response.start" or self.response_started or self.disconnected:
                await super().send(message)
                return
            real = self.transport
            capture = _HeadCapture()
            self.transport = capture  # type: ignore[assignment]
            try:
                await super().send(message)
            finally:
                self.transport = real
            if capture.data:
                self.held_head = capture.data
                # a response that starts and then waits still shows its head on the next loop turn
                asyncio.get_running_loop().call_soon(self._flush_head)
            return
        self.held_head = None
        if self.disconnected:
            await super().send(message)
            return
        real = self.transport
        joiner = _HeadJoiner(real, held)
        self.transport = joiner  # type: ignore[assignment]
        try:
            await super().send(message)
        finally:
            self.transport = real
            joiner.flush()  # HEAD answers, or a message uvicorn refused: the head still goes out first

    def _flush_head(self) -> None:
        held = self.held_head
        if held is not None:
            self.held_head = None
            if not self.disconnected and not self.transport.is_closing():
                self.transport.write(held)


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` whose cycles are :class:`CoalescingCycle` (pass as ``uvicorn.Config(http=...)``)."""

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
        if type(cycle) is RequestResponseCycle:
            cycle.__class__ = CoalescingCycle
        super()._start_asgi_task(cycle, app)

