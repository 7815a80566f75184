"""``qm simulate``: a surge played through the queue's own engine on a simulated clock (no server).

The room is an ``engine.Engine`` room on a ``FakeClock``; the simulation only decides *when* things
happen, and the engine decides *what* happens, exactly as it does for the memory store:

* visitor ``k`` joins (``visitor.join``) at the arrival curve's instant; the ETA it is shown is the
  view the server would render for that join; before a scheduled drop opens (``opens_after``) the
  join is a pre-queue entry, drawn into the line when the doors open (the depth counts both);
* the room ticks once a second (``Engine.tick``), as the server's ticker does: outflow, capacity,
  absent holders skipped, passes and sessions expiring;
* a visitor who keeps the waiting page open is seen: a polling page asks ``visitor.status`` every
  ``poll_every`` seconds from its join, a page holding the live stream asks after every tick
  (a stream's frame is that status); a no-show is never seen again after joining;
* a visitor who sees its pass goes to the door at once (``visitor.check``); turned away (``at_capacity``)
  it keeps polling and tries the door at each poll; admitted, it keeps browsing for ``stay`` seconds
  (a door check every ``poll_every`` seconds), then leaves, and the session idles out
  (``sessionTtlSec``) as the engine says.

The wait measured is the visitor's own: from its join to the moment its page shows the pass.

A million visitors would mean a billion polls and frames, almost all of them from people far back in a
line that cannot reach them yet. Where the room lets the line out from its head alone (``fifo``, no
lanes) and a polling or streaming visitor is never absent between two of its looks, such a visitor's
looks are skipped until the line comes near (``_Pacing``): a look at a waiting place only marks it
seen, and nothing reads that mark before the place is within the next tick's reach. When the visitor
comes near, its mark is set to the instant of the look it last had, and its looks resume on their
schedule; the prediction is the same, look for look, as if every look had been made.
"""

from __future__ import annotations

import hashlib
import heapq
import math
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from queue_manager.clock import FakeClock
from queue_manager.engine.engine import Engine
from queue_manager.engine.model import ClientId
from queue_manager.engine.randomness import SeededRandom
from queue_manager.engine.room import Room
from queue_manager.engine.view import visitor_view
from queue_manager.engine.visitor import Presented, check, join, status
from queue_manager.rehearse.ramp import Ramp
from queue_manager.rehearse.stats import eta_error, spread

JOIN, POLL, BROWSE = 0, 1, 2


@dataclass(frozen=True, slots=True)
class Scenario:
    """What is simulated: the room's settings (the admin API's field names) and the crowd."""

    room: dict[str, Any]
    ramp: Ramp
    visitors: int
    no_show: float = 0.0
    stream: float = 0.0
    poll_every: float = 5.0
    stay: float = 0.0
    seed: int = 1
    until: float = 6 * 3600.0  # simulated seconds at most
    opens_after: float | None = None  # a scheduled drop: the doors open this long after the first arrival


@dataclass(slots=True)
class _Visitor:
    k: int
    client: ClientId
    no_show: bool
    stream: bool
    joined_at: float = 0.0
    presented: Presented | None = None
    eta: int | None = None
    saw_pass: float | None = None
    admitted_at: float | None = None
    leave_at: float = 0.0
    door: tuple[str, bytes] = ("", b"")
    done: bool = False
    joined_ms: int = 0
    n: int | None = None  # the place in line, once it has one
    paced: bool = False  # its looks are skipped while it is far back (see _Pacing)
    epoch: int = 0  # a poll scheduled before the visitor was paced is stale once this moves on


@dataclass(slots=True)
class Sample:
    t: int
    arrived: int
    depth: int
    passes: int
    admitted: int
    sessions: int
    p50: float | None = None
    p90: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "t": self.t,
            "arrived": self.arrived,
            "depth": self.depth,
            "passes": self.passes,
            "admitted": self.admitted,
            "sessions": self.sessions,
            "waitP50": self.p50,
            "waitP90": self.p90,
        }


@dataclass(slots=True)
class Outcome:
    scenario: Scenario
    samples: list[Sample] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)
    eta_pairs: list[tuple[float, float]] = field(default_factory=list)
    admitted: int = 0
    expired: int = 0
    no_shows: int = 0
    first_admission: float | None = None
    ended_at: float = 0.0
    finished: bool = True
    rate_per_minute: int = 0

    def to_json(self) -> dict[str, Any]:
        s = self.scenario
        peak = max(self.samples, key=lambda x: x.depth) if self.samples else None
        return {
            "scenario": {
                "room": s.room,
                "visitors": s.visitors,
                "arrival": s.ramp.spec,
                "noShow": s.no_show,
                "stream": s.stream,
                "pollEverySec": s.poll_every,
                "staySec": s.stay,
                "seed": s.seed,
                "opensAfterSec": s.opens_after,
            },
            "visitors": s.visitors,
            "noShows": self.no_shows,
            "admitted": self.admitted,
            "expired": self.expired,
            "finished": self.finished,
            "endedSec": round(self.ended_at, 1),
            "firstAdmissionSec": None if self.first_admission is None else round(self.first_admission, 1),
            "peakDepth": 0 if peak is None else peak.depth,
            "peakDepthAtSec": None if peak is None else peak.t,
            "wait": spread(self.waits),
            "etaError": eta_error(self.eta_pairs),
            "outflowPerMin": _outflow(self.samples),
            "ratePerMinute": self.rate_per_minute,
            "samples": [x.to_json() for x in self.samples],
        }


def _outflow(samples: list[Sample]) -> float | None:
    """Passes a minute from the first second with a pass to the second the last one came."""
    first = next((x for x in samples if x.passes), None)
    if first is None:
        return None
    last = next(x for x in samples if x.passes == samples[-1].passes)
    if last.t <= first.t:
        return None
    return round((last.passes - first.passes) * 60 / (last.t - first.t), 1)


def _client(k: int) -> ClientId:
    """Visitor ``k``: an address of its own (198.18.0.0/15, the benchmarking range) and a cookie of its own."""
    digest = hashlib.blake2b(k.to_bytes(8, "big"), digest_size=28).digest()
    return ClientId(ident=f"198.{18 + (k >> 16) % 2}.{(k >> 8) & 255}.{k & 255}", fp=digest[:12], cookie=digest[12:])


class _Pacing:
    """Who looks at their place for real, and who is far back enough to skip their looks for now.

    ``near`` holds the present visitors (not no-shows) waiting in line, in line order, whose looks are
    made; ``far`` those behind them whose looks are skipped. A tick promotes at most ``reach`` holders
    who are present (each costs a slot: the one-slot bank plus a second's credit), so a visitor with
    ``reach`` present holders ahead of it is still waiting after the tick. Before each tick the near
    part is brought back to between ``low`` and ``high`` visitors.
    """

    def __init__(self, rate_per_minute: int) -> None:
        self.low = rate_per_minute // 60 + 64
        self.high = 2 * self.low
        self.near: deque[_Visitor] = deque()
        self.far: deque[_Visitor] = deque()
        self.drawn: list[_Visitor] = []  # pre-queue visitors, placed once the doors have opened


def _pacing(sc: Scenario, room: Room) -> _Pacing | None:
    """Pacing applies where only the head of one line moves and a looking visitor is never absent."""
    cfg = room.cfg
    if cfg.queueing != "fifo" or cfg.lanes:
        return None
    presence = cfg.presence_sec
    if presence is not None and presence * 1000 <= max(1000, round(sc.poll_every * 1000)):
        return None
    return _Pacing(cfg.rate_per_minute)


def simulate(sc: Scenario) -> Outcome:
    """Play ``sc`` through the engine; deterministic for a scenario (its seed included)."""
    clock = FakeClock()
    engine = Engine(clock, rng=SeededRandom(sc.seed))
    body: dict[str, Any] = {"queueMaxPerIp": None, "preQueueMaxPerIp": None, **sc.room}
    if sc.opens_after is not None:
        body["opensAt"] = clock.wall_ms() + round(sc.opens_after * 1000)
    room, _, _ = engine.upsert(body)
    out = Outcome(sc, rate_per_minute=room.cfg.rate_per_minute)
    pick = random.Random(sc.seed)
    times = sc.ramp.arrival_times(sc.visitors)
    visitors = []
    for k in range(sc.visitors):
        no_show = pick.random() < sc.no_show
        stream = not no_show and pick.random() < sc.stream
        visitors.append(_Visitor(k, _client(k), no_show, stream))
    out.no_shows = sum(v.no_show for v in visitors)
    start = clock.mono_ms()
    # (instant, kind, order, visitor, epoch). A visitor's polls come every poll_ms from its join, and
    # two polls at one instant are taken in the order of (-join instant, visitor): the order in which
    # their chains were scheduled, so a poll skipped and resumed keeps its turn.
    heap: list[tuple[int, int, int, int, int]] = [(round(t * 1000), JOIN, k, k, 0) for k, t in enumerate(times)]
    heapq.heapify(heap)
    seq = sc.visitors
    streams: set[int] = set()
    poll_ms = max(1, round(sc.poll_every * 1000))
    arrived = 0
    open_visitors = sc.visitors - out.no_shows
    pacing = _pacing(sc, room)

    def go(ms: int) -> None:
        now = clock.mono_ms() - start
        if ms > now:
            clock.advance((ms - now) / 1000)

    def poll_at(v: _Visitor, at_ms: int) -> None:
        heapq.heappush(heap, (at_ms, POLL, -v.joined_ms, v.k, v.epoch))

    def browse_at(v: _Visitor, at_ms: int) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(heap, (at_ms, BROWSE, seq, v.k, 0))

    def finish(v: _Visitor, *, expired: bool) -> None:
        nonlocal open_visitors
        v.done = True
        streams.discard(v.k)
        open_visitors -= 1
        if expired:
            out.expired += 1

    def see(v: _Visitor, now_ms: int) -> None:
        """The visitor's page asks for its status; at its pass it goes to the door."""
        found = status(room, v.client, v.presented)
        t = found.ticket
        if t is None and found.pre is not None:  # in the pre-queue until the doors open
            if not v.stream:
                poll_at(v, now_ms + poll_ms)
            return
        if t is None:  # the place is gone (its pass lapsed unused)
            finish(v, expired=True)
            return
        if t.state == "waiting":
            if not v.stream:
                poll_at(v, now_ms + poll_ms)
            return
        now = now_ms / 1000
        if v.saw_pass is None:
            v.saw_pass = now
            out.waits.append(now - v.joined_at)
            if v.eta is not None:
                out.eta_pairs.append((now - v.joined_at, float(v.eta)))
        if t.state == "passed":
            result = check(room, v.client, v.presented, None, None, v.door)
            if not result.admit:
                if not v.stream:
                    poll_at(v, now_ms + poll_ms)
                return
        v.admitted_at = now
        out.admitted += 1
        if out.first_admission is None:
            out.first_admission = now
        streams.discard(v.k)
        v.leave_at = now + sc.stay
        if sc.stay > 0:
            browse_at(v, now_ms + poll_ms)
        else:
            finish(v, expired=False)

    def waiting(v: _Visitor) -> bool:
        t = None if v.n is None else room.tickets.get(v.n)
        return t is not None and t.state == "waiting"

    def pace(p: _Pacing, tick_ms: int) -> None:
        """Before the tick at ``tick_ms``: skip the looks of those far back, resume those coming near."""
        if p.drawn:  # the doors opened: the drawn places join the near part, in line order
            placed: list[tuple[int, _Visitor]] = []
            for v in p.drawn:
                assert v.presented is not None and v.presented.handle is not None
                v.n = room.drawn.get(v.presented.handle)
                if v.n is not None and waiting(v):
                    placed.append((room.tickets[v.n].line_seq, v))
            placed.sort(key=lambda x: x[0])
            p.near.extendleft(v for _, v in reversed(placed))
            p.drawn.clear()
        near, far = p.near, p.far
        while near and not waiting(near[0]):  # the line leaves from its head, in order
            near.popleft()
        while len(near) > p.high:
            v = near.pop()
            v.paced = True
            v.epoch += 1  # its scheduled poll is stale
            streams.discard(v.k)
            far.appendleft(v)
        while len(near) < p.low and far:
            v = far.popleft()
            v.paced = False
            t = room.tickets[v.n] if v.n is not None else None
            assert t is not None and t.state == "waiting"
            if v.stream:  # it saw a frame after the last tick (if it had joined by then)
                if v.joined_ms < tick_ms - 1000:
                    t.seen = start + tick_ms - 1000
                streams.add(v.k)
            else:  # its looks come every poll_ms from its join: the last one before the tick, the next one
                nxt = max(1, -(-(tick_ms - v.joined_ms) // poll_ms))
                if nxt > 1:
                    t.seen = start + v.joined_ms + (nxt - 1) * poll_ms
                poll_at(v, v.joined_ms + nxt * poll_ms)
            near.append(v)

    next_tick = 1000
    limit_ms = round(sc.until * 1000)
    while True:
        while heap and heap[0][0] < next_tick:
            at, kind, _, k, epoch = heapq.heappop(heap)
            v = visitors[k]
            if kind == POLL and epoch != v.epoch:
                continue  # the visitor was paced since
            go(at)
            if kind == JOIN:
                found = join(room, v.client, None, None)
                arrived += 1
                v.joined_at = at / 1000
                v.joined_ms = at
                if found.pre is not None:  # before the doors open: a pre-queue handle, drawn at opening
                    v.presented = Presented(room.gen, handle=found.pre.handle)
                else:
                    assert found.ticket is not None
                    v.presented = Presented(room.gen, n=found.ticket.n)
                    v.n = found.ticket.n
                v.door = (f"dk{k}", hashlib.blake2b(b"dk%d" % k, digest_size=16).digest())
                v.eta = visitor_view(room, found).eta_sec
                if v.no_show:
                    continue
                if pacing is not None and found.ticket is not None and found.ticket.state == "waiting":
                    if pacing.far:  # behind those already paced: paced too
                        v.paced = True
                        pacing.far.append(v)
                        continue
                    pacing.near.append(v)
                elif pacing is not None and found.pre is not None:
                    pacing.drawn.append(v)
                if v.stream:
                    streams.add(k)
                else:
                    poll_at(v, at + poll_ms)
            elif kind == POLL and not v.done:
                see(v, at)
            elif kind == BROWSE and not v.done:
                check(room, v.client, v.presented, v.door[1], None, v.door)
                if at / 1000 + sc.poll_every <= v.leave_at:
                    browse_at(v, at + poll_ms)
                else:
                    finish(v, expired=False)
        go(next_tick)
        if pacing is not None and not room.prequeue:
            pace(pacing, next_tick)
        engine.tick()
        engine.events.clear()  # nothing journals a simulation
        for k in sorted(streams):  # a live stream's frame after the tick
            see(visitors[k], next_tick)
        out.samples.append(
            Sample(
                next_tick // 1000,
                arrived,
                len(room.line) + len(room.prequeue),
                room.passes_total,
                out.admitted,
                len(room.sessions),
            )
        )
        settled = arrived == sc.visitors and open_visitors == 0 and not len(room.line) and not room.prequeue
        if settled or next_tick >= limit_ms:
            out.finished = settled
            break
        next_tick += 1000
    out.ended_at = next_tick / 1000
    _fill_waits(out, visitors)
    return out


def _fill_waits(out: Outcome, visitors: list[_Visitor]) -> None:
    """Each sample's p50/p90 of the waits measured up to its second: nearest rank (``stats.percentile``)
    over a Fenwick tree of the distinct waits, so a million waits cost a million small steps."""
    seen = sorted((v.saw_pass, v.saw_pass - v.joined_at) for v in visitors if v.saw_pass is not None)
    values = sorted({w for _, w in seen})
    place = {w: i + 1 for i, w in enumerate(values)}
    size = len(values)
    tree = [0] * (size + 1)
    top = 1 << size.bit_length()

    def nth(rank: int) -> float:  # the rank-th smallest wait so far (1-based)
        at, step = 0, top
        while step:
            nxt = at + step
            if nxt <= size and tree[nxt] < rank:
                at = nxt
                rank -= tree[nxt]
            step >>= 1
        return values[at]

    def pick(q: float, count: int) -> float | None:
        if not count:
            return None
        return nth(min(max(1, math.ceil(q / 100 * count)), count))

    count = i = 0
    for sample in out.samples:
        while i < len(seen) and seen[i][0] <= sample.t:
            j = place[seen[i][1]]
            while j <= size:
                tree[j] += 1
                j += j & -j
            count += 1
            i += 1
        p50, p90 = pick(50, count), pick(90, count)
        sample.p50 = None if p50 is None else round(p50, 1)
        sample.p90 = None if p90 is None else round(p90, 1)
