"""What the journal knows about PostgreSQL's health, and the probe that finds out without traffic.

Every commit, probe and spool drain reports here: a failure (its text and wall time; a commit
counts one ``write_errors`` per caller), or a landing (``last_ok_at``). A failure of the maintenance
spool says nothing about PostgreSQL, so it leaves ``db_healthy`` alone. Readiness
(``fleet/storage_watch.py``) reads ``storage_ok`` and ``failing``.
"""

from __future__ import annotations

import contextlib
import logging

from queue_manager.clock import Clock
from queue_manager.journal.database import Database
from queue_manager.journal.describe import describe
from queue_manager.journal.rows import Row, insert_args, insert_sql
from queue_manager.journal.spool import SpoolFailed
from queue_manager.store.base import StoreUnavailable

log = logging.getLogger("queue_manager.journal")


class JournalHealth:
    """Failures and landings of one journal's writes (see the module docstring)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.write_errors = 0  # commits (callers) that failed
        self.probe_errors = 0
        self.last_error: str | None = None
        self.last_error_at: int | None = None  # wall ms of the newest failure (commit or probe)
        self.last_ok_at: int | None = None  # wall ms of the newest commit or probe that landed
        self.db_healthy = True

    def failed(self, err: BaseException, *, commit: bool, callers: int = 0) -> None:
        """A write failed (``commit``: ``callers`` callers were answered StoreUnavailable)."""
        if commit:
            self.write_errors += callers
        self.last_error = describe(err)
        self.last_error_at = self.clock.wall_ms()
        if not isinstance(err, SpoolFailed):
            self.db_healthy = False
        log.warning("events journal: %s", self.last_error)

    def landed(self) -> None:
        """A write reached PostgreSQL."""
        self.db_healthy = True
        self.last_ok_at = self.clock.wall_ms()

    def failing(self) -> bool:
        """No commit or probe has landed since the newest failure."""
        return self.last_error_at is not None and (self.last_ok_at is None or self.last_ok_at < self.last_error_at)

    def storage_ok(self, now_ms: int, window_ms: int) -> bool:
        """Healthy: no failure yet, or a commit/probe landed after the newest failure and
        ``window_ms`` (3 x ALERT_EVERY_MS) has passed since it."""
        if self.last_error_at is None:
            return True
        landed = self.last_ok_at is not None and self.last_ok_at >= self.last_error_at
        return landed and now_ms - self.last_error_at >= window_ms


class _Rollback(Exception):
    pass


class Probe:
    """The commit's insert for one row, in a transaction rolled back: PostgreSQL proven (or not)
    without writing anything."""

    def __init__(self, db: Database, health: JournalHealth, instance_id: str, *, timeout_sec: float = 5.0) -> None:
        self.db = db
        self.health = health
        self.instance_id = instance_id
        self.timeout = timeout_sec
        self._sql = insert_sql(db.sql_schema)

    async def __call__(self) -> None:
        """Probe once. Raises StoreUnavailable."""
        row: Row = ("__probe__", 0, 0, "probe", 1, self.health.clock.wall_ms(), "{}", self.instance_id, None)
        try:
            await self.db.ensure_migrated()
            async with self.db.acquire() as conn:
                with contextlib.suppress(_Rollback):
                    async with conn.transaction():
                        await conn.fetchrow(self._sql, *insert_args([row]), timeout=self.timeout)
                        raise _Rollback
        except Exception as err:
            self.health.probe_errors += 1
            self.health.failed(err, commit=False)
            raise StoreUnavailable(f"events journal probe failed: {describe(err)}") from err
        self.health.landed()
