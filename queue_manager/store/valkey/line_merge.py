"""A FIFO room's joins past one core (``joinShards``): taken in shards, put in line by the room in the order
of their arrival stamps.

A room is one hash slot, so every join of a FIFO room runs on one master's core. With ``joinShards`` N > 1
a new join goes to one of N - 1 hidden shards (shards.py; the shard of its address), which keeps it as an
entry stamped with the joining instance's clock (``pending_join`` in the prelude) and answers ``pending``.
Rounds put the shards' entries in line: a round takes from every shard the entries stamped at or before a
watermark ``W`` = now - ``LAG_MS`` (``shard_take.lua``), sorts them by stamp, and the room joins them in that
order in parts (``line_merge.lua``: the
same refusals a join has, each journaled as a ``join`` at its stamp), then the shards let them go
(``shard_drain.lua``) once the room's events are committed. The joining request waits for its handle's
outcome (its ticket number, or a refusal) and answers as a join does. One round at a time per room: a
claim in the room's slot, held for at most ``CLAIM_MS``; rounds run while any join of the room waits in
this instance.

The order it keeps: two joins stamped ``a`` < ``b`` are in line in that order, unless the first reached its
shard after a take whose watermark ``W`` was at or past ``a`` (its call took longer than ``LAG_MS`` less the
instances' clock difference); then it goes with the next round, ahead of that round's joins, and a join
stamped up to ``W`` - ``a`` after it can be ahead of it: never more than its call's delay past ``LAG_MS`` plus
twice the clock difference (``tests/store/test_join_shards.py`` checks this over a simulated crowd). Stamps
are the instances' clocks (anchored on Valkey's), so joins of different instances within their clock
difference are ordered as those clocks read, as calls of different instances reaching one Valkey are. A join
made by an instance whose copy of the room's config is older than the change that set ``joinShards``, or
whose shard is gone, joins the room at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import orjson

from queue_manager.engine.errors import EngineError
from queue_manager.engine.events import Event
from queue_manager.store.base import StoreUnavailable
from queue_manager.store.valkey.arguments import always, text
from queue_manager.store.valkey.errors import translate
from queue_manager.store.valkey.keys import room_key
from queue_manager.store.valkey.runner import RoomRunner, events_of
from queue_manager.store.valkey.shards import shard_ids

log = logging.getLogger(__name__)

LAG_MS = 50  # a take leaves the joins of the last LAG_MS to the next: they may still be on their way
ROUND_SEC = 0.02  # between two rounds while joins of the room wait here
CLAIM_MS = 5000  # a round's claim on the room, should its instance die mid-round
WAIT_SEC = 10.0  # a join waits at most this long for its place (then 503: the round will still place it)
LOOKUP_PART = 1000  # waiting joins' outcomes one HMGET reads
MERGE_PART = 500  # joins one line_merge.lua call puts in line

Commit = Callable[[list[Event]], Awaitable[None]]


class LineMerges:
    def __init__(self, runner: RoomRunner, commit: Commit, token: str) -> None:
        self._runner = runner
        self._commit = commit
        self._token = token  # this instance's claim value
        self._waiting: dict[str, dict[str, asyncio.Future[str]]] = {}
        self._loops: dict[str, asyncio.Task[None]] = {}

    async def stop(self) -> None:
        """The store closes: rounds in flight are cancelled (a join they would have placed is placed by the
        next round of any instance)."""
        loops = [t for t in self._loops.values() if not t.done()]
        for task in loops:
            task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        self._loops.clear()

    async def settle(self, room_id: str, count: int, handle: str) -> str:
        """Wait until the room holds the join ``handle`` a shard took: its view as line_merge.lua kept it (JSON),
        or ``-`` and its refusal's code. The joins waiting here for one room are looked up together, one HMGET
        after each round."""
        waiting = self._waiting.setdefault(room_id, {})
        done: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        waiting[handle] = done
        loop = self._loops.get(room_id)
        if loop is None or loop.done():
            self._loops[room_id] = asyncio.create_task(self._rounds(room_id, count))
        try:
            return await asyncio.wait_for(done, WAIT_SEC)
        except TimeoutError:
            raise StoreUnavailable(f"room {room_id!r}: the join was not put in line in time, try again") from None
        finally:
            waiting.pop(handle, None)

    async def _rounds(self, room_id: str, count: int) -> None:
        waiting = self._waiting.get(room_id) or {}
        while waiting:
            try:
                await self.round(room_id, count)
                await self._look_up(room_id, waiting)
            except (StoreUnavailable, EngineError) as exc:
                log.warning("room %s: a round putting its shards' joins in line failed: %s", room_id, exc)
            await asyncio.sleep(ROUND_SEC)

    async def _look_up(self, room_id: str, waiting: dict[str, asyncio.Future[str]]) -> None:
        calls = self._runner.calls
        key = room_key(calls.prefix, calls.slot_id(room_id), "mgd")
        handles = list(waiting)
        for start in range(0, len(handles), LOOKUP_PART):
            part = handles[start : start + LOOKUP_PART]
            with translate(room_id, calls.breaker):
                got = await calls.redis.hmget(key, part)
            for handle, value in zip(part, got, strict=True):
                future = waiting.get(handle)
                if value is not None and future is not None and not future.done():
                    future.set_result(text(value))

    async def round(self, room_id: str, count: int, *, everything: bool = False) -> int:
        """One round (see the module's text), if no other instance's is under way; how many joined.
        ``everything``: take every entry whatever its stamp (a shard being retired)."""
        calls = self._runner.calls
        claim = room_key(calls.prefix, calls.slot_id(room_id), "mcl")
        with translate(room_id, calls.breaker):
            if not await calls.redis.set(claim, self._token, nx=True, px=CLAIM_MS):
                return 0
        try:
            return await self._round(room_id, count, everything)
        finally:
            with contextlib.suppress(Exception), translate(room_id, calls.breaker):
                if text(await calls.redis.get(claim) or b"") == self._token:
                    await calls.redis.delete(claim)

    async def _round(self, room_id: str, count: int, everything: bool) -> int:
        runner = self._runner
        now = await runner.now()
        watermark = now[0] + 10**12 if everything else now[0] - LAG_MS
        taken: list[tuple[int, int, int, str]] = []
        handles: dict[str, list[str]] = {}
        for k, sid in enumerate(shard_ids(room_id, count), start=1):
            try:
                reply = await runner.once("shard_take", sid, [str(watermark)], now)
            except EngineError as err:
                if err.code == "no_room":
                    continue  # retired meanwhile
                raise
            for i, raw in enumerate(reply.get("entries") or []):
                entry = orjson.loads(raw)
                taken.append((int(entry["j"]), k, i, str(raw)))
                handles.setdefault(sid, []).append(str(entry["h"]))
        if not taken:
            return 0
        taken.sort()
        events: list[Event] = []
        joined = 0
        for start in range(0, len(taken), MERGE_PART):
            part = [raw for _, _, _, raw in taken[start : start + MERGE_PART]]
            reply, evs = await runner.run("line_merge", room_id, now, always(part), refs=True, refs_need=len(part))
            events.extend(evs)
            joined += int(reply.get("count") or 0)
        await self._commit(events)  # the room's joins are in the journal before the shards let them go
        drained: list[Event] = []
        for sid, held in handles.items():
            for start in range(0, len(held), MERGE_PART):
                reply = await runner.once("shard_drain", sid, ["0", *held[start : start + MERGE_PART]], now)
                drained.extend(events_of(sid, reply))
        await self._commit(drained)
        return joined
