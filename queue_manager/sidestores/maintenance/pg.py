"""STORE=valkey: journal maintenance on this instance's journal, the flag mirrored in PostgreSQL.

Turning it on switches this instance's journal to its disk spool (``journal/spooling.py``), mirrors the
flag in PostgreSQL's ``system_state`` row ``maintenance_mode`` and announces it with a ``maint`` hint
(``fleet/hints.py``), so every instance spools to its own ``SPOOL_DIR`` at once; an instance that missed
the hint obeys the row at its next re-read (every RESYNC_MS, and on every GET of the route).

Example::

    maint = PgJournalMaintenance(journal, hints=hints)
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


class PgJournalMaintenance:
    """Journal maintenance as the journal's spool holds it (the interface: ``base.JournalMaintenance``)."""

    def __init__(self, journal: PgJournal, *, hints: Hints | None = None) -> None:
        self.journal = journal
        self.hints = hints
        self._applying: set[asyncio.Task[None]] = set()
        if hints is not None:
            hints.on(HINT, self._on_hint)  # a missed one is repaired by the next re-read of system_state

    @property
    def enabled(self) -> bool:
        return self.journal.maintenance_spool.enabled

    @property
    def spooling(self) -> bool:
        return self.journal.maintenance_spool.spooling

    def _on_hint(self, data: dict[str, Any]) -> None:
        enabled = data.get("enabled")
        if not isinstance(enabled, bool) or enabled == self.enabled:
            return
        task = asyncio.create_task(self.journal.maintenance_spool.apply(enabled))
        self._applying.add(task)
        task.add_done_callback(self._applying.discard)

    async def set(self, enabled: bool) -> bool:
        mirrored = await self.journal.maintenance_spool.set(enabled)
        if self.hints is not None:
            try:
                await self.hints.publish(HINT, enabled=enabled)
            except Exception as err:  # the others obey the row at their next re-read
                log.warning("journal maintenance: announcing failed: %s", err)
        return mirrored

    async def refresh(self) -> bool:
        return await self.journal.maintenance_spool.refresh()

    async def status(self) -> dict[str, Any]:
        return await self.journal.maintenance_spool.status()

    def buffers(self) -> dict[str, Any]:
        return self.journal.maintenance_spool.buffers()

    def gauges(self) -> tuple[int, int, bool]:
        spool = self.journal.maintenance_spool
        stats = spool.stats()
        return int(stats["pendingCount"]), int(stats["failedCount"]), spool.enabled
