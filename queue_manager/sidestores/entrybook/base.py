"""The entry book: what the join remembers about invitations and codes, for one process or the fleet.

* a spent token id (``jti``) is kept until the token's ``exp``: a second use is refused (``token_used``);
* a user key (``sub``) holds one place per room: the signed ticket of its place, set once (the first of
  two racing joins wins and the other takes the same place) and refreshed while it is used;
* the counts the room read and the reports show (tokens accepted, refusals by code, codes redeemed).
"""

from __future__ import annotations

import hashlib
from typing import Any, Protocol


def digest(value: str) -> str:
    """The SHA-256 of a claim, hex: the name a token id or user key is kept under (bounded, opaque)."""
    return hashlib.sha256(value.encode()).hexdigest()


#: the counts of codes kept beside the tokens' (tallies ``codeIssued``, ``codeRedeemed``, ``code_*`` refusals)
ACCEPTED = "accepted"
CODE_ISSUED = "codeIssued"
CODE_REDEEMED = "codeRedeemed"


def entry_counts(tallies: dict[str, int]) -> dict[str, object]:
    """A room's entry counts as the room read shows them (``entryCounts``)."""
    return {
        "tokensAccepted": tallies.get(ACCEPTED, 0),
        "tokensRefused": {k: v for k, v in sorted(tallies.items()) if k.startswith("token_") and v},
        "codesIssued": tallies.get(CODE_ISSUED, 0),
        "codesRedeemed": tallies.get(CODE_REDEEMED, 0),
        "codesRefused": {k: v for k, v in sorted(tallies.items()) if k.startswith("code_") and v},
    }


def report_tallies(counts: dict[str, object]) -> dict[str, int]:
    """The entry counts as the hourly history's tallies (``history.rows.TALLIES``): refusals summed."""

    def total(value: object) -> int:
        return sum(value.values()) if isinstance(value, dict) else int(value) if isinstance(value, int) else 0

    return {
        "tokensAccepted": total(counts["tokensAccepted"]),
        "tokensRefused": total(counts["tokensRefused"]),
        "codesIssued": total(counts["codesIssued"]),
        "codesRedeemed": total(counts["codesRedeemed"]),
        "codesRefused": total(counts["codesRefused"]),
    }


async def with_entry_tallies(book: EntryBook, summaries: list[dict[str, Any]]) -> None:
    """Add each sampled room's entry counts to its summary (what the reports count per hour), for the rooms
    whose entry is not open: an open room's joins ask nothing of the book (a token aside, counted too once the
    room's entry changes)."""
    for summary in summaries:
        if summary.get("entry", "open") != "open":
            summary.update(report_tallies(entry_counts(await book.tallies(str(summary["id"])))))


class EntryBook(Protocol):
    """What the join and the room read ask of the entry book (``Context.entry_book``)."""

    async def spend(self, room_id: str, jti: str, until_ms: int) -> bool:
        """Mark ``jti`` spent in ``room_id`` until ``until_ms`` (wall ms); False when it already was."""

    async def forget(self, room_id: str, jti: str) -> None:
        """Unspend ``jti`` (its join was refused for a reason of the room's, not the token's)."""

    async def claim_place(self, room_id: str, sub: str, ticket: str, ttl_ms: int) -> str | None:
        """Set the user key's place to ``ticket`` when it has none; the place it already has otherwise."""

    async def set_place(self, room_id: str, sub: str, ticket: str, ttl_ms: int) -> None:
        """Set (or refresh) the user key's place."""

    async def drop_place(self, room_id: str, sub: str) -> None:
        """Forget the user key's place (its join took none)."""

    async def place(self, room_id: str, sub: str) -> str | None:
        """The user key's place, if it has one."""

    async def tally(self, room_id: str, name: str, n: int = 1) -> None:
        """Add ``n`` to the room's count ``name`` (``accepted``, a refusal code, ``codeRedeemed`` …)."""

    async def tallies(self, room_id: str) -> dict[str, int]:
        """The room's counts."""
