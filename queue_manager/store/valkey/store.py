"""ValkeyStore: the Store contract over Lua scripts (see the package docstring for the data model).

Each operation is the arguments its script takes and how the reply is answered; running a script to
its end is ``runner.py`` (on ``calls.py``), config changes are ``writes.py``, the room registry is
``registry.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any, Protocol

from redis.asyncio import Redis

from queue_manager.clock import Clock
from queue_manager.engine.draw import DrawState
from queue_manager.engine.errors import EngineError, no_room
from queue_manager.engine.events import Event
from queue_manager.engine.model import ClientId, RoomConfig, check_room_id
from queue_manager.engine.policy import RoomPolicy
from queue_manager.engine.randomness import SYSTEM_RANDOM, RandomSource
from queue_manager.engine.view import MintedWaits, VisitorView
from queue_manager.engine.visitor import CheckResult, NewDoor, Presented
from queue_manager.store.base import STATUS_BATCH, ChangeListener, JournalCommitFailed, Store, StoreUnavailable
from queue_manager.store.valkey import codec
from queue_manager.store.valkey.arguments import (
    always,
    asks_args,
    client_args,
    hex_or_empty,
    presented_args,
    query_args,
    text,
    to_json,
)
from queue_manager.store.valkey.batches import RoomBatches
from queue_manager.store.valkey.breaker import Breaker
from queue_manager.store.valkey.calls import Reply, ScriptCalls
from queue_manager.store.valkey.client import is_cluster, open_client
from queue_manager.store.valkey.clock import SharedClock
from queue_manager.store.valkey.cluster_lane import ClusterLanes
from queue_manager.store.valkey.configs import ConfigCopy
from queue_manager.store.valkey.errors import RoomFenced, translate
from queue_manager.store.valkey.keys import DEFAULT_PREFIX, ROOM_KEYS, room_key
from queue_manager.store.valkey.lane import ValkeyLane
from queue_manager.store.valkey.live import LiveLines
from queue_manager.store.valkey.refusals import refusal
from queue_manager.store.valkey.registry import RoomRegistry
from queue_manager.store.valkey.runner import DRAW_CHUNK, RoomRunner, events_of
from queue_manager.store.valkey.shard_merge import ShardKeeper
from queue_manager.store.valkey.shard_routes import Moved, ShardRoutes
from queue_manager.store.valkey.shards import is_shard
from queue_manager.store.valkey.snapshot import export_document, import_parts, import_payload
from queue_manager.store.valkey.takebacks import TakeBacks
from queue_manager.store.valkey.writes import ConfigWrites

#: what commits a join call's events and gives each of its asks its answer (batches.py)
JoinFinish = Callable[[], Awaitable[list[VisitorView | BaseException]]]

log = logging.getLogger("queue_manager.store.valkey")

CONFIG_FRESH_SEC = 2.0  # room_policy / room_exists answer from the config copy confirmed this recently

# list elements of a checkpoint one import call writes (about 10,000 tickets: ~60 ms of Valkey); a larger
# room is imported in parts, fenced until the last
IMPORT_PART = 20_000
LINE_FEED = ROOM_KEYS.index("lf")  # the line feed channel's place among a script's keys
STATE = ROOM_KEYS.index("st")
LINE = ROOM_KEYS.index("line")
FENCE = ROOM_KEYS.index("fence")


class Journal(Protocol):
    async def commit(self, events: list[Event]) -> None:
        """Durably record ``events``; raises StoreUnavailable when it cannot (handed on as JournalCommitFailed)."""


class ValkeyStore:
    """The live line in Valkey (STORE=valkey); answers exactly as MemoryStore does.

    ``redis`` is a URL (the store owns the connection) or a ``redis.asyncio.Redis`` client
    (``decode_responses=False``). ``clock`` defaults to a SharedClock anchored at ``start()``.
    ``journal.commit(events)`` is awaited before a change is acknowledged. ``rng`` is where
    pre-queue handles and the draw's order come from (the system's secure source by default).
    ``sweep_max``: deadlines one call may process (more: the store calls again); ``promote_max``:
    promotions one tick call may make; ``writer``: the instance that commits this store's events
    (kept with them in the outbox); ``draw_chunk``: pre-queue entries one call puts in line when a
    drop is drawn (a larger draw goes in over several calls, Valkey serving everyone between them).
    """

    kind = "valkey"
    immediate = False

    def __init__(
        self,
        redis: str | Redis,
        prefix: str = DEFAULT_PREFIX,
        clock: Clock | None = None,
        journal: Journal | None = None,
        *,
        sweep_max: int = 5000,
        promote_max: int = 10_000,
        config_fresh_sec: float = CONFIG_FRESH_SEC,
        rng: RandomSource = SYSTEM_RANDOM,
        writer: str = "",
        presence_mark_sec: float = 10.0,
        full_records: bool = False,
        draw_chunk: int = DRAW_CHUNK,
        local_polls: bool = False,
    ) -> None:
        if isinstance(redis, str):
            self._redis: Redis = open_client(redis)  # waits for a free connection; hiredis packs
            self._owns_client = True
        else:
            self._redis = redis
            self._owns_client = False
        # the per-request commands (room scripts, places_held) on one pipelined connection (lane.py);
        # on a cluster, one per master (cluster_lane.py)
        lane: ValkeyLane | ClusterLanes | None = None
        if isinstance(redis, str):
            lane = ValkeyLane.for_url(redis) or ClusterLanes.for_url(redis, self._redis)
        self.prefix = prefix
        self.clock: Clock = clock if clock is not None else SharedClock()
        self.journal = journal
        self.rng = rng
        self.config_fresh_sec = config_fresh_sec
        self.events_total = 0
        self.maxmemory_policy: str | None = None
        self.breaker = Breaker()  # the fast answer while Valkey is unreachable
        self.takebacks = TakeBacks()  # what the log says of changes taken back after a failed commit
        self.cluster = is_cluster(self._redis)  # a Valkey cluster: rooms spread over its masters
        self._calls = ScriptCalls(self._redis, lane, prefix, self.breaker, self.cluster)
        self._runner = RoomRunner(
            self._calls,
            self.clock,
            rng,
            sweep_max=sweep_max,
            promote_max=promote_max,
            writer=writer,
            full_records=full_records,
            draw_chunk=draw_chunk,
        )
        self._registry = RoomRegistry(self._calls)
        self._writes = ConfigWrites(self._runner, self._registry, self._finish)
        # a drop's pre-queue over several hash slots (shards.py, shard_merge.py)
        self.shards = ShardKeeper(self._runner, self._registry, self._writes, self._commit, self._delete)
        self._runner.merge_shards = self.shards.merge_for_draw
        self.routes = ShardRoutes(self._runner, self.shards, self._finish, rng)
        self._listeners: list[ChangeListener] = []
        # the live streams' reads: waiting visitors' frames from this process's replicas of the lines
        self.lines = LiveLines(self, mark_every=presence_mark_sec)
        # a waiting visitor's poll (status) from the replica too, after its first store read here (live.py)
        self.local_polls = local_polls
        # a room's joins that arrive while one of its join calls is on its way go together in the next
        self._joins: RoomBatches[list[str], VisitorView] = RoomBatches(self._join_call)

    @property
    def redis(self) -> Redis:
        """The client this store talks through (the leader lease and control channel share it)."""
        return self._redis

    @property
    def held(self) -> bool:
        """Admission maintenance: every script is told (the header's HOLD)."""
        return self._runner.held

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Anchor the shared clock, load the scripts, read the eviction policy. Raises
        StoreUnavailable when Valkey cannot be reached; every operation retries the anchor, so a
        caller may boot degraded and carry on."""
        with translate():
            if isinstance(self.clock, SharedClock) and not self.clock.anchored:
                await self.clock.anchor(self._redis)
            await self._calls.load()
            info = await self._redis.info("memory")
        policy = info.get("maxmemory_policy")
        self.maxmemory_policy = policy.decode() if isinstance(policy, bytes) else policy
        if self.maxmemory_policy != "noeviction":
            log.warning(
                "valkey maxmemory-policy is %s, not noeviction: Valkey may evict part of a room "
                "(admissions, passes, ticket ownership) and nothing would notice",
                self.maxmemory_policy,
            )

    async def close(self) -> None:
        await self._joins.stop()
        await self.lines.stop()
        self.takebacks.flush(force=True)
        if self._calls.lane is not None:
            await self._calls.lane.close()
        if self._owns_client:
            await self._redis.aclose()

    def on_change(self, listener: ChangeListener) -> None:
        self._listeners.append(listener)

    def _notify(self, rooms: set[str]) -> None:
        if not rooms:
            return
        for listener in self._listeners:
            listener(rooms)

    def set_held(self, held: bool) -> None:
        """Admission maintenance: no promotion and no new admission in any room while on."""
        self._runner.held = held

    def fenced_recently(self, within_sec: float = 30.0) -> set[str]:
        """Rooms Valkey answered as fenced (being rebuilt) within ``within_sec``."""
        return self._calls.fenced_recently(within_sec)

    # ------------------------------------------------------------------ events

    async def _commit(self, events: list[Event]) -> None:
        """Journal ``events``: a failure is JournalCommitFailed, the journal's and never Valkey's."""
        if not events:
            return
        self.events_total += len(events)
        if self.journal is not None:
            try:
                await self.journal.commit(events)
            except JournalCommitFailed:
                raise
            except StoreUnavailable as exc:
                raise JournalCommitFailed(str(exc), exc.retry_after) from exc

    async def _finish(self, events: list[Event]) -> None:
        """Commit, then tell the listeners (also when the commit failed: the state moved)."""
        try:
            await self._commit(events)
        finally:
            self._notify({e.room for e in events})

    def known_config(self, room_id: str) -> tuple[RoomConfig, RoomPolicy] | None:
        """The room's config as this process last saw it, however old: what gates the room's visitors
        while Valkey is unreachable (``routes/visitor/backend_down.py``). None: never seen here."""
        cache = self._runner.configs.get(room_id)
        return None if cache is None else (cache.cfg, cache.policy)

    # ------------------------------------------------------------------ rooms

    async def list_rooms(self) -> list[dict[str, Any]]:
        summaries, _ = await self.sample_rooms(None)
        return summaries

    async def sample_rooms(
        self, after: Mapping[str, tuple[int, int]] | None
    ) -> tuple[list[dict[str, Any]], dict[str, MintedWaits]]:
        """Every room's summary; given ``after`` (a reader's cursors), each room's unread waits too, read
        by the same ``stats`` call."""
        runner = self._runner
        ids = [i for i in await self._registry.ids() if not is_shard(i)]  # a shard is part of its room
        now = await runner.now()
        calls = []
        extra: dict[str, list[str]] = {}
        for room_id in ids:
            cache = runner.configs.get(room_id)
            args = ["stats"]
            if after is not None:
                cursor = after.get(room_id)
                args.append("*" if cursor is None else f"{cursor[0]}:{cursor[1]}")
            extra[room_id] = args
            calls.append((room_id, [*runner.header(now, str(cache.cv) if cache else "0"), *args]))
        replies = await self._calls.eval_many("stats", calls)
        out = []
        waits: dict[str, MintedWaits] = {}
        events: list[Event] = []
        for room_id, reply in zip(ids, replies, strict=True):
            if isinstance(reply, EngineError | RoomFenced):
                continue  # deleted since the registry was read, or being rebuilt
            if isinstance(reply, Exception):
                raise reply
            summary, evs, minted = await self._summary(room_id, now, reply, extra[room_id])
            events.extend(evs)
            out.append(summary)
            if minted is not None:
                waits[room_id] = minted
        await self._finish(events)
        return out, waits

    async def _summary(
        self, room_id: str, now: tuple[int, int], first: Reply | None = None, args: list[str] | None = None
    ) -> tuple[dict[str, Any], list[Event], MintedWaits | None]:
        runner = self._runner
        reply, events = await runner.run("stats", room_id, now, lambda _: args or ["stats"], first=first)
        cache = runner.configs.required(room_id)
        gen = int(reply["gen"])
        count = self.shards.count(room_id)
        if count > 1:  # the drop's sign-ups in shards are the room's pre-queue
            reply["pq"] = await self.shards.total(room_id, count)
        stats = codec.stats(gen, cache.cfg, reply, now[0])
        return {**cache.cfg.to_public(logo_data=False, secrets=False), **stats}, events, codec.minted_waits(gen, reply)

    async def get_room(self, room_id: str) -> dict[str, Any]:
        _visible(room_id)
        summary, events, _ = await self._summary(room_id, await self._runner.now())
        await self._finish(events)
        return summary

    async def room_exists(self, room_id: str) -> bool:
        if is_shard(room_id):
            return False
        if self._runner.configs.fresh(room_id, self.config_fresh_sec) is not None:
            return True
        return await self._registry.live(room_id)

    async def room_policy(self, room_id: str) -> RoomPolicy | None:
        """From this process's copy when a script confirmed it within ``config_fresh_sec`` (the
        HTTP layer asks on every request); otherwise one small read."""
        if is_shard(room_id):
            return None
        fresh = self._runner.configs.fresh(room_id, self.config_fresh_sec)
        if fresh is not None:
            return fresh.policy
        cache, _ = await self._runner.read_config(room_id)
        return None if cache is None else cache.policy

    async def upsert_room(
        self,
        body: dict[str, Any],
        *,
        expect_state: str | None = None,
        expect: Mapping[str, Any] | None = None,
        system: bool = False,
    ) -> tuple[dict[str, Any], bool, list[str]]:
        room_id = body.get("id")
        if isinstance(room_id, str) and is_shard(room_id):
            check_room_id(room_id)  # a shard's id is never a room's: refused as any malformed id
        before = await self._sharded_before(room_id, body)
        try:
            room_id, created, changed = await self._writes.upsert(body, expect_state, expect, system)
        finally:
            await self._shards_after(room_id, before)
        if "accessRules" in changed and not created:  # a changed rule counts anew: its old counters go
            kept = [rule.key for rule in self._runner.configs.required(room_id).cfg.access_rules]
            await self._runner.once("access_prune", room_id, kept)
        return await self.get_room(room_id), created, changed

    async def delete_room(self, room_id: str) -> None:
        _visible(room_id)
        await self._delete(room_id)
        for sid in await self.shards.present(room_id):  # its pre-queue shards go with it
            with contextlib.suppress(EngineError):
                await self._delete(sid)

    async def _delete(self, room_id: str) -> None:
        reply = await self._runner.once("delete", room_id, [room_id])
        self._runner.forget(room_id)
        await self._registry.unregister(room_id)
        await self._finish(events_of(room_id, reply))
        # committed: the deleted generation's outbox (its room.delete) is no longer needed
        with contextlib.suppress(Exception):
            await self._redis.delete(room_key(self.prefix, self._calls.slot_id(room_id), "ob"))

    async def schedule(self, room_id: str, body: Any) -> dict[str, Any]:
        _visible(room_id)
        before = await self._sharded_before(room_id, body if isinstance(body, dict) else {})
        try:
            await self._writes.schedule(room_id, body)
        finally:
            await self._shards_after(room_id, before)
        return await self.get_room(room_id)

    async def _sharded_before(self, room_id: Any, body: Mapping[str, Any]) -> bool | None:
        """Before a change of a room whose drop takes (or may take) sign-ups in shards: when the change changes
        the shard count, every shard is merged into the room and sealed first (a drop moved or cancelled needs
        nothing first: its draw merges the shards whenever it comes, draw_due).
        None: the room has no shards to keep (nothing to do after the change either); else whether it merged."""
        if not isinstance(room_id, str) or is_shard(room_id):
            return None
        copy = self._runner.configs.get(room_id)
        if copy is None:
            copy, _ = await self._runner.read_config(room_id)
        # a copy behind the room's config is safe: a sharded room's draw is due whatever its own pre-queue
        # holds and merges first (draw_due), and the shards a change no longer wants are merged before they go
        sharded = copy is not None and copy.cfg.prequeue_shards > 1
        if not sharded and (body.get("preQueueShards") or 1) == 1:
            return None
        # a handle names its shard by the count: a new count would send the shards' visitors elsewhere
        merge = (
            sharded
            and "preQueueShards" in body
            and copy is not None
            and body["preQueueShards"] != copy.cfg.prequeue_shards
        )
        if merge:
            await self.shards.seal_all(room_id)
        return merge

    async def _shards_after(self, room_id: Any, before: bool | None) -> None:
        """After the change (made or refused): the shards given the room's config, those it no longer wants
        merged and deleted, sealed ones opened again."""
        if before is not None and isinstance(room_id, str):
            await self.shards.sync(room_id, merge_first=before)

    async def draw_state(self, room_id: str) -> DrawState:
        _visible(room_id)
        runner = self._runner
        reply, events = await runner.run("stats", room_id, await runner.now(), lambda _: ["draw"])
        await self._finish(events)  # a draw that was due is committed before it is shown
        count = self.shards.count(room_id)
        pre = await self.shards.total(room_id, count) if count > 1 else int(reply["pq"])
        return DrawState(codec.draw_record(reply.get("draw")), reply["eff"] == "scheduled", pre)

    # ------------------------------------------------------------------ visitors

    async def join(
        self,
        room_id: str,
        client: ClientId,
        presented: Presented | None,
        return_url: str | None,
        *,
        lane: str | None = None,
    ) -> VisitorView:
        target, handle = self.routes.join_target(room_id, client, presented)
        args = [*client_args(client), *presented_args(presented), return_url or "", handle, lane or ""]
        if target != room_id:
            with contextlib.suppress(Moved):
                return await self._joins.join(target, args)
        return await self._joins.join(room_id, args)

    async def _join_call(self, room_id: str, asks: list[list[str]]) -> JoinFinish:
        """One call for the joins ``asks`` (each join.lua's arguments): join.lua for one, join_many.lua for
        more (batches.py). Returns what commits the call's events and gives each ask its answer; a new place
        whose commit failed is taken back."""
        runner = self._runner
        now = await runner.now()
        if len(asks) == 1:
            reply, events = await runner.run("join", room_id, now, always(asks[0]), refs=True)
            replies = [reply]
        else:
            flat = [arg for ask in asks for arg in ask]
            reply, events = await runner.run("join_many", room_id, now, always(flat), refs=True, refs_need=len(asks))
            replies = reply["js"] if reply["k"] == "ok" else [reply] * len(asks)
        gen = int(reply["gen"])

        async def finish() -> list[VisitorView | BaseException]:
            try:
                await self._commit(events)
            except BaseException as exc:
                for r in replies:
                    if r["k"] == "ok" and r.get("new"):
                        if r.get("t") is not None:
                            await self._revoke(room_id, "join", gen, n=int(r["t"]["n"]), why=exc)
                        elif r.get("pre") is not None:
                            await self._revoke(room_id, "prequeue", gen, handle=r["pre"]["h"], why=exc)
                raise
            finally:
                self._notify({e.room for e in events})
            if is_shard(room_id):  # answered by a pre-queue shard: rendered as its room's
                return [await self.routes.view(room_id, r, now) for r in replies]
            cfg = runner.configs.required(room_id).cfg
            await self.routes.sum_prequeue(room_id, replies, room_id)
            return [refusal(r) if r["k"] == "err" else codec.visitor_view(room_id, gen, cfg, r, *now) for r in replies]

        return finish

    async def status(self, room_id: str, client: ClientId, presented: Presented | None) -> VisitorView:
        if self.local_polls and presented is not None and presented.n is not None:
            view = await self.lines.poll(room_id, client, presented)
            if view is not None:
                return view
            return await self.lines.poll_read(room_id, client, presented)
        runner = self._runner
        now = await runner.now()
        args = [*client_args(client), *presented_args(presented)]
        sid = self.routes.shard_of(room_id, presented)
        if sid is not None:
            with contextlib.suppress(Moved):
                return await self.routes.call("status", sid, now, args)
        reply, events = await runner.run("status", room_id, now, lambda _: args)
        await self._finish(events)
        await self.routes.sum_prequeue(room_id, [reply], room_id)
        return codec.visitor_view(room_id, int(reply["gen"]), runner.configs.required(room_id).cfg, reply, *now)

    async def status_many(self, room_id: str, asks: Sequence[tuple[ClientId, Presented | None]]) -> list[VisitorView]:
        """One script call per STATUS_BATCH asks (lua/status_many.lua), every part at the same instant."""
        return [view for view, _, _, _ in await self.status_many_fed(room_id, asks)]

    async def status_many_fed(
        self, room_id: str, asks: Sequence[tuple[ClientId, Presented | None]]
    ) -> list[tuple[VisitorView, int | None, int, int]]:
        """``status_many``, each view with what a replica of the line answers from (live.py): the ticket's line
        sequence (None: not a waiting ticket of a room without lanes), the line feed sequence it was read at
        and the config version it was rendered with."""
        if not asks:
            return []
        if self.shards.count(room_id) > 1:
            return await self.routes.status_many(room_id, asks, self._status_many_in)
        return await self._status_many_in(room_id, asks)

    async def _status_many_in(
        self, room_id: str, asks: Sequence[tuple[ClientId, Presented | None]]
    ) -> list[tuple[VisitorView, int | None, int, int]]:
        if not asks:
            return []
        runner = self._runner
        now = await runner.now()
        out: list[tuple[VisitorView, int | None, int, int]] = []
        for start in range(0, len(asks), STATUS_BATCH):
            args = asks_args(asks[start : start + STATUS_BATCH])
            reply, events = await runner.run("status_many", room_id, now, always(args))
            await self._finish(events)
            gen, copy = int(reply["gen"]), runner.configs.required(room_id)
            cfg, cv, lf = copy.cfg, copy.cv, int(reply.get("lf") or 0)
            await self.routes.sum_prequeue(room_id, reply["vs"], room_id)
            out.extend((codec.visitor_view(room_id, gen, cfg, r, *now), r.get("ls"), lf, cv) for r in reply["vs"])
        return out

    async def line_snapshot(self, room_id: str) -> tuple[int, int, int, list[int]] | None:
        """The room's generation, line feed sequence, config version and waiting line sequences, read at one
        instant (a MULTI of plain commands in the room's slot: Valkey builds the reply in C, 257 ms for a
        line of a million where a script's loop took 786); None: no such room. A fenced room (being
        rebuilt) raises RoomFenced."""
        keys = self._calls.room_keys(room_id)
        with translate(room_id, self.breaker):
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.exists(keys[FENCE])
                pipe.hmget(keys[STATE], "gen", "lfs", "cv")
                pipe.execute_command("ZRANGE", keys[LINE], 0, -1, "WITHSCORES")  # [member, score] pairs
                fenced, head, raw = await pipe.execute()
        if fenced:
            raise RoomFenced(f"room {room_id!r} is being rebuilt from the journal")
        gen, lfs, cv = head
        if gen is None:
            return None
        return int(gen), int(lfs or 0), int(cv or 0), [int(score) for _, score in raw]

    async def mark_seen(self, room_id: str, gen: int, numbers: Sequence[int]) -> None:
        """Mark the waiting tickets ``numbers`` (of generation ``gen``) seen now, in one call (lua/seen.lua)."""
        await self._runner.once("seen", room_id, [str(gen), *map(str, numbers)])

    async def room_head(self, room_id: str) -> tuple[int | None, int, bool]:
        """The room's generation (None: no such room in Valkey), line feed sequence and whether it is fenced
        (being rebuilt), read at one instant in one round trip (two plain commands in the room's slot)."""
        keys = self._calls.room_keys(room_id)
        st, fence = keys[STATE], keys[FENCE]
        lane = self._calls.lane
        with translate(room_id, self.breaker):
            if lane is not None:
                head, fenced = await asyncio.gather(
                    lane.execute("HMGET", st, "gen", "lfs"), lane.execute("EXISTS", fence)
                )
            else:
                async with self._redis.pipeline(transaction=False) as pipe:
                    pipe.hmget(st, "gen", "lfs")
                    pipe.exists(fence)
                    head, fenced = await pipe.execute()
        gen, lfs = head
        return (None if gen is None else int(gen)), int(lfs or 0), bool(fenced)

    def line_channel(self, room_id: str) -> bytes:
        """The room's line feed channel (keys.py, lf)."""
        return self._calls.room_keys(room_id)[LINE_FEED]

    def config_copy(self, room_id: str) -> ConfigCopy | None:
        """This process's copy of the room's config (None: none read yet)."""
        return self._runner.configs.get(room_id)

    async def check(
        self,
        room_id: str,
        client: ClientId,
        presented: Presented | None,
        door_hash: bytes | None,
        url: str | None,
        new_door: NewDoor,
    ) -> CheckResult:
        runner = self._runner
        now = await runner.now()
        door = new_door() if callable(new_door) else new_door  # the script cannot call back for one
        fixed = [*client_args(client), *presented_args(presented), hex_or_empty(door_hash), "0" if url is None else "1"]
        matched: dict[str, str | None] = {}

        def check_args(cache: ConfigCopy | None) -> list[str]:
            rule_index, unprotected, rule_id = cache.rule_args(url) if cache is not None else ("", "0", None)
            matched["rule"] = rule_id
            return [*fixed, rule_index, unprotected, door[1].hex()]

        reply, events = await self.routes.check(room_id, presented, now, check_args)
        try:
            await self._commit(events)
        except BaseException as exc:
            undo = reply.get("undo")
            if undo is not None and reply.get("t") is not None:
                await self._revoke(
                    room_id,
                    "admit",
                    int(reply["gen"]),
                    n=int(reply["t"]["n"]),
                    door=door[1].hex(),
                    undo=undo,
                    why=exc,
                )
            raise
        finally:
            self._notify({e.room for e in events})
        t = reply.get("t")
        state = reply.get("state")
        return CheckResult(
            bool(reply["admit"]),
            state=state,
            reason=reply.get("reason"),
            door_key=door[0] if reply.get("dk") else None,
            ticket=codec.ticket_of(t) if t is not None else None,
            session_expires_ms=reply.get("sx"),
            rule=None if state == "bypass" else matched.get("rule"),
        )

    async def door_replay(
        self, room_id: str, presented: Presented, door_hash: bytes, url: str | None
    ) -> CheckResult | None:
        """The hot path: a live session's own door key slides it (one round trip); None: run check."""
        runner = self._runner
        now = await runner.now()
        fixed = [str(presented.gen), "" if presented.n is None else str(presented.n), door_hash.hex()]
        fixed.append("0" if url is None else "1")
        matched: dict[str, str | None] = {}

        def replay_args(cache: ConfigCopy | None) -> list[str]:
            rule_index, unprotected, rule_id = cache.rule_args(url) if cache is not None else ("", "0", None)
            matched["rule"] = rule_id
            return [*fixed, rule_index, unprotected]

        reply, events = await runner.run("door_replay", room_id, now, replay_args, cv="strict")
        await self._finish(events)
        if reply["k"] == "none":
            return None
        t = reply.get("t")
        state = reply.get("state")
        return CheckResult(
            True,
            state=state,
            ticket=codec.ticket_of(t) if t is not None else None,
            session_expires_ms=reply.get("sx"),
            rule=None if state == "bypass" else matched.get("rule"),
        )

    async def revoke_session(
        self, room_id: str, gen: int | None, n: int | None, door_hash: bytes
    ) -> tuple[int, int] | None:
        runner = self._runner
        args = ["" if gen is None else str(gen), "" if n is None else str(n), door_hash.hex()]
        reply, events = await runner.run("session_revoke", room_id, await runner.now(), lambda _: args, cv="any")
        await self._finish(events)
        return (int(reply["gen"]), int(reply["n"])) if reply["k"] == "ok" else None

    async def note_blocked_return(self, room_id: str) -> None:
        await self._runner.once("blocked", room_id)

    async def note_access_match(self, room_id: str, rule_key: str) -> None:
        await self._runner.once("access_hit", room_id, [rule_key])

    async def places_held(self, room_id: str, ident: str) -> int:
        calls = self._calls
        with translate(room_id, self.breaker):
            key = room_key(self.prefix, room_id, "pi")
            if calls.lane is not None:
                held = await calls.lane.execute("HGET", key, ident)
            else:
                held = await self._redis.hget(key, ident)
        return int(held) if held else 0

    async def _revoke(
        self,
        room_id: str,
        what: str,
        gen: int,
        *,
        n: int | None = None,
        handle: str | None = None,
        door: str | None = None,
        undo: Any = None,
        why: BaseException | str = "",
    ) -> None:
        """Take back what a change whose journal commit failed (``why``) minted (best effort: an orphan
        left behind lapses like a closed tab, as the guide describes). Logged by ``takebacks``: a line
        for a take-back that failed, a summary of those made."""
        args = [what, str(gen), "" if n is None else str(n), handle or "", door or "", to_json(undo or {})]
        try:
            reply = await self._runner.once("revoke", room_id, args)
        except (StoreUnavailable, EngineError) as exc:
            self.takebacks.could_not(room_id, what, why, exc)
            return
        events = events_of(room_id, reply)
        if not events:  # nothing of it left in Valkey (lapsed, ejected, or the room is another generation)
            log.debug("room %s: nothing left to take back of a %s whose journal commit failed", room_id, what)
            return
        # Taken back in Valkey. Its revoke event goes to the journal like any other; a commit that fails
        # too is held with the failed commits and written, after the change it undoes, once the journal
        # answers (journal/writer.py): nothing more to do here.
        with contextlib.suppress(StoreUnavailable):
            await self._commit(events)
        self.takebacks.took_back(room_id, what, why)

    # ------------------------------------------------------------------ operators

    async def eject(self, room_id: str, query: str) -> dict[str, Any]:
        _visible(room_id)
        runner = self._runner
        now = await runner.now()
        stripped, kind, number, ref = query_args(query)
        reply, events = await runner.run("eject", room_id, now, lambda _: [kind, number, ref], cv="any")
        await self._finish(events)
        if reply["k"] == "err":
            raise refusal(reply, query, stripped, room_id, now)
        n = int(reply["n"])
        if reply.get("d") is None:
            return {"ticket": n, "state": "forgotten"}
        return codec.describe(room_id, int(reply["gen"]), reply["d"], *now)

    async def purge(self, room_id: str) -> int:
        _visible(room_id)
        runner = self._runner
        await self.shards.merge(room_id, await runner.now(), reopen=True)  # the whole pre-queue goes
        reply, events = await runner.run("purge", room_id, await runner.now(), lambda _: [], cv="any")
        await self._finish(events)
        return int(reply["count"])

    async def flush(self, room_id: str) -> int:
        _visible(room_id)
        runner = self._runner
        reply, events = await runner.run("flush", room_id, await runner.now(), lambda _: [], cv="any")
        await self._finish(events)
        return int(reply["count"])

    async def lookup(self, room_id: str, query: str) -> dict[str, Any]:
        _visible(room_id)
        runner = self._runner
        now = await runner.now()
        stripped, kind, number, ref = query_args(query)
        reply, events = await runner.run("lookup", room_id, now, lambda _: [kind, number, ref, "1"], cv="any")
        await self._finish(events)
        if reply["k"] == "err":
            raise refusal(reply, query, stripped, room_id, now)
        return codec.lookup_answer(room_id, ref, reply, *now)

    async def match_rule(self, room_id: str, url: str) -> dict[str, Any]:
        _visible(room_id)
        cache, reply = await self._runner.read_config(room_id, rule_stats=True)
        if cache is None:
            raise no_room(room_id)
        return codec.rule_match(cache.cfg.rules, url, [text(x) for x in reply.get("rst") or []])

    # ------------------------------------------------------------------ time

    async def probe(self) -> bool:
        """While Valkey is held as unreachable (breaker.py): one PING past the hold; its answer ends the
        fast answers at once. The tick calls it every second. True when Valkey is not held as down."""
        breaker = self.breaker
        if breaker.claim_probe():
            with contextlib.suppress(StoreUnavailable), translate(None, breaker, probe=True):
                await self._redis.ping()
        return not breaker.down

    async def tick(self) -> set[str]:
        self.takebacks.flush()  # the take-backs of a burst that ended, summed up once it is due
        await self.probe()  # the fast-answer window ends within about a second of Valkey coming back
        runner = self._runner
        now = await runner.now()
        ids = await self._registry.ids()
        header = runner.header(now, "*")
        # a random room's draws this tick come from one fresh salt (engine/release.py); every room gets
        # one, as this copy of a room's config may not know yet that another instance made it random
        salts = [self.rng.token_hex(8) for _ in ids]
        replies = await self._calls.eval_many(
            "tick", [(room_id, [*header, salt]) for room_id, salt in zip(ids, salts, strict=True)]
        )
        events: list[Event] = []
        failure: Exception | None = None
        for room_id, salt, reply in zip(ids, salts, replies, strict=True):
            if isinstance(reply, EngineError | RoomFenced):
                continue  # deleted since the registry was read, or being rebuilt
            if isinstance(reply, Exception):
                failure = failure or reply
                continue
            try:
                _, evs = await runner.run("tick", room_id, now, partial(_salt_args, salt), cv="any", first=reply)
            except RoomFenced:
                continue
            except (StoreUnavailable, EngineError) as exc:
                failure = failure or exc
                continue
            events.extend(evs)
        try:
            await self._commit(events)
        except JournalCommitFailed as exc:
            if isinstance(failure, StoreUnavailable):  # Valkey failed too: that is the tick's failure
                raise failure from exc
            raise
        finally:
            rooms = {e.room for e in events} | set(ids)
            self._notify(rooms)
        try:  # pre-queue shards no room wants any more: merged and deleted
            await self.shards.housekeep(ids)
        except (StoreUnavailable, EngineError) as exc:
            failure = failure or exc
        if isinstance(failure, StoreUnavailable):
            raise failure
        return rooms

    # ------------------------------------------------------------------ snapshots

    async def export_room(self, room_id: str) -> dict[str, Any]:
        """The room generation as a checkpoint (docs/events.md, format v1)."""
        _visible(room_id)
        # a drop's sign-ups in shards are the room's: in its document
        await self.shards.merge(room_id, await self._runner.now(), reopen=True)
        return export_document(room_id, await self._runner.once("export", room_id))

    async def import_room(self, snapshot: dict[str, Any]) -> bool:
        """Replace the room's live state with ``snapshot`` (and lift its fence): at once, or for a large
        room in parts of IMPORT_PART list elements, the room fenced (503) until the last is in, so no
        call keeps Valkey from everyone else for long. False, and nothing changed, when this Valkey has
        seen the snapshot's generation deleted (a rebuild that read the journal before the deletion
        landed must not bring the room back). A part refused (another rebuild began, the room was
        deleted) raises StoreUnavailable: the room stays fenced and is rebuilt again."""
        now = await self._runner.now()
        # off the event loop: a million tickets' records take seconds to prepare
        room_id, payload = await asyncio.to_thread(
            import_payload, snapshot, now[0], now[1], full_records=self._runner.full_records
        )
        parts = import_parts(payload, IMPORT_PART)
        token = self.rng.token_hex(8) if len(parts) > 1 else None
        score = await self._registry.register(room_id)
        first = parts[0] if token is None else {**parts[0], "more": token}
        reply = await self._runner.once("import", room_id, [room_id, to_json(first)], now)
        if reply.get("k") == "deleted":
            await self._registry.unregister(room_id)  # added for the import above; the room is not back
            return False
        # a large checkpoint: the rest part by part, the room fenced by this import until its last part
        for i, part in enumerate(parts[1:], start=2):
            body = {**part, "gen": payload["gen"], "last": i == len(parts)}
            done = await self._runner.once("import_part", room_id, [str(token), to_json(body)], now)
            if done.get("k") != "ok":
                raise StoreUnavailable(f"room {room_id!r}: another rebuild or a deletion took it over mid-import")
        await self._registry.register(room_id, score)
        self._runner.forget(room_id)
        return True

    async def fence(self, room_id: str) -> None:
        """Mark the room as being rebuilt: every operation on it answers StoreUnavailable."""
        with translate(room_id, self.breaker):
            await self._redis.set(room_key(self.prefix, room_id, "fence"), b"1")

    async def unfence(self, room_id: str) -> None:
        with translate(room_id, self.breaker):
            await self._redis.delete(room_key(self.prefix, room_id, "fence"))


def _visible(room_id: str) -> None:
    """A pre-queue shard is part of its room, never a room of its own to anyone outside the store."""
    if is_shard(room_id):
        raise no_room(room_id)


def _implements_the_contract(store: ValkeyStore) -> Store:
    return store  # mypy checks ValkeyStore against the Store protocol here


def _salt_args(salt: str, _copy: object) -> list[str]:
    """The tick script's own arguments: the salt of its random draws."""
    return [salt]
