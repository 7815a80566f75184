"""The outflow: the one-second tick that lets the line move at the room's rate.

Credit accrues at ``ratePerMinute`` on the monotonic clock (``SLOT`` units per slot, so the
arithmetic is exact in integers) and banks at most one slot. Each tick promotes from the head of the
line while there is credit for a slot and (with ``maxConcurrent``) a free one. At their turn, an
absent holder (unseen for ``presenceSec``) is promoted in order without a slot and without costing
the rate. Paused, bypass, scheduled or a rate of 0 promote nobody. Each promotion is the room's
``promote`` transition.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from queue_manager.engine.deadlines import absent
from queue_manager.engine.minute import arrivals_last_minute, last_minute

if TYPE_CHECKING:
    from queue_manager.engine.room import Room

SLOT = 60_000  # credit units per slot: ratePerMinute × elapsed ms accrues credit exactly, in integers


def settle_credit(room: Room) -> None:
    """Credit the time since the last tick now, capped at the one-slot bank (a place minted into an
    empty line: credit earned while nobody waited banks at most one slot)."""
    now = room.clock.mono_ms()
    if room.effective_state() == "active" and room.cfg.rate_per_minute > 0:
        elapsed = max(0, now - room.last_tick)
        room.credit = min(SLOT, room.credit + room.cfg.rate_per_minute * elapsed)
    else:
        room.credit = min(SLOT, room.credit)
    room.last_tick = now


def tick(room: Room) -> int:
    """The one-second tick: credit the elapsed time and promote. Returns how many were promoted."""
    now = room.clock.mono_ms()
    elapsed = max(0, now - room.last_tick)
    room.last_tick = now
    room.advance()
    last_minute(room.join_times, now)  # keep the per-minute windows bounded
    arrivals_last_minute(room.arrival_buckets, now)
    last_minute(room.pass_times, now)
    state = room.effective_state()
    cfg = room.cfg
    moving = state == "active" and cfg.rate_per_minute > 0
    if moving:
        room.credit += cfg.rate_per_minute * elapsed
    promoted = 0
    while moving:
        head = room.line.head()
        if head is None:
            break
        t = room.tickets[head[1]]
        if absent(cfg, t.seen, now):
            room.promote(t, slot=False, now=now)
            promoted += 1
            continue
        if room.credit < SLOT:
            break
        free = room.free_slots(now)
        if free is not None and free <= 0:
            break
        room.credit -= SLOT
        room.promote(t, slot=True, now=now)
        promoted += 1
    if room.credit > SLOT:
        room.credit = SLOT  # the one-slot bank
    return promoted
