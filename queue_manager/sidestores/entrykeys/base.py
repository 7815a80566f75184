"""A room's entry keys: the current one and, for the overlap after a rotation, the one before it.

What is kept is the key sealed (``invitation.seal``: encrypted under SECRET with its room and kid bound
in), never the key itself: the route that creates a key answers it once and keeps only the sealed form.
A key replaced by a rotation stays valid until ``valid_until_ms``; one past it is never returned.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class SealedKey:
    kid: str
    sealed: bytes
    created_ms: int
    valid_until_ms: int | None  # None: the current key


class EntryKeys(Protocol):
    """What the entry-key route writes and the join reads (``Context.entry_keys``)."""

    async def rotate(self, room_id: str, key: SealedKey, overlap_ms: int) -> SealedKey | None:
        """Make ``key`` the room's current key; the key it replaces (returned, with its end) stays valid
        for ``overlap_ms`` more, and any older one no later than that."""

    async def keys(self, room_id: str) -> list[SealedKey]:
        """The room's keys still valid: the current one first."""

    async def drop(self, room_id: str) -> None:
        """Forget every key of the room (the room was deleted)."""
