"""STORE=memory: both maintenance modes as this process's flags (the interfaces: ``base.py``).

There is no journal: journal maintenance is a flag kept and reported, and nothing is buffered. Admission
maintenance is the store's ``held`` (``Store.set_held``): no promotion in the outflow, no new admission at
the door, an active room reads as paused to its visitors.

Example::

    maint = MemoryJournalMaintenance()
    pop = MemoryAdmissionMaintenance(store)
    await maint.set(True)
    await pop.set(True)
"""

from __future__ import annotations

from typing import Any

from queue_manager.store.base import Store


def _empty_stats() -> dict[str, Any]:
    return {
        "pendingCount": 0,
        "failedCount": 0,
        "dbHealthy": True,
        "failedFiles": {"count": 0, "totalBytes": 0, "totalMB": 0.0, "failoverCount": 0, "qos0Count": 0},
    }


class MemoryJournalMaintenance:
    """Journal maintenance without a journal: the flag alone."""

    def __init__(self) -> None:
        self._flag = False

    @property
    def enabled(self) -> bool:
        return self._flag

    @property
    def spooling(self) -> bool:
        return False

    async def set(self, enabled: bool) -> bool:
        self._flag = enabled
        return True

    async def refresh(self) -> bool:
        return self._flag

    async def status(self) -> dict[str, Any]:
        return {
            "maintenanceMode": self._flag,
            "bufferedMessages": 0,
            "bufferHealthy": True,
            "bufferStats": _empty_stats(),
        }

    def buffers(self) -> dict[str, Any]:
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

    def gauges(self) -> tuple[int, int, bool]:
        return 0, 0, self._flag


class MemoryAdmissionMaintenance:
    """Admission maintenance as this process's flag: the store's ``held``."""

    def __init__(self, store: Store) -> None:
        self.store = store

    @property
    def enabled(self) -> bool:
        return self.store.held

    @property
    def shared(self) -> bool:
        return False

    async def load(self) -> None:
        return None

    async def refresh(self) -> bool:
        return True

    async def set(self, enabled: bool) -> None:
        self.store.set_held(enabled)
