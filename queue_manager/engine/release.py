"""The random release (``queueing: random``): which waiting visitor each release draws.

At each release the visitor let through is drawn uniformly from those waiting and present. A tick
brings a fresh salt from the room's random source; the draw for a release is a function of that salt,
the room's pass ordinal (``passesTotal`` before the release) and a try number, so the Lua twin
(``store/valkey/lua/tick.lua``) draws the same visitor from the same salt:

* ``u`` = the first 32 bits (8 hex digits) of SHA-1(``"<salt>:<ordinal>:<try>"``), big-endian;
* with ``size`` people in line, ``u`` past the largest multiple of ``size`` below 2³² is thrown away
  (so no position is favoured) and the next try is made; otherwise the drawn place is ``u mod size``
  (0: the front);
* a drawn place whose holder is absent (unseen for ``presenceSec``) is left in line and the next try
  is made, so the draw is uniform among those present; after ``DRAW_TRIES`` tries without a present
  holder nobody is released this tick.

The estimate a visitor in a random line is shown (``wait_range``) and the odds of the next minute
(``next_minute_odds``) are derived in docs/OPERATIONS.md ("Queueing methods").
"""

from __future__ import annotations

import hashlib

from queue_manager.engine.states import EffectiveState

DRAW_TRIES = 32
_SPAN = 1 << 32


def draw_index(salt: str, ordinal: int, attempt: int, size: int) -> int | None:
    """The place (0 = the front) of a line of ``size`` drawn for try ``attempt`` of release ``ordinal``;
    None when that try is thrown away (the unbiased cut)."""
    u = int(hashlib.sha1(f"{salt}:{ordinal}:{attempt}".encode()).hexdigest()[:8], 16)
    if u >= (_SPAN // size) * size:
        return None
    return u % size


def wait_range(waiting: int | None, room_state: EffectiveState, rate_per_minute: int) -> tuple[int, int] | None:
    """(p25, p75) in seconds of the time until a visitor in a random line of ``waiting`` people is let
    through, at ``rate_per_minute`` and with no one else joining: the visitor's turn is uniform on
    1 … ``waiting``, so the quartiles are the turns ⌈waiting/4⌉ and ⌈3·waiting/4⌉, each 60/rate s apart.
    None when nobody waits or the line does not move."""
    if not waiting or room_state != "active" or rate_per_minute <= 0:
        return None
    low = -(-waiting // 4)
    high = -(-3 * waiting // 4)
    return max(1, -(-low * 60 // rate_per_minute)), max(1, -(-high * 60 // rate_per_minute))


def next_minute_odds(waiting: int | None, room_state: EffectiveState, rate_per_minute: int) -> int | None:
    """The chance, in whole percent, of being let through within the next minute: ``rate`` draws from
    ``waiting`` people, min(100, ⌊100·rate/waiting⌋). None when nobody waits or the line does not move."""
    if not waiting or room_state != "active" or rate_per_minute <= 0:
        return None
    return min(100, 100 * rate_per_minute // waiting)
