"""A place in line and what it becomes: waiting → passed → admitted → finished."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from queue_manager.engine.states import TicketState

_REF_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # Crockford base32: no I, L, O, U
_REF_PAIRS = tuple(a + b for a in _REF_ALPHABET for b in _REF_ALPHABET)  # 10 bits -> two characters


def make_ref(room_id: str, gen: int, n: int) -> str:
    """The short code a visitor reads out: a 30-bit digest naming ticket and room generation."""
    digest = hashlib.blake2b(f"{room_id}\x00{gen}\x00{n}".encode(), digest_size=4).digest()
    value = int.from_bytes(digest, "big") >> 2
    return _REF_PAIRS[value >> 20] + _REF_PAIRS[(value >> 10) & 1023] + _REF_PAIRS[value & 1023]


@dataclass(slots=True)
class Ticket:
    n: int
    ident: str
    fp: bytes
    fp2: bytes | None
    cookie: bytes | None
    joined_ms: int
    seen: int  # monotonic ms the holder was last seen
    return_url: str | None = None
    line_seq: int = 0  # the line sequence number of its place while waiting (0: not in line)
    charged: bool = False  # counted against queueMaxPerIp (an ejected place is not)
    state: TicketState = "waiting"
    reason: str | None = None  # why the visitor was put back (ejected, expired, …)
    passed_ms: int | None = None  # first promotion (kept across reclaims and ejects' re-grants)
    waited_ms: int | None = None
    pass_at: int = 0  # monotonic ms the current pass was granted
    slot: bool = False  # the unused pass holds a capacity slot
    told: bool = False  # the holder has been shown the pass since it was granted
    bounced_at: int | None = None  # last time the door turned this pass away (no slot)
    door: bytes | None = None  # hash of the door key of the live session
    session_start: int = 0
    session_last: int = 0
    session_touched: int = 0  # last slide written to the journal
    lane: str | None = None  # the room's lane it waits (or waited) in; None: the room has no lanes
    lane_seq: int = 0  # the sequence number of its place in its lane's line while waiting (0: none)


@dataclass(slots=True)
class PreEntry:
    """A pre-queue entry before the doors open: an opaque handle, no number."""

    handle: str
    ident: str
    fp: bytes
    fp2: bytes | None
    cookie: bytes | None
    joined_ms: int
    seen: int
    return_url: str | None = None
    lane: str | None = None  # the lane its ticket joins at the draw (engine/lanes.py)


@dataclass(slots=True)
class Finished:
    """What is kept of a ticket the engine has finished with (the last 50,000 per room)."""

    joined_ms: int
    passed_ms: int | None
    waited_ms: int | None
    reason: str
    ended_ms: int
