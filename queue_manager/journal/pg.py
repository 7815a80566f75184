"""The PostgreSQL events journal: group commit, read-back, checkpoints and the maintenance spool.

Group commit. ``commit(events)`` queues the caller's events and waits. One writer task takes the
queued callers in arrival order — whole callers, up to ``max_batch`` events (a caller larger than
that goes alone), after lingering ``linger_ms`` for more to arrive when the queue is not full — and
writes them with ONE statement on its own connection: an ``INSERT … SELECT FROM unnest(arrays)``
into ``events`` (ON CONFLICT DO NOTHING on (room, gen, seq)) and, in the same statement, the
``rooms`` upsert for any room.* event. One statement is one implicit transaction and one round
trip. Every caller in the batch is acknowledged only after it committed; if it fails, every caller
in it gets ``StoreUnavailable`` (each caller counts one ``write_errors``), the error and its time are
kept for health, the connection is dropped and the writer goes on with the next batch. While a
batch is in flight new callers queue up, so the batch size follows the load by itself.

Maintenance mode (``set_maintenance(True)``): the same writer appends each batch to the disk spool
(one fsync per batch) instead; ``set_maintenance(False)`` finalizes the spool file and drains every
spool file into PostgreSQL, oldest first, deduplicated by (room, gen, seq). The flag is mirrored in
``system_state`` (``maintenance_mode``) and read back at start, so a restart keeps spooling.

Example::

    journal = PgJournal("postgresql://qm@db/qm", instance_id="qm-1", spool_dir="/var/lib/qm/spool")
    await journal.start()
    await journal.commit(engine.drain_events())       # returns once committed (or spooled)
    events = await journal.read_events("shop", 3, after_seq=1042)
    await journal.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections import Counter, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import orjson

from queue_manager.clock import Clock, SystemClock
from queue_manager.engine.events import Event
from queue_manager.engine.replay import ReplayDeleted, ReplayFenced, fold
from queue_manager.journal.migrations import check_schema, migrate
from queue_manager.journal.spool import Spool, SpoolCorrupt
from queue_manager.store.base import StoreUnavailable

log = logging.getLogger("queue_manager.journal")

MAINTENANCE_KEY = "maintenance_mode"
POP_MAINTENANCE_KEY = "pop_maintenance_mode"
CHECKPOINT_EVERY = 10_000  # events since a room's last checkpoint that make it "busy"
SNAPSHOTS_KEPT = 2  # checkpoints kept per room generation
BACKLOG_MAX = 100_000  # events of failed batches kept for a later batch (beyond: the oldest are dropped)
DRAIN_CHUNK = 2_000  # events per statement when draining the spool
ROOM_EVENTS = ("room.create", "room.update", "room.schedule", "room.delete")

# (room, gen, seq, type, lv, ts, data JSON text, instance, ident)
Row = tuple[str, int, int, str, int, int, str, str, str | None]


@dataclass(slots=True)
class _Pending:
    rows: list[Row]
    future: asyncio.Future[None]


class _Rollback(Exception):
    pass


class _SpoolFailed(StoreUnavailable):
    """The maintenance spool could not take a batch (says nothing about PostgreSQL)."""


def event_row(event: Event | Mapping[str, Any], instance: str) -> Row:
    """An event as the journal stores it (``Event`` or its ``as_dict()``; a spooled row keeps its instance)."""
    d = event.as_dict() if isinstance(event, Event) else event
    data = d.get("data") or {}
    ident = data.get("ident") if d["type"] in ("join", "prequeue.join") else None
    return (
        str(d["room"]),
        int(d["gen"]),
        int(d["seq"]),
        str(d["type"]),
        int(d.get("lv") or 1),
        int(d["ts"]),
        orjson.dumps(data).decode(),
        str(d.get("instance") or instance),
        None if ident is None else str(ident),
    )


def _row_dict(row: Row) -> dict[str, Any]:
    room, gen, seq, type_, lv, ts, data, instance, _ = row
    return {
        "type": type_,
        "room": room,
        "gen": gen,
        "seq": seq,
        "ts": ts,
        "lv": lv,
        "data": orjson.loads(data),
        "instance": instance,
    }


def _insert_sql(s: str) -> str:
    return f"""
WITH ev AS (
    INSERT INTO {s}.events (room, gen, seq, type, lv, ts, data, instance, ident)
    SELECT u.room, u.gen, u.seq, u.type, u.lv, u.ts, u.data::jsonb, u.instance, u.ident
    FROM unnest($1::text[], $2::int[], $3::bigint[], $4::text[], $5::smallint[], $6::bigint[],
                $7::text[], $8::text[], $9::text[])
         AS u(room, gen, seq, type, lv, ts, data, instance, ident)
    ON CONFLICT (room, gen, seq) DO NOTHING
    RETURNING 1
), rm AS (
    INSERT INTO {s}.rooms AS r (id, gen, seq, config, deleted, updated_at)
    SELECT v.id, v.gen, v.seq, v.config::jsonb, v.deleted, now()
    FROM unnest($10::text[], $11::int[], $12::bigint[], $13::text[], $14::bool[])
         AS v(id, gen, seq, config, deleted)
    ON CONFLICT (id) DO UPDATE
       SET gen = EXCLUDED.gen, seq = EXCLUDED.seq, config = COALESCE(EXCLUDED.config, r.config),
           deleted = EXCLUDED.deleted, updated_at = now()
       WHERE (r.gen, r.seq) < (EXCLUDED.gen, EXCLUDED.seq)
    RETURNING 1
)
SELECT (SELECT count(*) FROM ev) AS inserted, (SELECT count(*) FROM rm) AS rooms
"""


def insert_args(rows: list[Row]) -> list[Any]:
    """The 14 array parameters of the insert statement for ``rows``."""
    columns: list[list[Any]] = [list(col) for col in zip(*rows, strict=True)] if rows else [[] for _ in range(9)]
    latest: dict[str, Row] = {}
    for row in rows:
        if row[3] in ROOM_EVENTS:
            kept = latest.get(row[0])
            if kept is None or (row[1], row[2]) > (kept[1], kept[2]):
                latest[row[0]] = row
    rooms = list(latest.values())
    configs: list[str | None] = []
    for row in rooms:
        config = orjson.loads(row[6]).get("config") if row[3] != "room.delete" else None
        configs.append(None if config is None else orjson.dumps(config).decode())
    return [
        *columns,
        [r[0] for r in rooms],
        [r[1] for r in rooms],
        [r[2] for r in rooms],
        configs,
        [r[3] == "room.delete" for r in rooms],
    ]


class PgJournal:
    """The events journal of one instance (see the module docstring)."""

    def __init__(
        self,
        dsn: str,
        schema: str = "qm",
        instance_id: str | None = None,
        *,
        spool_dir: str | os.PathLike[str] | None = None,
        max_batch: int = 512,
        linger_ms: float = 1.5,
        timeout_sec: float = 5.0,
        pool_size: int = 4,
        clock: Clock | None = None,
        auto_drain: bool = True,
        keep_failed: bool = True,
    ) -> None:
        self.dsn = dsn
        self.schema = schema
        self._s = check_schema(schema)
        self.instance_id = instance_id or f"{socket.gethostname()}-{os.getpid()}"
        self.max_batch = max(1, max_batch)
        self.linger = max(0.0, linger_ms) / 1000
        self.timeout = timeout_sec
        self.pool_size = pool_size
        self.auto_drain = auto_drain  # False: the spool drains only when drain() is called
        # The events of a failed batch are written again ahead of the next batch (their callers got
        # StoreUnavailable all the same), so a failed commit leaves no permanent seq gap: the
        # compensation the store journals afterwards (join.revoke …) then follows its original.
        self.keep_failed = keep_failed
        self.backlog: list[Row] = []
        self.backlog_dropped = 0
        self.clock: Clock = clock or SystemClock()
        self.spool = Spool(Path(spool_dir or Path("data") / "spool"), self.instance_id)
        self._sql = _insert_sql(self._s)
        self._pool: Any = None
        self._conn: Any = None  # the writer's own connection
        self._migrated = False
        self._queue: deque[_Pending] = deque()
        self._queued = 0  # events queued, not yet taken by the writer
        self._wake = asyncio.Event()
        self._switch = asyncio.Lock()  # a batch and a maintenance switch never interleave
        self._drain_lock = asyncio.Lock()
        self._drain_wake = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._drainer: asyncio.Task[None] | None = None
        self._closing = False
        self._closed = False
        self.maintenance = False
        # health
        self.write_errors = 0  # commits (callers) that failed
        self.probe_errors = 0
        self.last_error: str | None = None
        self.last_error_at: int | None = None  # wall ms of the newest failure (commit or probe)
        self.last_ok_at: int | None = None  # wall ms of the newest commit or probe that landed
        self.db_healthy = True
        # group-commit counters
        self.transactions = 0  # batches committed to PostgreSQL
        self.failed_batches = 0
        self.spooled_batches = 0
        self.events_committed = 0  # rows sent in committed batches (duplicates included)
        self.batch_events: Counter[int] = Counter()  # events per committed batch -> batches
        self.batch_callers: Counter[int] = Counter()  # callers per committed batch -> batches
        # rollback guard: events refused because their seq was taken, and who fences such rooms
        self.conflicts = 0
        self.on_conflict: Callable[[set[tuple[str, int]]], Awaitable[None]] | None = None

    @property
    def pool(self) -> Any:
        """The asyncpg pool (None before ``start``), for the other Postgres tables of this schema."""
        return self._pool

    @property
    def sql_schema(self) -> str:
        """The schema name, quoted for SQL (``"qm"``)."""
        return self._s

    # ---------------------------------------------------------------------------- life cycle

    async def start(self, *, require: bool = True) -> None:
        """Open the pool, migrate, read the maintenance flag, adopt orphaned spool files, start the writer.

        With ``require=False`` an unreachable PostgreSQL does not fail the start: the journal starts
        degraded (every commit answers ``StoreUnavailable``) and migrates at the first batch it can.
        """
        self._pool = await asyncpg.create_pool(
            self.dsn,
            min_size=0,
            max_size=self.pool_size,
            command_timeout=self.timeout,
            server_settings={"application_name": f"qm-journal {self.instance_id}"[:63]},
        )
        try:
            await self._ensure_migrated()
            self.maintenance = await self._read_flag(MAINTENANCE_KEY, default=False)
        except Exception as err:
            self._failed(err, commit=False)
            if require:
                await self._pool.close()
                self._pool = None
                raise StoreUnavailable(f"events journal unavailable at start: {_describe(err)}") from err
            log.warning("events journal: PostgreSQL unavailable at start (%s); starting degraded", _describe(err))
        await asyncio.to_thread(self.spool.adopt_orphans)
        self._writer = asyncio.create_task(self._run_writer(), name="qm-journal-writer")
        if self.auto_drain:
            self._drainer = asyncio.create_task(self._run_drainer(), name="qm-journal-drainer")
        if not self.maintenance:
            self._drain_wake.set()

    async def close(self) -> None:
        """Flush every queued batch, finalize the spool file, close the connections."""
        if self._closed:
            return
        self._closing = True
        self._wake.set()
        if self._writer is not None:
            await self._writer
        self._closed = True
        if self._drainer is not None:
            self._drainer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._drainer
        await asyncio.to_thread(self.spool.finalize)
        await self._drop_conn()
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    async def _ensure_migrated(self) -> None:
        if self._migrated:
            return
        async with self._acquire() as conn:
            await migrate(conn, self.schema)
        self._migrated = True

    @contextlib.asynccontextmanager
    async def _acquire(self) -> AsyncIterator[Any]:
        if self._pool is None:
            raise StoreUnavailable("events journal is not started")
        async with self._pool.acquire(timeout=self.timeout) as conn:
            yield conn

    # ---------------------------------------------------------------------------- commit

    async def commit(self, events: list[Event]) -> None:
        """Return once ``events`` are committed (or spooled in maintenance mode); else StoreUnavailable."""
        if not events:
            return
        if self._closing or self._writer is None:
            raise StoreUnavailable("events journal is closed")
        rows = [event_row(e, self.instance_id) for e in events]
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append(_Pending(rows, future))
        self._queued += len(rows)
        self._wake.set()
        await asyncio.shield(future)

    async def _run_writer(self) -> None:
        idle = True  # the queue ran dry: the next caller may have company on its way
        while True:
            if not self._queue:
                if self._closing:
                    if self.backlog:  # a last try at a clean stop
                        async with self._switch:
                            await self._write_backlog()
                    return
                idle = True
                self._wake.clear()
                await self._wake.wait()
                continue
            if idle and self.linger and not self._closing and self._queued < self.max_batch:
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
        self._queued -= size
        return batch

    async def _write(self, batch: list[_Pending]) -> None:
        rows = [row for item in batch for row in item.rows]
        async with self._switch:
            if self.backlog:
                await self._write_backlog()
            if self.maintenance:
                records = [_row_dict(r) for r in rows]
                try:
                    await asyncio.to_thread(self.spool.append, records, self.clock.wall_ms())
                except OSError as err:
                    raise _SpoolFailed(f"maintenance spool write failed: {_describe(err)}") from err
                self.spooled_batches += 1
            else:
                inserted = await self._insert(rows)
                if inserted < len(rows):  # a seq already taken by another event: a rolled-back room
                    taken = await self._taken(rows)
                    if taken:
                        await self._refuse_taken(batch, taken)
                self.transactions += 1
                self.events_committed += len(rows)
                self.batch_events[len(rows)] += 1
                self.batch_callers[len(batch)] += 1
                self.db_healthy = True
                self.last_ok_at = self.clock.wall_ms()
        for item in batch:
            if not item.future.done():
                item.future.set_result(None)

    async def _write_backlog(self) -> None:
        """Write the failed batches' events again, in a statement of their own: when that fails too
        they wait for the next batch, and the batch itself still goes through."""
        rows = self.backlog
        try:
            if self.maintenance:
                await asyncio.to_thread(self.spool.append, [_row_dict(r) for r in rows], self.clock.wall_ms())
            else:
                await self._insert(rows)
        except Exception as err:
            self._failed(err, commit=False)
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
            if not self._migrated:
                await self._ensure_migrated()
            if self._conn is None or self._conn.is_closed():
                self._conn = await asyncpg.connect(
                    self.dsn,
                    timeout=self.timeout,
                    command_timeout=self.timeout,
                    server_settings={"application_name": f"qm-journal-writer {self.instance_id}"[:63]},
                )
            row = await self._conn.fetchrow(self._sql, *insert_args(rows), timeout=self.timeout)
        except Exception:
            await self._drop_conn()
            raise
        return len(rows) if row is None else int(row["inserted"])

    async def _taken(self, rows: list[Row]) -> set[tuple[str, int, int]]:
        """The rows whose (room, gen, seq) the journal already holds for a *different* event. Such an
        event was not journaled: the room's Valkey state was rolled back behind the journal (or a
        change from before a rebuild landed after it). Identical rows are a harmless re-send."""
        found = await self._conn.fetch(
            f"""SELECT u.room, u.gen, u.seq
                FROM unnest($1::text[], $2::int[], $3::bigint[], $4::text[], $5::bigint[], $6::text[], $7::text[])
                     AS u(room, gen, seq, type, ts, data, instance)
                JOIN {self._s}.events e ON e.room = u.room AND e.gen = u.gen AND e.seq = u.seq
                WHERE e.type <> u.type OR e.ts <> u.ts OR e.instance <> u.instance OR e.data <> u.data::jsonb""",
            [r[0] for r in rows],
            [r[1] for r in rows],
            [r[2] for r in rows],
            [r[3] for r in rows],
            [r[5] for r in rows],
            [r[6] for r in rows],
            [r[7] for r in rows],
            timeout=self.timeout,
        )
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
                log.warning("events journal: on_conflict: %s", _describe(err))
        for item in batch:
            if any((r[0], r[1], r[2]) in taken for r in item.rows) and not item.future.done():
                item.future.set_exception(StoreUnavailable("the room is being rebuilt from the journal"))
                item.future.exception()

    async def _drop_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.terminate()

    def _fail_batch(self, batch: list[_Pending], err: BaseException) -> None:
        self.failed_batches += 1
        self._keep([row for item in batch for row in item.rows])
        self._failed(err, commit=True, callers=len(batch))
        message = str(err) if isinstance(err, StoreUnavailable) else f"events journal commit failed: {_describe(err)}"
        for item in batch:
            if not item.future.done():
                item.future.set_exception(StoreUnavailable(message))
                # a caller that stopped waiting must not leave "exception never retrieved" behind
                item.future.exception()

    def _failed(self, err: BaseException, *, commit: bool, callers: int = 0) -> None:
        if commit:
            self.write_errors += callers
        self.last_error = _describe(err)
        self.last_error_at = self.clock.wall_ms()
        if not isinstance(err, _SpoolFailed):
            self.db_healthy = False
        log.warning("events journal: %s", self.last_error)

    # ---------------------------------------------------------------------------- health

    async def probe(self) -> None:
        """The commit's insert for one row, in a transaction rolled back. Raises StoreUnavailable."""
        row: Row = ("__probe__", 0, 0, "probe", 1, self.clock.wall_ms(), "{}", self.instance_id, None)
        try:
            await self._ensure_migrated()
            async with self._acquire() as conn:
                with contextlib.suppress(_Rollback):
                    async with conn.transaction():
                        await conn.fetchrow(self._sql, *insert_args([row]), timeout=self.timeout)
                        raise _Rollback
        except Exception as err:
            self.probe_errors += 1
            self._failed(err, commit=False)
            raise StoreUnavailable(f"events journal probe failed: {_describe(err)}") from err
        self.db_healthy = True
        self.last_ok_at = self.clock.wall_ms()

    def storage_ok(self, now_ms: int, window_ms: int) -> bool:
        """Healthy: no failure yet, or a commit/probe landed after the newest failure and
        ``window_ms`` (3 x ALERT_EVERY_MS) has passed since it."""
        if self.last_error_at is None:
            return True
        landed = self.last_ok_at is not None and self.last_ok_at >= self.last_error_at
        return landed and now_ms - self.last_error_at >= window_ms

    def health(self) -> dict[str, Any]:
        return {
            "writeErrors": self.write_errors,
            "probeErrors": self.probe_errors,
            "lastError": self.last_error,
            "lastErrorAt": self.last_error_at,
            "lastOkAt": self.last_ok_at,
            "dbHealthy": self.db_healthy,
            "maintenance": self.maintenance,
            "transactions": self.transactions,
            "failedBatches": self.failed_batches,
            "queued": self._queued,
            "unjournaled": len(self.backlog) + self.backlog_dropped,  # events of failed commits not written
        }

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

    # ---------------------------------------------------------------------------- reading

    async def read_events(self, room: str, gen: int, after_seq: int = 0) -> list[Event]:
        """The journal of one room generation after ``after_seq``, in seq order."""
        try:
            async with self._acquire() as conn:
                rows = await conn.fetch(
                    f"SELECT type, room, gen, seq, ts, lv, data FROM {self._s}.events"
                    " WHERE room = $1 AND gen = $2 AND seq > $3 ORDER BY seq",
                    room,
                    gen,
                    after_seq,
                    timeout=self.timeout,
                )
        except StoreUnavailable:
            raise
        except Exception as err:
            raise StoreUnavailable(f"events journal read failed: {_describe(err)}") from err
        return [
            Event(r["type"], r["room"], r["gen"], r["ts"], orjson.loads(r["data"]), seq=r["seq"], lv=r["lv"])
            for r in rows
        ]

    async def rooms(self) -> list[tuple[str, int, dict[str, Any]]]:
        """Every room that is not deleted: (id, gen, config) — for the inline host index."""
        rows = await self._fetch(f"SELECT id, gen, config FROM {self._s}.rooms WHERE NOT deleted ORDER BY id")
        return [(r["id"], r["gen"], orjson.loads(r["config"]) if r["config"] else {}) for r in rows]

    async def heads(self) -> dict[str, tuple[int, int]]:
        """Every room that is not deleted: room -> (gen, newest seq journaled for that generation)."""
        rows = await self._fetch(
            f"""SELECT r.id, r.gen, coalesce(e.head, 0) AS head FROM {self._s}.rooms r
                LEFT JOIN LATERAL (SELECT max(seq) AS head FROM {self._s}.events
                                   WHERE room = r.id AND gen = r.gen) e ON true
                WHERE NOT r.deleted"""
        )
        return {r["id"]: (int(r["gen"]), int(r["head"])) for r in rows}

    async def head(self, room: str, gen: int) -> int:
        """The newest seq journaled for a room generation (0: none)."""
        rows = await self._fetch(
            f"SELECT coalesce(max(seq), 0) AS head FROM {self._s}.events WHERE room = $1 AND gen = $2", room, gen
        )
        return int(rows[0]["head"])

    async def _fetch(self, sql: str, *args: Any) -> list[Any]:
        try:
            async with self._acquire() as conn:
                return list(await conn.fetch(sql, *args, timeout=self.timeout))
        except StoreUnavailable:
            raise
        except Exception as err:
            raise StoreUnavailable(f"events journal read failed: {_describe(err)}") from err

    # ---------------------------------------------------------------------------- checkpoints

    async def latest_snapshot(self, room: str, gen: int | None = None) -> dict[str, Any] | None:
        """The newest checkpoint of ``room`` (of generation ``gen`` when given)."""
        if gen is None:
            rows = await self._fetch(
                f"SELECT snapshot FROM {self._s}.room_snapshots WHERE room = $1 ORDER BY gen DESC, seq DESC LIMIT 1",
                room,
            )
        else:
            rows = await self._fetch(
                f"SELECT snapshot FROM {self._s}.room_snapshots WHERE room = $1 AND gen = $2 ORDER BY seq DESC LIMIT 1",
                room,
                gen,
            )
        if not rows:
            return None
        data: dict[str, Any] = orjson.loads(rows[0]["snapshot"])
        return data

    async def save_snapshot(self, snapshot: Mapping[str, Any]) -> bool:
        """Store a checkpoint (format v1); keeps the newest ``SNAPSHOTS_KEPT`` of its generation.
        Returns False when one with the same (room, gen, seq) was already there."""
        if snapshot.get("v") != 1:
            raise ValueError(f"not a checkpoint of format v1: v={snapshot.get('v')!r}")
        room, gen, seq = str(snapshot["room"]), int(snapshot["gen"]), int(snapshot["seq"])
        rows = await self._fetch(
            f"""WITH ins AS (
                    INSERT INTO {self._s}.room_snapshots (room, gen, seq, snapshot)
                    VALUES ($1, $2, $3, $4::text::jsonb) ON CONFLICT DO NOTHING RETURNING 1
                ), old AS (
                    DELETE FROM {self._s}.room_snapshots
                    WHERE room = $1 AND gen = $2 AND seq < $3 AND seq NOT IN (
                        SELECT seq FROM {self._s}.room_snapshots WHERE room = $1 AND gen = $2 AND seq < $3
                        ORDER BY seq DESC LIMIT $5)
                    RETURNING 1
                )
                SELECT (SELECT count(*) FROM ins) AS inserted""",
            room,
            gen,
            seq,
            orjson.dumps(snapshot).decode(),
            SNAPSHOTS_KEPT - 1,
        )
        return bool(rows[0]["inserted"])

    async def busy_rooms(self, threshold: int = CHECKPOINT_EVERY) -> list[tuple[str, int, int, int]]:
        """Rooms with at least ``threshold`` events since their last checkpoint:
        (room, gen, checkpoint seq, newest seq)."""
        rows = await self._fetch(
            f"""SELECT r.id, r.gen, coalesce(c.seq, 0) AS base, e.head
                FROM {self._s}.rooms r
                CROSS JOIN LATERAL (SELECT max(seq) AS head FROM {self._s}.events
                                    WHERE room = r.id AND gen = r.gen) e
                LEFT JOIN LATERAL (SELECT max(seq) AS seq FROM {self._s}.room_snapshots
                                   WHERE room = r.id AND gen = r.gen) c ON true
                WHERE NOT r.deleted AND e.head - coalesce(c.seq, 0) >= $1
                ORDER BY e.head - coalesce(c.seq, 0) DESC""",
            threshold,
        )
        return [(r["id"], r["gen"], r["base"], r["head"]) for r in rows]

    async def quiet_rooms(self, age_ms: int) -> list[str]:
        """Rooms with events after their newest checkpoint, the oldest of them committed ``age_ms`` ago
        or more: a checkpoint at least that often while a room changes at all."""
        rows = await self._fetch(
            f"""SELECT r.id FROM {self._s}.rooms r
                LEFT JOIN LATERAL (SELECT max(seq) AS seq FROM {self._s}.room_snapshots
                                   WHERE room = r.id AND gen = r.gen) c ON true
                WHERE NOT r.deleted
                  AND (SELECT committed_at FROM {self._s}.events e
                       WHERE e.room = r.id AND e.gen = r.gen AND e.seq > coalesce(c.seq, 0)
                       ORDER BY e.seq LIMIT 1) <= now() - make_interval(secs => $1::float8 / 1000)""",
            age_ms,
        )
        return [r["id"] for r in rows]

    async def checkpoint_due(self, every_events: int, every_ms: int) -> list[tuple[str, int]]:
        """Under the lease, checkpoint every room with ``every_events`` events since its newest checkpoint,
        and every room whose oldest event after it is ``every_ms`` old. Returns (room, seq) of each saved."""
        done: list[tuple[str, int]] = []
        async with self.checkpoint_lease() as held:
            if not held:
                return done
            due = [room for room, _gen, _base, _head in await self.busy_rooms(every_events)]
            due += [room for room in await self.quiet_rooms(every_ms) if room not in due]
            for room in due:
                try:
                    snap = await self.checkpoint(room)
                except ReplayFenced as fenced:  # a journal this build cannot read: leave it for a newer one
                    log.warning("checkpoint of %s skipped: %s", room, fenced)
                    continue
                if snap is not None:
                    done.append((room, int(snap["seq"])))
        return done

    async def checkpoint(self, room: str, dump: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """Fold ``room``'s journal into a new checkpoint (read from PostgreSQL only) and save it.

        With ``dump`` given, that document is saved instead. Returns the checkpoint saved (the
        latest one when nothing new was journaled), None for a deleted or unknown room. A journal
        this build cannot read raises ``ReplayFenced``.
        """
        if dump is not None:
            await self.save_snapshot(dump)
            return dict(dump)
        rows = await self._fetch(f"SELECT gen, deleted FROM {self._s}.rooms WHERE id = $1", room)
        if not rows or rows[0]["deleted"]:
            return None
        gen = int(rows[0]["gen"])
        base = await self.latest_snapshot(room, gen)
        after = 0 if base is None else int(base["seq"])
        events: list[Event] = []
        for event in await self.read_events(room, gen, after):
            if event.seq != after + len(events) + 1:
                break  # fold the gap-free prefix only: a later seq may still be in flight elsewhere
            events.append(event)
        if not events:
            return base
        try:
            snap = fold(events, base)
        except ReplayDeleted:
            return None
        await self.save_snapshot(snap)
        return snap

    @contextlib.asynccontextmanager
    async def checkpoint_lease(self) -> AsyncIterator[bool]:
        """One checkpointer at a time across the fleet: yields True when this instance holds the lease."""
        key = f"qm.checkpoint:{self.schema}"
        async with self._acquire() as conn:
            held = bool(await conn.fetchval("SELECT pg_try_advisory_lock(hashtext($1))", key))
            try:
                yield held
            finally:
                if held:
                    await conn.execute("SELECT pg_advisory_unlock(hashtext($1))", key)

    async def checkpoint_busy_rooms(self, threshold: int = CHECKPOINT_EVERY) -> list[tuple[str, int]]:
        """Under the lease, checkpoint every busy room. Returns (room, seq) of each checkpoint saved."""
        done: list[tuple[str, int]] = []
        async with self.checkpoint_lease() as held:
            if not held:
                return done
            for room, _gen, _base, _head in await self.busy_rooms(threshold):
                snap = await self.checkpoint(room)
                if snap is not None:
                    done.append((room, int(snap["seq"])))
        return done

    # ---------------------------------------------------------------------------- system_state

    async def _read_flag(self, key: str, *, default: bool) -> bool:
        async with self._acquire() as conn:
            value = await conn.fetchval(f"SELECT value FROM {self._s}.system_state WHERE key = $1", key)
        if value is None:
            return default
        return bool(orjson.loads(value).get("enabled", default))

    async def read_flag(self, key: str, default: bool) -> bool:
        """A flag from ``system_state``, fresh; ``default`` when it cannot be read (never raises)."""
        try:
            return await self._read_flag(key, default=default)
        except Exception as err:
            log.warning("events journal: reading %s failed: %s", key, _describe(err))
            return default

    async def write_flag(self, key: str, enabled: bool) -> bool:
        """Mirror a flag into ``system_state`` (best effort: False when it could not be written)."""
        try:
            async with self._acquire() as conn:
                await conn.execute(
                    f"""INSERT INTO {self._s}.system_state (key, value, updated_at, updated_by)
                        VALUES ($1, $2::text::jsonb, now(), $3)
                        ON CONFLICT (key) DO UPDATE
                        SET value = EXCLUDED.value, updated_at = now(), updated_by = EXCLUDED.updated_by""",
                    key,
                    orjson.dumps({"enabled": enabled}).decode(),
                    self.instance_id,
                    timeout=self.timeout,
                )
        except Exception as err:
            log.warning("events journal: mirroring %s failed: %s", key, _describe(err))
            return False
        return True

    # ---------------------------------------------------------------------------- maintenance

    async def set_maintenance(self, enabled: bool) -> None:
        """Journal maintenance mode: on, every batch goes to the disk spool; off, the spool is
        finalized and drained into PostgreSQL (in the background; ``drain()`` waits for it)."""
        async with self._switch:  # no batch is half-way between the two destinations
            self.maintenance = enabled
            if not enabled:
                await asyncio.to_thread(self.spool.finalize)
        await self.write_flag(MAINTENANCE_KEY, enabled)
        if not enabled:
            self._drain_wake.set()

    async def refresh_maintenance(self) -> bool:
        """Re-read the mirrored flag (a change made on another instance) and obey it."""
        enabled = await self.read_flag(MAINTENANCE_KEY, self.maintenance)
        if enabled != self.maintenance:
            async with self._switch:
                self.maintenance = enabled
                if not enabled:
                    await asyncio.to_thread(self.spool.finalize)
            if not enabled:
                self._drain_wake.set()
        return enabled

    async def drain(self) -> int:
        """Drain every finalized spool file into PostgreSQL, oldest first; returns the events sent.
        Stops (leaving the rest) when maintenance is turned on again; raises StoreUnavailable when
        PostgreSQL fails (the file stays, counted as failed, and is retried)."""
        sent = 0
        async with self._drain_lock:
            await asyncio.to_thread(self.spool.adopt_orphans)
            for path in await asyncio.to_thread(self.spool.finalized):
                if self.maintenance:
                    break
                sent += await self._drain_file(path)
        return sent

    async def _drain_file(self, path: Path) -> int:
        sent = 0
        with self.spool.claim(path) as mine:
            if not mine:
                return 0
            try:
                batches = await asyncio.to_thread(lambda: list(self.spool.batches(path)))
            except (SpoolCorrupt, OSError) as err:
                self.spool.failed_files[path.name] = _describe(err)
                log.error("events journal: spool file %s cannot be drained: %s", path.name, _describe(err))
                return 0
            rows = [event_row(e, self.instance_id) for batch in batches for e in batch]
            try:
                await self._ensure_migrated()
                async with self._acquire() as conn:
                    for i in range(0, len(rows), DRAIN_CHUNK):
                        await conn.fetchrow(self._sql, *insert_args(rows[i : i + DRAIN_CHUNK]), timeout=self.timeout)
                        sent += len(rows[i : i + DRAIN_CHUNK])
            except Exception as err:
                self.spool.failed_files[path.name] = _describe(err)
                self._failed(err, commit=False)
                raise StoreUnavailable(f"draining the maintenance spool failed: {_describe(err)}") from err
            await asyncio.to_thread(self.spool.remove, path)
        self.db_healthy = True
        self.last_ok_at = self.clock.wall_ms()
        log.info("events journal: drained %s (%d events)", path.name, len(rows))
        return sent

    async def _run_drainer(self) -> None:
        delay = 1.0
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._drain_wake.wait(), timeout=delay)
            self._drain_wake.clear()
            if self.maintenance or not await asyncio.to_thread(self.spool.finalized):
                delay = 5.0
                continue
            try:
                await self.drain()
                delay = 1.0
            except StoreUnavailable:
                delay = min(30.0, delay * 2)  # PostgreSQL still failing: back off

    def maintenance_stats(self) -> dict[str, Any]:
        """``bufferStats`` of the maintenance route (see ``Spool.stats``)."""
        return self.spool.stats(self.db_healthy)

    async def maintenance_status(self) -> dict[str, Any]:
        """``GET /api/v1/system/maintenance`` without ``popMaintenanceMode`` (the route adds it):
        the flag re-read from ``system_state`` (falling back to this process's), never raising."""
        enabled = await self.refresh_maintenance()
        stats = self.maintenance_stats()
        return {
            "maintenanceMode": enabled,
            "bufferedMessages": stats["pendingCount"] + stats["failedCount"],
            "bufferHealthy": not self.spool.failed_files,
            "bufferStats": stats,
        }


def _describe(err: BaseException) -> str:
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    name = type(err).__name__
    return f"{name}: {text}" if text else name
