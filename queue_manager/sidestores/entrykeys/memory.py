"""STORE=memory: the entry keys in this process (the interface: ``base.EntryKeys``). Gone on restart,
like the rooms themselves."""

from __future__ import annotations

from dataclasses import replace

from queue_manager.clock import Clock
from queue_manager.sidestores.entrykeys.base import SealedKey


class MemoryEntryKeys:
    """Every room's sealed keys, in this process."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._rooms: dict[str, list[SealedKey]] = {}

    async def rotate(self, room_id: str, key: SealedKey, overlap_ms: int) -> SealedKey | None:
        now = self.clock.wall_ms()
        end = now + overlap_ms
        previous = None
        kept = [key]
        for old in self._rooms.get(room_id, []):
            if old.valid_until_ms is None:
                previous = replace(old, valid_until_ms=end)
                kept.append(previous)
            elif old.valid_until_ms > now:
                kept.append(replace(old, valid_until_ms=min(old.valid_until_ms, end)))
        self._rooms[room_id] = kept
        return previous

    async def keys(self, room_id: str) -> list[SealedKey]:
        now = self.clock.wall_ms()
        return [k for k in self._rooms.get(room_id, []) if k.valid_until_ms is None or k.valid_until_ms > now]

    async def drop(self, room_id: str) -> None:
        self._rooms.pop(room_id, None)
