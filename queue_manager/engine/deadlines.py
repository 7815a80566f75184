"""When a pass's slot and a session run out, and when a holder counts as absent.

Pure functions of a room's settings and a ticket, in integer monotonic milliseconds (the Valkey
store's Lua computes the same). ``Room`` keeps one deadline heap per clock and re-reads the real
deadline here when an entry comes due, so settings that lengthen a clock need no rescheduling.
"""

from __future__ import annotations

from queue_manager.engine.model import RoomConfig
from queue_manager.engine.ticket import Ticket


def absent(cfg: RoomConfig, seen: int, now: int) -> bool:
    """The holder, last seen at ``seen``, has been unseen for ``presenceSec`` (never with presence off)."""
    presence = cfg.presence_sec
    return presence is not None and now - seen >= presence * 1000


def slot_deadline(cfg: RoomConfig, t: Ticket) -> int:
    """An unused pass holds its capacity slot for the claim window, or — its holder never told — until
    the holder has been unseen for ``presenceSec``."""
    deadline = t.pass_at + cfg.claim_window_sec * 1000
    if not t.told and cfg.presence_sec is not None:
        deadline = min(deadline, t.seen + cfg.presence_sec * 1000)
    return deadline


def session_deadline(cfg: RoomConfig, t: Ticket) -> int:
    """A session ends ``sessionTtlSec`` after its last slide, and at the latest ``sessionMaxSec`` after it began."""
    deadline = t.session_last + cfg.session_ttl_sec * 1000
    if cfg.session_max_sec is not None:
        deadline = min(deadline, t.session_start + cfg.session_max_sec * 1000)
    return deadline
