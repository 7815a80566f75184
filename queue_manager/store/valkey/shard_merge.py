"""Keeping a room's pre-queue shards (shards.py): their configs, their merge into the room, their end.

- **Opened with the drop.** While a room with ``preQueueShards`` N > 1 has a drop scheduled, it has N - 1
  shards, each given the room's config on every change of it (``sync``). A change of N merges the shards
  into the room first: a handle names its shard by N, so no sign-up is left in a shard its visitor would
  no longer be sent to. A drop moved or cancelled needs nothing first: a shard whose config is not synced
  yet either answers ``moved`` (the room takes the sign-up) or is sealed by the draw before it is read.
- **Merged, then let go.** ``merge`` seals a shard (from then on it answers ``moved``: its visitors are the
  room's), reads its entries, puts them in the room's pre-queue in parts (``prequeue_merge.lua``: an entry
  the room holds already is skipped, so two instances merging at once add each entry once), commits the
  room's events, and only then drains the shard (``shard_drain.lua``, journaled in the shard). A crash in
  between leaves an entry in both, which the next merge settles.
- **At the draw.** A sharded room's draw is due whatever its own pre-queue holds; its reply names the shards
  (runner.py), and the draw waits for ``merge_for_draw``: every shard merged and sealed, then the room told
  (``prequeue_merge.lua`` 'done') that its pre-queue is whole for this drop.
- **Housekeeping.** Each tick, a shard whose room is gone, no longer has a drop scheduled or counts
  another N is merged (when it still holds anything) and deleted.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

from queue_manager.engine.errors import EngineError
from queue_manager.engine.events import Event
from queue_manager.engine.model import RoomConfig
from queue_manager.store.valkey.arguments import text
from queue_manager.store.valkey.errors import translate
from queue_manager.store.valkey.keys import room_key
from queue_manager.store.valkey.registry import RoomRegistry
from queue_manager.store.valkey.runner import RoomRunner, events_of
from queue_manager.store.valkey.shards import is_shard, parent, shard_ids
from queue_manager.store.valkey.writes import ConfigWrites

log = logging.getLogger(__name__)

MERGE_PART = 1000  # shard entries one prequeue_merge.lua or shard_drain.lua call takes
COUNT_FRESH_SEC = 1.0  # how long a room's summed pre-queue count is reused

Commit = Callable[[list[Event]], Awaitable[None]]
Delete = Callable[[str], Awaitable[None]]


def wanted(cfg: RoomConfig, now_wall: int) -> int:
    """How many shards the room's sign-ups are spread over now: its ``preQueueShards`` while its drop is
    scheduled, else 1 (the room alone)."""
    if cfg.prequeue_shards > 1 and cfg.opens_at_ms is not None and now_wall < cfg.opens_at_ms:
        return cfg.prequeue_shards
    return 1


class ShardKeeper:
    def __init__(
        self, runner: RoomRunner, registry: RoomRegistry, writes: ConfigWrites, commit: Commit, delete: Delete
    ) -> None:
        self._runner = runner
        self._registry = registry
        self._writes = writes
        self._commit = commit
        self._delete = delete
        self._counts: dict[str, tuple[float, dict[str, int]]] = {}
        self._commitments: dict[str, str | None] = {}

    # ------------------------------------------------------------------ routing

    def count(self, room_id: str) -> int:
        """The shards a visitor of ``room_id`` is routed over, from this process's copy of its config (1: none).
        A copy that is behind costs nothing but a call: a shard that is not taking sign-ups answers ``moved``."""
        copy = self._runner.configs.get(room_id)
        if copy is None:
            return 1
        return wanted(copy.cfg, self._runner.clock.wall_ms())

    async def total(self, room_id: str, count: int, seen: tuple[str, int] | None = None) -> int:
        """The room's pre-queue summed over its shards (what its visitors and its stats show): each shard's
        count as last seen here (``seen``: a reply's own count, (shard, count)), all of them read again at most
        once a second per room (one HLEN per shard, in one pipeline, with the room's drop's commitment)."""
        held = self._counts.get(room_id)
        if held is None or time.monotonic() - held[0] >= COUNT_FRESH_SEC:
            calls = self._runner.calls
            ids = [room_id, *shard_ids(room_id, count)] if count > 1 else [room_id]
            pipe = calls.redis.pipeline(transaction=False)
            for rid in ids:
                pipe.hlen(room_key(calls.prefix, calls.slot_id(rid), "pq"))
            pipe.hmget(room_key(calls.prefix, calls.slot_id(room_id), "draw"), ["com", "dat"])
            *counts, (com, drawn) = await pipe.execute()
            held = self._counts[room_id] = (time.monotonic(), dict(zip(ids, map(int, counts), strict=True)))
            self._commitments[room_id] = _waiting(com, drawn) or None
        if seen is not None:
            held[1][seen[0]] = seen[1]
        return sum(held[1].values())

    def commitment(self, room_id: str) -> str | None:
        """The room's drop's commitment as ``total`` last read it (what a shard's visitor is shown, should the
        shard's own copy be missing: a shard rebuilt from its journal has none until the room's next change)."""
        return self._commitments.get(room_id)

    # ------------------------------------------------------------------ configs

    async def present(self, room_id: str) -> list[str]:
        """The shards of ``room_id`` that exist (the registry's), whatever its config says now."""
        return [i for i in await self._registry.ids() if is_shard(i) and parent(i) == room_id]

    async def sync(self, room_id: str, *, merge_first: bool) -> None:
        """After a change of the room: its shards given its new config and its drop's commitment (what their
        visitors are shown), those it no longer wants merged and deleted. ``merge_first``: the change changed
        the shard count (every shard was merged before it, and stays sealed until it has its new config)."""
        runner = self._runner
        cfg, _ = await runner.read_config(room_id)
        present = await self.present(room_id)
        now = await runner.now()
        count = wanted(cfg.cfg, now[0]) if cfg is not None else 1
        keep = shard_ids(room_id, count) if count > 1 else []
        for sid in present:
            if sid not in keep:
                await self.retire(room_id, sid, now)
        if cfg is None:
            return
        commitment = await self._commitment(room_id) if keep else ""
        for sid in keep:
            await self._writes.put(sid, replace(cfg.cfg, id=sid))
            opened = merge_first or sid not in present
            await runner.once("shard_seal", sid, ["0" if opened else "=", commitment], now)

    async def _commitment(self, room_id: str) -> str:
        """The room's drop's published commitment while it waits for its draw ('' none), read now."""
        calls = self._runner.calls
        with translate(room_id, calls.breaker):
            com, drawn = await calls.redis.hmget(room_key(calls.prefix, calls.slot_id(room_id), "draw"), ["com", "dat"])
        return _waiting(com, drawn)

    async def seal_all(self, room_id: str) -> None:
        """Before a change that moves the drop or changes the shard count: every shard merged into the room
        and sealed (sign-ups meanwhile are the room's)."""
        await self.merge(room_id, await self._runner.now(), reopen=False)

    # ------------------------------------------------------------------ merging

    async def merge_for_draw(self, room_id: str, now: tuple[int, int]) -> None:
        """The room's draw is due: every shard merged and left sealed, then the room told its pre-queue is whole."""
        await self.merge(room_id, now, reopen=False)
        await self._runner.once("prequeue_merge", room_id, ["done"], now)

    async def merge(self, room_id: str, now: tuple[int, int], *, reopen: bool) -> int:
        """Every shard's entries into the room (see the module's text); ``reopen``: the shards take sign-ups
        again afterwards. Returns how many entries the room took."""
        took = 0
        for sid in await self.present(room_id):
            took += await self._merge_one(room_id, sid, now, reopen=reopen)
        self._counts.pop(room_id, None)
        return took

    async def _merge_one(self, room_id: str, sid: str, now: tuple[int, int], *, reopen: bool) -> int:
        runner = self._runner
        try:
            sealed = await runner.once("shard_seal", sid, ["1"], now)
        except EngineError as err:
            if err.code == "no_room":
                return 0  # deleted meanwhile
            raise
        count = int(sealed.get("count") or 0)
        records: list[str] = []
        while len(records) < count:
            page = await runner.once("shard_page", sid, [str(len(records)), str(MERGE_PART)], now)
            got = page.get("entries") or []
            if not int(page.get("n") or 0):
                break
            records.extend(str(r) for r in got)
        events: list[Event] = []
        took = 0
        late = 0
        for part in _parts(records):
            reply = await runner.once("prequeue_merge", room_id, ["add", *part], now)
            if reply["k"] == "late":
                late += len(part)
                continue
            took += int(reply.get("count") or 0)
            events.extend(events_of(room_id, reply))
        if late:
            log.error(
                "room %s: %d pre-queue sign-ups of shard %s reached the room after its draw; they were not drawn",
                room_id,
                late,
                sid,
            )
        await self._commit(events)  # the room holds them in the journal before the shard lets them go
        handles = [str(json.loads(r)["h"]) for r in records]
        drained: list[Event] = []
        parts = _parts(handles) or [[]]
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            reply = await runner.once("shard_drain", sid, ["1" if reopen and last else "0", *part], now)
            drained.extend(events_of(sid, reply))
        await self._commit(drained)
        return took

    # ------------------------------------------------------------------ the end of a shard

    def _keeps(self, room_id: str, sid: str, cfg: RoomConfig) -> bool:
        return _keeps_shard(room_id, sid, cfg, self._runner.clock.wall_ms())

    async def retire(self, room_id: str, sid: str, now: tuple[int, int]) -> None:
        """A shard the room no longer wants: merged when it still holds anything, then deleted."""
        await self._merge_one(room_id, sid, now, reopen=False)
        await self._delete(sid)

    async def housekeep(self, ids: Sequence[str]) -> None:
        """The tick's: every shard whose room is gone, has no drop scheduled or counts another N, retired. A
        room this process has no config of yet is left to a later tick."""
        rooms = set(ids)
        now: tuple[int, int] | None = None
        for sid in ids:
            if not is_shard(sid):
                continue
            room_id = parent(sid)
            if room_id in rooms:
                copy = self._runner.configs.get(room_id)
                if copy is None or self._keeps(room_id, sid, copy.cfg):
                    continue
                copy, _ = await self._runner.read_config(room_id)  # this copy may be behind: asked again
                if copy is not None and self._keeps(room_id, sid, copy.cfg):
                    continue
            now = now or await self._runner.now()
            try:
                if room_id in rooms:
                    await self.retire(room_id, sid, now)
                else:
                    await self._delete(sid)
            except EngineError as err:
                if err.code != "no_room":
                    raise


def _waiting(com: bytes | str | None, drawn: bytes | str | None) -> str:
    """The commitment of the room's draw hash (``com``, ``dat``) while its drop waits to be drawn ('' none)."""
    return "" if com is None or drawn is not None else text(com)


def _keeps_shard(room_id: str, sid: str, cfg: RoomConfig, now_wall: int) -> bool:
    count = wanted(cfg, now_wall)
    return count > 1 and sid in shard_ids(room_id, count)


def _parts(items: list[str]) -> list[list[str]]:
    return [items[i : i + MERGE_PART] for i in range(0, len(items), MERGE_PART)]
