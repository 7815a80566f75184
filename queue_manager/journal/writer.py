"""Group commit: many callers' events, one statement, one transaction.

``commit(events)`` queues the caller's events and waits. One writer job takes the queued callers in
arrival order — whole callers, up to ``max_batch`` events (a caller larger than that goes alone),
after lingering ``linger_ms`` for more to arrive when the queue is not full — and writes them with
ONE statement (``rows.insert_sql``) on its own connection. Every caller in the batch is acknowledged
only after it committed; if it fails, every caller in it gets ``JournalCommitFailed`` (a
``StoreUnavailable``; each caller counts one ``write_errors``), the error and its time are kept for
health, the connection is dropped and the writer goes on with the next batch. While a batch is in
flight new callers queue up, so the batch size follows the load by itself.

While the journal spools (``maintenance.py``: maintenance mode, or failover after a transient failure
with SPOOL_ON_FAILURE) the same writer appends each batch to the disk spool instead. The events of a
failed batch are written again ahead of the next one (the backlog), so a
failed commit leaves no permanent seq gap.

An event whose (room, gen, seq) the journal already holds for a *different* event is not journaled:
its caller is refused, after ``on_conflict`` was told which rooms to fence and rebuild.

Example::

    writer = GroupWriter(db, health, maintenance, instance_id="qm-1", clock=clock)
    writer.start()
    await writer.commit(engine.drain_events())       # returns once committed (or spooled)
    await writer.close()                             # flushes what is queued
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any

from queue_manager.background import Job
from queue_manager.clock import Clock
from queue_manager.engine.events import Event
from queue_manager.journal.database import Database, is_transient
from queue_manager.journal.db_health import JournalHealth
from queue_manager.journal.describe import describe
from queue_manager.journal.rows import Row, event_row, insert_args, insert_sql, row_dict, taken_args, taken_sql
from queue_manager.journal.spool import SpoolFailed
from queue_manager.journal.spooling import ConflictHandler, MaintenanceSpool
from queue_manager.store.base import JournalCommitFailed, StoreUnavailable

log = logging.getLogger("queue_manager.journal")

BACKLOG_MAX = 100_000  # events of failed batches kept for a later batch (beyond: the oldest are dropped)


@dataclass(slots=True)
class _Pending:
    rows: list[Row]
    future: asyncio.Future[None]


class GroupWriter:
    """The journal's write side (see the module docstring)."""

    def __init__(
        self,
        db: Database,
        health: JournalHealth,
        maintenance: MaintenanceSpool,
        *,
        instance_id: str,
        clock: Clock,
        max_batch: int = 512,
        linger_ms: float = 1.5,
        timeout_sec: float = 5.0,
        keep_failed: bool = True,
    ) -> None:
        self.db = db
        self.health = health
        self.maintenance = maintenance
        self.instance_id = instance_id
        self.clock = clock
        self.max_batch = max(1, max_batch)
        self.linger = max(0.0, linger_ms) / 1000
        self.timeout = timeout_sec
        # The events of a failed batch are written again ahead of the next batch (their callers got
        # StoreUnavailable all the same), so a failed commit leaves no permanent seq gap: the
        # compensation the store journals afterwards (join.revoke …) then follows its original.
        self.keep_failed = keep_failed
        self.backlog: list[Row] = []
        self.backlog_dropped = 0
        self._s = db.sql_schema
        self._sql = insert_sql(self._s)
        self.conn: Any = None  # the writer's own connection
        self._queue: deque[_Pending] = deque()
        self.queued = 0  # events queued, not yet taken by the writer
        self._wake = asyncio.Event()
        self._closing = False
        self.job = Job("qm-journal-writer", self._run)
        # group-commit counters
        self.transactions = 0  # batches committed to PostgreSQL
        self.failed_batches = 0
        self.spooled_batches = 0
        self.events_committed = 0  # rows sent in committed batches (duplicates included)
        self.batch_events: Counter[int] = Counter()  # events per committed batch -> batches
        self.batch_callers: Counter[int] = Counter()  # callers per committed batch -> batches
        # rollback guard: events refused because their seq was taken, and who fences such rooms
        self.conflicts = 0
        self.on_conflict: ConflictHandler | None = None

    # ---------------------------------------------------------------------------- life cycle

    def start(self) -> None:
        self.job.start()

    async def close(self) -> None:
        """Refuse new commits, write every queued batch, then end the writer job."""
        self._closing = True
        self._wake.set()
        task = self.job.task
        if task is not None:
            await asyncio.wait({task})  # the writer returns once the queue (and backlog) are written
        await self.job.stop()

    async def drop_conn(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.terminate()

    # ---------------------------------------------------------------------------- commit

    async def commit(self, events: list[Event]) -> None:
        """Return once ``events`` are committed (or spooled in maintenance mode); else JournalCommitFailed."""
        if not events:
            return
        if self._closing or self.job.task is None:
            raise JournalCommitFailed("events journal is closed")
        rows = [event_row(e, self.instance_id) for e in events]
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append(_Pending(rows, future))
        self.queued += len(rows)
        self._wake.set()
        await asyncio.shield(future)

    async def _run(self) -> None:
        idle = True  # the queue ran dry: the next caller may have company on its way
        while True:
            if not self._queue:
                if self._closing:
                    if self.backlog:  # a last try at a clean stop
                        async with self.maintenance.switch:
                            await self._write_backlog()
                    return
                idle = True
                self._wake.clear()
                await self._wake.wait()
                continue
            if idle and self.linger and not self._closing and self.queued < self.max_batch:
                # let concurrent callers join this batch; under load the callers that queued while the
                # previous batch was in flight are the batch, and lingering would only add latency
                await asyncio.sleep(self.linger)
            idle = False
            batch = self._take()
            try:
                await self._write(batch)
            except Exception as err:  # the writer never dies: fail this batch, go on
                self._fail_batch(batch, err)

    def _take(self) -> list[_Pending]:
        batch = [self._queue.popleft()]
        size = len(batch[0].rows)
        while self._queue and size + len(self._queue[0].rows) <= self.max_batch:
            item = self._queue.popleft()
            batch.append(item)
            size += len(item.rows)
        self.queued -= size
        return batch

    async def _write(self, batch: list[_Pending]) -> None:
        rows = [row for item in batch for row in item.rows]
        async with self.maintenance.switch:
            if self.backlog:
                await self._write_backlog()
            if self.maintenance.spooling:
                await self._spool(rows)
            else:
                try:
                    inserted = await self._insert(rows)
                except Exception as err:
                    if not (self.maintenance.spool_on_failure and is_transient(err)):
                        raise
                    # SPOOL_ON_FAILURE: this batch and every later one go to the disk spool, in order,
                    # until PostgreSQL answers again; the callers are acknowledged once it is on disk
                    self.health.failed(err, commit=False)
                    self.maintenance.begin_failover(err)
                    await self._spool(rows)
                else:
                    if inserted < len(rows):  # a seq already taken by another event: a rolled-back room
                        taken = await self._taken(rows)
                        if taken:
                            await self._refuse_taken(batch, taken)
                    self.transactions += 1
                    self.events_committed += len(rows)
                    self.batch_events[len(rows)] += 1
                    self.batch_callers[len(batch)] += 1
                    self.health.landed()
        for item in batch:
            if not item.future.done():
                item.future.set_result(None)

    async def _spool(self, rows: list[Row]) -> None:
        """Append ``rows`` to the disk spool as one batch (fsynced); SpoolFailed when they are not on disk."""
        records = [row_dict(r) for r in rows]
        try:
            await asyncio.to_thread(self.maintenance.spool.append, records, self.clock.wall_ms())
        except OSError as err:
            raise SpoolFailed(f"spool write failed: {describe(err)}") from err
        self.spooled_batches += 1

    async def _write_backlog(self) -> None:
        """Write the failed batches' events again, in a statement of their own: when that fails too
        they wait for the next batch, and the batch itself still goes through."""
        rows = self.backlog
        try:
            if self.maintenance.spooling:
                await self._spool(rows)
            else:
                await self._insert(rows)
        except Exception as err:
            self.health.failed(err, commit=False)
            return
        self.backlog = []
        log.warning("events journal: %d events of failed commits written after all", len(rows))

    def _keep(self, rows: list[Row]) -> None:
        if not self.keep_failed:
            return
        self.backlog.extend(rows)
        excess = len(self.backlog) - BACKLOG_MAX
        if excess > 0:
            del self.backlog[:excess]
            self.backlog_dropped += excess
            log.error(
                "events journal: %d events of failed commits dropped (backlog full): their seqs stay gaps", excess
            )

    async def _insert(self, rows: list[Row]) -> int:
        """Insert ``rows`` (one statement, one transaction); returns how many were new."""
        try:
            if not self.db.migrated:
                await self.db.ensure_migrated()
            if self.conn is None or self.conn.is_closed():
                self.conn = await self.db.connect(f"qm-journal-writer {self.instance_id}")
            row = await self.conn.fetchrow(self._sql, *insert_args(rows), timeout=self.timeout)
        except Exception:
            await self.drop_conn()
            raise
        return len(rows) if row is None else int(row["inserted"])

    async def _taken(self, rows: list[Row]) -> set[tuple[str, int, int]]:
        """The rows whose (room, gen, seq) the journal already holds for a *different* event. Such an
        event was not journaled: the room's Valkey state was rolled back behind the journal (or a
        change from before a rebuild landed after it). Identical rows are a harmless re-send."""
        found = await self.conn.fetch(taken_sql(self._s), *taken_args(rows), timeout=self.timeout)
        return {(r["room"], int(r["gen"]), int(r["seq"])) for r in found}

    async def _refuse_taken(self, batch: list[_Pending], taken: set[tuple[str, int, int]]) -> None:
        """Fail the callers whose events were not journaled (503, never acknowledged), after telling
        ``on_conflict`` which rooms to fence and rebuild (so their compensations find them fenced)."""
        rooms = {(room, gen) for room, gen, _ in taken}
        self.conflicts += len(taken)
        log.error("events journal: %d events of %s collide with journaled ones (rolled back?)", len(taken), rooms)
        if self.on_conflict is not None:
            try:
                await self.on_conflict(rooms)
            except Exception as err:  # the callers still get their 503
                log.warning("events journal: on_conflict: %s", describe(err))
        for item in batch:
            if any((r[0], r[1], r[2]) in taken for r in item.rows) and not item.future.done():
                item.future.set_exception(JournalCommitFailed("the room is being rebuilt from the journal"))
                item.future.exception()

    def _fail_batch(self, batch: list[_Pending], err: BaseException) -> None:
        self.failed_batches += 1
        self._keep([row for item in batch for row in item.rows])
        self.health.failed(err, commit=True, callers=len(batch))
        message = str(err) if isinstance(err, StoreUnavailable) else f"events journal commit failed: {describe(err)}"
        for item in batch:
            if not item.future.done():
                item.future.set_exception(JournalCommitFailed(message))
                # a caller that stopped waiting must not leave "exception never retrieved" behind
                item.future.exception()

    # ---------------------------------------------------------------------------- figures

    @property
    def unjournaled(self) -> int:
        """Events of failed commits not written (kept for a later batch, or dropped)."""
        return len(self.backlog) + self.backlog_dropped

    def batch_stats(self) -> dict[str, Any]:
        """Group-commit figures: batches, events, callers, mean and largest batch."""
        batches = sum(self.batch_events.values())
        events = sum(size * count for size, count in self.batch_events.items())
        callers = sum(size * count for size, count in self.batch_callers.items())
        return {
            "transactions": self.transactions,
            "events": events,
            "callers": callers,
            "meanEvents": round(events / batches, 2) if batches else 0.0,
            "meanCallers": round(callers / batches, 2) if batches else 0.0,
            "maxEvents": max(self.batch_events, default=0),
            "maxCallers": max(self.batch_callers, default=0),
        }
