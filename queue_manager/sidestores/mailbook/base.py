"""The turn-e-mail address book: which ticket asked to be e-mailed when its turn comes, and where.

One entry per ticket (room, generation, number): the address, the language the waiting page spoke at
sign-up and the absolute link the e-mail carries back to the visitor's place. Addresses live only here: in this process
(``memory.MemoryAddressBook``, ``STORE=memory``) or in Valkey (``valkey.ValkeyAddressBook``), never in
PostgreSQL, the journal, the audit trail or a log line.

Every entry expires on its own (``expires_ms``, a key TTL on Valkey): at sign-up the backstop is the
ticket cookie's lifetime plus ``LAPSED_TTL_MS``; once the ticket's entry window lapsed it is
``LAPSED_TTL_MS``. The leader's turn-e-mail job (``jobs/turn_mail.py``) removes an entry as soon as its
ticket ends.

``claim`` is the once-only step: the first caller for an entry gets True and every later one False,
across a leader change too, so a turn is e-mailed at most once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Place:
    """A ticket, the way the address book keys it."""

    room_id: str
    gen: int
    n: int

    @property
    def member(self) -> str:
        """The index member naming this place (room ids never contain ':')."""
        return f"{self.room_id}:{self.gen}:{self.n}"

    @classmethod
    def parse(cls, member: str) -> Place | None:
        room_id, _, rest = member.partition(":")
        gen, _, n = rest.partition(":")
        if not room_id or not (gen + n).isascii() or not gen.isdigit() or not n.isdigit():
            return None
        return cls(room_id, int(gen), int(n))


@dataclass(frozen=True)
class Entry:
    place: Place
    address: str
    lang: str
    link: str  # the absolute URL the e-mail sends the visitor back to (worked out at sign-up)
    signed_ms: int
    sent: bool = False  # claimed for sending (sent, being sent, or given up)
    lapsed: bool = False  # the ticket's entry window lapsed: kept LAPSED_TTL_MS, then gone


class AddressBook(Protocol):
    """What the sign-up routes and the leader's turn-e-mail job keep and read (``Context.addresses``)."""

    kind: str

    async def put(self, entry: Entry, ttl_ms: int) -> None:
        """Keep ``entry`` (replacing the ticket's earlier address), gone after ``ttl_ms`` at the latest."""

    async def get(self, place: Place) -> Entry | None: ...

    async def remove(self, place: Place) -> bool:
        """Forget the ticket's address; False when there was none."""

    async def entries(self) -> list[Entry]:
        """Every live entry (what the leader's job scans)."""

    async def claim(self, place: Place) -> bool:
        """Mark the entry sent; True only for the first caller, and only while the entry exists."""

    async def lapse(self, place: Place, ttl_ms: int) -> None:
        """The ticket's entry window lapsed: the entry is gone ``ttl_ms`` from now (once; later calls keep it)."""

    async def counts(self) -> tuple[int, int]:
        """(entries, entries not yet sent and not lapsed)."""
