"""Journal maintenance mode as the system routes see it (``GET/POST /api/v1/system/maintenance``).

With STORE=valkey it switches this instance's journal to its disk spool (``journal/spooling.py``),
mirrors the flag in PostgreSQL's ``system_state`` row ``maintenance_mode`` and announces it with a
``maint`` hint (``fleet/hints.py``), so every instance spools to its own ``SPOOL_DIR`` at once; an
instance that missed the hint obeys the row at its next re-read (every RESYNC_MS, and on every GET of
the route). With STORE=memory there is no journal: the flag is this process's, kept and reported, and
nothing is buffered.

Example::

    maint = JournalMaintenance()                                  # STORE=memory
    maint = JournalMaintenance(journal, hints=hints)              # STORE=valkey
    await maint.set(True)
    body = await maint.status()
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from queue_manager.fleet.hints import Hints
    from queue_manager.journal.pg import PgJournal

log = logging.getLogger("queue_manager.fleet")

HINT = "maint"


def _empty_stats() -> dict[str, Any]:
    return {
        "pendingCount": 0,
        "failedCount": 0,
        "dbHealthy": True,
        "failedFiles": {"count": 0, "totalBytes": 0, "totalMB": 0.0, "failoverCount": 0, "qos0Count": 0},
    }


class JournalMaintenance:
    def __init__(self, journal: PgJournal | None = None, *, hints: Hints | None = None) -> None:
        self.journal = journal
        self.hints = hints
        self._flag = False  # STORE=memory: the flag alone
        self._applying: set[asyncio.Task[None]] = set()
        if hints is not None and journal is not None:
            hints.on(HINT, self._on_hint)  # a missed one is repaired by the next re-read of system_state

    @property
    def enabled(self) -> bool:
        return self.journal.maintenance_spool.enabled if self.journal is not None else self._flag

    @property
    def spooling(self) -> bool:
        """Batches go to the disk spool now (maintenance, or failover after a failed commit)."""
        return self.journal is not None and self.journal.maintenance_spool.spooling

    def _on_hint(self, data: dict[str, Any]) -> None:
        enabled = data.get("enabled")
        if not isinstance(enabled, bool) or self.journal is None or enabled == self.enabled:
            return
        task = asyncio.create_task(self.journal.maintenance_spool.apply(enabled))
        self._applying.add(task)
        task.add_done_callback(self._applying.discard)

    async def set(self, enabled: bool) -> bool:
        """On or off, here and (STORE=valkey) fleet-wide. Returns whether the mirror in PostgreSQL was
        written (always True with STORE=memory, which has none)."""
        if self.journal is None:
            self._flag = enabled
            return True
        mirrored = await self.journal.maintenance_spool.set(enabled)
        if self.hints is not None:
            try:
                await self.hints.publish(HINT, enabled=enabled)
            except Exception as err:  # the others obey the row at their next re-read
                log.warning("journal maintenance: announcing failed: %s", err)
        return mirrored

    async def refresh(self) -> bool:
        """Re-read the mirrored flag and obey it (STORE=valkey); the flag."""
        if self.journal is None:
            return self._flag
        return await self.journal.maintenance_spool.refresh()

    async def status(self) -> dict[str, Any]:
        """The GET body without ``popMaintenanceMode``: the flag re-read, never raising."""
        if self.journal is None:
            return {
                "maintenanceMode": self._flag,
                "bufferedMessages": 0,
                "bufferHealthy": True,
                "bufferStats": _empty_stats(),
            }
        return await self.journal.maintenance_spool.status()

    def buffers(self) -> dict[str, Any]:
        """``GET /api/v1/status/buffers``."""
        if self.journal is None:
            return {
                "qos0": {"pending": 0, "failed": 0},
                "failover": {"pending": 0, "failed": 0},
                "dbHealthy": True,
                "maintenanceMode": self._flag,
                "spooling": False,
                "spoolingReason": None,
                "spoolingSince": None,
                "spoolOnFailure": False,
                "files": 0,
                "bytes": 0,
                "lastError": None,
                "retryInSec": None,
                "quarantine": {"count": 0, "totalBytes": 0, "events": 0, "files": []},
                "drained": {"files": 0, "events": 0, "duplicates": 0, "conflicts": 0, "last": None},
                "healthy": True,
            }
        return self.journal.maintenance_spool.buffers()

    def gauges(self) -> tuple[int, int, bool]:
        """For /metrics: events waiting in the active spool file, events in finalized files waiting to
        drain, and the flag."""
        if self.journal is None:
            return 0, 0, self._flag
        spool = self.journal.maintenance_spool
        stats = spool.stats()
        return int(stats["pendingCount"]), int(stats["failedCount"]), spool.enabled
