"""The revocation list of edge passes: the pass ids of a room refused before their passes expire.

An entry is kept only as long as a pass naming it could still be valid (``until_ms``, the revoking
instant plus EDGE_PASS_TTL_SEC), so the list a connector fetches holds the passes revoked in the last
pass lifetime and nothing older. A flush revokes every pass of the room at once with one cutoff instead
of one id per pass: a pass issued (``iat``) before ``revoked_before`` is refused, and the cutoff too is
kept only while a pass issued before it could still be valid. It lives in this process
(``MemoryRevocations``, ``STORE=memory``) or in Valkey for the fleet (``sidestores/revocations/valkey.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from queue_manager.clock import Clock


class RevocationList(Protocol):
    async def revoke(self, room_id: str, ids: Sequence[str], until_ms: int) -> None:
        """List ``ids`` for ``room_id`` until ``until_ms`` (wall ms); a later ``until_ms`` wins."""

    async def revoked(self, room_id: str) -> list[str]:
        """The ids listed for ``room_id`` now, sorted."""

    async def revoke_before(self, room_id: str, before_sec: int, until_ms: int) -> None:
        """Refuse every pass of ``room_id`` issued before ``before_sec`` (an ``iat``) until ``until_ms``;
        the latest cutoff wins."""

    async def revoked_before(self, room_id: str) -> int | None:
        """The cutoff in force for ``room_id`` now (None: no flush within a pass lifetime)."""


class MemoryRevocations:
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
