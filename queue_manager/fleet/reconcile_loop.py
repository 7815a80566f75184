"""The fleet's periodic round (every RESYNC_MS, or at once when woken): rebuilds, config re-reads, the
storage report, journal maintenance set elsewhere, and the leader's checkpoints."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from queue_manager.background import Job, stop_if_cancelled
from queue_manager.config import Settings
from queue_manager.fleet.checkpoints import Checkpoints
from queue_manager.fleet.connection import FleetConnection, first_words
from queue_manager.fleet.recovery import Recovery
from queue_manager.fleet.storage_watch import StorageWatch
from queue_manager.journal.pg import PgJournal

log = logging.getLogger("queue_manager.backend")


class ReconcileLoop:
    """The background job that runs the round; ``Recovery.wake`` runs the next one now."""

    def __init__(
        self,
        settings: Settings,
        journal: PgJournal,
        connection: FleetConnection,
        storage: StorageWatch,
        recovery: Recovery,
        checkpoints: Checkpoints,
    ) -> None:
        self.interval = max(0.5, settings.resync_ms / 1000)
        self.journal = journal
        self.connection = connection
        self.storage = storage
        self.recovery = recovery
        self.checkpoints = checkpoints
        self._job = Job("qm-reconciler", self._forever)

    def start(self) -> None:
        self._job.start()

    async def stop(self) -> None:
        await self._job.stop()

    async def _forever(self) -> None:
        while True:
            # each step reads or writes PostgreSQL: a driver can take the stop's cancel for its own and
            # return (or raise something else), so every step is followed by a look at whether to stop
            try:
                await self.recovery.reconcile()
            except Exception as exc:
                stop_if_cancelled()
                log.warning("reconcile: %s", first_words(exc))
            stop_if_cancelled()
            try:  # every room's config copy re-read (what gates requests while Valkey is down)
                await self.connection.store.list_rooms()
            except Exception as exc:
                log.warning("room configs: %s", first_words(exc))
            with contextlib.suppress(Exception):  # Valkey unreachable: nobody reads us as ok meanwhile
                await self.storage.report()
            # journal maintenance set on another instance whose announcement this one missed
            await self.journal.refresh_maintenance()
            stop_if_cancelled()
            if self.connection.lease.leader:
                try:
                    await self.checkpoints.round()
                except Exception as exc:
                    stop_if_cancelled()
                    log.warning("checkpoints: %s", first_words(exc))
                stop_if_cancelled()
            wake = self.recovery.wake
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), self.interval)
            wake.clear()
