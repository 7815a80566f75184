"""A burst of refused visitor tickets in one room: one warning line per room per minute, naming the count
and the likely cause.

Every refused ticket is counted in ``qm_rejected_tokens_all_total`` (``metrics.Counters.reject_token``). A
trickle of them is stale bookmarks; a burst means everyone in a room was re-queued at once, which is what a
SECRET rotated without SECRET_PREVIOUS, instances that do not share one SECRET, or a moved clock does, and
those visitors are shown no error: they are quietly put at the back of the line. So once a room's refusals
reach :data:`BURST` within the last :data:`WINDOW_SEC` seconds the server logs a warning, and at most one a
minute per room while it goes on.

The tally is per second, over the last minute, on the monotonic clock; the reasons are the token's
(``bad_signature``, ``unknown_kid``, ``expired``, ``future``, ``wrong_room``, ``malformed``, ...), and the
most frequent one names the cause.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from dataclasses import dataclass, field

from queue_manager.clock import Clock

__all__ = ["BURST", "WINDOW_SEC", "TicketBursts", "likely_cause"]

log = logging.getLogger("queue_manager.tickets")

#: Refused tickets in one room within WINDOW_SEC that make a burst.
BURST = 20
WINDOW_SEC = 60
#: Rooms tracked at once (only rooms that exist reach the check; this bounds a fleet of thousands).
MAX_ROOMS = 10_000

_KEY = "signed with a key this server does not hold: SECRET was likely changed without SECRET_PREVIOUS, or the "
_CAUSES = {
    "bad_signature": _KEY + "instances do not share one SECRET",
    "unknown_kid": _KEY + "instances do not share one SECRET (compare the kid in their tickets)",
    "future": "issued in the future: this host's clock likely stepped back (or another instance's is ahead)",
    "expired": "older than TOKEN_MAX_AGE_SEC: this host's clock likely stepped forward, or the tickets are stale",
    "wrong_room": "tickets of another room: likely an integration sending one room's ticket to another",
}
_OTHER = "not tickets this server issues: likely a client or an integration sending a damaged token"


def likely_cause(reason: str) -> str:
    """What a burst of refusals for ``reason`` most likely means, in words an operator can act on."""
    return _CAUSES.get(reason, _OTHER)


@dataclass
class _Room:
    seconds: deque[tuple[int, Counter[str]]] = field(default_factory=deque)  # (whole second, reasons), oldest first
    logged_at: float | None = None


class TicketBursts:
    """Refused tickets per room over the last minute, and the warning when they come in a burst."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._rooms: dict[str, _Room] = {}
        self.logged = 0  # warning lines written (read by tests and nothing else)

    def note(self, room_id: str, reason: str) -> None:
        """One refused ticket of ``room_id``; logs the warning when it makes (or continues) a burst."""
        now = self.clock.mono()
        second = int(now)
        room = self._rooms.get(room_id)
        if room is None:
            if len(self._rooms) >= MAX_ROOMS:
                self._rooms.clear()
            room = self._rooms[room_id] = _Room()
        window = room.seconds
        while window and window[0][0] <= second - WINDOW_SEC:
            window.popleft()
        if not window or window[-1][0] != second:
            window.append((second, Counter()))
        window[-1][1][reason] += 1
        if room.logged_at is not None and now - room.logged_at < WINDOW_SEC:
            return
        reasons: Counter[str] = Counter()
        for _, tally in window:
            reasons.update(tally)
        count = sum(reasons.values())
        if count < BURST:
            return
        room.logged_at = now
        self.logged += 1
        by_reason = ", ".join(f"{name} {n}" for name, n in reasons.most_common())
        log.warning(
            "room %s: %d visitor tickets refused in the last minute (%s): %s. Those visitors re-join at the back "
            "of the line (qm_rejected_tokens_all_total counts every refusal)",
            room_id,
            count,
            by_reason,
            likely_cause(reasons.most_common(1)[0][0]),
        )
