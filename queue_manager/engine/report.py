"""What a live room reports to its operators: the room stats, the visitor drill-down, the pass waits.

The memory store's side of ``engine/view.py``: each function reads a live ``Room`` (after bringing
its clocks up to date where the answer depends on them) and hands the raw numbers to the renderer
both stores share, so a room reads the same whichever store holds it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from queue_manager.engine.deadlines import session_deadline
from queue_manager.engine.errors import EngineError
from queue_manager.engine.minute import MINUTE_MS, arrivals_last_minute, last_minute
from queue_manager.engine.view import MintedWaits, render_stats, render_ticket, waits_after

if TYPE_CHECKING:
    from queue_manager.engine.room import Room


def stats(room: Room) -> dict[str, Any]:
    """The room stats of the operator API (``render_stats``), now."""
    room.advance()
    head = room.line.head()
    now = room.clock.mono_ms()
    return render_stats(
        room.cfg,
        room.gen,
        room.effective_state(),
        room.clock.wall_ms(),
        waiting=len(room.line),
        pre_queue=len(room.prequeue),
        sessions=len(room.sessions),
        passes=len(room.passes),
        slot_holders=len(room.slot_holders),
        joins_last_minute=last_minute(room.join_times, now) + arrivals_last_minute(room.arrival_buckets, now),
        passed_last_minute=last_minute(room.pass_times, now),
        head_joined_ms=None if head is None else room.tickets[head[1]].joined_ms,
        joins_total=room.joins_total,
        passes_total=room.passes_total,
        unscoped_checks=room.unscoped_checks,
        blocked_returns=room.blocked_returns,
        refused_full=room.refused_full,
        sessions_revoked=room.sessions_revoked,
        next_ticket=room.next_n,
        rule_counts=[(r.matches, r.last_match_ms) for r in room.cfg.rules],
        created_ms=room.created_ms,
        access_counts=room.access_hits,
        lane_counts=lane_counts(room, now),
    )


def lane_counts(room: Room, now: int) -> list[tuple[int, int]]:
    """(waiting, released in the last minute) of each of the room's lanes, in order."""
    times = room.lane_pass_times
    while times and times[0][0] <= now - MINUTE_MS:
        times.popleft()
    released: dict[str, int] = {}
    for _, lane in times:
        released[lane] = released.get(lane, 0) + 1
    return [(room.lane_waiting(lane.id), released.get(lane.id, 0)) for lane in room.cfg.lanes]


def minted_waits(room: Room, after: tuple[int, int] | None) -> MintedWaits:
    """The waits of this generation's latest passes that a reader which has read up to ``after``
    (generation, pass ordinal) has not read (see ``view.waits_after``)."""
    return waits_after(room.gen, room.passes_total, room.wait_ms_total, room.waits, after)


def lookup(room: Room, query: str) -> dict[str, Any]:
    """The visitor drill-down: by ticket number or Ref code."""
    room.advance()
    q = query.strip()
    if q.isascii() and q.isdigit():
        if len(q) > 15:
            raise EngineError(404, "no_ticket", "No such ticket in this room.", query=q[:32])
        return describe(room, int(q))
    numbers = room.refs.get(q.upper())
    if not numbers:
        raise EngineError(404, "no_ticket", f"No ticket {query!r} in this room's current generation.", query=query)
    if len(numbers) > 1:
        return {"candidates": [describe(room, n) for n in numbers], "ref": q.upper()}
    return describe(room, numbers[0])


def describe(room: Room, n: int) -> dict[str, Any]:
    """Ticket ``n`` of the room's current generation as the drill-down shows it (``render_ticket``)."""
    cfg = room.cfg
    now_wall, now_mono = room.clock.wall_ms(), room.clock.mono_ms()
    t = room.tickets.get(n)
    if t is None:
        fin = room.finished.get(n)
        if fin is None:
            raise EngineError(404, "no_ticket", f"No ticket {n} in this room's current generation.", ticket=n)
        return render_ticket(
            cfg.id,
            room.gen,
            n,
            now_wall,
            now_mono,
            state=None,
            reason=fin.reason,
            joined_ms=fin.joined_ms,
            passed_ms=fin.passed_ms,
            waited_ms=fin.waited_ms,
        )
    return render_ticket(
        cfg.id,
        room.gen,
        n,
        now_wall,
        now_mono,
        state=t.state,
        reason=t.reason,
        joined_ms=t.joined_ms,
        passed_ms=t.passed_ms,
        waited_ms=t.waited_ms,
        position=room.position(t),
        has_cookie=t.cookie is not None,
        seen_mono=t.seen,
        pass_deadline_mono=t.pass_at + cfg.passed_ttl_sec * 1000 if t.state == "passed" else None,
        holds_slot=t.slot,
        session_deadline_mono=session_deadline(cfg, t) if t.state == "admitted" else None,
        lane=t.lane if cfg.lanes else None,
    )
