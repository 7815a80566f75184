"""Whether the previous run of this instance stopped cleanly: one row per QM_INSTANCE_ID.

A start reads the instance's row and replaces it with the new run (started, no stop yet); a clean
stop marks it stopped, ``clean`` false when the events journal's last commit did not land. A run
that was killed never marks its row, so the next start of the same QM_INSTANCE_ID finds a run with
no stop and says it did not stop cleanly. The table (``instance_runs``) comes from
``migrations.py``.

Example::

    runs = InstanceRuns(db)
    previous = await runs.begin("qm-1", now_ms)   # None: first run of qm-1; else True/False
    ...
    await runs.end("qm-1", started_ms, now_ms, clean=True)
"""

from __future__ import annotations

from datetime import UTC, datetime

from queue_manager.journal.database import Database


def _ts(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


class InstanceRuns:
    """The ``instance_runs`` rows of one database (see the module docstring)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._s = db.sql_schema
        self._upsert_started = f"""INSERT INTO {self._s}.instance_runs (instance_id, started_at, stopped_at, clean)
            VALUES ($1, $2, NULL, NULL)
            ON CONFLICT (instance_id) DO UPDATE SET started_at = EXCLUDED.started_at, stopped_at = NULL, clean = NULL"""

    async def mark_started(self, instance_id: str, started_ms: int) -> None:
        """Record a run of ``instance_id`` without reading the previous one (a start that could not
        reach PostgreSQL records itself later, so a kill after that is still seen by the next start)."""
        await self.db.ensure_migrated()
        async with self.db.acquire() as conn:
            await conn.execute(self._upsert_started, instance_id, _ts(started_ms))

    async def begin(self, instance_id: str, now_ms: int) -> bool | None:
        """Record a new run of ``instance_id``; return how the previous one ended: None when there was
        none, True for a clean stop, False for a run that was killed or stopped with storage failing."""
        await self.db.ensure_migrated()
        async with self.db.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(
                f"SELECT stopped_at, clean FROM {self._s}.instance_runs WHERE instance_id = $1 FOR UPDATE",
                instance_id,
            )
            await conn.execute(self._upsert_started, instance_id, _ts(now_ms))
        if row is None:
            return None
        return row["stopped_at"] is not None and row["clean"] is True

    async def end(self, instance_id: str, started_ms: int, now_ms: int, *, clean: bool) -> None:
        """Mark the run of ``instance_id`` (started at ``started_ms``) stopped; ``clean``: its last
        commit landed. A run whose start could not be recorded is recorded here."""
        await self.db.ensure_migrated()
        async with self.db.acquire() as conn:
            await conn.execute(
                f"""INSERT INTO {self._s}.instance_runs (instance_id, started_at, stopped_at, clean)
                    VALUES ($1, $2, $3, $4)
                    ON CONFLICT (instance_id) DO UPDATE SET stopped_at = EXCLUDED.stopped_at, clean = EXCLUDED.clean""",
                instance_id,
                _ts(started_ms),
                _ts(now_ms),
                clean,
            )
