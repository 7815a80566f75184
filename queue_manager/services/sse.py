"""Live streams: one broadcaster per process wakes every stream of a room when that room changes.

Each stream watches ``http.disconnect``, times out every send, and ends when the process stops.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from queue_manager.access.principal import Principal
from queue_manager.engine.model import ClientId
from queue_manager.engine.view import VisitorView
from queue_manager.engine.visitor import Presented
from queue_manager.http.direct import write_chunk
from queue_manager.http.wire import Receive, Send
from queue_manager.store.base import STATUS_BATCH

SEND_TIMEOUT = 10.0
PING_EVERY = 15.0
PING_CHECK = 5.0
FAN_OUT_SLICE = 200  # frames written before a fan-out round lets other work in (~5 ms at most)

#: the store's ``status_many``: the views of many streams of one room in one call
StatusMany = Callable[[str, Sequence[tuple[ClientId, Presented | None]]], Awaitable[list[VisitorView]]]


class LiveReads(Protocol):
    """A store's reads for live streams that answer frames in this process when they can (the Valkey
    store's replicas of the line, store/valkey/live.py). ``read`` is ``status_many`` with, for each view,
    what the stream's next frames are answered from (its memo); ``local`` answers a frame from a memo:
    (False, None) when the store must, else (True, the view to send or None when nothing changed)."""

    def open(self, room_id: str) -> None: ...

    def close(self, room_id: str) -> None: ...

    async def read(
        self, room_id: str, asks: Sequence[tuple[ClientId, Presented | None]]
    ) -> list[tuple[VisitorView, object]]: ...

    def local(self, room_id: str, memo: object, now: float) -> tuple[bool, VisitorView | None]: ...


class Stream:
    """One open visitor stream: what the room's fan-out needs to send it a frame, and how it ends.

    ``step`` composes and sends the next frame (returning False ends the stream). When the store
    answers in this process, ``compose`` makes the next frame's bytes without a coroutine (None ends
    the stream) and, with ``cycle`` (http/direct.py), they go on the connection at once unless the
    client's reading is behind (then ``send`` waits for it); ``deadline`` (loop time) is when ``step``
    sends ``refresh`` instead. When the store answers over the network, ``client`` and ``presented``
    are what the room's batched status read asks for this stream, and ``frame_of`` turns its view into
    the frame's bytes. The stream's own request task only waits for ``http.disconnect``; it is woken
    (cancelled, with ``ending`` set) when the server ends the stream first.
    """

    __slots__ = (
        "again",
        "client",
        "compose",
        "cycle",
        "deadline",
        "ending",
        "frame_of",
        "last_sent",
        "memo",
        "pending",
        "pending_since",
        "presented",
        "room_id",
        "send",
        "step",
        "task",
        "timer",
    )

    def __init__(
        self,
        room_id: str,
        send: Send,
        step: Callable[[], Coroutine[Any, Any, bool]],
        task: asyncio.Task[Any],
        *,
        compose: Callable[[], bytes | None] | None = None,
        cycle: Any = None,
        deadline: float | None = None,
        client: ClientId | None = None,
        presented: Presented | None = None,
        frame_of: Callable[[VisitorView], bytes] | None = None,
    ) -> None:
        self.room_id = room_id
        self.client = client
        self.presented = presented
        self.frame_of = frame_of
        self.send = send
        self.step = step
        self.compose = compose
        self.cycle = cycle
        self.deadline = deadline
        self.task = task
        self.ending = False
        self.pending: asyncio.Task[None] | None = None  # a frame whose store read or write had to wait
        self.pending_since = 0.0
        self.again = False  # woken while a frame was pending: one more frame when it is done
        self.last_sent = 0.0
        self.timer: asyncio.TimerHandle | None = None  # the refresh deadline
        self.memo: object = None  # what the last store read saw, for frames answered locally (LiveReads)

    def end(self) -> None:
        if not self.ending:
            self.ending = True
            self.task.cancel()


class _Feed:
    """The streams of one room. A wake schedules one fan-out round; wakes during a round add one more."""

    __slots__ = ("dirty", "running", "streams")

    def __init__(self) -> None:
        self.streams: dict[Stream, None] = {}
        self.dirty = False
        self.running = False


class Broadcaster:
    """Every live stream of this process, by room. A room's change costs one fan-out task, not one per stream:
    the round composes and writes each stream's frame in turn, and only a frame that must wait (a store
    round-trip, a full socket buffer) continues in a task of its own.

    With ``status_many`` (a store answering over the network) a round reads the room's due streams in
    batches of STATUS_BATCH: one task and one store call per batch, then each frame is composed and
    written as the batch's answer arrives."""

    def __init__(
        self, *, inline_steps: bool = False, status_many: StatusMany | None = None, live: LiveReads | None = None
    ) -> None:
        self._rooms: dict[str, _Feed] = {}
        self.streams = 0
        self.per_ip: dict[str, int] = {}
        self.closing = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._pinger: asyncio.Task[None] | None = None
        # the store answers without suspending (the memory store): a frame runs inside the fan-out, and
        # only one that must wait (a full socket buffer) goes on in a task. Otherwise every frame is a task:
        # a store round-trip may hold timeouts bound to the task it started in.
        self.inline_steps = inline_steps
        self.status_many = status_many
        # frames answered in this process while they can be (a store's replica of the line): a stream
        # whose frame is answered so and unchanged gets none (the ping keeps its connection alive)
        self.live = live

    def notify(self, room_ids: set[str]) -> None:
        for room_id in room_ids:
            feed = self._rooms.get(room_id)
            if feed is None:
                continue
            feed.dirty = True
            if not feed.running:
                feed.running = True
                self._spawn(self._fan_out(feed))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _fan_out(self, feed: _Feed) -> None:
        loop = asyncio.get_running_loop()
        try:
            while feed.dirty and not self.closing.is_set():
                feed.dirty = False
                now = loop.time()
                batch: list[Stream] = []
                live = self.live
                for i, s in enumerate(list(feed.streams), 1):
                    if self._batched(s, now):
                        if live is not None and s.memo is not None and self._local(live, s, now):
                            continue
                        batch.append(s)
                        if len(batch) >= STATUS_BATCH:
                            self._read_batch(batch, now)
                            batch = []
                    else:
                        self.wake(s, now)
                    if not i % FAN_OUT_SLICE:
                        await asyncio.sleep(0)  # the rest of the server runs between slices of a round
                        now = loop.time()
                if batch:
                    self._read_batch(batch, now)
                await asyncio.sleep(0)
        finally:
            feed.running = False

    def _batched(self, s: Stream, now: float) -> bool:
        """``s``'s frame of this round goes in the room's batched read: a stream fed by a store over the
        network, nothing of it on the way, not ending, before its refresh deadline (which ``step`` sends)."""
        return (
            self.status_many is not None
            and s.frame_of is not None
            and s.client is not None
            and s.compose is None
            and s.pending is None
            and not s.ending
            and (s.deadline is None or now < s.deadline)
        )

    def _local(self, live: LiveReads, s: Stream, now: float) -> bool:
        """``s``'s frame answered in this process, sent if it changed; False: the store must answer it."""
        try:
            answered, view = live.local(s.room_id, s.memo, now)
        except Exception:
            return False
        if not answered:
            return False
        if view is None:
            return True
        frame_of = s.frame_of
        assert frame_of is not None
        try:
            body = frame_of(view)
        except Exception:
            s.end()
            return True
        s.last_sent = now
        s.pending_since = now
        if s.cycle is None or not write_chunk(s.cycle, body):
            s.pending = asyncio.get_running_loop().create_task(self._send_task(s, body))
        return True

    def _read_batch(self, batch: list[Stream], now: float) -> None:
        """One task reads the views of ``batch`` (streams of one room) in one store call; each stream's
        frame is pending on it meanwhile, so a wake in between asks for one more frame (``again``)."""
        task = self._spawn(self._batch_task(batch))
        for s in batch:
            s.last_sent = now
            s.pending_since = now
            s.pending = task

    async def _batch_task(self, batch: list[Stream]) -> None:
        status_many = self.status_many
        assert status_many is not None
        views: list[VisitorView] | None
        try:
            # every stream of a batch has its client (``_batched``)
            asks = [(s.client, s.presented) for s in batch if s.client is not None]
            live = self.live
            if live is None:
                views = await status_many(batch[0].room_id, asks)
            else:
                read = await live.read(batch[0].room_id, asks)
                views = [view for view, _ in read]
                for s, (_, memo) in zip(batch, read, strict=True):
                    s.memo = memo
        except asyncio.CancelledError:
            for s in batch:
                s.pending = None
                s.end()
            raise
        except Exception:
            views = None  # what a stream's own step does when the store fails: the stream ends
        loop = asyncio.get_running_loop()
        again: list[Stream] = []
        for i, s in enumerate(batch):
            s.pending = None
            if views is None:
                s.end()
                continue
            if s.ending:
                continue
            frame_of = s.frame_of
            try:
                assert frame_of is not None
                body = frame_of(views[i])
            except Exception:
                s.end()
                continue
            if s.cycle is None or not write_chunk(s.cycle, body):
                s.pending = loop.create_task(self._send_task(s, body))
            elif s.again:
                s.again = False
                again.append(s)
        if again:  # woken while the batch was on its way: one more frame each, read together again
            now = loop.time()
            rest: list[Stream] = []
            for s in again:
                if self._batched(s, now):
                    rest.append(s)
                else:
                    self.wake(s, now)  # its refresh deadline passed meanwhile: the step sends refresh
            for start in range(0, len(rest), STATUS_BATCH):
                self._read_batch(rest[start : start + STATUS_BATCH], now)

    def wake(self, s: Stream, now: float) -> None:
        """Send ``s`` its next frame now, or once the frame still on its way is out."""
        if s.ending:
            return
        if s.pending is not None:
            if now - s.pending_since > SEND_TIMEOUT:
                s.end()  # a frame stuck this long: the client does not read
            else:
                s.again = True
            return
        s.last_sent = now
        s.pending_since = now
        compose = s.compose
        if compose is not None and (s.deadline is None or now < s.deadline):
            try:
                body = compose()  # composed here, in the round: no task, no coroutine
            except Exception:
                body = None
            if body is None:
                s.end()
            elif s.cycle is None or not write_chunk(s.cycle, body):
                s.pending = asyncio.get_running_loop().create_task(self._send_task(s, body))
            return
        if not self.inline_steps:
            s.pending = asyncio.get_running_loop().create_task(self._step_task(s))
            return
        coro = s.step()
        try:
            waiting = coro.send(None)  # the frame runs here, at once, unless it has to wait
        except StopIteration as done:
            if not done.value:
                s.end()
            return
        except BaseException:
            s.end()
            return
        s.pending = asyncio.get_running_loop().create_task(self._finish(s, coro, waiting))

    async def _send_task(self, s: Stream, body: bytes) -> None:
        """A composed frame the connection could not take at once: ``send`` waits for the client."""
        ok = True
        try:
            await s.send({"type": "http.response.body", "body": body, "more_body": True})
        except Exception:
            ok = False
        finally:
            s.pending = None
        self._after(s, ok)

    async def _step_task(self, s: Stream) -> None:
        try:
            ok = await s.step()
        except Exception:
            ok = False
        finally:
            s.pending = None
        self._after(s, ok)

    def _after(self, s: Stream, ok: bool) -> None:
        if not ok:
            s.end()
        elif s.again:
            s.again = False
            self.wake(s, asyncio.get_running_loop().time())

    async def _finish(self, s: Stream, coro: Coroutine[Any, Any, bool], waiting: Any) -> None:
        """Carry on a frame that had to wait: await what it awaits, then resume it, until it returns."""
        ok = False
        try:
            while True:
                if waiting is None:
                    await asyncio.sleep(0)
                else:
                    with contextlib.suppress(Exception):
                        await waiting  # its outcome reaches the frame when the frame resumes
                try:
                    waiting = coro.send(None)
                except StopIteration as done:
                    ok = bool(done.value)
                    break
        except BaseException:
            coro.close()
            ok = False
        finally:
            s.pending = None
        self._after(s, ok)

    def add(self, s: Stream, deadline: float | None) -> None:
        feed = self._rooms.get(s.room_id)
        if feed is None:
            feed = self._rooms[s.room_id] = _Feed()
            if self.live is not None:
                self.live.open(s.room_id)
        feed.streams[s] = None
        loop = asyncio.get_running_loop()
        s.last_sent = loop.time()
        s.deadline = deadline
        if deadline is not None:
            s.timer = loop.call_at(deadline, self._due, s)
        if self._pinger is None or self._pinger.done():
            self._pinger = loop.create_task(self._ping())

    def _due(self, s: Stream) -> None:
        s.timer = None
        self.wake(s, asyncio.get_running_loop().time())  # the step sees the deadline and sends refresh

    def remove(self, s: Stream) -> None:
        if s.timer is not None:
            s.timer.cancel()
            s.timer = None
        feed = self._rooms.get(s.room_id)
        if feed is not None:
            feed.streams.pop(s, None)
            if not feed.streams:
                del self._rooms[s.room_id]
                if self.live is not None:
                    self.live.close(s.room_id)

    async def _ping(self) -> None:
        """A comment line on every stream that had no frame for PING_EVERY seconds (checked every PING_CHECK)."""
        loop = asyncio.get_running_loop()
        while self._rooms and not self.closing.is_set():
            await asyncio.sleep(PING_CHECK)
            now = loop.time()
            for feed in list(self._rooms.values()):
                for s in list(feed.streams):
                    if now - s.last_sent >= PING_EVERY and s.pending is None and not s.ending:
                        s.last_sent = now
                        self._spawn(self._send_ping(s))

    async def _send_ping(self, s: Stream) -> None:
        try:
            async with asyncio.timeout(SEND_TIMEOUT):
                await s.send({"type": "http.response.body", "body": b": ping\n\n", "more_body": True})
        except (TimeoutError, OSError):
            s.end()

    def close_all(self) -> None:
        self.closing.set()
        for feed in self._rooms.values():
            for s in feed.streams:
                s.end()


async def watch_disconnect(receive: Receive, gone: asyncio.Event, wake: asyncio.Event | None = None) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            gone.set()
            if wake is not None:
                wake.set()
            return


async def hold_stream(receive: Receive, s: Stream) -> None:
    """The request task of a stream: wait for the client to go, or for the server to end the stream."""
    try:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
    except asyncio.CancelledError:
        task = s.task
        if not s.ending or task.cancelling() > 1:
            raise  # cancelled by someone else too (the server stopping): not ours to swallow
        task.uncancel()


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
