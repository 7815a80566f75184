"""Live streams: one broadcaster per process wakes every stream of a room when that room changes.

Each stream watches ``http.disconnect``, times out every send, and ends when the process stops.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from queue_manager.access.principal import Principal
from queue_manager.http.wire import Receive, Send

SEND_TIMEOUT = 10.0
PING_EVERY = 15.0


class Broadcaster:
    def __init__(self) -> None:
        self._rooms: dict[str, set[asyncio.Event]] = {}
        self.streams = 0
        self.per_ip: dict[str, int] = {}
        self.closing = asyncio.Event()

    def notify(self, room_ids: set[str]) -> None:
        for room_id in room_ids:
            for ev in self._rooms.get(room_id, ()):
                ev.set()

    def subscribe(self, room_id: str) -> asyncio.Event:
        ev = asyncio.Event()
        self._rooms.setdefault(room_id, set()).add(ev)
        return ev

    def unsubscribe(self, room_id: str, ev: asyncio.Event) -> None:
        subs = self._rooms.get(room_id)
        if subs is not None:
            subs.discard(ev)
            if not subs:
                del self._rooms[room_id]

    def close_all(self) -> None:
        self.closing.set()
        for subs in self._rooms.values():
            for ev in subs:
                ev.set()


async def watch_disconnect(receive: Receive, gone: asyncio.Event, wake: asyncio.Event | None = None) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            gone.set()
            if wake is not None:
                wake.set()
            return


async def send_frame(send: Send, frame: bytes) -> None:
    async with asyncio.timeout(SEND_TIMEOUT):  # no task per send: the frame is written at once
        await send({"type": "http.response.body", "body": frame, "more_body": True})


async def run_stream(
    send: Send,
    receive: Receive,
    wake: asyncio.Event,
    broadcaster: Broadcaster,
    next_frame: Callable[[], Awaitable[bytes | None]],
    deadline: float | None,
    loop_time: Callable[[], float],
) -> None:
    """Send ``next_frame()`` on every wake until the client goes, the deadline passes or the process stops.

    ``next_frame`` returning None ends the stream (after it sent whatever it wanted, e.g. ``refresh``).
    """
    gone = asyncio.Event()
    watcher = asyncio.create_task(watch_disconnect(receive, gone, wake))
    try:
        while not gone.is_set() and not broadcaster.closing.is_set():
            wake.clear()
            frame = await next_frame()
            if frame is None:
                return
            if frame:
                await send_frame(send, frame)
            timeout = PING_EVERY
            if deadline is not None:
                timeout = max(0.0, min(timeout, deadline - loop_time()))
            try:
                async with asyncio.timeout(timeout):  # one event: woken by the room, a disconnect or a stop
                    await wake.wait()
            except TimeoutError:
                if deadline is not None and loop_time() >= deadline:
                    continue  # next_frame sees the deadline and sends refresh
                await send_frame(send, b": ping\n\n")
    except (TimeoutError, OSError):
        return
    finally:
        watcher.cancel()
        with contextlib.suppress(BaseException):
            await watcher


@dataclass(eq=False)
class _Stream:
    principal: Principal
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    revoked: bool = False


class AdminStreams:
    def __init__(self) -> None:
        self._streams: set[_Stream] = set()

    def __len__(self) -> int:
        return len(self._streams)

    def revoke(self, credentials: set[str]) -> None:
        for s in self._streams:
            if s.principal.credential in credentials or credentials.intersection(s.principal.rests_on):
                s.revoked = True
                s.wake.set()

    def close_all(self) -> None:
        for s in self._streams:
            s.wake.set()

    def add(self, principal: Principal) -> _Stream:
        s = _Stream(principal)
        self._streams.add(s)
        return s

    def remove(self, s: _Stream) -> None:
        self._streams.discard(s)
