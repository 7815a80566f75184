"""ValkeyStore: the Store contract over Lua scripts (see the package docstring for the data model)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
from redis import exceptions as rx
from redis.asyncio import Redis

import queue_manager.engine.engine as engine_module
import queue_manager.engine.room as room_module
from queue_manager.clock import Clock
from queue_manager.engine import draw as draw_rules
from queue_manager.engine.draw import DrawState
from queue_manager.engine.errors import EngineError, bad_field, no_room
from queue_manager.engine.events import Event
from queue_manager.engine.model import (
    ClientId,
    RoomConfig,
    apply_fields,
    check_room_id,
    check_schedule_body,
    normalise_body,
    parse_opens_at,
)
from queue_manager.engine.policy import RoomPolicy, policy_of
from queue_manager.engine.randomness import SYSTEM_RANDOM, RandomSource
from queue_manager.engine.targeting import match as match_rule
from queue_manager.engine.ticket import make_ref
from queue_manager.engine.view import MintedWaits, VisitorView
from queue_manager.engine.visitor import CheckResult, NewDoor, Presented, identity_limit
from queue_manager.store.base import STATUS_BATCH, ChangeListener, JournalCommitFailed, Store, StoreUnavailable
from queue_manager.store.valkey import codec
from queue_manager.store.valkey.breaker import Breaker
from queue_manager.store.valkey.client import is_cluster, open_client
from queue_manager.store.valkey.clock import SharedClock
from queue_manager.store.valkey.cluster_lane import ClusterLanes
from queue_manager.store.valkey.errors import RoomFenced, translate
from queue_manager.store.valkey.keys import DEFAULT_PREFIX, room_key, rooms_key, rooms_seq_key, script_keys
from queue_manager.store.valkey.lane import ValkeyLane
from queue_manager.store.valkey.scripts import Script, load_all
from queue_manager.store.valkey.snapshot import export_document, import_payload
from queue_manager.store.valkey.takebacks import TakeBacks

log = logging.getLogger("queue_manager.store.valkey")

Reply = dict[str, Any]
ArgsFn = Callable[["_Config | None"], list[str]]

MAX_ATTEMPTS = 50  # draws, config refreshes, Ref windows, sweep budgets: each costs one more call
CONFIG_FRESH_SEC = 2.0  # room_policy / room_exists answer from the config copy confirmed this recently
REF_WINDOW_MIN = 4
REF_WINDOW_MAX = 256
REF_RUN_KEEP = 256  # Refs below the hint kept before the run is trimmed
REF_RUN_ROOMS = 1_000  # rooms with a run of Refs kept (beyond: all dropped, derived again as needed)


class Journal(Protocol):
    async def commit(self, events: list[Event]) -> None:
        """Durably record ``events``; raises StoreUnavailable when it cannot (handed on as JournalCommitFailed)."""


@dataclass(slots=True)
class _Config:
    cv: int
    gen: int
    cfg: RoomConfig
    policy: RoomPolicy
    confirmed: float = 0.0  # time.monotonic() when a script last confirmed this is the room's config

    def rule_args(self, url: str | None) -> tuple[str, str, str | None]:
        """(matched rule index, unprotected flag, rule id) for a door check of ``url`` (Room._door_prelude)."""
        if url is None or not self.cfg.rules:
            return "", "0", None
        rule = match_rule(self.cfg.rules, url)
        if rule is None:
            return "", "1", None
        index = next(i for i, r in enumerate(self.cfg.rules) if r is rule)
        return str(index), "1" if rule.action == "skip" else "0", rule.id


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


def _hex(value: bytes | None) -> str:
    return "" if value is None else value.hex()


def _client_args(client: ClientId) -> list[str]:
    return [client.ident, client.fp.hex(), _hex(client.fp2), _hex(client.cookie)]


def _presented_args(presented: Presented | None) -> list[str]:
    if presented is None:
        return ["", "", ""]
    return [str(presented.gen), "" if presented.n is None else str(presented.n), presented.handle or ""]


def _always(args: list[str]) -> ArgsFn:
    return lambda _: args


def _asks_args(asks: Sequence[tuple[ClientId, Presented | None]]) -> list[str]:
    """status_many.lua's arguments: each ask's client and presented token, 7 strings per ask."""
    out: list[str] = []
    for client, presented in asks:
        out += _client_args(client)
        out += _presented_args(presented)
    return out


def _query(query: str) -> tuple[str, str, str, str]:
    """(stripped, kind, number, Ref) the way report.lookup reads a query."""
    q = query.strip()
    if q.isascii() and q.isdigit():  # "²" is a digit to str.isdigit but no number: a Ref, as in report.lookup
        if len(q) > 15:
            return q, "long", "", q.upper()
        return q, "num", str(int(q)), q.upper()
    return q, "ref", "", q.upper()


class ValkeyStore:
    """The live line in Valkey (STORE=valkey); answers exactly as MemoryStore does.

    ``redis`` is a URL (the store owns the connection) or a ``redis.asyncio.Redis`` client
    (``decode_responses=False``). ``clock`` defaults to a SharedClock anchored at ``start()``.
    ``journal.commit(events)`` is awaited before a change is acknowledged. ``rng`` is where
    pre-queue handles and the draw's order come from (the system's secure source by default).
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
    ) -> None:
        if isinstance(redis, str):
            self._redis: Redis = open_client(redis)  # waits for a free connection; hiredis packs
            self._owns_client = True
        else:
            self._redis = redis
            self._owns_client = False
        # the per-request commands (room scripts, places_held) on one pipelined connection (lane.py);
        # on a cluster, one per master (cluster_lane.py)
        self._lane: ValkeyLane | ClusterLanes | None = None
        if isinstance(redis, str):
            self._lane = ValkeyLane.for_url(redis) or ClusterLanes.for_url(redis, self._redis)
        self.prefix = prefix
        self.clock: Clock = clock if clock is not None else SharedClock()
        self.journal = journal
        self.rng = rng
        self.sweep_max = sweep_max  # deadlines one call may process (more: the store calls again)
        self.promote_max = promote_max  # promotions one tick call may make (more: called again)
        self.held = False  # admission maintenance: every script is told (the header's HOLD)
        self.writer = writer  # the instance that commits this store's events (kept with them in the outbox)
        self.config_fresh_sec = config_fresh_sec
        self._scripts: dict[str, Script] = load_all()
        self._listeners: list[ChangeListener] = []
        self._configs: dict[str, _Config] = {}
        self._next_hint: dict[str, tuple[int, int]] = {}
        self._ref_window: dict[str, int] = {}
        self._ref_runs: dict[str, tuple[int, int, list[str]]] = {}  # room -> (gen, first n, Refs from it)
        self._ref_sent: dict[str, tuple[tuple[int, int, int], tuple[str, str]]] = {}  # the last window sent
        self._keys: dict[str, list[bytes]] = {}  # each room's KEYS, encoded once
        self.events_total = 0
        self.maxmemory_policy: str | None = None
        self.breaker = Breaker()  # the fast answer while Valkey is unreachable
        self.takebacks = TakeBacks()  # what the log says of changes taken back after a failed commit
        self.cluster = is_cluster(self._redis)  # a Valkey cluster: rooms spread over its masters
        self.fenced_seen: dict[str, float] = {}  # room -> time.monotonic() Valkey last answered it fenced

    @property
    def redis(self) -> Redis:
        """The client this store talks through (the leader lease and control channel share it)."""
        return self._redis

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Anchor the shared clock, load the scripts, read the eviction policy. Raises
        StoreUnavailable when Valkey cannot be reached; every operation retries the anchor, so a
        caller may boot degraded and carry on."""
        with translate():
            if isinstance(self.clock, SharedClock) and not self.clock.anchored:
                await self.clock.anchor(self._redis)
            for script in self._scripts.values():
                await self._redis.script_load(script.source)
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
        self.takebacks.flush(force=True)
        if self._lane is not None:
            await self._lane.close()
        if self._owns_client:
            await self._redis.aclose()

    def on_change(self, listener: ChangeListener) -> None:
        self._listeners.append(listener)

    def _notify(self, rooms: set[str]) -> None:
        if not rooms:
            return
        for listener in self._listeners:
            listener(rooms)

    # ------------------------------------------------------------------ calling scripts

    async def _now(self) -> tuple[int, int]:
        """The instant an operation happens at (every script call of one operation uses it)."""
        if isinstance(self.clock, SharedClock) and not self.clock.anchored:
            # a process that booted while Valkey was down anchors on first contact
            with translate(None, self.breaker):
                await self.clock.anchor(self._redis)
        return self.clock.wall_ms(), self.clock.mono_ms()

    def _header(
        self,
        now: tuple[int, int],
        want_cv: str,
        draw: tuple[str, str, str] = ("", "", ""),
        refs: tuple[str, str] = ("", ""),
    ) -> list[str]:
        return [
            str(now[0]),
            str(now[1]),
            want_cv,
            str(room_module.FINISHED_KEEP),
            str(engine_module.ARCHIVE_TICKETS),
            str(self.sweep_max),
            *draw,
            *refs,
            str(self.promote_max),
            "1" if self.held else "0",
            self.writer,
        ]

    def set_held(self, held: bool) -> None:
        """Admission maintenance: no promotion and no new admission in any room while on."""
        self.held = held

    def _slot_id(self, room_id: str) -> str:
        """The id a room's keys are named by: ``room_id``, except the empty id on a cluster (never a room,
        but asked about): the tag ``{}`` is empty, so its keys would hash apart (a CROSSSLOT refusal); named
        ``<prefix>{{}}:<name>`` instead (tag ``{``), they share a slot and the scripts answer "no room"."""
        return "{}" if self.cluster and not room_id else room_id

    def _room_keys(self, room_id: str) -> list[bytes]:
        keys = self._keys.get(room_id)
        if keys is None:
            if len(self._keys) >= 10_000:  # room ids come from requests: keep the cache bounded
                self._keys.clear()
            keys = self._keys[room_id] = [k.encode() for k in script_keys(self.prefix, self._slot_id(room_id))]
        return keys

    async def _evalsha(self, script: Script, keys: Sequence[str | bytes], args: Sequence[str]) -> Any:
        lane = self._lane
        try:
            if lane is not None:
                return await lane.execute("EVALSHA", script.sha, len(keys), *keys, *args)
            return await self._redis.evalsha(script.sha, len(keys), *keys, *args)
        except rx.NoScriptError:
            await self._redis.script_load(script.source)
            if lane is not None:
                return await lane.execute("EVALSHA", script.sha, len(keys), *keys, *args)
            return await self._redis.evalsha(script.sha, len(keys), *keys, *args)

    async def _eval(self, name: str, room_id: str, args: Sequence[str]) -> Reply:
        try:
            with translate(room_id, self.breaker):
                raw = await self._evalsha(self._scripts[name], self._room_keys(room_id), args)
        except RoomFenced:
            self._saw_fenced(room_id)
            raise
        reply: Reply = orjson.loads(raw)
        return reply

    def _saw_fenced(self, room_id: str) -> None:
        if len(self.fenced_seen) >= 10_000:
            self.fenced_seen.clear()
        self.fenced_seen[room_id] = time.monotonic()

    def fenced_recently(self, within_sec: float = 30.0) -> set[str]:
        """Rooms Valkey answered as fenced (being rebuilt) within ``within_sec``."""
        now = time.monotonic()
        return {room for room, at in self.fenced_seen.items() if now - at < within_sec}

    async def _eval_many(self, name: str, calls: list[tuple[str, list[str]]]) -> list[Reply | Exception]:
        """One round trip for many rooms (a pipeline); each script is still atomic on its own."""
        if not calls:
            return []
        script = self._scripts[name]
        with translate(None, self.breaker):
            async with self._redis.pipeline(transaction=False) as pipe:
                for room_id, args in calls:
                    keys = self._room_keys(room_id)
                    # (by name: redis-py's cluster pipeline blocks its evalsha method, not the command)
                    pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
                raw = await pipe.execute(raise_on_error=False)
        out: list[Reply | Exception] = []
        for (room_id, args), item in zip(calls, raw, strict=True):
            if isinstance(item, rx.NoScriptError):
                try:
                    out.append(await self._eval(name, room_id, args))
                except Exception as exc:  # handed back per room
                    out.append(exc)
            elif isinstance(item, Exception):
                try:
                    with translate(room_id):  # an error reply of one room: Valkey answered
                        raise item
                except Exception as exc:  # handed back per room
                    if isinstance(exc, RoomFenced):
                        self._saw_fenced(room_id)
                    out.append(exc)
            else:
                out.append(orjson.loads(item))
        return out

    def _absorb(self, room_id: str, reply: Reply) -> None:
        """Config, generation and next ticket number from any reply."""
        cfg = reply.get("cfg")
        if isinstance(cfg, str) and reply.get("cv") is not None:
            config = codec.from_store(orjson.loads(cfg))
            self._configs[room_id] = _Config(
                int(reply["cv"]), int(reply["gen"]), config, policy_of(config), time.monotonic()
            )
        if reply.get("gen") is not None and reply.get("next") is not None:
            self._next_hint[room_id] = (int(reply["gen"]), int(reply["next"]))

    def _events(self, room_id: str, reply: Reply) -> list[Event]:
        raw = reply.get("ev") or []
        gen = int(reply.get("gen") or 0)
        return [
            Event(typ, room_id, gen, ts, data if isinstance(data, dict) else {}, seq=seq) for typ, seq, ts, data in raw
        ]

    def _refs(self, room_id: str) -> tuple[str, str]:
        hint = self._next_hint.get(room_id)
        if hint is None:
            return "", ""
        gen, first = hint
        size = self._ref_window.get(room_id, REF_WINDOW_MIN)
        # concurrent joins send overlapping windows: each Ref is derived once (blake2b) and kept in a
        # run per room; the encoded window is reused while the hint does not move
        memo = self._ref_sent.get(room_id)
        if memo is not None and memo[0] == (gen, first, size):
            return memo[1]
        run = self._ref_runs.get(room_id)
        if run is None or run[0] != gen or first < run[1] or first > run[1] + len(run[2]):
            if len(self._ref_runs) >= REF_RUN_ROOMS:  # room ids come from requests: keep the caches bounded
                self._ref_runs.clear()
                self._ref_sent.clear()
            run = self._ref_runs[room_id] = (gen, first, [])
        _, base, refs = run
        have = base + len(refs)
        if have < first + size:
            refs.extend(make_ref(room_id, gen, n) for n in range(have, first + size))
        if first - base > REF_RUN_KEEP:  # drop the Refs of numbers already minted
            del refs[: first - base]
            run = self._ref_runs[room_id] = (gen, first, refs)
            base = first
        # fixed-width Refs concatenated: the script cuts out the one it mints instead of decoding JSON
        out = f"{gen}:{first}", "".join(refs[first - base : first - base + size])
        self._ref_sent[room_id] = ((gen, first, size), out)
        return out

    def _draw(self, room_id: str, reply: Reply) -> tuple[str, str, str]:
        """The draw itself, in Python (qm-draw-v1 of the committed seed, engine/draw.py); the script
        applies it and keeps it as the draw's record. A drop without a committed seed (scheduled by an
        older build) is drawn from a fresh one, published with the draw (drop.draw_seed)."""
        handles, groups = draw_rules.freeze((str(h), str(ident)) for h, ident in reply.get("entries") or [])
        doc: dict[str, Any] = {}
        committed = reply.get("seed")
        if isinstance(committed, str) and committed:
            seed = bytes.fromhex(committed)
        else:
            seed = self.rng.draw_seed()
            doc.update(seed=seed.hex(), com=draw_rules.commitment(seed))
        order = draw_rules.draw_order(seed, handles, groups)
        doc.update(order=order, handles=handles, groups=groups)
        gen, first = int(reply["gen"]), int(reply["next"])
        refs = [make_ref(room_id, gen, first + i) for i in range(len(order))]
        return str(reply["ver"]), _json(doc), _json(refs)

    async def _room_op(
        self,
        name: str,
        room_id: str,
        now: tuple[int, int],
        args: ArgsFn,
        *,
        cv: str = "loose",
        refs: bool = False,
        first: Reply | None = None,
    ) -> tuple[Reply, list[Event]]:
        """Call a room script until it has done its work; every call uses the same instant.

        Replies that ask for another call: ``cfg`` (this process's config copy is older than the
        room's; strict scripts change nothing then), ``draw`` (the pre-queue is due to be drawn),
        ``refs`` (the Refs of the ticket numbers about to be minted), ``again`` (the sweep's
        budget ran out) and ``more`` (the tick's promotion budget ran out).
        """
        events: list[Event] = []
        draw = ("", "", "")
        for _ in range(MAX_ATTEMPTS):
            cache = self._configs.get(room_id)
            if first is not None:
                reply, first = first, None
            else:
                want = "*" if cv == "any" else (str(cache.cv) if cache is not None else "0")
                header = self._header(now, want, draw, self._refs(room_id) if refs else ("", ""))
                reply = await self._eval(name, room_id, [*header, *args(cache)])
            self._absorb(room_id, reply)
            events.extend(self._events(room_id, reply))
            kind = reply["k"]
            if kind == "draw":
                draw = self._draw(room_id, reply)
            elif kind == "refs":
                if room_id in self._next_hint:  # a miss: others minted meanwhile, widen the window
                    self._ref_window[room_id] = min(REF_WINDOW_MAX, 2 * self._ref_window.get(room_id, REF_WINDOW_MIN))
                self._next_hint[room_id] = (int(reply["gen"]), int(reply["next"]))
            elif kind not in ("cfg", "again", "more"):
                if cache is not None and cv != "any" and cache is self._configs.get(room_id):
                    cache.confirmed = time.monotonic()  # the script compared versions: still current
                return reply, events
        raise StoreUnavailable(f"room {room_id!r}: too much contention, try again")

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

    def _config(self, room_id: str) -> _Config:
        cache = self._configs.get(room_id)
        if cache is None:  # pragma: no cover - every reply that renders carried the config
            raise StoreUnavailable(f"room {room_id!r}: no config copy")
        return cache

    async def _read_config(self, room_id: str, rule_stats: bool = False) -> tuple[_Config | None, Reply]:
        cache = self._configs.get(room_id)
        want = str(cache.cv) if cache is not None else "0"
        reply = await self._eval("cfg", room_id, [*self._header(await self._now(), want), "1" if rule_stats else "0"])
        if reply["k"] == "none":
            self._configs.pop(room_id, None)
            return None, reply
        if isinstance(reply.get("cfg"), str):
            self._absorb(room_id, reply)
        current = self._configs[room_id]
        current.confirmed = time.monotonic()
        return current, reply

    def _fresh(self, room_id: str) -> _Config | None:
        cache = self._configs.get(room_id)
        if cache is not None and time.monotonic() - cache.confirmed < self.config_fresh_sec:
            return cache
        return None

    def known_config(self, room_id: str) -> tuple[RoomConfig, RoomPolicy] | None:
        """The room's config as this process last saw it, however old: what gates the room's visitors
        while Valkey is unreachable (``routes/visitor/backend_down.py``). None: never seen here."""
        cache = self._configs.get(room_id)
        return None if cache is None else (cache.cfg, cache.policy)

    # ------------------------------------------------------------------ rooms

    async def list_rooms(self) -> list[dict[str, Any]]:
        summaries, _ = await self._list_rooms(None)
        return summaries

    async def sample_rooms(
        self, after: Mapping[str, tuple[int, int]]
    ) -> tuple[list[dict[str, Any]], dict[str, MintedWaits]]:
        return await self._list_rooms(after)

    async def _list_rooms(
        self, after: Mapping[str, tuple[int, int]] | None
    ) -> tuple[list[dict[str, Any]], dict[str, MintedWaits]]:
        """Every room's summary; given ``after`` (a reader's cursors), each room's unread waits too, read
        by the same ``stats`` call."""
        with translate(None, self.breaker):
            ids = [_text(i) for i in await self._redis.zrange(rooms_key(self.prefix), 0, -1)]
        now = await self._now()
        calls = []
        extra: dict[str, list[str]] = {}
        for room_id in ids:
            cache = self._configs.get(room_id)
            args = ["stats"]
            if after is not None:
                cursor = after.get(room_id)
                args.append("*" if cursor is None else f"{cursor[0]}:{cursor[1]}")
            extra[room_id] = args
            calls.append((room_id, [*self._header(now, str(cache.cv) if cache else "0"), *args]))
        replies = await self._eval_many("stats", calls)
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
        reply, events = await self._room_op("stats", room_id, now, lambda _: args or ["stats"], first=first)
        cache = self._config(room_id)
        gen = int(reply["gen"])
        stats = codec.stats(gen, cache.cfg, reply, now[0])
        return {**cache.cfg.to_public(logo_data=False), **stats}, events, codec.minted_waits(gen, reply)

    async def get_room(self, room_id: str) -> dict[str, Any]:
        summary, events, _ = await self._summary(room_id, await self._now())
        await self._finish(events)
        return summary

    async def room_exists(self, room_id: str) -> bool:
        if self._fresh(room_id) is not None:
            return True
        with translate(room_id, self.breaker):
            tag = self._slot_id(room_id)
            count = await self._redis.exists(room_key(self.prefix, tag, "st"), room_key(self.prefix, tag, "fence"))
        return bool(count)

    async def room_policy(self, room_id: str) -> RoomPolicy | None:
        """From this process's copy when a script confirmed it within ``config_fresh_sec`` (the
        HTTP layer asks on every request); otherwise one small read."""
        fresh = self._fresh(room_id)
        if fresh is not None:
            return fresh.policy
        cache, _ = await self._read_config(room_id)
        return None if cache is None else cache.policy

    async def upsert_room(
        self, body: dict[str, Any], *, expect_state: str | None = None
    ) -> tuple[dict[str, Any], bool, list[str]]:
        body = normalise_body(body)
        if "id" not in body:
            raise bad_field("id", "id is required.", "invalid_room_id")
        room_id = body["id"]
        if not isinstance(room_id, str):
            check_room_id(room_id)
        for _ in range(MAX_ATTEMPTS):
            cur, _reply = await self._read_config(room_id)
            try:
                if cur is None:
                    if expect_state is not None:
                        check_room_id(room_id)
                        raise no_room(room_id)
                    return await self._create(room_id, body)
                return await self._update(room_id, body, cur, expect_state)
            except _Retry:
                continue  # created or deleted meanwhile by another instance: read again
        raise StoreUnavailable(f"room {room_id!r}: too much contention, try again")

    async def _create(self, room_id: str, body: dict[str, Any]) -> tuple[dict[str, Any], bool, list[str]]:
        check_room_id(room_id)
        cfg, changed = apply_fields(None, body)
        seed = _OneSeed(self.rng)
        commit = _commits(None, cfg)
        args = [*self._header(await self._now(), "*"), "create", room_id, _json(codec.store_form(cfg))]
        args += [*codec.lua_fields(cfg), "0", "0", "[]", *_seed_args(seed, commit)]
        score = await self._register(room_id)
        reply = await self._eval("upsert", room_id, args)
        if reply["k"] == "conflict":
            raise _Retry
        await self._register(room_id, score)
        self._absorb(room_id, reply)
        data = {"fields": changed, "config": cfg.to_event(None), **_seed_data(seed, commit)}
        await self._finish([_with_data(e, "room.create", data) for e in self._events(room_id, reply)])
        return await self.get_room(room_id), True, changed

    async def _update(
        self, room_id: str, body: dict[str, Any], cur: _Config, expect_state: str | None
    ) -> tuple[dict[str, Any], bool, list[str]]:
        held: dict[str, Any] = {}
        seed = _OneSeed(self.rng)  # drawn once for this request, whatever the attempts

        def update_args(cache: _Config | None) -> list[str]:
            base = cache.cfg if cache is not None else cur.cfg
            # the compare of a compare-and-set: made on the config this call's script insists on (strict,
            # below: a newer config answers 'cfg', nothing changes, and this runs again on the new one)
            engine_module.check_expected_state(room_id, base.state, expect_state)
            cfg, changed = apply_fields(base, body)
            old_rules = {(r.id, r.pattern, r.action): i for i, r in enumerate(base.rules)}
            rule_map = [old_rules.get((r.id, r.pattern, r.action), -1) for r in cfg.rules]
            clocks = (base.session_ttl_sec, base.session_max_sec, base.passed_ttl_sec, base.presence_sec)
            clocks_changed = clocks != (cfg.session_ttl_sec, cfg.session_max_sec, cfg.passed_ttl_sec, cfg.presence_sec)
            moved = base.state != cfg.state or base.rate_per_minute != cfg.rate_per_minute
            held.update(cfg=cfg, changed=changed, base=base, commit=_commits(base.opens_at_ms, cfg))
            return [
                "update",
                room_id,
                _json(codec.store_form(cfg)),
                *codec.lua_fields(cfg),
                "1" if clocks_changed else "0",
                "1" if moved else "0",
                _json(rule_map),
                *_seed_args(seed, held["commit"]),
            ]

        try:
            _, events = await self._room_op("upsert", room_id, await self._now(), update_args, cv="strict")
        except EngineError as err:
            if err.code == "no_room":
                raise _Retry from None  # deleted meanwhile: this upsert creates it (or, expecting a state, says so)
            raise
        cfg, changed = held["cfg"], held["changed"]
        # the script wrote this config only over ``base`` (strict): the logo's bytes go once, when new
        data = {"fields": changed, "config": cfg.to_event(held["base"]), **_seed_data(seed, held["commit"])}
        await self._finish([_with_data(e, "room.update", data) for e in events])
        return await self.get_room(room_id), False, changed

    async def _register(self, room_id: str, score: float | None = None) -> float:
        """Add ``room_id`` to the registry unless it is there (its score: the creation order); called
        before and after the script that creates or imports the room (no script touches the registry,
        which lives in another slot on a cluster). Returns the room's score."""
        key = rooms_key(self.prefix)
        with translate(room_id, self.breaker):
            if score is None:
                held = await self._redis.zscore(key, room_id)
                if held is not None:
                    return float(held)
                score = float(await self._redis.incr(rooms_seq_key(self.prefix)))
            await self._redis.zadd(key, {room_id: score}, nx=True)
        return score

    async def _unregister(self, room_id: str) -> None:
        """Take ``room_id`` out of the registry after the script that deleted it, and put it back if the
        room exists again (another instance created it meanwhile: its second add may have come first)."""
        with translate(room_id, self.breaker):
            await self._redis.zrem(rooms_key(self.prefix), room_id)
            tag = self._slot_id(room_id)
            live = await self._redis.exists(room_key(self.prefix, tag, "st"), room_key(self.prefix, tag, "fence"))
        if live:
            await self._register(room_id)

    async def delete_room(self, room_id: str) -> None:
        reply = await self._eval("delete", room_id, [*self._header(await self._now(), "*"), room_id])
        self._configs.pop(room_id, None)
        self._next_hint.pop(room_id, None)
        await self._unregister(room_id)
        await self._finish(self._events(room_id, reply))
        # committed: the deleted generation's outbox (its room.delete) is no longer needed
        with contextlib.suppress(Exception):
            await self._redis.delete(room_key(self.prefix, self._slot_id(room_id), "ob"))

    async def schedule(self, room_id: str, body: Any) -> dict[str, Any]:
        cur, _ = await self._read_config(room_id)
        if cur is None:
            raise no_room(room_id)
        body = check_schedule_body(body)
        held: dict[str, Any] = {}
        seed = _OneSeed(self.rng)  # drawn once for this request, whatever the attempts

        def schedule_args(cache: _Config | None) -> list[str]:
            base = cache.cfg if cache is not None else cur.cfg
            fields: dict[str, Any] = {}
            if "opensAt" in body:
                fields["opensAt"] = parse_opens_at(body["opensAt"])
            if "preQueueMaxPerIp" in body:
                fields["preQueueMaxPerIp"] = body["preQueueMaxPerIp"]
            cfg, changed = apply_fields(base, {"id": room_id, **fields})
            cancelled = "opensAt" in body and body["opensAt"] is None and base.opens_at_ms is not None
            held.update(cfg=cfg, changed=changed, base=base, commit=_commits(base.opens_at_ms, cfg))
            return [
                _json(codec.store_form(cfg)),
                *codec.lua_fields(cfg),
                "1" if cancelled else "0",
                *_seed_args(seed, held["commit"]),
            ]

        try:
            schedule_args(cur)
        except EngineError:
            # the engine advances the room before it reads the values it refuses
            _, events = await self._room_op("stats", room_id, await self._now(), lambda _: ["advance"])
            await self._finish(events)
            raise
        _, events = await self._room_op("schedule", room_id, await self._now(), schedule_args, cv="strict")
        config = held["cfg"].to_event(held["base"])
        data = {"fields": held["changed"], "config": config, **_seed_data(seed, held["commit"])}
        await self._finish([_with_data(e, "room.schedule", data) for e in events])
        return await self.get_room(room_id)

    async def draw_state(self, room_id: str) -> DrawState:
        reply, events = await self._room_op("stats", room_id, await self._now(), lambda _: ["draw"])
        await self._finish(events)  # a draw that was due is committed before it is shown
        return DrawState(codec.draw_record(reply.get("draw")), reply["eff"] == "scheduled", int(reply["pq"]))

    # ------------------------------------------------------------------ visitors

    async def join(
        self, room_id: str, client: ClientId, presented: Presented | None, return_url: str | None
    ) -> VisitorView:
        now = await self._now()
        handle = self.rng.token_hex(8)
        args = [*_client_args(client), *_presented_args(presented), return_url or "", handle]
        reply, events = await self._room_op("join", room_id, now, lambda _: args, refs=True)
        try:
            await self._commit(events)
        except BaseException as exc:
            if reply["k"] == "ok" and reply.get("new"):
                if reply.get("t") is not None:
                    await self._revoke(room_id, "join", int(reply["gen"]), n=int(reply["t"]["n"]), why=exc)
                elif reply.get("pre") is not None:
                    await self._revoke(room_id, "prequeue", int(reply["gen"]), handle=reply["pre"]["h"], why=exc)
            raise
        finally:
            self._notify({e.room for e in events})
        if reply["k"] == "err":
            raise self._refusal(reply)
        return codec.visitor_view(room_id, int(reply["gen"]), self._config(room_id).cfg, reply, *now)

    async def status(self, room_id: str, client: ClientId, presented: Presented | None) -> VisitorView:
        now = await self._now()
        args = [*_client_args(client), *_presented_args(presented)]
        reply, events = await self._room_op("status", room_id, now, lambda _: args)
        await self._finish(events)
        return codec.visitor_view(room_id, int(reply["gen"]), self._config(room_id).cfg, reply, *now)

    async def status_many(self, room_id: str, asks: Sequence[tuple[ClientId, Presented | None]]) -> list[VisitorView]:
        """One script call per STATUS_BATCH asks (lua/status_many.lua), every part at the same instant."""
        if not asks:
            return []
        now = await self._now()
        out: list[VisitorView] = []
        for start in range(0, len(asks), STATUS_BATCH):
            args = _asks_args(asks[start : start + STATUS_BATCH])
            reply, events = await self._room_op("status_many", room_id, now, _always(args))
            await self._finish(events)
            gen, cfg = int(reply["gen"]), self._config(room_id).cfg
            out.extend(codec.visitor_view(room_id, gen, cfg, r, *now) for r in reply["vs"])
        return out

    async def check(
        self,
        room_id: str,
        client: ClientId,
        presented: Presented | None,
        door_hash: bytes | None,
        url: str | None,
        new_door: NewDoor,
    ) -> CheckResult:
        now = await self._now()
        door = new_door() if callable(new_door) else new_door  # the script cannot call back for one
        fixed = [*_client_args(client), *_presented_args(presented), _hex(door_hash), "0" if url is None else "1"]
        matched: dict[str, str | None] = {}

        def check_args(cache: _Config | None) -> list[str]:
            rule_index, unprotected, rule_id = cache.rule_args(url) if cache is not None else ("", "0", None)
            matched["rule"] = rule_id
            return [*fixed, rule_index, unprotected, door[1].hex()]

        reply, events = await self._room_op("check", room_id, now, check_args, cv="strict")
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
        now = await self._now()
        fixed = [str(presented.gen), "" if presented.n is None else str(presented.n), door_hash.hex()]
        fixed.append("0" if url is None else "1")
        matched: dict[str, str | None] = {}

        def replay_args(cache: _Config | None) -> list[str]:
            rule_index, unprotected, rule_id = cache.rule_args(url) if cache is not None else ("", "0", None)
            matched["rule"] = rule_id
            return [*fixed, rule_index, unprotected]

        reply, events = await self._room_op("door_replay", room_id, now, replay_args, cv="strict")
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

    async def note_blocked_return(self, room_id: str) -> None:
        await self._eval("blocked", room_id, self._header(await self._now(), "*"))

    async def places_held(self, room_id: str, ident: str) -> int:
        with translate(room_id, self.breaker):
            key = room_key(self.prefix, room_id, "pi")
            if self._lane is not None:
                held = await self._lane.execute("HGET", key, ident)
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
        args = [what, str(gen), "" if n is None else str(n), handle or "", door or "", _json(undo or {})]
        try:
            reply = await self._eval("revoke", room_id, [*self._header(await self._now(), "*"), *args])
        except (StoreUnavailable, EngineError) as exc:
            self.takebacks.could_not(room_id, what, why, exc)
            return
        events = self._events(room_id, reply)
        if not events:  # nothing of it left in Valkey (lapsed, ejected, or the room is another generation)
            log.debug("room %s: nothing left to take back of a %s whose journal commit failed", room_id, what)
            return
        # Taken back in Valkey. Its revoke event goes to the journal like any other; a commit that fails
        # too is held with the failed commits and written, after the change it undoes, once the journal
        # answers (journal/writer.py): nothing more to do here.
        with contextlib.suppress(StoreUnavailable):
            await self._commit(events)
        self.takebacks.took_back(room_id, what, why)

    def _refusal(
        self,
        reply: Reply,
        query: str = "",
        stripped: str = "",
        room_id: str = "",
        now: tuple[int, int] = (0, 0),
    ) -> EngineError:
        code = reply["code"]
        if code == "queue_identity_limit":
            return identity_limit()
        if code == "no_ticket_long":
            return EngineError(404, "no_ticket", "No such ticket in this room.", query=stripped[:32])
        if code == "no_ticket_num":
            n = int(stripped)
            return EngineError(404, "no_ticket", f"No ticket {n} in this room's current generation.", ticket=n)
        if code == "no_ticket_ref":
            return EngineError(404, "no_ticket", f"No ticket {query!r} in this room's current generation.", query=query)
        if code == "no_ticket_engine":
            return EngineError(404, "no_ticket", f"No ticket {query!r} in this room.", query=query)
        if code == "ambiguous_ref":
            candidates = [codec.describe(room_id, int(reply["gen"]), c, *now) for c in reply.get("c") or []]
            return EngineError(
                409,
                "ambiguous_ref",
                "That Ref matches several tickets; eject by ticket number.",
                candidates=candidates,
            )
        raise AssertionError(f"unknown refusal {code!r}")  # pragma: no cover

    # ------------------------------------------------------------------ operators

    async def eject(self, room_id: str, query: str) -> dict[str, Any]:
        now = await self._now()
        stripped, kind, number, ref = _query(query)
        reply, events = await self._room_op("eject", room_id, now, lambda _: [kind, number, ref], cv="any")
        await self._finish(events)
        if reply["k"] == "err":
            raise self._refusal(reply, query, stripped, room_id, now)
        n = int(reply["n"])
        if reply.get("d") is None:
            return {"ticket": n, "state": "forgotten"}
        return codec.describe(room_id, int(reply["gen"]), reply["d"], *now)

    async def purge(self, room_id: str) -> int:
        reply, events = await self._room_op("purge", room_id, await self._now(), lambda _: [], cv="any")
        await self._finish(events)
        return int(reply["count"])

    async def flush(self, room_id: str) -> int:
        reply, events = await self._room_op("flush", room_id, await self._now(), lambda _: [], cv="any")
        await self._finish(events)
        return int(reply["count"])

    async def lookup(self, room_id: str, query: str) -> dict[str, Any]:
        now = await self._now()
        stripped, kind, number, ref = _query(query)
        reply, events = await self._room_op("lookup", room_id, now, lambda _: [kind, number, ref, "1"], cv="any")
        await self._finish(events)
        kind_ = reply["k"]
        if kind_ == "err":
            raise self._refusal(reply, query, stripped, room_id, now)
        if kind_ == "previous":
            numbers = [int(n) for n in reply["tickets"]]
            gen = int(reply["pgen"])
            return {
                "state": "previous_generation",
                "generation": gen,
                "tickets": numbers,
                "ref": ref,
                "message": f"Ref {ref} was ticket {', '.join(map(str, numbers))} of an earlier generation "
                f"({gen}) of this room, which was deleted and created again. The caller has to "
                "join again.",
            }
        gen = int(reply["gen"])
        if kind_ == "candidates":
            return {"candidates": [codec.describe(room_id, gen, c, *now) for c in reply["c"]], "ref": ref}
        return codec.describe(room_id, gen, reply["d"], *now)

    async def match_rule(self, room_id: str, url: str) -> dict[str, Any]:
        cache, reply = await self._read_config(room_id, rule_stats=True)
        if cache is None:
            raise no_room(room_id)
        rules = cache.cfg.rules
        if not rules:
            return {
                "url": url,
                "rule": None,
                "protected": True,
                "why": "the room has no rules: every page is protected",
            }
        rule = match_rule(rules, url)
        if rule is None:
            return {"url": url, "rule": None, "protected": False, "why": "no rule matches: the page is not protected"}
        index = next(i for i, r in enumerate(rules) if r is rule)
        matches, last = codec.rule_stats([_text(x) for x in reply.get("rst") or []]).get(index, (0, None))
        stats = {**rule.to_public(), "matchCount": matches, "lastMatchAt": last}
        return {"url": url, "rule": stats, "protected": rule.action == "queue"}

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
        now = await self._now()
        with translate(None, self.breaker):
            ids = [_text(i) for i in await self._redis.zrange(rooms_key(self.prefix), 0, -1)]
        header = self._header(now, "*")
        replies = await self._eval_many("tick", [(room_id, header) for room_id in ids])
        events: list[Event] = []
        failure: Exception | None = None
        for room_id, reply in zip(ids, replies, strict=True):
            if isinstance(reply, EngineError | RoomFenced):
                continue  # deleted since the registry was read, or being rebuilt
            if isinstance(reply, Exception):
                failure = failure or reply
                continue
            try:
                _, evs = await self._room_op("tick", room_id, now, lambda _: [], cv="any", first=reply)
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
        if isinstance(failure, StoreUnavailable):
            raise failure
        return rooms

    # ------------------------------------------------------------------ snapshots

    async def export_room(self, room_id: str) -> dict[str, Any]:
        """The room generation as a checkpoint (docs/events.md, format v1)."""
        reply = await self._eval("export", room_id, self._header(await self._now(), "*"))
        return export_document(room_id, reply)

    async def import_room(self, snapshot: dict[str, Any]) -> None:
        """Replace the room's live state with ``snapshot`` atomically (and lift its fence)."""
        now = await self._now()
        room_id, payload = import_payload(snapshot, now[0], now[1])
        score = await self._register(room_id)
        await self._eval("import", room_id, [*self._header(now, "*"), room_id, _json(payload)])
        await self._register(room_id, score)
        self._configs.pop(room_id, None)
        self._next_hint.pop(room_id, None)

    async def fence(self, room_id: str) -> None:
        """Mark the room as being rebuilt: every operation on it answers StoreUnavailable."""
        with translate(room_id, self.breaker):
            await self._redis.set(room_key(self.prefix, room_id, "fence"), b"1")

    async def unfence(self, room_id: str) -> None:
        with translate(room_id, self.breaker):
            await self._redis.delete(room_key(self.prefix, room_id, "fence"))


class _Retry(Exception):
    """Another instance created or deleted the room between the read and the write."""


def _commits(opens_before: int | None, cfg: RoomConfig) -> bool:
    """The change schedules a drop or moves it to another instant: it commits a new seed (Engine._commit)."""
    return cfg.opens_at_ms is not None and cfg.opens_at_ms != opens_before


class _OneSeed:
    """The seed of one room change, drawn from ``rng`` the first time it is needed (never when the
    change commits none), the same on every attempt of the change's script."""

    __slots__ = ("_rng", "_seed")

    def __init__(self, rng: RandomSource) -> None:
        self._rng = rng
        self._seed: bytes | None = None

    def get(self) -> bytes:
        if self._seed is None:
            self._seed = self._rng.draw_seed()
        return self._seed


def _seed_args(seed: _OneSeed, commit: bool) -> list[str]:
    """The seed and its commitment as a script's arguments ('' when the change commits none)."""
    return [seed.get().hex(), draw_rules.commitment(seed.get())] if commit else ["", ""]


def _seed_data(seed: _OneSeed, commit: bool) -> dict[str, str]:
    """What the room change's event carries of the seed (``seed``, when it committed one)."""
    return {"seed": seed.get().hex()} if commit else {}


def _with_data(event: Event, type_: str, data: dict[str, Any]) -> Event:
    if event.type == type_:
        event.data = data
    return event


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _implements_the_contract(store: ValkeyStore) -> Store:
    return store  # mypy checks ValkeyStore against the Store protocol here
