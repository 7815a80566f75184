"""The chart's timeline in PostgreSQL: the marks of every room, kept 24 h and read by every instance.

With ``SIDESTORE=pg`` each instance's series recorder hands the marks it makes (state flips, rate moves,
purges, a room re-created, protection blocks) to :class:`TimelineNotes`, which keeps them in memory and
writes them to ``timeline_notes`` about a second later, in one transaction (one Job, ``FLUSH_SEC``), and
once more on a clean stop. ``GET /api/admin/series/<room>`` reads them back through :meth:`read`, so the
marks survive a restart and every instance's console shows the same ones.

One row per mark. Every instance samples the same rooms, so every instance sees the same state flip, but
each at its own sample instant (up to one sampling interval apart): a mark is written only when no row of
the same room, kind and note lies within ``SAME_MARK_SEC`` of it. The check and the insert run under one
advisory lock per schema, so two instances flushing at once still write it once. The unique index on
(room, at, kind, note) makes a repeated flush harmless too.

A ``block`` mark stands for every join refused by bot protection in one room in one minute: its ``at``
is the minute, its ``count`` the refusals, summed over the instances (each adds what it refused since its
last flush), so an attack writes at most one row per room per minute.

Rows older than ``KEEP_SEC`` are deleted by the same Job, once every ``PRUNE_SEC``; a read never returns
one in the meantime.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from queue_manager.background import Job, stop_if_cancelled
from queue_manager.store.base import StoreUnavailable

if TYPE_CHECKING:
    from queue_manager.clock import Clock
    from queue_manager.journal.database import Database

log = logging.getLogger("queue_manager.timeline")

KEEP_SEC = 24 * 3600
FLUSH_SEC = 1.0
PRUNE_SEC = 60.0
SAME_MARK_SEC = 5  # two instances' sightings of one change are at most one sample (2 s) apart, plus lag
PENDING_MAX = 5000  # marks held while PostgreSQL is unreachable; the oldest are dropped beyond it
READ_MAX = 2000
READ_BACKOFF_SEC = 10.0  # after a failed read, the chart uses this process's marks for this long at once
BLOCK_KIND = "block"
BLOCK_NOTE = "refused by bot protection"  # the stored note of every block row; the count says how many

Mark = tuple[str, int, str, str]  # room, t (s), kind, note


class TimelineNotes:
    """Marks waiting to be written, the writer Job, and the read the chart's route makes: the shared
    timeline is both the recorder's ``MarkSink`` and the route's ``TimelineView`` (``base.py``)."""

    def __init__(
        self, db: Database, clock: Clock, *, flush_sec: float = FLUSH_SEC, prune_sec: float = PRUNE_SEC
    ) -> None:
        self.db = db
        self.clock = clock
        self.flush_sec = flush_sec
        self.prune_sec = prune_sec
        self._marks: list[Mark] = []
        self._blocks: dict[tuple[str, int], int] = {}
        self._inflight_marks: list[Mark] = []
        self._inflight_blocks: dict[tuple[str, int], int] = {}
        self._lock = asyncio.Lock()
        self._job = Job("qm-timeline", self._run)
        self._read_failed_at: float | None = None
        self.written = 0
        self.write_errors = 0
        self.dropped = 0
        self.pruned = 0

    # ---------------------------------------------------------------------------- what the recorder calls

    def mark(self, room_id: str, t: int, kind: str, note: str) -> None:
        """A mark the recorder made at ``t`` (s); written with the next flush."""
        self._marks.append((room_id, int(t), kind, note))
        if len(self._marks) > PENDING_MAX:
            over = len(self._marks) - PENDING_MAX
            del self._marks[:over]
            self.dropped += over

    def block(self, room_id: str, minute: int, n: int = 1) -> None:
        """``n`` joins refused by bot protection in ``room_id`` in the minute starting at ``minute`` (s)."""
        key = (room_id, int(minute))
        if key not in self._blocks and len(self._blocks) >= PENDING_MAX:
            self.dropped += 1
            return
        self._blocks[key] = self._blocks.get(key, 0) + n

    def pending(self) -> int:
        return len(self._marks) + len(self._blocks) + len(self._inflight_marks) + len(self._inflight_blocks)

    # ---------------------------------------------------------------------------- the writer

    def start(self) -> None:
        self._job.start()

    async def stop(self) -> None:
        """Stop the Job, then write what is still held (a clean stop keeps every mark)."""
        await self._job.stop()
        try:
            await self.flush()
        except Exception as exc:
            log.warning("timeline: the last marks could not be saved: %s", type(exc).__name__)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        pruned_at = 0.0
        while True:
            await asyncio.sleep(self.flush_sec)
            try:
                await self.flush()
                if loop.time() - pruned_at >= self.prune_sec:
                    await self.prune()
                    pruned_at = loop.time()
            except Exception as exc:  # kept for the next round; PostgreSQL's own health is reported elsewhere
                stop_if_cancelled()
                log.warning("timeline: marks not saved yet: %s", type(exc).__name__)
            stop_if_cancelled()  # a write under way took the stop's cancel for its own

    async def flush(self) -> int:
        """Write every held mark in one transaction; returns how many were handed over. On failure they
        are held again for the next flush."""
        async with self._lock:
            marks, self._marks = self._marks, []
            blocks, self._blocks = self._blocks, {}
            if not marks and not blocks:
                return 0
            self._inflight_marks, self._inflight_blocks = marks, blocks
            try:
                await self._write(marks, blocks)
            except BaseException:
                self.write_errors += 1
                self._marks[:0] = marks
                for key, n in blocks.items():
                    self._blocks[key] = self._blocks.get(key, 0) + n
                raise
            finally:
                self._inflight_marks, self._inflight_blocks = [], {}
            self.written += len(marks) + len(blocks)
            return len(marks) + len(blocks)

    async def _write(self, marks: list[Mark], blocks: dict[tuple[str, int], int]) -> None:
        await self.db.ensure_migrated()
        s = self.db.sql_schema
        async with self.db.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", f"qm.timeline:{self.db.schema}")
            if marks:
                await conn.executemany(
                    f"""INSERT INTO {s}.timeline_notes (room, at, kind, note)
                        SELECT $1, to_timestamp($2::float8), $3, $4
                        WHERE NOT EXISTS (
                            SELECT 1 FROM {s}.timeline_notes
                            WHERE room = $1 AND kind = $3 AND note = $4
                              AND at BETWEEN to_timestamp($2::float8 - $5) AND to_timestamp($2::float8 + $5))
                        ON CONFLICT (room, at, kind, note) DO NOTHING""",
                    [(room, float(t), kind, note, float(SAME_MARK_SEC)) for room, t, kind, note in marks],
                )
            if blocks:
                await conn.executemany(
                    f"""INSERT INTO {s}.timeline_notes AS n (room, at, kind, note, count)
                        VALUES ($1, to_timestamp($2::float8), '{BLOCK_KIND}', '{BLOCK_NOTE}', $3)
                        ON CONFLICT (room, at, kind, note) DO UPDATE SET count = n.count + EXCLUDED.count""",
                    [(room, float(minute), n) for (room, minute), n in blocks.items()],
                )

    async def prune(self) -> int:
        """Delete the rows older than ``KEEP_SEC``; returns how many."""
        await self.db.ensure_migrated()
        cutoff = self.clock.wall_ms() / 1000 - KEEP_SEC
        async with self.db.acquire() as conn:
            status = await conn.execute(
                f"DELETE FROM {self.db.sql_schema}.timeline_notes WHERE at < to_timestamp($1::float8)", cutoff
            )
        deleted = int(str(status).rsplit(" ", 1)[-1]) if str(status).startswith("DELETE") else 0
        self.pruned += deleted
        return deleted

    # ---------------------------------------------------------------------------- the read

    async def read(self, room_id: str, since_s: int) -> list[dict[str, Any]]:
        """The room's marks since ``since_s`` (never older than ``KEEP_SEC``), oldest first: the rows every
        instance wrote, plus this instance's not written yet. A block mark carries its ``count``.

        Raises when PostgreSQL cannot be read, and at once for ``READ_BACKOFF_SEC`` after such a failure, so
        an unreachable database does not hold every chart request up to the pool's timeout."""
        failed_at = self._read_failed_at
        if failed_at is not None and self.clock.mono() - failed_at < READ_BACKOFF_SEC:
            raise StoreUnavailable("the timeline could not be read a moment ago")
        try:
            out = await self._read(room_id, since_s)
        except Exception:
            self._read_failed_at = self.clock.mono()
            raise
        self._read_failed_at = None
        return out

    async def _read(self, room_id: str, since_s: int) -> list[dict[str, Any]]:
        since = max(int(since_s), self.clock.wall_ms() // 1000 - KEEP_SEC)
        # taken before the query: a flush landing during it shows at worst twice, and is folded below
        held = [m for m in (*self._inflight_marks, *self._marks) if m[0] == room_id and m[1] >= since]
        held_blocks: dict[int, int] = {}
        for source in (self._inflight_blocks, self._blocks):
            for (room, minute), n in source.items():
                if room == room_id and minute >= since - 60:
                    held_blocks[minute] = held_blocks.get(minute, 0) + n
        await self.db.ensure_migrated()
        async with self.db.acquire() as conn:
            rows = await conn.fetch(
                f"""SELECT extract(epoch FROM at)::bigint AS t, kind, note, count
                    FROM {self.db.sql_schema}.timeline_notes
                    WHERE room = $1 AND at >= to_timestamp($2::float8)
                    ORDER BY at, id LIMIT {READ_MAX}""",
                room_id,
                float(since - 60),  # a block mark's minute can start before since
            )
        out: list[dict[str, Any]] = []
        blocks: dict[int, dict[str, Any]] = {}
        for row in rows:
            t, kind = int(row["t"]), str(row["kind"])
            if kind == BLOCK_KIND:
                mark = {"t": t, "kind": kind, "note": BLOCK_NOTE, "count": int(row["count"])}
                blocks[t] = mark
            elif t >= since:
                mark = {"t": t, "kind": kind, "note": str(row["note"])}
            else:
                continue
            out.append(mark)
        for _, t, kind, note in held:
            if not any(m["kind"] == kind and m["note"] == note and abs(m["t"] - t) <= SAME_MARK_SEC for m in out):
                out.append({"t": t, "kind": kind, "note": note})
        for minute, n in held_blocks.items():
            if minute in blocks:
                blocks[minute]["count"] += n
            else:
                out.append({"t": minute, "kind": BLOCK_KIND, "note": BLOCK_NOTE, "count": n})
        out = [m for m in out if m["kind"] != BLOCK_KIND or m["t"] >= since - 60]
        out.sort(key=lambda m: m["t"])
        return out

    def stats(self) -> dict[str, int]:
        return {
            "pending": self.pending(),
            "written": self.written,
            "writeErrors": self.write_errors,
            "dropped": self.dropped,
            "pruned": self.pruned,
        }
