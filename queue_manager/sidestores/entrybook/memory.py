"""STORE=memory: the entry book in this process (the interface: ``base.EntryBook``). Gone on restart."""

from __future__ import annotations

from queue_manager.clock import Clock
from queue_manager.sidestores.entrybook.base import digest

PRUNE_EVERY = 1024  # spends between two sweeps of the ids whose tokens have expired


class MemoryEntryBook:
    """Spent ids, places and counts of every room, in this process."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._spent: dict[tuple[str, str], int] = {}  # (room, jti hash) -> until wall ms
        self._places: dict[tuple[str, str], tuple[str, int]] = {}  # (room, sub hash) -> (ticket, until)
        self._tallies: dict[str, dict[str, int]] = {}
        self._since_prune = 0

    def _prune(self) -> None:
        now = self.clock.wall_ms()
        for key in [k for k, until in self._spent.items() if until <= now]:
            del self._spent[key]
        for key in [k for k, (_, until) in self._places.items() if until <= now]:
            del self._places[key]

    async def spend(self, room_id: str, jti: str, until_ms: int) -> bool:
        self._since_prune += 1
        if self._since_prune >= PRUNE_EVERY:
            self._since_prune = 0
            self._prune()
        key = (room_id, digest(jti))
        held = self._spent.get(key)
        if held is not None and held > self.clock.wall_ms():
            return False
        self._spent[key] = until_ms
        return True

    async def forget(self, room_id: str, jti: str) -> None:
        self._spent.pop((room_id, digest(jti)), None)

    async def claim_place(self, room_id: str, sub: str, ticket: str, ttl_ms: int) -> str | None:
        held = await self.place(room_id, sub)
        if held is not None:
            return held
        self._places[(room_id, digest(sub))] = (ticket, self.clock.wall_ms() + ttl_ms)
        return None

    async def set_place(self, room_id: str, sub: str, ticket: str, ttl_ms: int) -> None:
        self._places[(room_id, digest(sub))] = (ticket, self.clock.wall_ms() + ttl_ms)

    async def drop_place(self, room_id: str, sub: str) -> None:
        self._places.pop((room_id, digest(sub)), None)

    async def place(self, room_id: str, sub: str) -> str | None:
        held = self._places.get((room_id, digest(sub)))
        if held is None or held[1] <= self.clock.wall_ms():
            return None
        return held[0]

    async def tally(self, room_id: str, name: str, n: int = 1) -> None:
        room = self._tallies.setdefault(room_id, {})
        room[name] = room.get(name, 0) + n

    async def tallies(self, room_id: str) -> dict[str, int]:
        return dict(self._tallies.get(room_id, {}))
