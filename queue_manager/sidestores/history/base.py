"""What the hourly history is kept in, as the writer sees it: the rows' warehouse and the refusal counts.

* :class:`Warehouse` — where the rows are kept: this process (``memory.MemoryWarehouse``, STORE=memory)
  or PostgreSQL's ``history_hourly`` (``pg.PgWarehouse``, SIDESTORE=pg);
* :class:`RefusalCounts` — bot protection's refusals per room and hour: this process's
  (``memory.MemoryRefusals``) or the fleet's in Valkey (``valkey.SharedRefusals``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from queue_manager.sidestores.history.rows import HourRow


class WarehouseRefused(Exception):
    """The warehouse answered, and the hourly history cannot be read: starting would overwrite it."""


class HistoryUnavailable(Exception):
    """The stored history could not be read (with STORE=valkey: PostgreSQL did not answer)."""


class Warehouse(Protocol):
    """Where the rows are kept: this process (``MemoryWarehouse``) or PostgreSQL (``pg.py``)."""

    kind: str

    async def check(self) -> None:
        """Read the stored rows once (at boot): raises when they cannot be read."""

    async def update(self, hour: int, rooms: list[str], change: Callable[[dict[str, HourRow]], list[HourRow]]) -> None:
        """Hand ``change`` the stored rows of ``rooms`` for ``hour`` (those that exist), locked against other
        writers, and store what it returns, in one transaction."""

    async def read(self, since: int, until: int, room: str | None) -> tuple[list[HourRow], dict[str, int]]:
        """Rows with ``since <= hour < until`` (epoch s) and each room's first stored hour."""

    async def prune(self, before: int) -> int:
        """Delete the rows of hours before ``before`` (epoch s); returns how many."""


class RefusalCounts(Protocol):
    """Joins refused (``blocked``) or let through with a warning (``warned``) by bot protection, per room
    and hour: this process's (``MemoryRefusals``) or the fleet's (``valkey.py``)."""

    def add(self, room: str, hour: int, kind: str) -> None: ...

    async def read(self, hour: int) -> dict[str, tuple[int, int]]: ...

    def start(self) -> None: ...

    async def stop(self) -> None: ...
