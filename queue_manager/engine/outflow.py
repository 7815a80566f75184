"""The outflow: the one-second tick that lets the line move at the room's rate.

Credit accrues at ``ratePerMinute`` on the monotonic clock (``SLOT`` units per slot, so the
arithmetic is exact in integers) and banks at most one slot. Each tick promotes from the head of the
line while there is credit for a slot and (with ``maxConcurrent``) a free one. At their turn, an
absent holder (unseen for ``presenceSec``) is promoted in order without a slot and without costing
the rate. Paused, bypass, scheduled or a rate of 0 promote nobody. Each promotion is the room's
``promote`` transition.

The room's ``queueing`` method changes whom a tick promotes: ``fifo`` the head, as above; ``random``
a holder drawn uniformly from those waiting and present (``engine/release.py``; the absent are left in
line); ``passthrough`` everyone waiting, at once, without a slot and whatever the rate; ``reject``
nobody.

A room with lanes (``engine/lanes.py``) releases lane by lane: each release first lets the absent
holders at the head of every lane through (no slot, no rate, as above), then picks the lane
(``lanes.pick_lane``: priority or share, among the lanes with somebody at the head) and promotes that
lane's head (``fifo``) or a holder drawn from that lane (``random``; a lane whose draw finds nobody
present sits out the rest of the tick).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from queue_manager.engine.deadlines import absent
from queue_manager.engine.lanes import pick_lane
from queue_manager.engine.minute import arrivals_last_minute, last_minute
from queue_manager.engine.release import DRAW_TRIES, draw_index

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
    method = cfg.queueing
    if method == "passthrough":
        return _pass_everyone(room, now) if state == "active" else 0
    moving = state == "active" and cfg.rate_per_minute > 0 and method != "reject"
    if moving:
        room.credit += cfg.rate_per_minute * elapsed
    if moving and cfg.lanes:
        promoted = _lanes_random(room, now) if method == "random" else _lanes_fifo(room, now)
        moving = False
    else:
        promoted = _draw(room, now) if moving and method == "random" else 0
    while moving and method == "fifo":
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


def _pass_everyone(room: Room, now: int) -> int:
    """passthrough: everyone still waiting (those in line when the method was switched) gets a pass, no slot."""
    promoted = 0
    while (head := room.line.head()) is not None:
        room.promote(room.tickets[head[1]], slot=False, now=now)
        promoted += 1
    room.credit = min(room.credit, SLOT)
    return promoted


def _draw(room: Room, now: int) -> int:
    """random: while there is credit for a slot (and a free one), promote a holder drawn from those
    waiting and present (``engine/release.py``). Absent holders stay in line."""
    cfg = room.cfg
    line = room.line
    salt: str | None = None
    promoted = 0
    while len(line) and room.credit >= SLOT:
        free = room.free_slots(now)
        if free is not None and free <= 0:
            break
        if salt is None:
            salt = room.rng.token_hex(8)
        picked = None
        for attempt in range(DRAW_TRIES):
            index = draw_index(salt, room.passes_total, attempt, len(line))
            if index is None:
                continue
            t = room.tickets[line.nth(index + 1)]
            if not absent(cfg, t.seen, now):
                picked = t
                break
        if picked is None:
            break
        room.credit -= SLOT
        room.promote(picked, slot=True, now=now)
        promoted += 1
    if room.credit > SLOT:
        room.credit = SLOT
    return promoted


def _clear_absent_heads(room: Room, now: int) -> int:
    """Every lane's absent holders at its head get their pass (no slot, no rate), lane by lane."""
    promoted = 0
    for lane in room.cfg.lanes:
        line = room.lane_lines[lane.id]
        while (head := line.head()) is not None:
            t = room.tickets[head[1]]
            if not absent(room.cfg, t.seen, now):
                break
            room.promote(t, slot=False, now=now)
            promoted += 1
    return promoted


def _lanes_fifo(room: Room, now: int) -> int:
    """fifo with lanes: while there is credit for a slot (and a free one), the head of the lane picked."""
    promoted = _clear_absent_heads(room, now)
    while room.credit >= SLOT:
        ready = [lane.id for lane in room.cfg.lanes if len(room.lane_lines[lane.id])]
        if not ready:
            break
        free = room.free_slots(now)
        if free is not None and free <= 0:
            break
        lane_id = pick_lane(room.cfg.lanes, ready, room.lane_credit)
        assert lane_id is not None
        head = room.lane_lines[lane_id].head()
        assert head is not None
        room.credit -= SLOT
        room.promote(room.tickets[head[1]], slot=True, now=now)
        promoted += 1 + _clear_absent_heads(room, now)
    return promoted


def _lanes_random(room: Room, now: int) -> int:
    """random with lanes: the lane picked as in fifo, then a holder drawn from that lane's line."""
    cfg = room.cfg
    salt: str | None = None
    promoted = 0
    dry: set[str] = set()  # lanes whose draw found nobody present this tick
    while room.credit >= SLOT:
        ready = [lane.id for lane in cfg.lanes if lane.id not in dry and len(room.lane_lines[lane.id])]
        if not ready:
            break
        free = room.free_slots(now)
        if free is not None and free <= 0:
            break
        if salt is None:
            salt = room.rng.token_hex(8)
        lane_id = pick_lane(cfg.lanes, ready, room.lane_credit)
        assert lane_id is not None
        line = room.lane_lines[lane_id]
        picked = None
        for attempt in range(DRAW_TRIES):
            index = draw_index(salt, room.passes_total, attempt, len(line))
            if index is None:
                continue
            t = room.tickets[line.nth(index + 1)]
            if not absent(cfg, t.seen, now):
                picked = t
                break
        if picked is None:
            dry.add(lane_id)
            continue
        room.credit -= SLOT
        room.promote(picked, slot=True, now=now)
        promoted += 1
    return promoted
