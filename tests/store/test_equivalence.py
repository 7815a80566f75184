"""MemoryStore and ValkeyStore driven through the same random operations, on two FakeClocks kept in
lockstep, must give identical answers after every step: visitor views, door checks, room
summaries, look-ups, errors and the events (type, seq, ts, data).

Pre-queue handles and drop seeds are random by design; each store is given a random source
(``_SeededDraw``) that hands both the same handle for a join and draws seeds from a generator seeded
alike, so both commit the same seeds and draw the same order.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import hashlib
import random
import secrets
import uuid
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test
from redis.asyncio import Redis

from queue_manager.clock import FakeClock
from queue_manager.engine.errors import EngineError
from queue_manager.engine.events import Event
from queue_manager.engine.model import ClientId
from queue_manager.engine.ticket import make_ref
from queue_manager.engine.visitor import Presented
from queue_manager.store.memory import MemoryStore
from queue_manager.store.valkey import ValkeyStore
from queue_manager.store.valkey.keys import room_key

from .conftest import TARGET, VALKEY_URL, RecordingJournal, drop_prefix, store_as_before, valkey_client

ROOM = "eq"
SEEN: collections.Counter[str] = collections.Counter()  # event types over all examples: what was exercised
LONG_RUNS: dict[int, collections.Counter[str]] = {}
IDENTS = ["198.51.100.1", "198.51.100.2", "198.51.100.3"]
URLS = [None, f"{TARGET}/shop/item", f"{TARGET}/free/page", f"{TARGET}/elsewhere"]
RULES = [{"pattern": "/shop/*", "action": "queue"}, {"pattern": "/free/*", "action": "skip", "id": "free"}]
# priority lanes (engine/lanes.py): by share, by priority, one lane gone (its people move to the default)
LANES: list[list[dict[str, Any]]] = [
    [],
    [{"id": "public", "share": 40}, {"id": "members", "share": 60}],
    [{"id": "public", "priority": 10}, {"id": "members", "priority": 50}],
    [{"id": "members", "priority": 1}],
]


class Browser:
    def __init__(self, i: int) -> None:
        self.client = ClientId(
            ident=IDENTS[i % len(IDENTS)],
            fp=f"fp-{i}".encode(),
            fp2=b"tier2-shared" if i in (1, 2) else None,
            cookie=None if i % 4 == 3 else f"cookie-{i}".encode(),
        )
        self.token_m: Presented | None = None
        self.token_v: Presented | None = None
        self.door: bytes | None = None


def live_pairs(live: tuple[int, set[int]]) -> set[tuple[int, int]]:
    """(generation, ticket) of the memory room's live sessions."""
    gen, sessions = live
    return {(gen, n) for n in sessions}


def _outcome(result: Any) -> Any:
    if isinstance(result, EngineError):
        return ("error", result.status, result.code, result.message, result.extra, result.headers)
    if isinstance(result, BaseException):
        raise result
    return result


class Equivalence(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.clock_m = FakeClock()
        self.clock_v = FakeClock()
        self.rng_m, self.rng_v = _SeededDraw(), _SeededDraw()
        self.mem = MemoryStore(self.clock_m, rng=self.rng_m)
        self.captured: list[Event] = []
        original = self.mem.engine.drain_events

        def drain() -> list[Event]:
            events = original()
            self.captured.extend(events)
            return events

        self.mem.engine.drain_events = drain  # type: ignore[method-assign]
        self.redis = Redis.from_url(VALKEY_URL, decode_responses=False)
        self.prefix = f"qmeq:{uuid.uuid4().hex[:12]}:"
        self.journal = RecordingJournal()
        self.val = ValkeyStore(
            self.redis,
            prefix=self.prefix,
            clock=self.clock_v,
            journal=self.journal,
            sweep_max=7,
            draw_chunk=3,
            rng=self.rng_v,
        )
        self.run(self.val.start())
        self.browsers = [Browser(i) for i in range(6)]
        self.handles: dict[str, str] = {}  # valkey handle -> memory handle
        self.doors = 0
        self.exists = False

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self.run(drop_prefix(self.redis, self.prefix))
        self.run(self.val.close())
        self.run(self.redis.aclose())
        self.loop.close()

    # ------------------------------------------------------------------ running both

    async def _try(self, coro: Any) -> Any:
        try:
            return await coro
        except EngineError as exc:
            return exc

    def both(self, make: Any) -> tuple[Any, Any]:
        m = self.run(self._try(make(self.mem, "m")))
        v = self.run(self._try(make(self.val, "v")))
        return _outcome(m), _outcome(v)

    def map_handle(self, handle: str | None) -> str | None:
        if handle is None:
            return None
        return self.handles.get(handle, f"unmapped:{handle}")

    def view(self, view: Any, side: str) -> Any:
        if isinstance(view, tuple):
            return view
        out = dataclasses.asdict(view)
        if side == "v":
            out["handle"] = self.map_handle(out["handle"])
        return out

    def event(self, e: Event, side: str) -> dict[str, Any]:
        data = dict(e.data)
        if side == "v":
            if "h" in data:
                data["h"] = self.map_handle(data["h"])
        return {"type": e.type, "room": e.room, "gen": e.gen, "seq": e.seq, "ts": e.ts, "lv": e.lv, "data": data}

    def settle_events(self) -> None:
        self.mem.engine.drain_events()
        mem = [self.event(e, "m") for e in self.captured]
        val = [self.event(e, "v") for e in self.journal.events]
        self.captured.clear()
        self.journal.events.clear()
        assert val == mem
        SEEN.update(e["type"] for e in mem)

    # ------------------------------------------------------------------ the room

    @initialize(
        rate=st.sampled_from([0, 7, 60, 60, 600, 6000]),
        cap=st.sampled_from([None, 1, 2, 3]),
        presence=st.sampled_from([None, 5, 30]),
        pttl=st.sampled_from([10, 30, 130, 600]),
        sttl=st.sampled_from([10, 60, 1800]),
        smax=st.sampled_from([None, 10, 100]),
        qmax=st.sampled_from([None, None, 2, 3]),
        pqmax=st.sampled_from([None, 1, 2]),
        state=st.sampled_from(["active", "active", "active", "active", "paused", "bypass"]),
        opens_in=st.sampled_from([None, None, None, 5_000, 60_000]),
        rules=st.booleans(),
    )
    def create(self, rate, cap, presence, pttl, sttl, smax, qmax, pqmax, state, opens_in, rules) -> None:  # type: ignore[no-untyped-def]
        body: dict[str, Any] = {
            "id": ROOM,
            "targetUrl": TARGET,
            "ratePerMinute": rate,
            "maxConcurrent": cap,
            "presenceSec": presence,
            "passedTtlSec": pttl,
            "sessionTtlSec": sttl,
            "sessionMaxSec": smax,
            "queueMaxPerIp": qmax,
            "preQueueMaxPerIp": pqmax,
            "state": state,
        }
        if opens_in is not None:
            body["opensAt"] = self.clock_m.wall_ms() + opens_in
        if rules:
            body["rules"] = RULES
        m, v = self.both(lambda s, _: s.upsert_room(body))
        assert v == m
        self.exists = True
        self.settle_events()

    @invariant()
    def same_summary_and_lookups(self) -> None:
        m, v = self.both(lambda s, _: s.get_room(ROOM))
        assert v == m
        if self.exists:
            nxt = m["nextTicket"]
            for n in sorted({1, 2, nxt - 1, nxt, *range(max(1, nxt - 4), nxt)}):
                m, v = self.both(lambda s, _, n=n: s.lookup(ROOM, str(n)))
                assert v == m
        self.settle_events()

    @invariant()
    def same_waits_of_the_passes(self) -> None:
        """Each pass's wait (minted − joined, ms), numbered by pass, and the running sum: every one kept, and
        those past a reader's cursor."""
        m, v = self.both(lambda s, _: s.sample_rooms({}))
        assert v == m
        if self.exists:
            minted = m[1][ROOM]
            assert minted.last == m[0][0]["passesTotal"] and len(minted.waits_ms) == minted.last
            assert minted.total_ms == sum(minted.waits_ms)
            cursor = {ROOM: (minted.gen, max(0, minted.last - 2))}
            m, v = self.both(lambda s, _: s.sample_rooms(cursor))
            assert v == m and m[1][ROOM].waits_ms == minted.waits_ms[len(minted.waits_ms) - len(m[1][ROOM].waits_ms) :]
        self.settle_events()

    # ------------------------------------------------------------------ visitors

    def do_join(self, who: int, ret: str | None, lane: str | None = None) -> None:
        b = self.browsers[who]
        self.rng_m.preset = self.rng_v.preset = secrets.token_hex(8)  # the same handle on both sides
        m = self.run(self._try(self.mem.join(ROOM, b.client, b.token_m, ret, lane=lane)))
        v = self.run(self._try(self.val.join(ROOM, b.client, b.token_v, ret, lane=lane)))
        if not isinstance(m, EngineError) and not isinstance(v, EngineError):
            if m.handle is not None and v.handle is not None and v.handle not in self.handles:
                self.handles[v.handle] = m.handle
            for view, side in ((m, "m"), (v, "v")):
                token = None
                if view.ticket is not None:
                    token = Presented(gen=view.gen, n=view.ticket)
                elif view.handle is not None:
                    token = Presented(gen=view.gen, handle=view.handle)
                if token is not None:
                    if side == "m":
                        b.token_m = token
                    else:
                        b.token_v = token
        assert self.view(_outcome(v), "v") == self.view(_outcome(m), "m")
        self.settle_events()

    def do_status(self, who: int) -> None:
        b = self.browsers[who]
        m, v = self.both(lambda s, side: s.status(ROOM, b.client, b.token_m if side == "m" else b.token_v))
        assert self.view(v, "v") == self.view(m, "m")
        self.settle_events()

    def do_check(self, who: int, url: str | None, door: str) -> None:
        b = self.browsers[who]
        self.doors += 1
        raw = f"door-{self.doors}"
        new_door = (raw, hashlib.sha256(raw.encode()).digest()[:16])
        sent = {"own": b.door, "none": None, "wrong": b"\x00" * 16}[door]

        async def door_check(store: Any, side: str) -> Any:
            # as the HTTP layer does: the hot path first when a token and a door key are sent
            token = b.token_m if side == "m" else b.token_v
            if token is not None and sent is not None:
                result = await store.door_replay(ROOM, token, sent, url)
                if result is not None:
                    return result
            return await store.check(ROOM, b.client, token, sent, url, new_door)

        m, v = self.both(door_check)

        def fields(r: Any) -> Any:
            if isinstance(r, tuple):
                return r
            t = None if r.ticket is None else dataclasses.asdict(r.ticket)
            if t is not None:
                t.pop("line_seq")  # the Python line's own bookkeeping
                t.pop("lane_seq")  # and its lanes' lines'
            return (r.admit, r.state, r.reason, r.door_key, r.session_expires_ms, r.rule, t)

        assert fields(v) == fields(m)
        if not isinstance(m, tuple) and m.door_key is not None:
            b.door = new_door[1]
        self.settle_events()

    def do_visit(self, action: str, who: int, ret: str | None, url: str | None, door: str) -> None:
        if action == "join":
            self.do_join(who, ret)
        elif action.startswith("join:"):  # a lane a grant names (unknown_lane when the room has not got it)
            self.do_join(who, ret, action.split(":", 1)[1])
        elif action == "status":
            self.do_status(who)
        elif action == "check":
            self.do_check(who, url, door)
        else:  # somebody else's token: not_owner at the door and in status, a fresh place on join
            thief = self.browsers[(who + 1) % len(self.browsers)]
            owner = self.browsers[who]
            thief.token_m, thief.token_v = owner.token_m, owner.token_v

    VISIT = st.lists(
        st.tuples(
            st.sampled_from(["join", "join", "join:members", "join:public", "status", "check", "check", "steal"]),
            st.integers(0, 5),
            st.sampled_from([None, f"{TARGET}/cart"]),
            st.sampled_from(URLS),
            st.sampled_from(["own", "own", "none", "wrong"]),
        ),
        min_size=1,
        max_size=4,
    )

    @rule(visits=VISIT)
    def visit_a(self, visits: list[tuple[str, int, str | None, str | None, str]]) -> None:
        for visit in visits:
            self.do_visit(*visit)

    @rule(visits=VISIT)
    def visit_b(self, visits: list[tuple[str, int, str | None, str | None, str]]) -> None:
        for visit in visits:
            self.do_visit(*visit)

    @rule(visits=VISIT)
    def visit_c(self, visits: list[tuple[str, int, str | None, str | None, str]]) -> None:
        for visit in visits:
            self.do_visit(*visit)

    # ------------------------------------------------------------------ time

    def do_tick(self, ms: int) -> None:
        self.clock_m.advance(ms / 1000)
        self.clock_v.advance(ms / 1000)
        m, v = self.both(lambda s, _: s.tick())
        assert v == m
        self.settle_events()

    TIME: ClassVar[dict[str, Any]] = {
        "kind": st.sampled_from(["tick", "tick", "run", "run", "quiet", "step"]),
        "ms": st.one_of(st.integers(0, 2_000), st.integers(0, 90_000)),
        "step": st.sampled_from([-3600, 5, 3600]),
    }

    def do_time(self, kind: str, ms: int, step: int) -> None:
        if kind == "tick":
            self.do_tick(ms)
        elif kind == "run":  # whole seconds, one tick each: lands exactly on second-aligned deadlines
            for _ in range(1 + ms % 40):
                self.do_tick(1000)
        elif kind == "quiet":  # time passes with no tick (a stalled ticker)
            self.clock_m.advance(ms / 1000 * 3)
            self.clock_v.advance(ms / 1000 * 3)
        else:  # an NTP step of the wall clock only
            self.clock_m.step_wall(step)
            self.clock_v.step_wall(step)

    @rule(**TIME)
    def time_a(self, kind: str, ms: int, step: int) -> None:
        self.do_time(kind, ms, step)

    @rule(**TIME)
    def time_b(self, kind: str, ms: int, step: int) -> None:
        self.do_time(kind, ms, step)

    @rule(**TIME)
    def time_c(self, kind: str, ms: int, step: int) -> None:
        self.do_time(kind, ms, step)

    # ------------------------------------------------------------------ operators

    def upsert(self, **fields: Any) -> None:
        m, v = self.both(lambda s, _: s.upsert_room({"id": ROOM, **fields}))
        assert v == m
        if not isinstance(m, tuple):
            self.exists = True
        self.settle_events()

    @rule(
        change=st.one_of(
            st.fixed_dictionaries({"state": st.sampled_from(["active", "active", "paused", "bypass"])}),
            st.fixed_dictionaries({"rate": st.sampled_from([0, 1, 60, 600, 6000])}),
            st.fixed_dictionaries({"maxConcurrent": st.sampled_from([None, 1, 2, 4])}),
            st.fixed_dictionaries(  # a full line: new joins refused with queue_full
                {"maxWaiting": st.sampled_from([None, 1, 2, 4]), "maxWaitSec": st.sampled_from([None, 1, 3, 60])}
            ),
            st.dictionaries(
                st.sampled_from(["presenceSec", "passedTtlSec", "sessionTtlSec", "sessionMaxSec", "queueMaxPerIp"]),
                st.sampled_from([None, 5, 10, 60, 700]),
                min_size=1,
                max_size=2,
            ),
            st.fixed_dictionaries(
                {"rules": st.sampled_from([[], RULES, RULES[::-1], [{"pattern": "*", "action": "queue"}]])}
            ),
            st.fixed_dictionaries({"lanes": st.sampled_from(LANES)}),
            st.sampled_from([{"state": "nope"}, {"rate": 5, "ratePerMinute": 6}, {"bogus": 1}, {}]),
        )
    )
    def reconfigure(self, change: dict[str, Any]) -> None:
        self.upsert(**change)

    @rule(
        opens_in=st.sampled_from([None, 3_000, 30_000, -1_000]),
        cap=st.sampled_from([..., None, 1, 3]),
        bad=st.sampled_from([None, None, None, {}, {"opensAt": "tomorrow"}, {"preQueueMaxPerIp": 0}, {"x": 1}, [1]]),
    )
    def schedule(self, opens_in: int | None, cap: Any, bad: Any) -> None:
        body: Any = {"opensAt": None if opens_in is None else self.clock_m.wall_ms() + opens_in}
        if cap is not ...:
            body["preQueueMaxPerIp"] = cap
        if bad is not None:
            body = bad
        m, v = self.both(lambda s, _: s.schedule(ROOM, body))
        assert v == m
        self.settle_events()

    @rule(
        action=st.sampled_from(["eject", "eject", "eject", "purge", "flush", "lookup", "blocked", "match", "revoke"]),
        number=st.integers(1, 12),
        who=st.integers(0, 5),
        by=st.sampled_from(["number", "ref", "odd"]),
        odd=st.sampled_from(["  1 ", "ZZZZZZ", "9" * 16, "abc"]),
        url=st.sampled_from(URLS[1:]),
    )
    def operate(self, action: str, number: int, who: int, by: str, odd: str, url: str) -> None:
        b = self.browsers[who]
        if by == "ref" and b.token_m is not None and b.token_m.n is not None:
            query = make_ref(ROOM, b.token_m.gen, b.token_m.n).lower()
        elif by == "odd":
            query = odd
        else:
            query = str(number)
        if action == "eject":
            m, v = self.both(lambda s, _: s.eject(ROOM, query))
        elif action == "purge":
            m, v = self.both(lambda s, _: s.purge(ROOM))
        elif action == "flush":
            m, v = self.both(lambda s, _: s.flush(ROOM))
        elif action == "revoke":  # the site ends the browser's session: by its door key, with the ticket or not
            door = b.door or b"\x00" * 16
            n = b.token_m.n if by == "ref" and b.token_m is not None else None
            m, v = self.both(lambda s, _: s.revoke_session(ROOM, None, n, door))
        elif action == "lookup":
            m, v = self.both(lambda s, _: s.lookup(ROOM, query))
        elif action == "blocked":
            m, v = self.both(lambda s, _: s.note_blocked_return(ROOM))
        else:
            m, v = self.both(lambda s, _: s.match_rule(ROOM, url))
            assert v == m
            m, v = self.both(lambda s, _: s.room_policy(ROOM))
            assert v == m
            m, v = self.both(lambda s, _: s.places_held(ROOM, b.client.ident))
        assert v == m
        self.settle_events()

    @rule(rate=st.sampled_from([60, 6000]), cap=st.sampled_from([None, 2]), really=st.integers(0, 3))
    def delete_or_recreate(self, rate: int, cap: int | None, really: int) -> None:
        if self.exists:
            if really:
                return
            m, v = self.both(lambda s, _: s.delete_room(ROOM))
            self.exists = False
        else:
            body = {"id": ROOM, "targetUrl": TARGET, "ratePerMinute": rate, "maxConcurrent": cap}
            m, v = self.both(lambda s, _: s.upsert_room(body))
            self.exists = True
        assert v == m
        self.settle_events()

    @rule()
    def records_stored_as_before(self) -> None:
        """A rolling upgrade: every live ticket record as a server stored it before records left out their
        defaults (with n, s waiting, pa/ss/sla/st 0). Nothing either store answers changes."""
        if self.exists:
            self.run(store_as_before(self.redis, self.prefix, ROOM))

    # the deterministic runs below call these
    def join(self, who: int, ret: str | None, lane: str | None = None) -> None:
        self.do_join(who, ret, lane)

    def status(self, who: int) -> None:
        self.do_status(who)

    def check(self, who: int, url: str | None, door: str) -> None:
        self.do_check(who, url, door)

    def tick(self, ms: int) -> None:
        self.do_tick(ms)

    def eject(self, query: str) -> None:
        m, v = self.both(lambda s, _: s.eject(ROOM, query))
        assert v == m
        self.settle_events()

    def set_cap(self, cap: int | None) -> None:
        self.upsert(maxConcurrent=cap)


class _SeededDraw:
    """A random source with the handle the test hands both stores for a join (``preset``) and drop
    seeds from a seeded generator: two stores given one each commit the same seeds and hold the same
    handles, so draw the same order (qm-draw-v1 reads both). The Valkey store mints a handle on every
    join, the memory store only for the pre-queue, so the handles must not move the seeds' generator."""

    def __init__(self) -> None:
        self._rng = random.Random(20260101)
        self.preset: str | None = None

    def token_hex(self, nbytes: int) -> str:
        return self.preset or secrets.token_hex(nbytes)

    def draw_seed(self) -> bytes:
        return self._rng.randbytes(32)


async def _reachable() -> None:
    client = await valkey_client()
    await client.aclose()


def test_memory_and_valkey_answer_alike() -> None:
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(_reachable())
    finally:
        loop.close()
    run_state_machine_as_test(
        Equivalence,
        settings=settings(
            max_examples=60,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
    # the random runs reached the common kinds of change (else the comparison proves little)
    assert {"join", "promote", "room.update"} <= set(SEEN), SEEN


# one worker runs them all (make test: --dist loadgroup), so the check of what the first four reached together runs
@pytest.mark.xdist_group("long-runs")
@pytest.mark.parametrize("seed", range(6))
def test_long_runs_with_a_crowd(seed: int) -> None:
    """Long deterministic runs: two dozen visitors at a small door, short clocks, a drop opening,
    operators changing things; every kind of change happens, and both stores agree throughout. Seeds 4
    and 5 run with priority lanes (by share, then by priority), joins naming lanes and lanes changed live."""
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(_reachable())
    finally:
        loop.close()
    rng = random.Random(seed)
    lane_rng = random.Random(1000 + seed)  # the lanes' choices, apart from the runs' other operations
    lane_changes = 0
    seen_before = collections.Counter(SEEN)
    machine = Equivalence()
    machine.browsers = [Browser(i) for i in range(24)]
    try:
        machine.create(
            rate=600,
            cap=2 + seed % 2,
            presence=5,
            pttl=(30, 130)[seed % 2],
            sttl=10,
            smax=None,
            qmax=3,
            pqmax=2,
            state="active",
            opens_in=10_000,
            rules=seed == 3,
        )
        if seed >= 4:  # two more runs with priority lanes: by share, then by priority
            machine.reconfigure({"lanes": LANES[seed - 3]})
        for _ in range(500):
            if seed >= 4 and lane_rng.random() < 0.02:  # lanes changed live (their own random source)
                machine.reconfigure({"lanes": lane_rng.choice(LANES[1:])})
                lane_changes += 1
            op = rng.random()
            who = rng.randrange(len(machine.browsers))
            if op < 0.28:
                lane = lane_rng.choice([None, None, "members", "public"]) if seed >= 4 else None
                machine.join(who, rng.choice([None, f"{TARGET}/cart"]), lane)
            elif op < 0.45:
                machine.status(who)
            elif op < 0.7:
                machine.check(who, rng.choice(URLS), rng.choice(["own", "own", "none", "wrong"]))
            elif op < 0.9:
                machine.tick(rng.choice([1000, 1000, 1000, 2000, rng.randrange(0, 8_000)]))
            elif op < 0.93:
                machine.operate("eject", rng.randrange(1, 40), who, rng.choice(["number", "ref"]), "", URLS[1])
            elif op < 0.95:
                machine.reconfigure(
                    rng.choice(
                        [
                            {"maxConcurrent": rng.choice([1, 3, 5])},
                            {"presenceSec": rng.choice([None, 5, 30])},
                            {"sessionMaxSec": rng.choice([None, 20])},
                            {"rate": rng.choice([60, 600])},
                            {"state": rng.choice(["active", "paused"])},
                        ]
                    )
                )
            elif op < 0.965:
                machine.schedule(rng.choice([None, 4_000]), ..., None)
            elif op < 0.975:
                machine.operate("purge", 1, who, "number", "", URLS[1])
            elif op < 0.98:
                machine.delete_or_recreate(600, 3, 0)
            elif op < 0.983:
                machine.operate("flush", 1, who, "number", "", URLS[1])
            elif op < 0.995:  # the site ends a session: of a browser in a live session, else one that walked in
                room = machine.mem.engine.rooms.get(ROOM)
                live = (room.gen, room.sessions) if room is not None else (0, set())
                inside = [
                    i
                    for i, b in enumerate(machine.browsers)
                    if b.door is not None and b.token_m is not None and (b.token_m.gen, b.token_m.n) in live_pairs(live)
                ]
                inside = inside or [i for i, b in enumerate(machine.browsers) if b.door is not None] or [who]
                machine.operate("revoke", 1, rng.choice(inside), rng.choice(["number", "ref"]), "", URLS[1])
            else:
                machine.do_visit("steal", who, None, None, "own")
            machine.same_summary_and_lookups()
    finally:
        machine.teardown()
    seen = SEEN - seen_before
    assert {"join", "promote", "admit"} <= set(seen), seen
    if seed >= 4:  # the lanes' runs: both stores agreed; the kinds of change are the first four's to reach
        assert lane_changes >= 3, lane_changes
        return
    LONG_RUNS[seed] = seen
    if len(LONG_RUNS) == 4:  # all four in this session: together they reached every kind of change
        union = set().union(*LONG_RUNS.values())
        wanted = {
            "expire",
            "session.end",
            "bounce",
            "reclaim",
            "eject",
            "purge",
            "flush",
            "session.revoke",
            "prequeue.draw",
            "room.schedule",
            "room.delete",
            "slot.release",
            "return.update",
        }
        assert wanted <= union, sorted(wanted - union)


def test_a_bounced_holder_who_keeps_watching_keeps_its_claim_alike() -> None:
    """cap 1, presenceSec 5: two passes without a slot are bounced at the door; when the slot frees,
    the older holder only watches the waiting page (status polls) while the younger keeps trying the
    door, well past the bounce's grace. Both stores keep the freed slot for the older one."""
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(_reachable())
    finally:
        loop.close()
    machine = Equivalence()

    def state(n: int) -> str:
        m, v = machine.both(lambda s, _: s.lookup(ROOM, str(n)))
        assert v == m
        return str(m["state"])

    try:
        machine.create(
            rate=60,
            cap=1,
            presence=5,
            pttl=600,
            sttl=1800,
            smax=None,
            qmax=None,
            pqmax=None,
            state="active",
            opens_in=None,
            rules=False,
        )
        machine.join(0, None)  # ticket 1: walks in and holds the one slot
        machine.tick(1000)
        machine.check(0, None, "own")
        assert state(1) == "admitted"
        machine.upsert(state="paused")
        for who in (1, 2, 3):  # tickets 2 (older), 3 (younger), 4
            machine.join(who, None)
        for _ in range(6):  # 2 and 3 go unseen for presenceSec: promoted without a slot
            machine.tick(1000)
            machine.status(3)
        machine.upsert(state="active")
        machine.tick(1000)
        machine.status(3)
        assert (state(2), state(3)) == ("passed", "passed")
        machine.check(1, None, "own")
        machine.check(2, None, "own")
        assert "bounce" in SEEN
        machine.eject("1")  # the slot frees
        for _ in range(12):  # more than twice the grace: 2 watches, 3 tries the door
            machine.tick(1000)
            machine.status(1)
            machine.check(2, None, "own")
            machine.same_summary_and_lookups()
        assert state(3) == "passed"
        machine.check(1, None, "own")
        assert state(2) == "admitted"
    finally:
        machine.teardown()


def test_bypass_arrivals_are_counted_alike() -> None:
    """A room that queues, goes to bypass and queues again: in bypass every join and door check is an
    arrival in joinsLastMinute on both stores (a door replay of a session already inside is not),
    joinsTotal stays, and both windows forget the arrivals after a minute."""
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(_reachable())
    finally:
        loop.close()
    rng = random.Random(11)
    machine = Equivalence()

    def summary() -> dict[str, Any]:
        m, v = machine.both(lambda s, _: s.get_room(ROOM))
        assert v == m
        return dict(m)

    try:
        machine.create(
            rate=600,
            cap=None,
            presence=None,
            pttl=600,
            sttl=1800,
            smax=None,
            qmax=None,
            pqmax=None,
            state="active",
            opens_in=None,
            rules=True,
        )
        for who in range(6):
            machine.join(who, None)
        machine.tick(1000)
        for who in range(3):
            machine.check(who, None, "own")  # three walk in and hold door keys
        machine.upsert(state="bypass")
        before = summary()
        assert before["joinsTotal"] == 6
        peak = 0
        for _ in range(150):
            who = rng.randrange(len(machine.browsers))
            op = rng.random()
            if op < 0.3:
                machine.join(who, rng.choice([None, f"{TARGET}/cart"]))
            elif op < 0.75:
                machine.check(who, rng.choice(URLS), rng.choice(["own", "own", "none", "wrong"]))
            elif op < 0.85:
                machine.status(who)
            else:
                machine.tick(rng.choice([1000, 1000, 5000, 20_000]))
            machine.same_summary_and_lookups()
            peak = max(peak, summary()["joinsLastMinute"])
        assert peak >= 10  # the arrivals were counted (alike: summary() compares the stores)
        assert summary()["joinsTotal"] == 6
        machine.tick(60_000)
        assert summary()["joinsLastMinute"] == 0
        machine.upsert(state="active")
        machine.browsers.append(Browser(len(machine.browsers)))  # somebody new: a place minted
        machine.join(len(machine.browsers) - 1, None)
        machine.check(5, None, "none")
        after = summary()
        assert (after["joinsLastMinute"], after["joinsTotal"]) == (1, 7)
    finally:
        machine.teardown()


def test_bypass_arrivals_per_second_are_counted_alike_across_the_minute() -> None:
    """Arrivals in bypass spread over the milliseconds of many seconds, with and without ticks, for
    well over a minute: both stores give the same joinsLastMinute at every step, and it is the
    per-second rule (an arrival in second s counts while s * 1000 > now - 60,000), to the
    millisecond at the boundary. Both keep one bucket per second (memory) / hash field (Valkey)."""
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(_reachable())
    finally:
        loop.close()
    rng = random.Random(29)
    machine = Equivalence()
    arrivals: list[int] = []  # mono ms of every arrival (both clocks read the same)

    def joins_last_minute() -> int:
        m, v = machine.both(lambda s, _: s.get_room(ROOM))
        assert v == m
        return int(m["joinsLastMinute"])

    def expected() -> int:
        cutoff = machine.clock_m.mono_ms() - 60_000
        return sum(1 for t in arrivals if t // 1000 * 1000 > cutoff)

    def buckets() -> int:
        kept = len(machine.mem.engine.rooms[ROOM].arrival_buckets)
        fields = machine.run(machine.redis.hlen(room_key(machine.prefix, ROOM, "ab")))
        assert fields == kept
        return kept

    def advance(ms: int, tick: bool) -> None:
        if tick:
            machine.tick(ms)
        else:  # no tick: only the arrivals and the stats keep the window
            machine.clock_m.advance(ms / 1000)
            machine.clock_v.advance(ms / 1000)
        assert machine.clock_m.mono_ms() == machine.clock_v.mono_ms()

    def arrive(who: int, join: bool) -> None:
        if join:
            machine.join(who, None)
        else:
            machine.check(who, rng.choice(URLS), rng.choice(["none", "wrong"]))
        arrivals.append(machine.clock_m.mono_ms())

    try:
        machine.create(
            rate=60,
            cap=None,
            presence=None,
            pttl=600,
            sttl=1800,
            smax=None,
            qmax=None,
            pqmax=None,
            state="bypass",
            opens_in=None,
            rules=True,
        )
        most = 0
        while machine.clock_m.mono_ms() < 1_000_000 + 150_000:
            advance(rng.choice([1, 137, 250, 499, 999, 1000, 1001, 1700, 3100]), rng.random() < 0.4)
            for _ in range(rng.randrange(4)):
                arrive(rng.randrange(len(machine.browsers)), rng.random() < 0.3)
            assert joins_last_minute() == expected()
            cutoff = machine.clock_m.mono_ms() - 60_000
            seconds = {t // 1000 for t in arrivals if t // 1000 * 1000 > cutoff}
            assert buckets() == len(seconds)  # the stats read dropped the rest, in both stores
            most = max(most, len(seconds))
        assert 30 <= most <= 60
        # the boundary, to the millisecond: three arrivals in one second s ...
        advance(1000 - machine.clock_m.mono_ms() % 1000, False)
        second = machine.clock_m.mono_ms() // 1000
        for ms in (0, 500, 499):
            advance(ms, False)
            arrive(0, False)
        assert [t // 1000 for t in arrivals[-3:]] == [second] * 3
        # ... count until the last millisecond before (s + 60) * 1000, and not from it on
        advance((second + 60) * 1000 - 1 - machine.clock_m.mono_ms(), False)
        before = joins_last_minute()
        assert before == expected() and before >= 3
        advance(1, False)
        assert joins_last_minute() == expected() == before - 3
        advance(60_000, True)
        assert joins_last_minute() == 0 and buckets() == 0
        assert machine.run(machine.mem.get_room(ROOM))["joinsTotal"] == 0
    finally:
        machine.teardown()
