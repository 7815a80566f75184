"""A room's entry codes: each kept as ``SHA-256(room salt || code)`` (``entrycode.hashed``) with the lane it
puts its visitor in, the uses it allows and the uses spent. A redemption spends one use atomically: two
visitors racing for a code's last use, one wins and the other is told ``used_up``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

Outcome = Literal["ok", "invalid", "used_up"]
NO_LANE = ""  # how the counts name the codes without a lane


@dataclass(frozen=True, slots=True)
class Redemption:
    outcome: Outcome
    lane: str | None = None


@dataclass(frozen=True, slots=True)
class StoredCode:
    hash: bytes
    lane: str | None
    uses: int


class EntryCodes(Protocol):
    """What the codes routes write and the join redeems (``Context.entry_codes``)."""

    async def salt(self, room_id: str) -> bytes:
        """The room's salt, made on first use."""

    async def add(self, room_id: str, codes: Sequence[StoredCode]) -> int:
        """Store the codes the room does not hold yet; how many were stored."""

    async def redeem(self, room_id: str, code_hash: bytes) -> Redemption:
        """Spend one use of the code."""

    async def give_back(self, room_id: str, code_hash: bytes) -> None:
        """Un-spend one use (the join it was spent for was refused)."""

    async def counts(self, room_id: str) -> dict[str, dict[str, int]]:
        """Per lane (``NO_LANE`` for none): ``codes``, ``uses`` allowed, ``redeemed`` (uses spent)."""

    async def drop(self, room_id: str) -> int:
        """Remove every code of the room (and its salt); how many there were."""
