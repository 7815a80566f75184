"""STORE=memory: the edge passes' revocation list in this process (the interface: ``base.RevocationList``).

Each entry is kept until its ``until_ms``, and the flush cutoff of a room likewise; gone on restart.
"""

from __future__ import annotations

from collections.abc import Sequence

from queue_manager.clock import Clock


class MemoryRevocations:
    """The revoked pass ids and flush cutoffs of every room, in this process."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._rooms: dict[str, dict[str, int]] = {}
        self._before: dict[str, tuple[int, int]] = {}  # room -> (cutoff s, until wall ms)

    async def revoke(self, room_id: str, ids: Sequence[str], until_ms: int) -> None:
        room = self._rooms.setdefault(room_id, {})
        for pass_id in ids:
            room[pass_id] = max(room.get(pass_id, 0), until_ms)

    async def revoked(self, room_id: str) -> list[str]:
        room = self._rooms.get(room_id)
        if not room:
            return []
        now = self.clock.wall_ms()
        for pass_id in [i for i, until in room.items() if until <= now]:
            del room[pass_id]
        if not room:
            del self._rooms[room_id]
        return sorted(room)

    async def revoke_before(self, room_id: str, before_sec: int, until_ms: int) -> None:
        old = self._before.get(room_id)
        if old is not None:
            before_sec, until_ms = max(before_sec, old[0]), max(until_ms, old[1])
        self._before[room_id] = (before_sec, until_ms)

    async def revoked_before(self, room_id: str) -> int | None:
        entry = self._before.get(room_id)
        if entry is None:
            return None
        if entry[1] <= self.clock.wall_ms():
            del self._before[room_id]
            return None
        return entry[0]
