"""The hourly history's writer, :class:`HourlyHistory` (``Context.history``): samples folded into the open hour.

Every sample of the series recorder (``timeline/series.py``, every ``SAMPLE_SEC``) is handed to
:class:`HourlyHistory`, which folds it into the open hour's row of each room (``rows.fold``) and writes the
rows to its :class:`~queue_manager.sidestores.history.base.Warehouse` (``memory.MemoryWarehouse``, in this
process; with ``SIDESTORE=pg`` the PostgreSQL table ``history_hourly``, ``pg.py``). On ``STORE=valkey``
only the leader writes, from the room summaries every instance reads from Valkey (already the fleet's
counts, so joins on two instances are counted once). The reports read the rows back through
:meth:`HourlyHistory.report` (``report.build_report``).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from queue_manager.background import stop_if_cancelled
from queue_manager.sidestores.history.base import HistoryUnavailable, RefusalCounts, Warehouse
from queue_manager.sidestores.history.report import bucket_start, build_report
from queue_manager.sidestores.history.rows import DAY, GAP_MS, HOUR, HourRow, Reading, fold, hour_of, note_refusals
from queue_manager.sidestores.timeline.series import WaitLump

log = logging.getLogger("queue_manager.history")

PRUNE_EVERY_SEC = 3600.0
HELD_WAITS = 4096  # waits per room an instance holds one by one until it writes (a follower: until it leads,
# this hour); older ones it holds on as a count and a sum (a ``WaitLump``), so none is lost from the count


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
