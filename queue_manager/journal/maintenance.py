"""Journal maintenance mode: batches go to the disk spool instead of PostgreSQL, and drain back after.

``set(True)``: the writer appends each batch to the spool (``spool.py``: one fsync per batch)
instead of PostgreSQL. ``set(False)`` finalizes the spool file and wakes the drainer job, which
drains every finalized spool file into PostgreSQL, oldest first, deduplicated by (room, gen, seq);
``drain()`` does the same and waits. The flag is mirrored in ``system_state``
(``maintenance_mode``) and read back at start, so a restart keeps spooling; ``refresh()`` obeys a
change another instance made.

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
from pathlib import Path
from typing import Any

import orjson

from queue_manager.background import Job
from queue_manager.clock import Clock
from queue_manager.journal.database import Database, describe
from queue_manager.journal.health import JournalHealth
from queue_manager.journal.rows import event_row, insert_args, insert_sql
from queue_manager.journal.spool import Spool, SpoolCorrupt
from queue_manager.store.base import StoreUnavailable

log = logging.getLogger("queue_manager.journal")

MAINTENANCE_KEY = "maintenance_mode"
POP_MAINTENANCE_KEY = "pop_maintenance_mode"
DRAIN_CHUNK = 2_000  # events per statement when draining the spool


class MaintenanceSpool:
    """Maintenance mode of one journal (see the module docstring)."""

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
    ) -> None:
        self.db = db
        self.health = health
        self.spool = spool
        self.instance_id = instance_id
        self.clock = clock
        self.timeout = timeout_sec
        self.auto_drain = auto_drain  # False: the spool drains only when drain() is called
        self.enabled = False
        self.switch = asyncio.Lock()  # a batch and a maintenance switch never interleave
        self.drain_lock = asyncio.Lock()
        self._drain_wake = asyncio.Event()
        self._s = db.sql_schema
        self._sql = insert_sql(self._s)
        self.drainer = Job("qm-journal-drainer", self._run_drainer)

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
            return await self._read_flag(key, default=default)
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

    async def set(self, enabled: bool) -> None:
        """On, every batch goes to the disk spool; off, the spool is finalized and drained into
        PostgreSQL (in the background; ``drain()`` waits for it)."""
        async with self.switch:  # no batch is half-way between the two destinations
            self.enabled = enabled
            if not enabled:
                await asyncio.to_thread(self.spool.finalize)
        await self.write_flag(MAINTENANCE_KEY, enabled)
        if not enabled:
            self._drain_wake.set()

    async def refresh(self) -> bool:
        """Re-read the mirrored flag (a change made on another instance) and obey it."""
        enabled = await self.read_flag(MAINTENANCE_KEY, self.enabled)
        if enabled != self.enabled:
            async with self.switch:
                self.enabled = enabled
                if not enabled:
                    await asyncio.to_thread(self.spool.finalize)
            if not enabled:
                self._drain_wake.set()
        return enabled

    # ---------------------------------------------------------------------------- draining

    async def drain(self) -> int:
        """Drain every finalized spool file into PostgreSQL, oldest first; returns the events sent.
        Stops (leaving the rest) when maintenance is turned on again; raises StoreUnavailable when
        PostgreSQL fails (the file stays, counted as failed, and is retried)."""
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
                batches = await asyncio.to_thread(lambda: list(self.spool.batches(path)))
            except (SpoolCorrupt, OSError) as err:
                self.spool.failed_files[path.name] = describe(err)
                log.error("events journal: spool file %s cannot be drained: %s", path.name, describe(err))
                return 0
            rows = [event_row(e, self.instance_id) for batch in batches for e in batch]
            try:
                await self.db.ensure_migrated()
                async with self.db.acquire() as conn:
                    for i in range(0, len(rows), DRAIN_CHUNK):
                        await conn.fetchrow(self._sql, *insert_args(rows[i : i + DRAIN_CHUNK]), timeout=self.timeout)
                        sent += len(rows[i : i + DRAIN_CHUNK])
            except Exception as err:
                self.spool.failed_files[path.name] = describe(err)
                self.health.failed(err, commit=False)
                raise StoreUnavailable(f"draining the maintenance spool failed: {describe(err)}") from err
            await asyncio.to_thread(self.spool.remove, path)
        self.health.landed()
        log.info("events journal: drained %s (%d events)", path.name, len(rows))
        return sent

    async def _run_drainer(self) -> None:
        delay = 1.0
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._drain_wake.wait(), timeout=delay)
            self._drain_wake.clear()
            if self.enabled or not await asyncio.to_thread(self.spool.finalized):
                delay = 5.0
                continue
            try:
                await self.drain()
                delay = 1.0
            except StoreUnavailable:
                delay = min(30.0, delay * 2)  # PostgreSQL still failing: back off

    # ---------------------------------------------------------------------------- reporting

    def stats(self) -> dict[str, Any]:
        """``bufferStats`` of the maintenance route (see ``Spool.stats``)."""
        return self.spool.stats(self.health.db_healthy)

    async def status(self) -> dict[str, Any]:
        """``GET /api/v1/system/maintenance`` without ``popMaintenanceMode`` (the route adds it):
        the flag re-read from ``system_state`` (falling back to this process's), never raising."""
        enabled = await self.refresh()
        stats = self.stats()
        return {
            "maintenanceMode": enabled,
            "bufferedMessages": stats["pendingCount"] + stats["failedCount"],
            "bufferHealthy": not self.spool.failed_files,
            "bufferStats": stats,
        }
