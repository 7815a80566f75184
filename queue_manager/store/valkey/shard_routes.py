"""A visitor of a room whose drop takes its sign-ups in shards (shards.py), sent to the shard that holds them.

While the room's drop is scheduled with ``preQueueShards`` N > 1 (this process's copy of its config says so),
a new sign-up goes to the shard of its address with a handle naming that shard, and a handle presented later
(a join again, a poll, a stream's read, a door check) is asked of its shard first. A shard answers only for an
entry it holds while its pre-queue is open; ``moved`` (or a shard that is gone) sends the visitor to the room,
which holds everything else. What a shard answers is rendered as its room's: the room's generation and config,
and the whole pre-queue's count.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from queue_manager.engine.errors import EngineError
from queue_manager.engine.events import Event
from queue_manager.engine.model import ClientId
from queue_manager.engine.randomness import RandomSource
from queue_manager.engine.view import VisitorView
from queue_manager.engine.visitor import Presented
from queue_manager.store.base import STATUS_BATCH
from queue_manager.store.valkey import codec
from queue_manager.store.valkey.arguments import always, asks_args
from queue_manager.store.valkey.calls import Reply
from queue_manager.store.valkey.refusals import refusal
from queue_manager.store.valkey.runner import ArgsFn, RoomRunner
from queue_manager.store.valkey.shard_merge import ShardKeeper
from queue_manager.store.valkey.shards import handle_in, parent, shard_id, shard_of_handle, shard_of_ident

Finish = Callable[[list[Event]], Awaitable[None]]
Asks = Sequence[tuple[ClientId, Presented | None]]
Fed = list[tuple[VisitorView, int | None, int, int]]


class Moved(Exception):
    """A shard's answer: not its visitor (or no sign-ups now); the room answers instead."""


class ShardRoutes:
    def __init__(self, runner: RoomRunner, shards: ShardKeeper, finish: Finish, rng: RandomSource) -> None:
        self._runner = runner
        self._shards = shards
        self._finish = finish
        self._rng = rng

    def join_target(self, room_id: str, client: ClientId, presented: Presented | None) -> tuple[str, str]:
        """Where a join of ``room_id`` goes, and the fresh handle it takes should it sign up: the shard of the
        handle presented, or of the address; the room itself otherwise."""
        count = self._shards.count(room_id)
        if count < 2 or (presented is not None and presented.n is not None):
            return room_id, self._rng.token_hex(8)
        held = presented.handle if presented is not None else None
        k = shard_of_handle(held, count) if held else shard_of_ident(client.ident, count)
        return (shard_id(room_id, k, count) if k else room_id), handle_in(self._rng, k, count)

    def shard_of(self, room_id: str, presented: Presented | None) -> str | None:
        """The shard a presented handle names, while the room's drop takes sign-ups in shards (None: the room)."""
        if presented is None or presented.n is not None or not presented.handle:
            return None
        count = self._shards.count(room_id)
        k = shard_of_handle(presented.handle, count) if count > 1 else 0
        return shard_id(room_id, k, count) if k else None

    async def view(self, sid: str, r: Reply, now: tuple[int, int]) -> VisitorView | BaseException:
        """A shard's answer as its room's; ``moved`` as Moved, a refusal as its EngineError."""
        if r["k"] == "moved":
            return Moved()
        if r["k"] == "err":
            return refusal(r)
        room_id = parent(sid)
        copy = self._runner.configs.required(room_id)
        await self.sum_prequeue(room_id, [r], sid)
        if r.get("pre") is not None and not r.get("dc"):  # the shard's copy of the commitment is missing
            r["dc"] = self._shards.commitment(room_id)
        return codec.visitor_view(room_id, copy.gen, copy.cfg, r, *now)

    async def sum_prequeue(self, room_id: str, replies: Sequence[Reply], source: str) -> None:
        """A pre-queue entry's view of a room whose drop takes sign-ups in shards shows the whole pre-queue;
        ``source``: the room or shard that answered (its own count is in each such view)."""
        count = self._shards.count(room_id)
        pre = [r for r in replies if r.get("pre") is not None]
        if count > 1 and pre:
            total = await self._shards.total(room_id, count, (source, int(pre[-1]["pc"])))
            for r in pre:
                r["pc"] = total

    async def call(self, name: str, sid: str, now: tuple[int, int], args: list[str]) -> VisitorView:
        """A visitor's call answered by the shard ``sid`` (raises Moved when its room answers)."""
        try:
            reply, events = await self._runner.run(name, sid, now, lambda _: args)
        except EngineError as err:
            if err.code == "no_room":
                raise Moved from None  # retired meanwhile: its entries are the room's
            raise
        await self._finish(events)
        view = await self.view(sid, reply, now)
        if isinstance(view, BaseException):
            raise view
        return view

    async def status_many(self, room_id: str, asks: Asks, in_room: Callable[[str, Asks], Awaitable[Fed]]) -> Fed:
        """The store's ``status_many_fed`` for such a room: each handle asked of its shard, the rest (and whatever
        a shard says is the room's) of the room through ``in_room``, the answers in the order asked."""
        runner = self._runner
        now = await runner.now()
        out: list[tuple[VisitorView, int | None, int, int] | None] = [None] * len(asks)
        by_shard: dict[str, list[int]] = {}
        for i, (_, presented) in enumerate(asks):
            sid = self.shard_of(room_id, presented)
            if sid is not None:
                by_shard.setdefault(sid, []).append(i)
        for sid, idx in by_shard.items():
            for start in range(0, len(idx), STATUS_BATCH):
                part = idx[start : start + STATUS_BATCH]
                args = asks_args([asks[i] for i in part])
                try:
                    reply, events = await runner.run("status_many", sid, now, always(args))
                except EngineError as err:
                    if err.code != "no_room":
                        raise
                    continue  # retired meanwhile: the room answers
                await self._finish(events)
                for i, view in zip(part, reply["vs"], strict=True):
                    if view.get("moved"):
                        continue
                    rendered = await self.view(sid, {**view, "k": "ok"}, now)
                    if isinstance(rendered, VisitorView):
                        out[i] = (rendered, None, 0, runner.configs.required(room_id).cv)
        rest = [i for i, got in enumerate(out) if got is None]
        for i, answer in zip(rest, await in_room(room_id, [asks[i] for i in rest]), strict=True):
            out[i] = answer
        return [answer for answer in out if answer is not None]

    async def check(
        self, room_id: str, presented: Presented | None, now: tuple[int, int], args: ArgsFn
    ) -> tuple[Reply, list[Event]]:
        """The door check, of the shard a presented handle names first (it answers only for an entry it holds;
        anything else is the room's)."""
        sid = self.shard_of(room_id, presented)
        if sid is not None:
            try:
                reply, events = await self._runner.run("check", sid, now, args, cv="strict")
            except EngineError as err:
                if err.code != "no_room":
                    raise
            else:
                if reply["k"] != "moved":
                    return reply, events
        return await self._runner.run("check", room_id, now, args, cv="strict")
