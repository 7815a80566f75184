"""The two maintenance modes of the system surface, as the system routes and the ticker see them.

* :class:`JournalMaintenance` — ``GET/POST /api/v1/system/maintenance``: the events journal's batches go to
  the disk spool instead of PostgreSQL, and ``GET /api/v1/status/buffers``;
* :class:`AdmissionMaintenance` — ``GET/POST /api/v1/system/maintenance/pop``: no room lets anybody through
  (the store's ``held``), the line keeps its places and keeps answering.

Each has a twin in this process (``memory.py``, STORE=memory) and one the fleet shares: journal maintenance
on the instance's journal spool, mirrored in PostgreSQL (``pg.py``), admission maintenance in Valkey
(``valkey.py``).
"""

from __future__ import annotations

from typing import Any, Protocol


class JournalMaintenance(Protocol):
    """Journal maintenance mode (``Context.journal_maintenance``)."""

    @property
    def enabled(self) -> bool: ...

    @property
    def spooling(self) -> bool:
        """Batches go to the disk spool now (maintenance, or failover after a failed commit)."""
        ...

    async def set(self, enabled: bool) -> bool:
        """On or off, here and (STORE=valkey) fleet-wide. Returns whether the mirror in PostgreSQL was
        written (always True with STORE=memory, which has none)."""
        ...

    async def refresh(self) -> bool:
        """Re-read the mirrored flag and obey it (STORE=valkey); the flag."""
        ...

    async def status(self) -> dict[str, Any]:
        """The GET body without ``popMaintenanceMode``: the flag re-read, never raising."""
        ...

    def buffers(self) -> dict[str, Any]:
        """``GET /api/v1/status/buffers``."""
        ...

    def gauges(self) -> tuple[int, int, bool]:
        """For /metrics: events waiting in the active spool file, events in finalized files waiting to
        drain, and the flag."""
        ...


class AdmissionMaintenance(Protocol):
    """Admission maintenance mode (``Context.admission``): while on, no room lets anybody through."""

    @property
    def enabled(self) -> bool: ...

    @property
    def shared(self) -> bool:
        """Is the flag the fleet's (Valkey) rather than this process's?"""
        ...

    async def load(self) -> None:
        """At start: the fleet's flag (Valkey, else the PostgreSQL mirror); best effort, never raises."""

    async def refresh(self) -> bool:
        """Re-read the fleet's flag and obey it (each tick); False when Valkey holds none or cannot be read."""
        ...

    async def set(self, enabled: bool) -> None:
        """Turn admission maintenance on or off: here at once, then the fleet (Valkey, the hint, the mirror)."""
