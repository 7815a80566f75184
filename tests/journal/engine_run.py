"""Random runs of the Python engine, and what "the same room" means, for the journal tests.

``Run`` drives one room through an engine on a FakeClock with a list of operations (hypothesis draws
them from ``ops()``). ``observe(room, browsers)`` answers every question a caller can ask of a room
without changing it. ``align(rebuilt, live)`` applies the documented exceptions — what the journal
deliberately does not record — before two rooms are compared:

* every holder counts as seen at the rebuild (``seen``), and whether a pass was shown (``told``);
* a session's slide reaches the journal at most once a minute (``session_last`` may lag < 60 s);
* door-check counters (``unscopedChecks``, ``blockedReturnUrls``, URL-rule matches);
* optionally the outflow credit, which is exact only under the conditions ``test_replay`` states.

``engine_missing()`` reads off room.py what replay needs (``NEEDS``) and the engine does not journal:
``test_the_engine_journals_what_replay_needs`` keeps it empty.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import hashlib
import heapq
import inspect
import itertools
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any
from unittest import mock

from hypothesis import strategies as st

from queue_manager.clock import FakeClock
from queue_manager.engine import engine as engine_module
from queue_manager.engine import operator, outflow, report
from queue_manager.engine import room as room_module
from queue_manager.engine import visitor as visits
from queue_manager.engine.deadlines import session_deadline, slot_deadline
from queue_manager.engine.engine import Engine
from queue_manager.engine.errors import EngineError
from queue_manager.engine.events import Event
from queue_manager.engine.minute import arrivals_last_minute
from queue_manager.engine.model import ClientId
from queue_manager.engine.randomness import SystemRandomSource
from queue_manager.engine.room import TOUCH_EVERY_MS, Room
from queue_manager.engine.ticket import make_ref
from queue_manager.engine.view import visitor_view
from queue_manager.engine.visitor import Presented

TARGET = "https://shop.example"
URLS = (None, "https://shop.example/checkout", "https://shop.example/static/x.css", "/checkout")

# ------------------------------------------------------------------------------ what replay needs

NEEDS = {
    "join.reason": "join: add reason (t.reason: why the presented token was not a live place)",
    "promote.credit": "promote: add credit (room.credit right after this promotion)",
    "slot.release": "new type slot.release {n}: sweep released an unused pass's slot",
    "return.update": "new type return.update {n | h, ret}: a held place's return URL changed",
    "bounced.lapse": "Room._active_bounced: stop dropping a bounced holder whose grace ran out (only skip it)",
}


def _emits() -> dict[str, set[str]]:
    """Every ``emit("<type>", key=...)`` call in room.py and engine.py: type -> the keys it writes."""
    found: dict[str, set[str]] = {}
    for module in (room_module, engine_module):
        for node in ast.walk(ast.parse(inspect.getsource(module))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "emit"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                keys = found.setdefault(str(node.args[0].value), set())
                keys.update(k.arg for k in node.keywords if k.arg is not None)
    return found


def engine_missing() -> list[str]:
    """The needs the engine does not meet yet (read off its ``emit`` calls)."""
    emits = _emits()
    missing = []
    if "reason" not in emits.get("join", set()):
        missing.append("join.reason")
    if "credit" not in emits.get("promote", set()):
        missing.append("promote.credit")
    if "slot.release" not in emits:
        missing.append("slot.release")
    if "return.update" not in emits:
        missing.append("return.update")
    if _prunes_lapsed_claims():
        missing.append("bounced.lapse")
    return missing


def _prunes_lapsed_claims() -> bool:
    """Does the lazy prune forget a bounced claim for good once its grace ran out? Then raising
    presenceSec later revives it in a rebuilt room (which has only bouncedAt) but not in the live one."""
    clock = FakeClock()
    room = Engine(clock).upsert({"id": "p", "targetUrl": TARGET, "presenceSec": 5})[0]
    t = room._mint("x", b"f", None, None, 0, None, charge=False)
    room.promote(t, slot=False, now=clock.mono_ms())
    t.bounced_at = clock.mono_ms()
    room.bounced.add(t.n)
    room._active_bounced(clock.mono_ms() + 10_000)
    return t.n not in room.bounced


@contextlib.contextmanager
def deterministic() -> Iterator[None]:
    """Pre-queue handles and drop seeds (so the draws) made deterministic, so two rooms can be driven alike."""
    handles = itertools.count(1)
    seeds = itertools.count(1)

    def token_hex(self: SystemRandomSource, nbytes: int) -> str:
        return f"{next(handles):016x}"

    def draw_seed(self: SystemRandomSource) -> bytes:
        return next(seeds).to_bytes(32, "big")

    # every room built without a source of its own (Run's, a rebuilt one) uses the system source
    with (
        mock.patch.object(SystemRandomSource, "token_hex", token_hex),
        mock.patch.object(SystemRandomSource, "draw_seed", draw_seed),
    ):
        yield


# ------------------------------------------------------------------------------------ browsers


@dataclass
class Browser:
    client: ClientId
    token: Presented | None = None
    door: bytes | None = None


def browsers(count: int = 7) -> list[Browser]:
    out = []
    for i in range(count):
        out.append(
            Browser(
                ClientId(
                    ident=f"10.0.0.{i % 3}",  # three addresses, so queueMaxPerIp bites
                    fp=f"fp-{i}".encode(),
                    fp2=f"fp2-{i}".encode() if i % 4 == 1 else None,
                    cookie=None if i % 3 == 2 else f"cookie-{i}".encode(),
                )
            )
        )
    return out


# ------------------------------------------------------------------------------------ operations

_UPDATES: list[tuple[str, Any]] = [
    ("state", "paused"),
    ("state", "active"),
    ("state", "active"),
    ("state", "active"),
    ("state", "bypass"),
    ("ratePerMinute", 0),
    ("ratePerMinute", 7),
    ("ratePerMinute", 60),
    ("ratePerMinute", 150),
    ("ratePerMinute", 6000),
    ("maxConcurrent", None),
    ("maxConcurrent", 1),
    ("maxConcurrent", 2),
    ("presenceSec", None),
    ("presenceSec", 5),
    ("presenceSec", 30),
    ("sessionTtlSec", 10),
    ("sessionTtlSec", 90),
    ("sessionMaxSec", None),
    ("sessionMaxSec", 40),
    ("passedTtlSec", 10),
    ("passedTtlSec", 150),
    ("queueMaxPerIp", None),
    ("queueMaxPerIp", 2),
    ("rules", []),
    ("rules", [{"pattern": "/checkout*", "action": "queue"}, {"pattern": "/static/*", "action": "skip"}]),
    # priority lanes (engine/lanes.py): by share, by priority, one lane gone, none
    ("lanes", [{"id": "public", "share": 40}, {"id": "members", "share": 60}]),
    ("lanes", [{"id": "members", "priority": 50}, {"id": "public", "priority": 10}]),
    ("lanes", [{"id": "public", "priority": 1}]),
    ("lanes", []),
]


def ops(
    *, between_ticks: bool = True, schedules: bool = True, min_size: int = 15, max_size: int = 80
) -> st.SearchStrategy[list[Any]]:
    b = st.integers(0, 6)
    choices: list[st.SearchStrategy[Any]] = [
        st.tuples(st.just("join"), b, st.sampled_from([None, None, f"{TARGET}/a", f"{TARGET}/b"])),
        st.tuples(st.just("steal"), b, b),
        st.tuples(st.just("status"), b),
        st.tuples(st.just("check"), b, st.integers(0, len(URLS) - 1), st.sampled_from([0, 0, 0, 1, 2])),
        st.tuples(st.just("eject"), st.integers(1, 10)),
        st.tuples(st.just("purge")),
        st.tuples(st.just("flush")),
        st.tuples(
            st.just("wait"), st.sampled_from([1, 250, 1000, 1000, 1000, 2000, 3000, 7000, 15000, 45000, 70000, 130000])
        ),
        st.tuples(st.just("update"), st.integers(0, len(_UPDATES) - 1)),
        st.tuples(st.just("lane"), b, st.sampled_from(["members", "public"])),  # a join a grant puts in a lane
    ]
    if between_ticks:
        choices.append(st.tuples(st.just("advance"), st.sampled_from([1, 333, 999, 5000, 61000])))
    if schedules:
        choices.append(st.tuples(st.just("schedule"), st.sampled_from([None, 1, 4, 20])))
    weights = [10, 1, 5, 12, 1, 1, 12, 3, 3] + ([3] if between_ticks else []) + ([1] if schedules else [])
    # a weighted pick of the kind first: one_of over the strategies favours the simplest ones heavily
    kinds = st.sampled_from([i for i, w in enumerate(weights) for _ in range(w)])
    one = kinds.flatmap(lambda i: choices[i])
    return st.lists(one, min_size=min_size, max_size=max_size)


def room_fields() -> st.SearchStrategy[dict[str, Any]]:
    """The room's settings at creation."""
    return st.fixed_dictionaries(
        {
            "ratePerMinute": st.sampled_from([7, 60, 60, 120, 600]),
            "maxConcurrent": st.sampled_from([None, 1, 2, 3]),
            "presenceSec": st.sampled_from([None, 5, 30]),
            "sessionTtlSec": st.sampled_from([20, 90, 1800]),
            "passedTtlSec": st.sampled_from([30, 150, 600]),
        }
    )


class Run:
    """One room on a FakeClock, driven by operations; ``events`` holds everything it journaled."""

    def __init__(self, **fields: Any) -> None:
        self.clock = FakeClock()
        self.engine = Engine(self.clock)
        body = {"id": "r", "targetUrl": TARGET, "presenceSec": 30, "queueMaxPerIp": 3, **fields}
        self.room, _, _ = self.engine.upsert(body)
        self.browsers = browsers()
        self.doors = itertools.count(1)
        self.events: list[Event] = []
        self.results: list[Any] = []

    def drain(self) -> list[Event]:
        fresh = self.engine.drain_events()
        self.events += fresh
        return fresh

    def apply(self, op: tuple[Any, ...]) -> None:
        kind = op[0]
        if kind == "wait":
            self.clock.advance(op[1] / 1000)
            self.engine.tick()
        elif kind == "advance":
            self.clock.advance(op[1] / 1000)
        elif kind == "update":
            key, value = _UPDATES[op[1]]
            self.engine.upsert({"id": "r", key: value})
        elif kind == "schedule":
            opens = None if op[1] is None else self.clock.wall_ms() + op[1] * 1000
            self.engine.schedule("r", {"opensAt": opens})
        else:
            self.results.append(visit(self.room, self.browsers, op, self.doors))
        self.drain()


def visit(room: Room, people: list[Browser], op: tuple[Any, ...], doors: Iterator[int]) -> Any:
    """A visitor- or operator-side operation on one room; returns a comparable summary of the answer."""
    kind = op[0]
    try:
        if kind in ("join", "steal", "lane"):
            who = people[op[1]]
            if kind == "steal":
                who.token = people[op[2]].token
            lane = op[2] if kind == "lane" else None
            found = visits.join(room, who.client, who.token, op[2] if kind == "join" else None, lane)
            if found.ticket is not None:
                who.token = Presented(gen=room.gen, n=found.ticket.n)
            elif found.pre is not None:
                who.token = Presented(gen=room.gen, handle=found.pre.handle)
            return ("join", asdict(visitor_view(room, found)))
        if kind == "status":
            who = people[op[1]]
            return ("status", asdict(visitor_view(room, visits.status(room, who.client, who.token))))
        if kind == "check":
            who = people[op[1]]
            raw = f"door-{next(doors)}"
            digest = hashlib.sha256(raw.encode()).digest()
            sent = {0: who.door, 1: None, 2: b"wrong"}[op[3]]
            res = visits.check(room, who.client, who.token, sent, URLS[op[2]], (raw, digest))
            if res.door_key is not None:
                who.door = digest
            return (
                "check",
                res.admit,
                res.state,
                res.reason,
                res.door_key,
                None if res.ticket is None else res.ticket.n,
                res.session_expires_ms,
                res.rule,
            )
        if kind == "eject":
            return ("eject", operator.eject(room, op[1]))
        if kind == "purge":
            return ("purge", operator.purge(room))
        if kind == "flush":
            return ("flush", operator.flush(room))
        if kind == "revoke":
            door = people[op[1]].door
            return ("revoke", None if door is None else visits.revoke(room, None, None, door))
    except EngineError as err:
        return ("error", err.status, err.code)
    raise AssertionError(f"unknown op {op!r}")


# ------------------------------------------------------------------------------------ comparing


def observe(room: Room, people: list[Browser], *, windows: bool = True) -> dict[str, Any]:
    """Every answer the room gives without changing anything (call ``room.advance()`` first)."""
    stats = report.stats(room)
    # bypass arrivals (door checks, joins that mint nothing) are not journaled: a rebuilt room starts them afresh
    stats["joinsLastMinute"] -= arrivals_last_minute(room.arrival_buckets, room.clock.mono_ms())
    stats["rules"] = [{k: v for k, v in r.items() if k not in ("matchCount", "lastMatchAt")} for r in stats["rules"]]
    if not windows:
        stats.pop("joinsLastMinute")
        stats.pop("passedLastMinute")
        for row in stats.get("laneStats", []):
            row.pop("releasedLastMinute")
    out: dict[str, Any] = {"stats": stats, "line": list(room.line), "per_ident": dict(room.per_ident)}
    out["lanes"] = ({k: list(v) for k, v in room.lane_lines.items()}, dict(room.lane_credit))
    looks: dict[int, Any] = {}
    for n in range(1, room.next_n + 2):
        try:
            looks[n] = (report.describe(room, n), report.lookup(room, make_ref(room.cfg.id, room.gen, n)))
        except EngineError as err:
            looks[n] = err.code
    out["tickets"] = looks
    out["views"] = [asdict(visitor_view(room, visits.resolve(room, b.token, b.client))) for b in people]
    out["prequeue"] = sorted((e.handle, e.ident, e.return_url, e.joined_ms) for e in room.prequeue.values())
    out["pq_per_ident"] = dict(room.pq_per_ident)
    out["drawn"] = dict(room.drawn)
    out["draw"] = None if room.draw_record is None else room.draw_record.to_doc()  # seed, reschedules, the draw
    out["purged"] = list(room.purged_handles)
    out["finished"] = [(n, asdict(f)) for n, f in room.finished.items()]
    active_bounced = room._active_bounced(room.clock.mono_ms())  # prunes the lazy set first
    out["effective"] = (room.effective_state(), room.occupancy(), active_bounced, sorted(room.slot_holders))
    return out


def see_everyone(room: Room) -> None:
    now = room.clock.mono_ms()
    for t in room.tickets.values():
        t.seen = now
    for e in room.prequeue.values():
        e.seen = now


def fresh_heaps(room: Room) -> None:
    """Rebuild the lazy deadline heaps from the state (a no-op for what the room does, but two rooms
    with the same state then sweep in the same order: a stale entry can otherwise decide which of two
    lapses at the same instant is journaled first)."""
    room._pass_heap = [(room.tickets[n].pass_at + room.cfg.passed_ttl_sec * 1000, n) for n in room.passes]
    room._slot_heap = [(slot_deadline(room.cfg, room.tickets[n]), n) for n in room.slot_holders]
    room._session_heap = [(session_deadline(room.cfg, room.tickets[n]), n) for n in room.sessions]
    for heap in (room._pass_heap, room._slot_heap, room._session_heap):
        heapq.heapify(heap)


def align(rebuilt: Room, live: Room, *, pacing: bool) -> None:
    """Copy onto ``rebuilt`` what the journal deliberately does not record (checking the bounds first)."""
    see_everyone(live)
    see_everyone(rebuilt)
    assert set(rebuilt.tickets) == set(live.tickets)
    for n, t in live.tickets.items():
        r = rebuilt.tickets[n]
        r.told = t.told
        if t.state == "admitted" and r.state == "admitted":
            lag = t.session_last - r.session_last
            assert 0 <= lag < TOUCH_EVERY_MS, (n, lag)
            r.session_last = t.session_last
    rebuilt.unscoped_checks = live.unscoped_checks
    rebuilt.blocked_returns = live.blocked_returns
    for mine, theirs in zip(rebuilt.cfg.rules, live.cfg.rules, strict=True):
        mine.matches, mine.last_match_ms = theirs.matches, theirs.last_match_ms
    if pacing:
        rebuilt.credit, rebuilt.last_tick = live.credit, live.last_tick
    fresh_heaps(rebuilt)
    fresh_heaps(live)


def future(room: Room, clock: FakeClock, people: list[Browser], rounds: int = 12, *, windows: bool = True) -> list[Any]:
    """The same later life for any room: polls, door checks, joins and ticks; returns every answer and event."""
    people = copy.deepcopy(people)
    doors = itertools.count(10_000)
    start = len(room.events)
    out: list[Any] = []
    steps = [1000, 1000, 7000, 31000, 1000, 65000, 250, 1000, 130000, 1000, 1000, 2000]
    with deterministic():
        for r in range(rounds):
            for i in range(len(people)):
                if (r + i) % 3 == 0:
                    out.append(visit(room, people, ("status", i), doors))
                out.append(visit(room, people, ("check", i, r % len(URLS), 0), doors))
                if (r + i) % 5 == 0:
                    out.append(visit(room, people, ("join", i, None), doors))
            clock.advance(steps[r % len(steps)] / 1000)
            out.append(("tick", outflow.tick(room)))
    out.append(("events", [e.as_dict() for e in room.events[start:]]))
    room.advance()
    out.append(("final", observe(room, people, windows=windows)))
    return out


def clock_copy(clock: FakeClock) -> FakeClock:
    return FakeClock(clock.wall_ms(), clock.mono_ms() / 1000)


__all__ = [
    "NEEDS",
    "Browser",
    "Run",
    "align",
    "clock_copy",
    "deterministic",
    "engine_missing",
    "fresh_heaps",
    "future",
    "observe",
    "ops",
    "see_everyone",
]


def diff(a: Any, b: Any, path: str = "", out: list[str] | None = None) -> list[str]:
    """Where two observations differ (for assertion messages)."""
    out = [] if out is None else out
    if len(out) >= 12:
        return out
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            diff(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{path}.{k}", out)
    elif isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            diff(x, y, f"{path}[{i}]", out)
    elif a != b:
        out.append(f"{path}: {a!r} != {b!r}")
    return out
