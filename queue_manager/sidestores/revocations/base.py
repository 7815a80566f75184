"""The revocation list of edge passes: the pass ids of a room refused before their passes expire.

An entry is kept only as long as a pass naming it could still be valid (``until_ms``, the revoking
instant plus EDGE_PASS_TTL_SEC), so the list a connector fetches holds the passes revoked in the last
pass lifetime and nothing older. A flush revokes every pass of the room at once with one cutoff instead
of one id per pass: a pass issued (``iat``) before ``revoked_before`` is refused, and the cutoff too is
kept only while a pass issued before it could still be valid. It lives in this process
(``memory.MemoryRevocations``, ``STORE=memory``) or in Valkey for the fleet (``valkey.ValkeyRevocations``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class RevocationList(Protocol):
    """What the edge-pass routes revoke and read (``Context.revocations``)."""

    async def revoke(self, room_id: str, ids: Sequence[str], until_ms: int) -> None:
        """List ``ids`` for ``room_id`` until ``until_ms`` (wall ms); a later ``until_ms`` wins."""

    async def revoked(self, room_id: str) -> list[str]:
        """The ids listed for ``room_id`` now, sorted."""

    async def revoke_before(self, room_id: str, before_sec: int, until_ms: int) -> None:
        """Refuse every pass of ``room_id`` issued before ``before_sec`` (an ``iat``) until ``until_ms``;
        the latest cutoff wins."""

    async def revoked_before(self, room_id: str) -> int | None:
        """The cutoff in force for ``room_id`` now (None: no flush within a pass lifetime)."""
