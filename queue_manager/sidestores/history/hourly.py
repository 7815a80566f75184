"""The hourly history behind ``GET /api/admin/reports``: one row per room per hour, folded from samples.

Every sample of the series recorder (``series.py``, every ``SAMPLE_SEC``) is handed to
:class:`HourlyHistory`, which folds it into the open hour's row of each room and writes the rows to its
:class:`Warehouse` (``MemoryWarehouse`` here, in this process; with ``SIDESTORE=pg`` the PostgreSQL table
``history_hourly``, ``sidestores/history/pg.py``). On ``STORE=valkey`` only the leader writes, from the room
summaries every instance reads from Valkey (already the fleet's counts, so joins on two instances are
counted once).

A row never depends on who wrote it before:

* joins and passes are counted from the room's cumulative counters against a baseline kept in the row
  (the counters at the start of the hour, or at the first sample of the hour), so any writer computes
  the hour's joins exactly from the row and the current counters; a new generation of the room (deleted
  and created again) moves what was counted into ``done_*`` and starts the baseline at zero;
* every write reads the rows it changes first, under a lock (``Warehouse.update``), and merges into them:
  peaks are maxima, waits go into the bounded reservoir (``RESERVOIR``), coverage is added from the row's
  own ``last_ms``;
* blocked and warned are absolute counts of the hour read from the instances' tallies
  (:class:`RefusalCounts`), taken as a maximum, never added twice.

Coverage: the time between two samples of the fleet counts as covered when it is at most ``GAP_MS``;
a longer gap (the server was not running, or the leader was killed and the lease had to expire) is a
hole. A report judges a row on the hour's length, or the time elapsed so far for the open hour; a
shortfall of at most ``TOLERANCE_SEC`` (one missed sample around the hour's turn) is not a hole. A row
with a hole is ``partial``: its counters are lower bounds and its ``netUnserved`` is null.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from queue_manager.background import stop_if_cancelled
from queue_manager.sidestores.timeline.series import WaitLump, weighted_percentile

log = logging.getLogger("queue_manager.history")

HOUR = 3600
DAY = 86400
RESERVOIR = 256  # waits kept per room and hour: a uniform sample; the percentiles are estimated from it
GAP_MS = 10_000  # two samples at most this far apart cover the time between them
TOLERANCE_SEC = 10  # a row short of its span by at most this much is not partial
PRUNE_EVERY_SEC = 3600.0
HELD_WAITS = 4096  # waits per room an instance holds one by one until it writes (a follower: until it leads,
# this hour); older ones it holds on as a count and a sum (a ``WaitLump``), so none is lost from the count

COLUMNS = (
    "roomId",
    "bucket",
    "start",
    "startIso",
    "joins",
    "passes",
    "netUnserved",
    "peakDepth",
    "avgDepth",
    "peakActive",
    "waitP50Sec",
    "waitP90Sec",
    "waitMaxSec",
    "waitAvgSec",
    "measuredWaits",
    "blocked",
    "warned",
    "samples",
    "partial",
    "coveredSec",
    "missingSec",
)


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

    @property
    def joins(self) -> int:
        return self.done_joins + max(0, self.cur_joins - self.base_joins)

    @property
    def passes(self) -> int:
        return self.done_passes + max(0, self.cur_passes - self.base_passes)

    def state(self) -> dict[str, int]:
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
    elif reading.joins_total < row.cur_joins or reading.passes_total < row.cur_passes:
        row.done_joins, row.done_passes = row.joins, row.passes  # counters went back: count on from here
        row.base_joins, row.base_passes = reading.joins_total, reading.passes_total
        row.wait_ord = 0
    row.cur_joins, row.cur_passes = reading.joins_total, reading.passes_total
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


# ------------------------------------------------------------------------------------------ reports


def iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _r1(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _covered(row: HourRow, now_ms: int) -> int:
    """The row's covered seconds, a shortfall within the tolerance counted as covered."""
    span = max(0, min(HOUR, now_ms // 1000 - row.hour))
    covered = min(span, row.covered_ms // 1000)
    return span if span - covered <= TOLERANCE_SEC else covered


def report(
    room: str,
    bucket: str,
    start: int,
    rows: list[HourRow],
    now_ms: int,
    *,
    since: int | None = None,
    until: int | None = None,
) -> dict[str, Any]:
    """One report row: the hours ``rows`` of ``room`` merged into the bucket starting at ``start`` (s).

    The bucket's span runs to its end, or to now for the open one, or to ``until`` (the end of the room's
    last stored hour: a room deleted since) if earlier, and from its start, or from ``since`` (the start of
    the room's first stored hour) if later: hours within it the room had no row in are a hole.
    Percentiles merge the hours' reservoirs, each kept wait weighing what its hour measured per kept wait."""
    size = HOUR if bucket == "hour" else DAY
    begin = max(start, since) if since is not None else start
    end = min(start + size, now_ms // 1000, until if until is not None else start + size)
    span = max(0, end - begin)
    covered = min(span, sum(_covered(r, now_ms) for r in rows))
    missing = span - covered
    partial = missing > 0
    joins = sum(r.joins for r in rows)
    passes = sum(r.passes for r in rows)
    samples = sum(r.samples for r in rows)
    measured = sum(r.measured for r in rows)
    pairs = [(w, r.measured / len(r.reservoir)) for r in rows if r.reservoir for w in r.reservoir]
    return {
        "roomId": room,
        "bucket": bucket,
        "start": start * 1000,
        "startIso": iso(start * 1000),
        "joins": joins,
        "passes": passes,
        "netUnserved": None if partial else joins - passes,
        "peakDepth": max((r.peak_depth for r in rows), default=0),
        "avgDepth": round(sum(r.depth_sum for r in rows) / samples, 2) if samples else 0,
        "peakActive": max((r.peak_active for r in rows), default=0),
        "waitP50Sec": _r1(weighted_percentile(pairs, 0.5)),
        "waitP90Sec": _r1(weighted_percentile(pairs, 0.9)),
        "waitMaxSec": _r1(max(r.wait_max for r in rows if r.measured)) if measured else None,
        "waitAvgSec": round(sum(r.wait_sum for r in rows) / measured, 1) if measured else None,
        "measuredWaits": measured,
        "blocked": sum(r.blocked for r in rows),
        "warned": sum(r.warned for r in rows),
        "samples": samples,
        "partial": partial,
        "coveredSec": covered,
        "missingSec": missing,
    }


def bucket_start(s: int, bucket: str) -> int:
    size = HOUR if bucket == "hour" else DAY
    return s - s % size


def build_report(
    rows: Iterable[HourRow],
    bucket: str,
    from_s: int,
    to_s: int,
    now_ms: int,
    first_hours: Mapping[str, int],
) -> list[dict[str, Any]]:
    """Report rows for the buckets starting in [from_s floored to the bucket, to_s), room by room, oldest
    first. Within a room's recorded life (from ``first_hours[room]``) an hour nobody recorded is reported
    as a hole (hour buckets) or counted missing (day buckets)."""
    by_room: dict[str, dict[int, HourRow]] = {}
    for row in rows:
        by_room.setdefault(row.room, {})[row.hour] = row
    out: list[dict[str, Any]] = []
    size = HOUR if bucket == "hour" else DAY
    lo = bucket_start(from_s, bucket)
    now_s = now_ms // 1000
    for room in sorted(by_room):
        hours = by_room[room]
        first = first_hours.get(room, min(hours))
        last = max(hours)
        groups: dict[int, list[HourRow]] = {}
        for hour in range(max(lo, first - first % HOUR), min(last, now_s, to_s - 1) + 1, HOUR):
            start = bucket_start(hour, bucket)
            if start < lo or start >= to_s:
                continue
            group = groups.setdefault(start, [])
            if hour in hours:
                group.append(hours[hour])
        for start in sorted(groups):
            group = groups[start]
            if bucket == "hour" and not group:
                # an hour inside the room's recorded life with no row: nobody was sampling
                out.append(report(room, bucket, start, [], min(now_ms, (start + size) * 1000), since=None))
                continue
            out.append(report(room, bucket, start, group, now_ms, since=first, until=last + HOUR))
    return out


# ------------------------------------------------------------------------------------------ storage


class Warehouse(Protocol):
    """Where the rows are kept: this process (``MemoryWarehouse``) or PostgreSQL (``sidestores/history/pg.py``)."""

    kind: str

    async def check(self) -> None:
        """Read the stored rows once (at boot): raises when they cannot be read."""

    async def update(self, hour: int, rooms: list[str], change: Callable[[dict[str, HourRow]], list[HourRow]]) -> None:
        """Hand ``change`` the stored rows of ``rooms`` for ``hour`` (those that exist), locked against other
        writers, and store what it returns, in one transaction."""

    async def read(self, since: int, until: int, room: str | None) -> tuple[list[HourRow], dict[str, int]]:
        """Rows with ``since <= hour < until`` (epoch s) and each room's first stored hour."""

    async def prune(self, before: int) -> int:
        """Delete the rows of hours before ``before`` (epoch s); returns how many."""


class RefusalCounts(Protocol):
    """Joins refused (``blocked``) or let through with a warning (``warned``) by bot protection, per room
    and hour: this process's (``MemoryRefusals``) or the fleet's (``sidestores/history/valkey_refusals.py``)."""

    def add(self, room: str, hour: int, kind: str) -> None: ...

    async def read(self, hour: int) -> dict[str, tuple[int, int]]: ...

    def start(self) -> None: ...

    async def stop(self) -> None: ...


class MemoryWarehouse:
    """The rows in this process (STORE=memory): the same rows, gone on restart."""

    kind = "memory"

    def __init__(self) -> None:
        self.rows: dict[tuple[str, int], HourRow] = {}
        self._lock = asyncio.Lock()

    async def check(self) -> None:
        return None

    async def update(self, hour: int, rooms: list[str], change: Callable[[dict[str, HourRow]], list[HourRow]]) -> None:
        async with self._lock:
            held = {room: self.rows[(room, hour)] for room in rooms if (room, hour) in self.rows}
            for row in change(held):
                self.rows[(row.room, row.hour)] = row

    async def read(self, since: int, until: int, room: str | None) -> tuple[list[HourRow], dict[str, int]]:
        first: dict[str, int] = {}
        for r, h in self.rows:
            first[r] = min(first.get(r, h), h)
        rows = [r for (name, h), r in self.rows.items() if since <= h < until and (room is None or name == room)]
        return rows, first

    async def prune(self, before: int) -> int:
        old = [k for k in self.rows if k[1] < before]
        for k in old:
            del self.rows[k]
        return len(old)


class MemoryRefusals:
    """Bot protection's refusals per room and hour, counted in this process."""

    def __init__(self) -> None:
        self.counts: dict[int, dict[str, list[int]]] = {}

    def add(self, room: str, hour: int, kind: str) -> None:
        hours = self.counts.setdefault(hour, {})
        pair = hours.setdefault(room, [0, 0])
        pair[0 if kind == "blocked" else 1] += 1
        for old in [h for h in self.counts if h < hour - 2 * HOUR]:
            del self.counts[old]

    async def read(self, hour: int) -> dict[str, tuple[int, int]]:
        return {room: (b, w) for room, (b, w) in self.counts.get(hour, {}).items()}

    def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None


# ------------------------------------------------------------------------------------------ the writer


class WarehouseRefused(Exception):
    """The warehouse answered, and the hourly history cannot be read: starting would overwrite it."""


class HistoryUnavailable(Exception):
    """The stored history could not be read (with STORE=valkey: PostgreSQL did not answer)."""


def _bound_held(reading: Reading) -> None:
    """At most ``HELD_WAITS`` waits held one by one: the older ones, and every lump older than the waits kept,
    become one lump (their count and sum), so a follower holding a long hour still counts each wait."""
    if len(reading.waits) <= HELD_WAITS:
        return
    reading.waits.sort()
    dropped, reading.waits[:] = reading.waits[:-HELD_WAITS], reading.waits[-HELD_WAITS:]
    oldest_kept = reading.waits[0][0]
    older = [lump for lump in reading.lumps if lump.last < oldest_kept]
    reading.lumps[:] = [lump for lump in reading.lumps if lump.last >= oldest_kept]
    first = min([k for k, _ in dropped] + [lump.first for lump in older])
    last = max([k for k, _ in dropped] + [lump.last for lump in older])
    count = len(dropped) + sum(lump.count for lump in older)
    seconds = sum(w for _, w in dropped) + sum(lump.seconds for lump in older)
    reading.lumps.insert(0, WaitLump(first, last, count, seconds))


class HourlyHistory:
    """Folds the recorder's samples into the open hour's rows and answers the reports.

    ``leads`` says whether this instance writes (on STORE=valkey the leader only; otherwise always). The
    ticker hands over each sample with :meth:`offer` and never waits for the write: a Job of its own
    writes the latest sample, with every wait measured since the last write, about every sample."""

    def __init__(
        self,
        warehouse: Warehouse,
        refusals: RefusalCounts,
        wall_ms: Callable[[], int],
        *,
        retain_days: int,
        leads: Callable[[], bool] = lambda: True,
        counters_from_boot: bool = False,
        seed: int | None = None,
    ) -> None:
        self.warehouse = warehouse
        self.refusals = refusals
        self.wall_ms = wall_ms
        self.retain_days = max(1, retain_days)
        self.leads = leads
        # STORE=memory: every counter began in this process, so a room first seen counted from zero
        self.counters_from_boot = counters_from_boot
        self._rng = random.Random(seed)
        self._pending: dict[str, Reading] = {}  # room -> its latest reading, waits accumulated
        self._pending_ms = 0
        self._previous: dict[str, Reading] = {}  # room -> its reading at the last write (baselines)
        self._previous_ms = 0
        self._since_ms: int | None = None  # when this writer's unbroken run of samples began
        self._last_write_ms = 0  # the latest sample handled (written, or passed over by a follower)
        self._pruned_at: float | None = None
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self.written = 0
        self.write_errors = 0
        self.pruned = 0
        self.last_error: str | None = None

    # ---------------------------------------------------------------------------- inputs

    def note(self, room: str, kind: str) -> None:
        """A join bot protection refused (``blocked``) or let through with a warning (``warned``)."""
        self.refusals.add(room, hour_of(self.wall_ms()), kind)

    def offer(
        self,
        summaries: list[dict[str, Any]],
        waits: Mapping[str, list[tuple[int, float]]],
        now_ms: int,
        lumps: Mapping[str, WaitLump] | None = None,
    ) -> None:
        """One sample of every room (the recorder's ``last_waits`` and ``last_lumps``): kept for the next
        write, waits added up (only of the room's current generation and hour; one by one at most
        ``HELD_WAITS`` a room, the newest, the older ones as a count and a sum)."""
        fresh: dict[str, Reading] = {}
        for summary in summaries:
            room = str(summary["id"])
            held = self._pending.get(room)
            lump = None if lumps is None else lumps.get(room)
            reading = Reading.of(summary, waits.get(room, ()), () if lump is None else (lump,))
            if held is not None and held.gen == reading.gen and hour_of(self._pending_ms) == hour_of(now_ms):
                reading.waits[:0] = held.waits  # else a write missed at the hour's turn: waits stay approximate
                reading.lumps[:0] = held.lumps
                _bound_held(reading)
            fresh[room] = reading
        self._pending, self._pending_ms = fresh, now_ms
        self._wake.set()

    # ---------------------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Read the stored rows once (raises when they cannot be read), then start writing."""
        await self.warehouse.check()
        await self.start_degraded()

    async def start_degraded(self) -> None:
        """Start writing without the boot's read (the warehouse did not answer): every write reads first."""
        self.refusals.start()
        self._task = asyncio.create_task(self._run(), name="qm-history")

    async def stop(self) -> None:
        """A clean stop: the last sample and the refusals counted so far folded into the open hour."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
            self._task = None
        await self.refusals.stop()
        try:
            await self.write()
        except Exception as exc:
            log.warning("history: the open hour could not be saved at stop: %s", type(exc).__name__)

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self.write()
                await self._maybe_prune()
            except Exception as exc:  # kept: the next sample carries the counters on, the waits stay held
                stop_if_cancelled()  # the stop's cancel, turned into an error on the way
                self.write_errors += 1
                self.last_error = f"{type(exc).__name__}: {exc}"[:200]
                log.warning("history: the open hour not saved yet: %s", type(exc).__name__)
                await asyncio.sleep(1.0)
            stop_if_cancelled()  # a write under way took the stop's cancel for its own

    async def fold_open_hour(self) -> list[dict[str, Any]]:
        """Write the latest sample into the open hour now (the leader, or STORE=memory), and return the open
        hour's report rows as the warehouse then holds them."""
        await self.write()
        now = self.wall_ms()
        hour = hour_of(now)
        return await self.report("hour", hour, hour + HOUR, None)

    # ---------------------------------------------------------------------------- the write

    async def write(self) -> int:
        """Fold the held sample into the open hour (only while this instance leads); returns rows written."""
        async with self._lock:
            pending, now_ms = self._pending, self._pending_ms
            if now_ms <= self._last_write_ms:
                return 0
            if not self.leads():
                # the waits stay held: a follower that takes the lead folds those the row does not hold yet
                # (the fleet's leader may have been killed before it wrote them)
                self._since_ms = None
                self._previous = {room: replace(r, waits=[], lumps=[]) for room, r in pending.items()}
                self._previous_ms = now_ms
                self._last_write_ms = now_ms
                return 0
            if self._since_ms is None or now_ms - self._last_write_ms > GAP_MS:
                self._since_ms = now_ms
            hour = hour_of(now_ms)
            counts = await self.refusals.read(hour)
            since_ms = self._since_ms
            watching = self.counters_from_boot or (bool(self._previous_ms) and now_ms - self._previous_ms <= GAP_MS)
            previous = dict(self._previous) if watching else {}
            if watching:  # a room the last sample did not list is new since: its counters began at zero
                for room, reading in pending.items():
                    if room not in previous:
                        previous[room] = Reading(room, reading.gen, 0, 0, 0, 0)

            def change(held: dict[str, HourRow]) -> list[HourRow]:
                out = []
                for room, reading in pending.items():
                    row = fold(
                        held.get(room),
                        reading,
                        now_ms,
                        covered_since_ms=since_ms,
                        previous=previous.get(room),
                        rng=self._rng,
                    )
                    b, w = counts.get(room, (0, 0))
                    note_refusals(row, b, w)
                    out.append(row)
                return out

            if pending:
                self._pending = {}  # samples offered during the write start afresh
                try:
                    await self.warehouse.update(hour, sorted(pending), change)
                except BaseException:
                    self._hold_again(pending)
                    raise
            if now_ms // 1000 - hour < 120 and hour - HOUR >= 0:  # the last refusals of the hour just closed
                await self._close_refusals(hour - HOUR)
            self._previous = {room: replace(r, waits=[], lumps=[]) for room, r in pending.items()}
            self._previous_ms = now_ms
            self._last_write_ms = now_ms
            self.written += len(pending)
            return len(pending)

    def _hold_again(self, pending: dict[str, Reading]) -> None:
        """A write that failed: its waits are held again, under any newer reading of the same room."""
        for room, reading in pending.items():
            newer = self._pending.get(room)
            if newer is None:
                self._pending[room] = reading
            elif (reading.waits or reading.lumps) and newer.gen == reading.gen:
                newer.waits[:0] = reading.waits
                newer.lumps[:0] = reading.lumps
                _bound_held(newer)

    async def _close_refusals(self, hour: int) -> None:
        counts = await self.refusals.read(hour)
        if not counts:
            return

        def change(held: dict[str, HourRow]) -> list[HourRow]:
            for room, row in held.items():
                b, w = counts.get(room, (0, 0))
                note_refusals(row, b, w)
            return list(held.values())

        await self.warehouse.update(hour, sorted(counts), change)

    async def _maybe_prune(self) -> None:
        loop = asyncio.get_running_loop()
        if self._pruned_at is not None and loop.time() - self._pruned_at < PRUNE_EVERY_SEC:
            return
        self._pruned_at = loop.time()
        await self.prune()

    async def prune(self) -> int:
        """Delete the rows older than HISTORY_RETAIN_DAYS (the writer does it at its first write and hourly)."""
        before = self.wall_ms() // 1000 - self.retain_days * DAY
        deleted = await self.warehouse.prune(before - before % HOUR)
        self.pruned += deleted
        return deleted

    # ---------------------------------------------------------------------------- the read

    async def report(self, bucket: str, from_s: int, to_s: int, room: str | None) -> list[dict[str, Any]]:
        """The report rows of buckets starting in [from_s, to_s) (raises when the rows cannot be read)."""
        lo = bucket_start(from_s, bucket)
        now_ms = self.wall_ms()
        keep_from = now_ms // 1000 - self.retain_days * DAY
        try:
            rows, first = await self.warehouse.read(max(lo, keep_from - keep_from % HOUR), to_s, room)
        except Exception as exc:
            raise HistoryUnavailable(str(exc)) from exc
        return build_report(rows, bucket, from_s, to_s, now_ms, first)

    def stats(self) -> dict[str, Any]:
        return {
            "store": self.warehouse.kind,
            "written": self.written,
            "writeErrors": self.write_errors,
            "pruned": self.pruned,
            "lastError": self.last_error,
        }
