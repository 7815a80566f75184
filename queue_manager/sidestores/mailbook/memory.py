"""STORE=memory: the turn-e-mail address book in this process (the interface: ``base.AddressBook``).

Each entry expires on its own (its ``ttl_ms``); a restart drops them all.
"""

from __future__ import annotations

from dataclasses import replace

from queue_manager.clock import Clock
from queue_manager.sidestores.mailbook.base import Entry, Place


class MemoryAddressBook:
    """STORE=memory: the entries in this process, dropped by a restart."""

    kind = "memory"

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._entries: dict[Place, tuple[Entry, int]] = {}  # place -> (entry, expires wall ms)

    def _live(self, place: Place) -> Entry | None:
        hit = self._entries.get(place)
        if hit is None:
            return None
        if hit[1] <= self.clock.wall_ms():
            del self._entries[place]
            return None
        return hit[0]

    async def put(self, entry: Entry, ttl_ms: int) -> None:
        self._entries[entry.place] = (entry, self.clock.wall_ms() + ttl_ms)

    async def get(self, place: Place) -> Entry | None:
        return self._live(place)

    async def remove(self, place: Place) -> bool:
        return self._entries.pop(place, None) is not None

    async def entries(self) -> list[Entry]:
        return [e for e in (self._live(p) for p in list(self._entries)) if e is not None]

    async def claim(self, place: Place) -> bool:
        entry = self._live(place)
        if entry is None or entry.sent:
            return False
        self._entries[place] = (replace(entry, sent=True), self._entries[place][1])
        return True

    async def lapse(self, place: Place, ttl_ms: int) -> None:
        entry = self._live(place)
        if entry is None or entry.lapsed:
            return
        self._entries[place] = (replace(entry, lapsed=True), self.clock.wall_ms() + ttl_ms)

    async def counts(self) -> tuple[int, int]:
        live = await self.entries()
        return len(live), sum(1 for e in live if not e.sent and not e.lapsed)
