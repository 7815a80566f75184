"""The journal's disk spool in use: maintenance mode, spooling on failure, and the drain back.

The writer appends each batch to the disk spool (``spool.py``: one fsync per batch) instead of
PostgreSQL while ``spooling`` is true, which it is for one of two reasons:

* **maintenance mode** (``set(True)``): an operator's planned PostgreSQL work. The flag is mirrored in
  ``system_state`` (``maintenance_mode``) and read back at start, so a restart keeps spooling;
  ``refresh()`` obeys a change another instance made, ``apply()`` one announced over Valkey.
* **failover** (``SPOOL_ON_FAILURE=1``): a commit failed for a fault that passes by itself
  (``database.is_transient``: PostgreSQL down, restarting, unreachable, a timeout). That batch and every
  later one go to the spool, in order, until PostgreSQL answers the probe again; then the active file
  is finalized and drained like any other (``docs/adr/0004-spool-on-failure.md``).

Turning either off finalizes the active file and wakes the drainer job, which drains every finalized
file into PostgreSQL oldest first, deduplicated by (room, gen, seq); ``drain()`` does the same and
waits. A transient database error leaves the file in place and the drainer retries with a growing
cooldown (1 s, doubling to 10 s). Any other error is asked about with the probe: when PostgreSQL
takes the probe's row the file itself is at fault (it is *poisoned*), so it is quarantined in
``failed/`` (``Spool.quarantine``) and the drain goes on with the next one; when the probe fails too
it is the database's fault and the file is retried. A file that does not parse is quarantined at once.

``switch`` is the lock the writer holds around each batch: a batch and a switch of destination
never interleave, so no batch is half in the spool and half in PostgreSQL.

Example::

    spool = MaintenanceSpool(db, health, Spool("/var/lib/qm/spool", "qm-1"), instance_id="qm-1", clock=clock)
    await spool.load()            # the mirrored flag
    spool.start()                 # the drainer job
    await spool.set(True)
    ...
    await spool.set(False)
    await spool.drain()
    await spool.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson

from queue_manager.background import Job
from queue_manager.clock import Clock
from queue_manager.journal.database import Database, is_transient
from queue_manager.journal.db_health import JournalHealth
from queue_manager.journal.describe import describe
from queue_manager.journal.flags import MAINTENANCE_KEY
from queue_manager.journal.rows import (
    Row,
    audit_args,
    audit_insert_sql,
    event_row,
    insert_args,
    insert_sql,
    taken_args,
    taken_sql,
)
from queue_manager.journal.spool import Spool, SpoolCorrupt
from queue_manager.store.base import StoreUnavailable

log = logging.getLogger("queue_manager.journal")

DRAIN_CHUNK = 2_000  # events per statement when draining the spool
RETRY_FIRST_SEC = 1.0
RETRY_MAX_SEC = 10.0
FAILOVER_PROBE_SEC = 1.0  # while failing over, PostgreSQL is probed this often

ConflictHandler = Callable[[set[tuple[str, int]]], Awaitable[None]]


class MaintenanceSpool:
    """The journal's disk spool in use (see the module docstring)."""

    def __init__(
        self,
        db: Database,
        health: JournalHealth,
        spool: Spool,
        *,
        instance_id: str,
        clock: Clock,
        timeout_sec: float = 5.0,
        auto_drain: bool = True,
        spool_on_failure: bool = False,
        probe: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.db = db
        self.health = health
        self.spool = spool
        self.instance_id = instance_id
        self.clock = clock
        self.timeout = timeout_sec
        self.auto_drain = auto_drain  # False: the spool drains only when drain() is called
        self.spool_on_failure = spool_on_failure
        self.probe = probe  # proves PostgreSQL takes a row (raises StoreUnavailable when it does not)
        self.enabled = False  # maintenance mode
        self.failover = False  # spooling because a commit failed transiently (SPOOL_ON_FAILURE)
        self.failover_since: int | None = None  # wall ms
        self.failovers = 0  # times failover began
        self.switch = asyncio.Lock()  # a batch and a change of destination never interleave
        self.drain_lock = asyncio.Lock()
        self._drain_wake = asyncio.Event()
        self._s = db.sql_schema
        self._sql = insert_sql(self._s)
        self.drainer = Job("qm-journal-drainer", self._run_drainer)
        #: told which (room, gen) had drained events refused because their seq is taken by another event
        self.on_conflict: ConflictHandler | None = None
        # what the drain did
        self.drained_events = 0  # events sent to PostgreSQL by drains (re-sends included)
        self.drained_files = 0
        self.duplicates = 0  # drained events PostgreSQL already held, identical (a second drain of a file)
        self.conflicts = 0  # drained events whose seq PostgreSQL holds for another event: not journaled
        self.retry_in_sec: float | None = None  # the drainer's cooldown after a transient failure
        self.last_drain: dict[str, Any] | None = None
        self.quarantined_files = 0  # files moved to failed/ by this process
        self.unmirrored: bool | None = None  # a switch made here whose mirror PostgreSQL has not taken yet

    @property
    def spooling(self) -> bool:
        """Batches go to the disk spool now (maintenance mode, or failover)."""
        return self.enabled or self.failover

    # ---------------------------------------------------------------------------- life cycle

    async def load(self) -> None:
        """Read the mirrored flag (raises when PostgreSQL cannot be read)."""
        self.enabled = await self._read_flag(MAINTENANCE_KEY, default=False)

    async def adopt_orphans(self) -> None:
        """Finalize the spool files whose writer died, so they drain."""
        await asyncio.to_thread(self.spool.adopt_orphans)

    def start(self) -> None:
        """Start the drainer job (with ``auto_drain``); it drains at once unless maintenance is on."""
        if self.auto_drain:
            self.drainer.start()
        if not self.enabled:
            self._drain_wake.set()

    async def close(self) -> None:
        """Stop the drainer and finalize the active spool file."""
        await self.drainer.stop()
        await asyncio.to_thread(self.spool.finalize)

    # ---------------------------------------------------------------------------- system_state

    async def _read_flag(self, key: str, *, default: bool) -> bool:
        async with self.db.acquire() as conn:
            value = await conn.fetchval(f"SELECT value FROM {self._s}.system_state WHERE key = $1", key)
        if value is None:
            return default
        return bool(orjson.loads(value).get("enabled", default))

    async def read_flag(self, key: str, default: bool) -> bool:
        """A flag from ``system_state``, fresh; ``default`` when it cannot be read (never raises)."""
        try:
            return await asyncio.wait_for(self._read_flag(key, default=default), self.timeout)
        except Exception as err:
            log.warning("events journal: reading %s failed: %s", key, describe(err))
            return default

    async def write_flag(self, key: str, enabled: bool) -> bool:
        """Mirror a flag into ``system_state`` (best effort: False when it could not be written)."""
        try:
            async with self.db.acquire() as conn:
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
            log.warning("events journal: mirroring %s failed: %s", key, describe(err))
            return False
        return True

    # ---------------------------------------------------------------------------- the switch

    async def set(self, enabled: bool) -> bool:
        """Maintenance mode on or off, mirrored in ``system_state``: on, every batch goes to the disk
        spool; off, the spool is finalized and drained into PostgreSQL (in the background; ``drain()``
        waits for it). Returns whether the mirror was written."""
        await self.apply(enabled)
        mirrored = await self.write_flag(MAINTENANCE_KEY, enabled)
        # PostgreSQL away: the mirror is written at the next re-read, before anything is read from it
        self.unmirrored = None if mirrored else enabled
        return mirrored

    async def apply(self, enabled: bool) -> None:
        """Obey maintenance mode as set elsewhere (another instance's announcement): no mirror written."""
        async with self.switch:  # no batch is half-way between the two destinations
            self.enabled = enabled
            self.unmirrored = None
            if not self.spooling:
                await asyncio.to_thread(self.spool.finalize)
        if not enabled:
            self._drain_wake.set()

    async def refresh(self) -> bool:
        """Re-read the mirrored flag (a change made on another instance) and obey it. A switch made here
        whose mirror could not be written is written first: the newest switch wins, never the row's
        older value."""
        if self.unmirrored is not None:
            if await self.write_flag(MAINTENANCE_KEY, self.unmirrored):
                self.unmirrored = None
            return self.enabled
        enabled = await self.read_flag(MAINTENANCE_KEY, self.enabled)
        if enabled != self.enabled:
            await self.apply(enabled)
        return enabled

    def begin_failover(self, err: BaseException) -> None:
        """A commit failed transiently with SPOOL_ON_FAILURE: spool from this batch on (the caller holds
        ``switch``)."""
        if not self.failover:
            self.failover = True
            self.failover_since = self.clock.wall_ms()
            self.failovers += 1
            log.warning("events journal: PostgreSQL failed (%s); spooling to disk until it answers", describe(err))
        self._drain_wake.set()  # the drainer probes, and ends the failover when PostgreSQL answers

    async def take_audit(self, record: dict[str, Any], failure: BaseException | None) -> bool:
        """Spool an audit row instead of PostgreSQL (fsynced before this returns): while the journal spools,
        or, with SPOOL_ON_FAILURE, when its insert failed transiently (that begins a failover). False: the
        row is not taken, and goes (or went) to PostgreSQL as usual."""
        if not self.spooling and (failure is None or not (self.spool_on_failure and is_transient(failure))):
            return False
        async with self.switch:
            if not self.spooling:
                assert failure is not None
                self.begin_failover(failure)
            await asyncio.to_thread(self.spool.append, [], self.clock.wall_ms(), [record])
        return True

    async def _end_failover(self) -> None:
        async with self.switch:
            self.failover = False
            self.failover_since = None
            if not self.spooling:
                await asyncio.to_thread(self.spool.finalize)
        log.warning("events journal: PostgreSQL answers again; draining the spool")

    # ---------------------------------------------------------------------------- draining

    async def drain(self) -> int:
        """Drain every finalized spool file into PostgreSQL, oldest first; returns the events sent.
        Stops (leaving the rest) when maintenance is turned on again; raises StoreUnavailable when
        PostgreSQL fails (the file stays, and is retried). A poisoned or unreadable file is quarantined."""
        sent = 0
        async with self.drain_lock:
            await asyncio.to_thread(self.spool.adopt_orphans)
            for path in await asyncio.to_thread(self.spool.finalized):
                if self.enabled:
                    break
                sent += await self._drain_file(path)
        return sent

    async def _drain_file(self, path: Path) -> int:
        sent = 0
        with self.spool.claim(path) as mine:
            if not mine:
                return 0
            try:
                lines = await asyncio.to_thread(lambda: list(self.spool.lines(path)))
                rows = [event_row(e, self.instance_id) for events, _ in lines for e in events]
                audit = [audit_args(record) for _, records in lines for record in records]
            except (SpoolCorrupt, OSError, KeyError, TypeError, ValueError) as err:
                await self._quarantine(path, f"the file cannot be read: {describe(err)}")
                return 0
            inserted = 0
            try:
                await self.db.ensure_migrated()
                async with self.db.acquire() as conn:
                    for i in range(0, len(rows), DRAIN_CHUNK):
                        chunk = rows[i : i + DRAIN_CHUNK]
                        row = await conn.fetchrow(self._sql, *insert_args(chunk), timeout=self.timeout)
                        sent += len(chunk)
                        new = len(chunk) if row is None else int(row["inserted"])
                        inserted += new
                        if new < len(chunk):
                            await self._check_taken(conn, chunk)
                    if audit:
                        await conn.executemany(audit_insert_sql(self._s), audit, timeout=self.timeout)
            except Exception as err:
                if not is_transient(err) and await self._database_answers():
                    await self._quarantine(path, f"PostgreSQL refuses its events: {describe(err)}")
                    return 0
                self.spool.failed_files[path.name] = describe(err)
                self.health.failed(err, commit=False)
                raise StoreUnavailable(f"draining the spool failed: {describe(err)}") from err
            # counted before the file goes: a reader (GET /api/v1/status/buffers, from a thread) that sees
            # the file gone sees its events drained
            self.health.landed()
            self.drained_events += sent
            self.drained_files += 1
            self.duplicates += sent - inserted
            self.last_drain = {"file": path.name, "events": sent, "inserted": inserted, "at": self.clock.wall_ms()}
            await asyncio.to_thread(self.spool.remove, path)
        log.info("events journal: drained %s (%d events, %d new)", path.name, sent, inserted)
        return sent

    async def _check_taken(self, conn: Any, rows: list[Row]) -> None:
        """Some drained events were already there: identical ones are a second drain (harmless); one whose
        seq holds a different event was not journaled, and its room is fenced and rebuilt."""
        found = await conn.fetch(taken_sql(self._s), *taken_args(rows), timeout=self.timeout)
        if not found:
            return
        rooms = {(r["room"], int(r["gen"])) for r in found}
        self.conflicts += len(found)
        log.error(
            "events journal: %d drained events collide with journaled ones of %s (the room's state was rolled "
            "back while they were spooled); they are not in the journal",
            len(found),
            ", ".join(sorted(room for room, _ in rooms)),
        )
        if self.on_conflict is not None:
            with contextlib.suppress(Exception):
                await self.on_conflict(rooms)

    async def _database_answers(self) -> bool:
        if self.probe is None:
            return False
        try:
            await self.probe()
        except Exception:
            return False
        return True

    async def _quarantine(self, path: Path, why: str) -> None:
        await asyncio.to_thread(self.spool.quarantine, path, why)
        self.quarantined_files += 1
        log.error("events journal: spool file %s moved to %s/: %s", path.name, self.spool.quarantine_dir.name, why)

    async def _run_drainer(self) -> None:
        delay = RETRY_FIRST_SEC
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._drain_wake.wait(), timeout=delay)
            self._drain_wake.clear()
            if self.failover and not self.enabled:
                if not await self._database_answers():
                    delay = FAILOVER_PROBE_SEC
                    continue
                await self._end_failover()
            if self.enabled or not await asyncio.to_thread(self.spool.finalized):
                delay, self.retry_in_sec = 5.0, None
                continue
            try:
                await self.drain()
                delay, self.retry_in_sec = RETRY_FIRST_SEC, None
            except StoreUnavailable:
                delay = self._cooldown(delay)

    def _cooldown(self, delay: float) -> float:
        """PostgreSQL still failing: wait longer before the next try."""
        nxt = min(RETRY_MAX_SEC, delay * 2)
        self.retry_in_sec = nxt
        return nxt

    # ---------------------------------------------------------------------------- reporting

    def stats(self) -> dict[str, Any]:
        """``bufferStats`` of the maintenance route (see ``Spool.stats``)."""
        return self.spool.stats(self.health.db_healthy)

    @property
    def healthy(self) -> bool:
        """Nothing quarantined, and the newest append reached the disk."""
        return self.spool.write_failed is None and not self.spool.quarantined()

    async def status(self) -> dict[str, Any]:
        """``GET /api/v1/system/maintenance`` without ``popMaintenanceMode`` (the route adds it):
        the flag re-read from ``system_state`` (falling back to this process's), never raising."""
        enabled = await self.refresh()
        stats = self.stats()
        return {
            "maintenanceMode": enabled,
            "bufferedMessages": stats["pendingCount"] + stats["failedCount"],
            "bufferHealthy": self.healthy and not self.spool.failed_files,
            "bufferStats": stats,
        }

    def buffers(self) -> dict[str, Any]:
        """``GET /api/v1/status/buffers``: this instance's spool in full."""
        stats = self.stats()
        reason = "maintenance" if self.enabled else "failover" if self.failover else None
        return {
            "qos0": {"pending": 0, "failed": 0},
            "failover": {"pending": stats["pendingCount"], "failed": stats["failedCount"]},
            "dbHealthy": stats["dbHealthy"],
            "maintenanceMode": self.enabled,
            "spooling": reason is not None,
            "spoolingReason": reason,
            "spoolingSince": self.failover_since if reason == "failover" else None,
            "spoolOnFailure": self.spool_on_failure,
            "files": stats["failedFiles"]["count"],
            "bytes": stats["failedFiles"]["totalBytes"],
            "lastError": next(iter(self.spool.failed_files.values()), None) or self.spool.write_failed,
            "retryInSec": self.retry_in_sec,
            "quarantine": self.spool.quarantine_stats(),
            "drained": {
                "files": self.drained_files,
                "events": self.drained_events,
                "duplicates": self.duplicates,
                "conflicts": self.conflicts,
                "last": self.last_drain,
            },
            "healthy": self.healthy,
        }
