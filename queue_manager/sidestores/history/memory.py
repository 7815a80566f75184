"""STORE=memory: the hourly history's rows and bot protection's refusal counts in this process.

The same rows and counts as the shared twins (``pg.py``, ``valkey.py``) keep, gone on restart.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from queue_manager.sidestores.history.rows import HOUR, HourRow


class MemoryWarehouse:
    """The rows in this process (STORE=memory): the same rows, gone on restart."""

    kind = "memory"

    def __init__(self) -> None:
        self.rows: dict[tuple[str, int], HourRow] = {}
        self._lock = asyncio.Lock()

    async def check(self) -> None:
        return None

    async def update(self, hour: int, rooms: list[str], change: Callable[[dict[str, HourRow]], list[HourRow]]) -> None:
        async with self._lock:
            held = {room: self.rows[(room, hour)] for room in rooms if (room, hour) in self.rows}
            for row in change(held):
                self.rows[(row.room, row.hour)] = row

    async def read(self, since: int, until: int, room: str | None) -> tuple[list[HourRow], dict[str, int]]:
        first: dict[str, int] = {}
        for r, h in self.rows:
            first[r] = min(first.get(r, h), h)
        rows = [r for (name, h), r in self.rows.items() if since <= h < until and (room is None or name == room)]
        return rows, first

    async def prune(self, before: int) -> int:
        old = [k for k in self.rows if k[1] < before]
        for k in old:
            del self.rows[k]
        return len(old)


class MemoryRefusals:
    """Bot protection's refusals per room and hour, counted in this process."""

    def __init__(self) -> None:
        self.counts: dict[int, dict[str, list[int]]] = {}

    def add(self, room: str, hour: int, kind: str) -> None:
        hours = self.counts.setdefault(hour, {})
        pair = hours.setdefault(room, [0, 0])
        pair[0 if kind == "blocked" else 1] += 1
        for old in [h for h in self.counts if h < hour - 2 * HOUR]:
            del self.counts[old]

    async def read(self, hour: int) -> dict[str, tuple[int, int]]:
        return {room: (b, w) for room, (b, w) in self.counts.get(hour, {}).items()}

    def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None
