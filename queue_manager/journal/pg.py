"""The PostgreSQL events journal of one instance: its parts, composed.

=====================  =============================================================================
part                   does
=====================  =============================================================================
``database``           the one asyncpg pool on the schema (``database.py``), shared with the access
                       records; every table comes from ``migrations.py``
``writer``             group commit (``writer.py``): many callers' events, one statement, one
                       transaction
``reader``             reading back (``reader.py``): a room generation's events, rooms, heads,
                       checkpoints
``checkpoints``        the checkpoint policy (``checkpoints.py``): which rooms get a new checkpoint
``maintenance_spool``  the disk spool (``spool.py``) in use (``maintenance.py``): maintenance mode,
                       spooling on failure, the drain back
``status``, ``probe``  what the writes tell about PostgreSQL, and the probe (``health.py``)
=====================  =============================================================================

``PgJournal`` only wires them and forwards to them. Given a ``Database`` it uses that one (its
owner opens and closes it); given a connection string it builds and owns its own.

Example::

    db = Database("postgresql://qm@db/qm", "qm", instance_id="qm-1")
    await db.open()
    journal = PgJournal(db, instance_id="qm-1", spool_dir="/var/lib/qm/spool")
    await journal.start()
    await journal.commit(engine.drain_events())       # returns once committed (or spooled)
    events = await journal.read_events("shop", 3, after_seq=1042)
    await journal.close()
    await db.close()
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from pathlib import Path
from typing import Any

from queue_manager.clock import Clock, SystemClock
from queue_manager.journal.checkpoints import CHECKPOINT_EVERY, SNAPSHOTS_KEPT, Checkpoints
from queue_manager.journal.database import Database, default_instance_id, is_tls_verify_failure
from queue_manager.journal.db_health import JournalHealth, Probe
from queue_manager.journal.describe import describe
from queue_manager.journal.flags import MAINTENANCE_KEY, POP_MAINTENANCE_KEY
from queue_manager.journal.reader import JournalReader
from queue_manager.journal.rows import Row, event_row, insert_args
from queue_manager.journal.spool import Spool
from queue_manager.journal.spooling import ConflictHandler, MaintenanceSpool
from queue_manager.journal.writer import BACKLOG_MAX, GroupWriter
from queue_manager.store.base import StoreUnavailable

__all__ = [
    "BACKLOG_MAX",
    "CHECKPOINT_EVERY",
    "MAINTENANCE_KEY",
    "POP_MAINTENANCE_KEY",
    "SNAPSHOTS_KEPT",
    "PgJournal",
    "Row",
    "event_row",
    "insert_args",
]

log = logging.getLogger("queue_manager.journal")


class PgJournal:
    """The events journal of one instance (see the module docstring)."""

    def __init__(
        self,
        database: Database | str,
        schema: str | None = None,
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
        spool_on_failure: bool = False,
    ) -> None:
        if isinstance(database, Database):
            if schema is not None and schema != database.schema:
                raise ValueError(f"schema {schema!r} differs from the database's {database.schema!r}")
            self.instance_id = instance_id or database.instance_id
            self.database = database
            self._owns_database = False
        else:
            self.instance_id = instance_id or default_instance_id()
            self.database = Database(
                database,
                schema or "qm",
                instance_id=self.instance_id,
                pool_size=pool_size,
                timeout_sec=timeout_sec,
            )
            self._owns_database = True
        db = self.database
        self.clock: Clock = clock or SystemClock()
        self.status = JournalHealth(self.clock)
        self.probe = Probe(db, self.status, self.instance_id, timeout_sec=timeout_sec)
        self.reader = JournalReader(db, timeout_sec=timeout_sec)
        self.checkpoints = Checkpoints(db, self.reader)
        self.maintenance_spool = MaintenanceSpool(
            db,
            self.status,
            Spool(Path(spool_dir or Path("data") / "spool"), self.instance_id),
            instance_id=self.instance_id,
            clock=self.clock,
            timeout_sec=timeout_sec,
            auto_drain=auto_drain,
            spool_on_failure=spool_on_failure,
            probe=self.probe,
        )
        self.writer = GroupWriter(
            db,
            self.status,
            self.maintenance_spool,
            instance_id=self.instance_id,
            clock=self.clock,
            max_batch=max_batch,
            linger_ms=linger_ms,
            timeout_sec=timeout_sec,
            keep_failed=keep_failed,
        )
        self._closed = False

        # what each part answers, under the journal's names
        self.commit = self.writer.commit
        self.batch_stats = self.writer.batch_stats
        self.read_events = self.reader.read_events
        self.rooms = self.reader.rooms
        self.heads = self.reader.heads
        self.positions = self.reader.positions
        self.head = self.reader.head
        self.latest_snapshot = self.reader.latest_snapshot
        self.save_snapshot = self.checkpoints.save_snapshot
        self.busy_rooms = self.checkpoints.busy_rooms
        self.quiet_rooms = self.checkpoints.quiet_rooms
        self.checkpoint_due = self.checkpoints.checkpoint_due
        self.checkpoint = self.checkpoints.checkpoint
        self.checkpoint_lease = self.checkpoints.checkpoint_lease
        self.checkpoint_busy_rooms = self.checkpoints.checkpoint_busy_rooms
        self.read_flag = self.maintenance_spool.read_flag
        self.write_flag = self.maintenance_spool.write_flag
        self.set_maintenance = self.maintenance_spool.set
        self.refresh_maintenance = self.maintenance_spool.refresh
        self.drain = self.maintenance_spool.drain
        self.maintenance_stats = self.maintenance_spool.stats
        self.maintenance_status = self.maintenance_spool.status
        self.storage_ok = self.status.storage_ok

    # ---------------------------------------------------------------------------- life cycle

    async def start(self, *, require: bool = True) -> None:
        """Open the database (when this journal owns it), migrate, read the maintenance flag, adopt
        orphaned spool files, start the writer and the drainer.

        With ``require=False`` an unreachable PostgreSQL does not fail the start: the journal starts
        degraded (every commit answers ``StoreUnavailable``) and migrates at the first batch it can. A
        server certificate that does not verify still fails it (``StoreUnavailable``): waiting would not
        mend it.
        """
        await self.database.open()
        try:
            await self.database.ensure_migrated()
            await self.maintenance_spool.load()
        except Exception as err:
            self.status.failed(err, commit=False)
            if require or is_tls_verify_failure(err):  # a certificate that does not verify is not an outage
                if self._owns_database:
                    await self.database.close()
                raise StoreUnavailable(f"events journal unavailable at start: {describe(err)}") from err
            log.warning("events journal: PostgreSQL unavailable at start (%s); starting degraded", describe(err))
        await self.maintenance_spool.adopt_orphans()
        self.writer.start()
        self.maintenance_spool.start()

    async def close(self) -> None:
        """Flush every queued batch, finalize the spool file, close the writer's connection (and the
        database when this journal owns it)."""
        if self._closed:
            return
        await self.writer.close()
        self._closed = True
        await self.maintenance_spool.close()
        await self.writer.drop_conn()
        if self._owns_database:
            await self.database.close()

    # ---------------------------------------------------------------------------- the parts' state

    @property
    def dsn(self) -> str:
        return self.database.dsn

    @property
    def schema(self) -> str:
        return self.database.schema

    @property
    def sql_schema(self) -> str:
        """The schema name, quoted for SQL (``"qm"``)."""
        return self.database.sql_schema

    @property
    def pool(self) -> Any:
        """The asyncpg pool of the database (None while it is not open)."""
        return self.database.pool

    @property
    def spool(self) -> Spool:
        return self.maintenance_spool.spool

    @property
    def maintenance(self) -> bool:
        """Maintenance mode is on: batches go to the spool."""
        return self.maintenance_spool.enabled

    @property
    def on_conflict(self) -> ConflictHandler | None:
        """Told which (room, gen) had events refused because their seq is taken, before their callers."""
        return self.writer.on_conflict

    @on_conflict.setter
    def on_conflict(self, handler: ConflictHandler | None) -> None:
        self.writer.on_conflict = handler
        self.maintenance_spool.on_conflict = handler

    @property
    def conflicts(self) -> int:
        return self.writer.conflicts + self.maintenance_spool.conflicts

    @property
    def transactions(self) -> int:
        return self.writer.transactions

    @property
    def failed_batches(self) -> int:
        return self.writer.failed_batches

    @property
    def spooled_batches(self) -> int:
        return self.writer.spooled_batches

    @property
    def events_committed(self) -> int:
        return self.writer.events_committed

    @property
    def batch_events(self) -> Counter[int]:
        return self.writer.batch_events

    @property
    def batch_callers(self) -> Counter[int]:
        return self.writer.batch_callers

    @property
    def write_errors(self) -> int:
        return self.status.write_errors

    @property
    def probe_errors(self) -> int:
        return self.status.probe_errors

    @property
    def last_error(self) -> str | None:
        return self.status.last_error

    @property
    def last_error_at(self) -> int | None:
        return self.status.last_error_at

    @property
    def last_ok_at(self) -> int | None:
        return self.status.last_ok_at

    @property
    def db_healthy(self) -> bool:
        return self.status.db_healthy

    def unjournaled_at_stop(self) -> int | None:
        """After ``close``: None when the last commit landed, else how many events of failed commits are
        not in the journal (0: PostgreSQL failed since the last commit that landed, nothing was lost)."""
        if not self.status.failing() and self.writer.unjournaled == 0:
            return None
        return self.writer.unjournaled

    def health(self) -> dict[str, Any]:
        return {
            "writeErrors": self.status.write_errors,
            "probeErrors": self.status.probe_errors,
            "lastError": self.status.last_error,
            "lastErrorAt": self.status.last_error_at,
            "lastOkAt": self.status.last_ok_at,
            "dbHealthy": self.status.db_healthy,
            "maintenance": self.maintenance_spool.enabled,
            "spooling": self.maintenance_spool.spooling,
            "transactions": self.writer.transactions,
            "failedBatches": self.writer.failed_batches,
            "queued": self.writer.queued,
            "unjournaled": self.writer.unjournaled,  # events of failed commits not written
        }
