"""A room's calls in this process one at a time: the asks that arrive while a call of the room is on its
way wait for it and go together in the next, up to the batch size.

Joins (``ValkeyStore.join``, ``lua/join_many.lua``, up to JOIN_BATCH): a room's joins all run on its one
Valkey core, and about half of what each call costs there is paid by every call whatever it does (the room
loaded, the prelude's closures defined, the deadlines swept: docs/benchmarks.md, "What a script call costs
before its own work"). So under load a call that joins many visitors costs the room's core about half as
much per visitor. Alone, a join goes as it arrives (``join.lua``): no waiting is added when the room is
quiet. The order stays first come, first served: the asks wait in arrival order and the script joins them
in that order, so a join answered before another was asked for is ahead of it, as with one call each.

Polls answered from the replica (``live.py``): the question whether the room is still where the replica
is, one for every poll that arrived while the last one was on its way; an ask never shares a call made
before it arrived.

Each ask gets its own answer (its view, or its refusal); a failure of the call as a whole (Valkey
unreachable, the journal's commit failed) is every ask's. The answers of one call (for joins, after the
commit of its events) go on while the next call of the room is made.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

JOIN_BATCH = 32  # the joins one call takes at most (the rest wait for the next)

Ask = TypeVar("Ask")
Answer = TypeVar("Answer")


@dataclass
class _Room(Generic[Ask, Answer]):
    waiting: list[tuple[Ask, asyncio.Future[Answer]]] = field(default_factory=list)
    running: bool = False


class RoomBatches(Generic[Ask, Answer]):
    """``call(room_id, asks)`` makes one call for ``asks`` and returns a coroutine that commits and gives
    each ask's answer (an Answer, or the exception it is refused with), in order."""

    def __init__(
        self,
        call: Callable[[str, list[Ask]], Awaitable[Callable[[], Awaitable[list[Answer | BaseException]]]]],
        *,
        batch: int = JOIN_BATCH,
    ) -> None:
        self._call = call
        self._batch = batch
        self._rooms: dict[str, _Room[Ask, Answer]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.calls = 0  # calls made, and asks they took: how much the batching saves
        self.asks = 0

    async def join(self, room_id: str, ask: Ask) -> Answer:
        room = self._rooms.get(room_id)
        if room is None:
            room = self._rooms[room_id] = _Room()
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        room.waiting.append((ask, future))
        if not room.running:
            room.running = True
            self._spawn(self._drain(room_id, room))
        return await future

    async def _drain(self, room_id: str, room: _Room[Ask, Answer]) -> None:
        try:
            while room.waiting:
                taken = room.waiting[: self._batch]
                del room.waiting[: self._batch]
                self.calls += 1
                self.asks += len(taken)
                try:
                    finish = await self._call(room_id, [ask for ask, _ in taken])
                except BaseException as exc:  # the call as a whole failed: every ask's answer
                    _fail(taken, exc)
                    if isinstance(exc, asyncio.CancelledError):
                        raise
                    continue
                self._spawn(self._answer(taken, finish))
        finally:
            room.running = False
            if not room.waiting and self._rooms.get(room_id) is room:
                del self._rooms[room_id]

    async def _answer(
        self,
        taken: list[tuple[Ask, asyncio.Future[Answer]]],
        finish: Callable[[], Awaitable[list[Answer | BaseException]]],
    ) -> None:
        try:
            answers = await finish()
        except BaseException as exc:
            _fail(taken, exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        for (_, future), answer in zip(taken, answers, strict=True):
            if future.done():  # its caller went away
                continue
            if isinstance(answer, BaseException):
                future.set_exception(answer)
            else:
                future.set_result(answer)

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            try:
                await task
            except BaseException:
                pass


def _fail(taken: Sequence[tuple[object, asyncio.Future[Answer]]], exc: BaseException) -> None:
    for _, future in taken:
        if not future.done():
            if isinstance(exc, asyncio.CancelledError):
                future.cancel()
            else:
                future.set_exception(exc)
