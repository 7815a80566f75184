"""The hourly history's rows: one room's hour as stored, and the fold of a sample into it.

A row never depends on who wrote it before:

* joins and passes are counted from the room's cumulative counters against a baseline kept in the row
  (the counters at the start of the hour, or at the first sample of the hour), so any writer computes
  the hour's joins exactly from the row and the current counters; a new generation of the room (deleted
  and created again) moves what was counted into ``done_*`` and starts the baseline at zero;
* every write reads the rows it changes first, under a lock (``Warehouse.update``, ``base.py``), and merges
  into them: peaks are maxima, waits go into the bounded reservoir (``RESERVOIR``), coverage is added from
  the row's own ``last_ms``;
* the room's other cumulative counters (``TALLIES``: full-line refusals, the sessions the site ended, the
  entry's invitations and codes accepted, issued and refused) are
  counted the same way, each with its own baseline, kept in the row's state;
* blocked and warned are absolute counts of the hour read from the instances' tallies
  (``RefusalCounts``), taken as a maximum, never added twice.

Coverage: the time between two samples of the fleet counts as covered when it is at most ``GAP_MS``;
a longer gap (the server was not running, or the leader was killed and the lease had to expire) is a
hole.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from queue_manager.sidestores.timeline.series import WaitLump

HOUR = 3600
DAY = 86400
RESERVOIR = 256  # waits kept per room and hour: a uniform sample; the percentiles are estimated from it
GAP_MS = 10_000  # two samples at most this far apart cover the time between them
TOLERANCE_SEC = 10  # a row short of its span by at most this much is not partial
#: the room's cumulative counters, besides joins and passes, an hour counts: each is a report column and a
#: field of the room's summary by the same name
TALLIES = (
    "refusedFull",
    "sessionsRevoked",
    "tokensAccepted",
    "tokensRefused",
    "codesIssued",
    "codesRedeemed",
    "codesRefused",
)


@dataclass(slots=True)
class Tally:
    """One cumulative counter within an hour: where its counting began, its latest reading, and what earlier
    generations of the room counted within the hour."""

    base: int = 0
    cur: int = 0
    done: int = 0

    @property
    def value(self) -> int:
        return self.done + max(0, self.cur - self.base)

    def restart(self, base: int) -> None:
        """The counter started over (a new generation) or went back: what was counted is kept, counting goes on
        from ``base``."""
        self.done, self.base, self.cur = self.value, base, base


@dataclass(slots=True)
class HourRow:
    """One room's hour as stored: the counters' baseline and everything the report is computed from."""

    room: str
    hour: int  # the hour's start, epoch seconds
    gen: int = 0
    base_joins: int = 0  # the room's cumulative counters where this hour's counting of ``gen`` began
    base_passes: int = 0
    cur_joins: int = 0  # ... and at the row's latest sample
    cur_passes: int = 0
    done_joins: int = 0  # counted in earlier generations of the room within this hour
    done_passes: int = 0
    peak_depth: int = 0
    depth_sum: float = 0.0
    samples: int = 0
    peak_active: int = 0
    reservoir: list[float] = field(default_factory=list)
    measured: int = 0
    wait_sum: float = 0.0
    wait_max: float = 0.0
    blocked: int = 0
    warned: int = 0
    covered_ms: int = 0
    last_ms: int = 0  # when the fleet last sampled this row (epoch ms)
    wait_ord: int = 0  # the highest pass (k-th of generation ``gen``) whose wait is folded in: none twice
    tallies: dict[str, Tally] = field(default_factory=dict)

    @property
    def joins(self) -> int:
        return self.done_joins + max(0, self.cur_joins - self.base_joins)

    @property
    def passes(self) -> int:
        return self.done_passes + max(0, self.cur_passes - self.base_passes)

    def tally(self, name: str) -> int:
        """The hour's count of the room counter ``name`` (one of ``TALLIES``)."""
        held = self.tallies.get(name)
        return held.value if held is not None else 0

    def counted(self) -> dict[str, int]:
        """Every tally's count of the hour, by name."""
        return {name: self.tally(name) for name in TALLIES}

    def state(self) -> dict[str, Any]:
        """The bookkeeping a writer needs that is not a report column (stored as jsonb)."""
        return {
            "gen": self.gen,
            "baseJoins": self.base_joins,
            "basePasses": self.base_passes,
            "curJoins": self.cur_joins,
            "curPasses": self.cur_passes,
            "doneJoins": self.done_joins,
            "donePasses": self.done_passes,
            "coveredMs": self.covered_ms,
            "lastMs": self.last_ms,
            "waitOrd": self.wait_ord,
            "tallies": {name: [t.base, t.cur, t.done] for name, t in self.tallies.items()},
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.gen = int(state.get("gen") or 0)
        self.base_joins = int(state.get("baseJoins") or 0)
        self.base_passes = int(state.get("basePasses") or 0)
        self.cur_joins = int(state.get("curJoins") or 0)
        self.cur_passes = int(state.get("curPasses") or 0)
        self.done_joins = int(state.get("doneJoins") or 0)
        self.done_passes = int(state.get("donePasses") or 0)
        self.covered_ms = int(state.get("coveredMs") or 0)
        self.last_ms = int(state.get("lastMs") or 0)
        self.wait_ord = int(state.get("waitOrd") or 0)
        held = state.get("tallies")
        if isinstance(held, Mapping):
            for name, triple in held.items():
                if name in TALLIES and isinstance(triple, list) and len(triple) == 3:
                    self.tallies[name] = Tally(*(int(v or 0) for v in triple))


@dataclass(slots=True)
class Reading:
    """One room at one sample: its summary's counters and the waits read since the previous write, each as
    (k, seconds): the wait of the generation's k-th pass minted from the line; ``lumps``: waits read as a
    count and a sum only (the recorder fell behind the room's kept waits, or more were held than
    ``HELD_WAITS``)."""

    room: str
    gen: int
    joins_total: int
    passes_total: int
    depth: int
    active: int
    waits: list[tuple[int, float]] = field(default_factory=list)
    created_ms: int = 0  # when this generation of the room began (epoch ms; 0: unknown)
    lumps: list[WaitLump] = field(default_factory=list)
    tallies: dict[str, int] = field(default_factory=dict)  # the room's ``TALLIES`` counters, cumulative

    @classmethod
    def of(
        cls, summary: Mapping[str, Any], waits: Iterable[tuple[int, float]] = (), lumps: Iterable[WaitLump] = ()
    ) -> Reading:
        return cls(
            str(summary["id"]),
            int(summary.get("generation") or 0),
            int(summary.get("joinsTotal") or 0),
            int(summary.get("passesTotal") or 0),
            int(summary.get("waiting") or 0),
            int(summary.get("activeSessions") or 0),
            list(waits),
            int(summary.get("createdAt") or 0),
            list(lumps),
            {name: int(summary.get(name) or 0) for name in TALLIES},
        )


def hour_of(ms: int) -> int:
    s = ms // 1000
    return s - s % HOUR


def add_wait(row: HourRow, rng: random.Random, wait: float) -> None:
    """One measured wait: exact count, sum and maximum; a uniform reservoir of at most ``RESERVOIR``."""
    row.measured += 1
    row.wait_sum += wait
    row.wait_max = max(row.wait_max, wait)
    if len(row.reservoir) < RESERVOIR:
        row.reservoir.append(round(wait, 1))
    else:
        slot = rng.randrange(row.measured)
        if slot < RESERVOIR:
            row.reservoir[slot] = round(wait, 1)


def add_lump(row: HourRow, count: int, seconds: float) -> None:
    """``count`` waits known by their sum only: exact count and sum; no maximum, no reservoir sample."""
    row.measured += count
    row.wait_sum += seconds


def fold(
    row: HourRow | None,
    reading: Reading,
    now_ms: int,
    *,
    covered_since_ms: int,
    previous: Reading | None = None,
    rng: random.Random,
) -> HourRow:
    """``reading`` (taken at ``now_ms``) folded into the room's row of the hour holding ``now_ms``.

    A new row starts its baseline at ``previous`` (the room as last read by this writer, when that was
    this generation) so the joins between the hour's turn and its first sample are not lost, or at zero
    when the room's generation began within this hour (every join it has counted is this hour's, also those
    made before any writer's first sample of it), and covers
    the time since ``covered_since_ms`` (when this writer's unbroken run of samples began), or since the
    hour's start if later. A reading older than the row's latest changes no counter or sum (a writer
    that lost its lead late) but its waits the row does not hold yet: each wait is folded once, by its k."""
    hour = hour_of(now_ms)
    if row is None:
        row = HourRow(reading.room, hour, gen=reading.gen)
        base = previous if previous is not None and previous.gen == reading.gen else reading
        if base.joins_total > reading.joins_total or base.passes_total > reading.passes_total:
            base = reading
        if reading.created_ms >= hour * 1000:  # born this hour: its counters began at zero within it
            base = Reading(reading.room, reading.gen, 0, 0, 0, 0)
        row.base_joins, row.base_passes = base.joins_total, base.passes_total
        row.cur_joins, row.cur_passes = row.base_joins, row.base_passes
        for name in TALLIES:
            start = base.tallies.get(name, 0)
            if start > reading.tallies.get(name, 0):
                start = reading.tallies.get(name, 0)
            row.tallies[name] = Tally(start, start)
        row.covered_ms = max(0, now_ms - max(hour * 1000, covered_since_ms))
        row.last_ms = now_ms
    elif now_ms > row.last_ms:
        gap = now_ms - row.last_ms
        if gap <= GAP_MS:
            row.covered_ms = min(HOUR * 1000, row.covered_ms + gap)
        row.last_ms = now_ms
    else:
        _absolute(row, reading)
        if reading.gen == row.gen:
            _add_waits(row, reading, rng)  # only those the row does not hold: none is counted twice
        return row
    if reading.gen != row.gen:  # the room was deleted and created again: its counters start over
        row.done_joins, row.done_passes = row.joins, row.passes
        row.gen, row.base_joins, row.base_passes, row.wait_ord = reading.gen, 0, 0, 0
        for counter in row.tallies.values():
            counter.restart(0)
    elif reading.joins_total < row.cur_joins or reading.passes_total < row.cur_passes:
        row.done_joins, row.done_passes = row.joins, row.passes  # counters went back: count on from here
        row.base_joins, row.base_passes = reading.joins_total, reading.passes_total
        row.wait_ord = 0
    row.cur_joins, row.cur_passes = reading.joins_total, reading.passes_total
    for name in TALLIES:
        now = reading.tallies.get(name, 0)
        held = row.tallies.get(name)
        if held is None:  # a row written before this counter was kept: it counts from this sample on
            held = row.tallies[name] = Tally(now, now)
        elif now < held.cur:  # this counter went back (a rebuild that lost it): count on from here
            held.restart(now)
        held.cur = now
    row.depth_sum += reading.depth
    row.samples += 1
    _absolute(row, reading)
    _add_waits(row, reading, rng)
    return row


def _add_waits(row: HourRow, reading: Reading, rng: random.Random) -> None:
    """The reading's waits the row does not hold yet (those past ``wait_ord``), in pass order."""
    items: list[tuple[int, int, float]] = [(k, 0, wait) for k, wait in reading.waits]
    items += [(lump.last, lump.count, lump.seconds) for lump in reading.lumps]
    for last, count, value in sorted(items):
        if last <= row.wait_ord:  # a wait this row already holds (folded by an earlier writer) is not added again
            continue
        if count == 0:
            add_wait(row, rng, value)
        else:  # a lump the row holds the first of (another writer read them one by one): the rest, pro rata
            fresh = min(count, last - row.wait_ord)
            add_lump(row, fresh, value if fresh == count else value * fresh / count)
        row.wait_ord = last


def _absolute(row: HourRow, reading: Reading) -> None:
    row.peak_depth = max(row.peak_depth, reading.depth)
    row.peak_active = max(row.peak_active, reading.active)


def note_refusals(row: HourRow, blocked: int, warned: int) -> None:
    """The hour's refusals as the instances' tallies hold them now (absolute: re-reading adds nothing)."""
    row.blocked = max(row.blocked, blocked)
    row.warned = max(row.warned, warned)
