"""Two parts of uvicorn's per-connection state, made as they are needed instead of up front.

Every connection uvicorn accepts gets a write flow control holding an ``asyncio.Event`` and a deque for
pipelined requests: each comes with a block of about 0.6 KB that most connections never use. An open
``/events`` stream writes a few hundred bytes a second into a socket buffer that never fills, and browsers
do not pipeline. At 10,000 streams the two are about 15 MB. These behave the same and cost a few bytes
until used.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.flow_control import FlowControl


class LeanFlow(FlowControl):
    """uvicorn's ``FlowControl``, its event made the first time the transport asks to pause writing."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self.read_paused = False
        self.write_paused = False
        self._event: asyncio.Event | None = None

    async def drain(self) -> None:
        event = self._event
        if event is not None:
            await event.wait()

    def pause_writing(self) -> None:
        if not self.write_paused:
            self.write_paused = True
            if self._event is None:
                self._event = asyncio.Event()
            self._event.clear()

    def resume_writing(self) -> None:
        if self.write_paused:
            self.write_paused = False
            if self._event is not None:
                self._event.set()


class Pipeline(list[Any]):
    """The requests pipelined behind the one being answered, as uvicorn uses its deque: ``appendleft`` the
    newest, ``pop`` the oldest. A list (56 bytes empty); there are at most a few."""

    __slots__ = ()

    def appendleft(self, item: Any) -> None:
        self.insert(0, item)
