"""Per-room time series for the console's chart and reports, sampled from the store's room summaries.

Every ``SAMPLE_SEC`` the recorder reads each room's summary (what ``/api/admin/rooms`` lists) and folds it
into two bounded tiers: 10-second buckets for the last hour and 1-minute buckets for the last 24 hours.
Each bucket keeps queue depth, joins, passes, the configured rate, and the waits of the people who left
the line in it.

Actual waits are the store's, exact to the millisecond: each pass minted from the line records its wait
(minted − joined) in the room, numbered by pass (the generation's k-th pass is k on every instance), and
the same read as the summaries (``Store.sample_rooms``) hands the recorder those it has not read yet; a
room keeps the latest ``view.WAITS_KEPT`` of them, so a recorder sampling every 2 s reads every one while
a room mints fewer than that between two samples. A wait counts in the sample that read it, as its pass
does in ``passes``. Events that changed the room (state, rate, purge, a new generation) become marks, and
so do joins refused by bot protection (``block``: one mark per room per minute, with the count).

The marks are kept here for this process; given a ``sink`` (a ``base.MarkSink``; with ``SIDESTORE=pg``
the shared timeline, ``pg.py``) the recorder also hands it every mark it makes, so they outlive the process.
"""

from __future__ import annotations

import random
from array import array
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

    from queue_manager.engine.view import MintedWaits
    from queue_manager.sidestores.timeline.base import MarkSink
    from queue_manager.store.base import Store

SAMPLE_SEC = 2.0
RESERVOIRS = {10: 128, 60: 64}  # waits kept per bucket (a uniform sample), by bucket seconds; 4 bytes each
MARKS_KEEP = 500
STATE_MARKS = {"paused": "pause", "active": "resume", "bypass": "bypass", "scheduled": "schedule"}
TIERS = {"10s": (10, 360), "1m": (60, 1440)}  # name: (bucket seconds, buckets kept)
BLOCK_SEC = 60  # refused joins are one mark per room per this many seconds


def block_note(count: int) -> str:
    """What a coalesced ``block`` mark says."""
    return f"{count} join{'' if count == 1 else 's'} refused by bot protection"


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile of values (None for none)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, int(-(-q * len(ordered) // 1)) - 1))
    return ordered[rank]


def weighted_percentile(pairs: list[tuple[float, float]], q: float) -> float | None:
    """Percentile of values each standing for a weight of waits (merging buckets' reservoirs fairly)."""
    if not pairs:
        return None
    ordered = sorted(pairs)
    total = sum(w for _, w in ordered)
    target, run = q * total, 0.0
    for value, weight in ordered:
        run += weight
        if run >= target - 1e-9:
            return value
    return ordered[-1][0]


@dataclass(frozen=True, slots=True)
class WaitLump:
    """Waits counted and summed but not read one by one: ``count`` passes numbered ``first`` … ``last``
    (of one generation) whose waits the room no longer kept when they were read, ``seconds`` their sum."""

    first: int
    last: int
    count: int
    seconds: float


@dataclass(slots=True)
class Bucket:
    start_ms: int
    depth: int = 0
    depth_max: int = 0
    depth_sum: int = 0
    samples: int = 0
    joins: int = 0
    passes: int = 0
    rate: int | None = None
    state: str = "active"
    active_max: int = 0
    passed_last_min: int = 0
    joins_last_min: int = 0
    cap: int = 64
    waits: array[float] = field(default_factory=lambda: array("f"))
    waits_seen: int = 0
    wait_max: float = 0.0
    wait_sum: float = 0.0

    def add_wait(self, rng: random.Random, wait: float) -> None:
        self.waits_seen += 1
        self.wait_sum += wait
        self.wait_max = max(self.wait_max, wait)
        if len(self.waits) < self.cap:
            self.waits.append(wait)
        else:  # uniform reservoir sample
            slot = rng.randrange(self.waits_seen)
            if slot < self.cap:
                self.waits[slot] = wait

    def add_lump(self, lump: WaitLump) -> None:
        """Waits whose count and sum are known, not their values (no maximum, no reservoir sample)."""
        self.waits_seen += lump.count
        self.wait_sum += lump.seconds

    def row(self, seconds: float) -> dict[str, Any]:
        per_min = 60.0 / seconds
        est = None
        if self.depth == 0:
            est = 0
        elif self.passed_last_min > 0:
            est = round(self.depth * 60 / self.passed_last_min)
        return {
            "t": self.start_ms // 1000,
            "depth": self.depth,
            "depthMax": self.depth_max,
            "depthAvg": round(self.depth_sum / self.samples, 2) if self.samples else 0,
            # per minute: the trailing minute's counts at the bucket's last sample (what the cards show)
            "joinsPerMin": self.joins_last_min if seconds < 60 else round(self.joins * per_min, 2),
            "passesPerMin": self.passed_last_min if seconds < 60 else round(self.passes * per_min, 2),
            "joins": self.joins,
            "passes": self.passes,
            "estWaitSec": est,
            "waitP50Sec": _round(percentile(list(self.waits), 0.5)),
            "waitP90Sec": _round(percentile(list(self.waits), 0.9)),
            "waitMaxSec": _round(self.wait_max) if self.waits_seen else None,
            "waitAvgSec": _round(self.wait_sum / self.waits_seen) if self.waits_seen else None,
            "measuredWaits": self.waits_seen,
            "peakActive": self.active_max,
            "rate": self.rate,
            "state": self.state,
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


@dataclass(slots=True)
class Tier:
    seconds: int
    keep: int
    closed: deque[Bucket] = field(default_factory=deque)
    open: Bucket | None = None

    def bucket(self, now_ms: int) -> Bucket:
        start = now_ms - now_ms % (self.seconds * 1000)
        if self.open is None or self.open.start_ms != start:
            if self.open is not None:
                self.closed.append(self.open)
                while len(self.closed) > self.keep:
                    self.closed.popleft()
            self.open = Bucket(start, cap=RESERVOIRS.get(self.seconds, 64))
        return self.open


@dataclass(slots=True)
class RoomSeries:
    room_id: str
    generation: int
    joins_total: int
    passes_total: int
    exits: int
    state: str
    rate: int
    waiting: int
    tiers: dict[str, Tier] = field(default_factory=lambda: {k: Tier(s, n) for k, (s, n) in TIERS.items()})
    marks: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=MARKS_KEEP))
    wait_ord: int = 0  # the newest pass of this generation whose wait this recorder has read
    wait_ms: int = 0  # the sum of the waits of passes 1 … wait_ord (the store's running total)
    block_mark: dict[str, Any] | None = None  # this minute's block mark, counted up in place


def _exits(summary: dict[str, Any]) -> int:
    return max(0, int(summary["joinsTotal"]) - int(summary["waiting"]) - int(summary.get("preQueue") or 0))


class SeriesRecorder:
    """Bounded per-room series in this process; fed by the app's ticker, read by the console's routes."""

    def __init__(self, sink: MarkSink | None = None) -> None:
        self.rooms: dict[str, RoomSeries] = {}
        self.sink = sink
        self.started_ms: int | None = None
        # when this process began watching its store: a room generation created since then has had every
        # join counted by this recorder's samples, also one created before the first sample
        self.watching_since_ms: int | None = None
        self._last_ms = 0
        self._rng = random.Random()
        self._sampled = False
        self._first = False
        # room -> the waits read in the latest sample: (k, seconds), the k-th pass of the room's generation
        # (the same k on every instance reading the same store, so a wait handed over twice is folded once)
        self.last_waits: dict[str, list[tuple[int, float]]] = {}
        # room -> the waits of the latest sample read as a count and a sum only (the recorder fell more than
        # view.WAITS_KEPT passes behind): at most one a room and sample
        self.last_lumps: dict[str, WaitLump] = {}

    def due(self, now_ms: int) -> bool:
        return now_ms - self._last_ms >= SAMPLE_SEC * 1000 - 50

    async def feed(self, store: Store, now_ms: int) -> list[dict[str, Any]] | None:
        """The ticker's hook: sample every room when a sample is due; returns the summaries sampled (the
        waits measured in that sample are in ``last_waits``), or None when no sample was due."""
        if not self.due(now_ms):
            return None
        summaries, waits = await self.read(store)
        self.sample(summaries, now_ms, waits)
        return summaries

    async def read(self, store: Store) -> tuple[list[dict[str, Any]], dict[str, MintedWaits]]:
        """Every room's summary and the waits of its passes this recorder has not read yet."""
        return await store.sample_rooms({r: (s.generation, s.wait_ord) for r, s in self.rooms.items()})

    def sample(
        self, summaries: list[dict[str, Any]], now_ms: int, waits: Mapping[str, MintedWaits] | None = None
    ) -> None:
        """Fold one reading of every room in (with the waits read with it: ``read``); rooms no longer
        listed are forgotten."""
        if self.started_ms is None:
            self.started_ms = now_ms
        self._last_ms = now_ms
        seen = set()
        self.last_waits = {}
        self.last_lumps = {}
        self._first = not self._sampled
        self._sampled = True
        for summary in summaries:
            room_id = summary["id"]
            seen.add(room_id)
            self._sample_room(summary, now_ms, None if waits is None else waits.get(room_id))
        for gone in [r for r in self.rooms if r not in seen]:
            del self.rooms[gone]

    def _sample_room(self, s: dict[str, Any], now_ms: int, minted: MintedWaits | None) -> None:
        room_id, gen = s["id"], int(s.get("generation") or 0)
        state, rate = str(s.get("effectiveState") or s.get("state")), int(s.get("ratePerMinute") or 0)
        joins, passes, waiting = int(s["joinsTotal"]), int(s["passesTotal"]), int(s["waiting"])
        exits = _exits(s)
        series = self.rooms.get(room_id)
        if series is None or series.generation != gen or joins < series.joins_total:
            fresh = RoomSeries(room_id, gen, 0, 0, 0, state, rate, 0)
            if series is not None and series.generation == gen:
                # counters went back (a room restored from an older state): its waits read on from the
                # cursor, none read twice
                fresh.tiers, fresh.marks = series.tiers, series.marks
                fresh.wait_ord, fresh.wait_ms = series.wait_ord, series.wait_ms
            elif series is not None:  # a new generation keeps the room's history, restarts its counters
                fresh.tiers, fresh.marks = series.tiers, series.marks
                self._mark(fresh, now_ms, "room", f"room re-created (generation {gen})")
            elif self._first and not self._born_watched(s):
                # counters and waits from before this process was watching are not ours to put in one sample
                fresh.joins_total, fresh.passes_total, fresh.exits, fresh.waiting = joins, passes, exits, waiting
                if minted is not None and minted.gen == gen:
                    fresh.wait_ord, fresh.wait_ms = minted.last, minted.total_ms
                else:
                    fresh.wait_ord = passes
            series = self.rooms[room_id] = fresh
        d_joins = max(0, joins - series.joins_total)
        d_passes = max(0, passes - series.passes_total)
        d_exits = max(0, exits - series.exits)
        waits: list[float] = []
        measured: list[tuple[int, float]] = []
        lump: WaitLump | None = None
        if minted is not None and minted.gen == gen and minted.last < series.wait_ord:
            series.wait_ord, series.wait_ms = minted.last, minted.total_ms  # passes went back: on from here
        if minted is not None and minted.gen == gen and minted.last > series.wait_ord:
            read_ms = 0
            for k, ms in minted.numbered():
                if k > series.wait_ord:
                    waits.append(ms / 1000.0)
                    measured.append((k, waits[-1]))
                    read_ms += ms
            missed = minted.last - series.wait_ord - len(measured)
            if missed > 0:  # passes the room no longer kept the waits of: counted and summed all the same
                missed_ms = max(0, minted.total_ms - series.wait_ms - read_ms)
                lump = WaitLump(series.wait_ord + 1, series.wait_ord + missed, missed, missed_ms / 1000.0)
                self.last_lumps[room_id] = lump
            series.wait_ord, series.wait_ms = minted.last, minted.total_ms
        if measured:
            self.last_waits[room_id] = measured
        purged = d_exits - min(d_passes, d_exits)
        if state != series.state:
            kind = STATE_MARKS.get(state, state)
            self._mark(series, now_ms, kind, f"state {series.state} → {state}")
        if rate != series.rate:
            self._mark(series, now_ms, "rate", f"rate {series.rate} → {rate}/min")
        if purged > 0 and waiting < series.waiting:
            self._mark(series, now_ms, "purge", f"{purged} left the line unserved")
        for tier in series.tiers.values():
            b = tier.bucket(now_ms)
            b.depth = waiting
            b.depth_max = max(b.depth_max, waiting)
            b.depth_sum += waiting
            b.samples += 1
            b.joins += d_joins
            b.passes += d_passes
            b.rate, b.state = rate, state
            b.active_max = max(b.active_max, int(s.get("activeSessions") or 0))
            b.passed_last_min = int(s.get("passedLastMinute") or 0)
            b.joins_last_min = int(s.get("joinsLastMinute") or 0)
            for w in waits:
                b.add_wait(self._rng, w)
            if lump is not None:
                b.add_lump(lump)
        series.joins_total, series.passes_total, series.exits = joins, passes, exits
        series.state, series.rate, series.waiting = state, rate, waiting

    def _born_watched(self, s: dict[str, Any]) -> bool:
        """Whether the room's generation began after this process began watching: then its joins and passes
        so far were all made since, and its waits are read at this first sample as any sample's are."""
        created = int(s.get("createdAt") or 0)
        return self.watching_since_ms is not None and created > 0 and created >= self.watching_since_ms

    def _mark(self, series: RoomSeries, now_ms: int, kind: str, note: str) -> None:
        t = now_ms // 1000
        series.marks.append({"t": t, "kind": kind, "note": note})
        if self.sink is not None:
            self.sink.mark(series.room_id, t, kind, note)

    def block(self, room_id: str, now_ms: int) -> None:
        """A join refused by bot protection: counted into the room's mark for this minute."""
        now_s = now_ms // 1000
        minute = now_s - now_s % BLOCK_SEC
        series = self.rooms.get(room_id)
        if series is not None:
            mark = series.block_mark
            if mark is None or mark["t"] != minute:
                mark = series.block_mark = {"t": minute, "kind": "block", "note": block_note(0), "count": 0}
                series.marks.append(mark)
            mark["count"] += 1
            mark["note"] = block_note(mark["count"])
        if self.sink is not None:
            self.sink.block(room_id, minute)

    def rows(self, room_id: str, tier: str, now_ms: int | None = None) -> list[dict[str, Any]] | None:
        """Closed buckets oldest first, then (given now_ms) the open one, its rates over the time it has run."""
        series = self.rooms.get(room_id)
        if series is None:
            return None
        t = series.tiers[tier]
        out = [b.row(t.seconds) for b in t.closed]
        if now_ms is not None and t.open is not None:
            elapsed = max(SAMPLE_SEC, min(t.seconds, (now_ms - t.open.start_ms) / 1000))
            out.append({**t.open.row(elapsed), "partial": True})
        return out

    def marks(self, room_id: str, since_s: int) -> list[dict[str, Any]]:
        series = self.rooms.get(room_id)
        if series is None:
            return []
        return [m for m in series.marks if m["t"] >= since_s]
