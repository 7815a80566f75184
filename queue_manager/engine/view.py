"""What a visitor and an operator are told, rendered once for every store.

The renderers here are pure: each store gathers its raw numbers (the memory store from a live
``Room``, the Valkey store from a Lua reply) and hands them to the same renderer, so the ETA, the
pass expiry and the room stats are computed in exactly one place. (The Lua scripts compute what
they need for their own decisions in Lua; the store equivalence tests hold both sides together.)

* ``eta_sec``: the wait estimate for a place (or a line) of that length.
* ``render_visitor_view``: a ``VisitorView`` from what a join or status resolved to.
* ``render_stats``: the room stats of the operator API.
* ``render_ticket``: one ticket as the drill-down shows it.
* ``visitor_view``: ``render_visitor_view`` over a live ``Room``, now (the memory store's path; the
  operator's side of a live room is ``engine/report.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any

from queue_manager.engine.lanes import Lane, ahead_lanes, lane_eta_sec
from queue_manager.engine.model import RoomConfig
from queue_manager.engine.release import next_minute_odds, wait_range
from queue_manager.engine.states import EffectiveState, TicketState, ViewState
from queue_manager.engine.ticket import Ticket, make_ref

if TYPE_CHECKING:
    from queue_manager.engine.room import Room
    from queue_manager.engine.visitor import Lookup

#: Waits a room keeps of its latest passes minted from the line (``Room.waits``; the Valkey key ``wt``):
#: a reader that comes back within this many passes reads every one of them. A busy room's list is about
#: 22 KB on Valkey (a list of integers) and about 160 KB in the memory store (a deque of Python ints).
WAITS_KEPT = 4096


@dataclass(frozen=True, slots=True)
class MintedWaits:
    """The waits of a room generation's latest passes minted from the line, as a reader asked for them.

    ``last`` is the ordinal of the generation's newest pass (its ``passesTotal``); ``waits_ms`` are the
    waits (pass minted − joined, ms) of passes ``last - len(waits_ms) + 1`` … ``last``, oldest first:
    those the reader had not read yet that the room still keeps (at most ``WAITS_KEPT``); ``total_ms`` is
    the sum of the waits of passes 1 … ``last``, so a reader that fell more than ``WAITS_KEPT`` passes
    behind still counts the waits it missed, and their sum, exactly (not their values one by one).
    """

    gen: int
    last: int
    total_ms: int
    waits_ms: list[int]

    def numbered(self) -> list[tuple[int, int]]:
        """(ordinal, wait ms) of each wait, oldest first."""
        first = self.last - len(self.waits_ms) + 1
        return [(first + i, ms) for i, ms in enumerate(self.waits_ms)]


def waits_after(gen: int, last: int, total_ms: int, kept: Sequence[int], after: tuple[int, int] | None) -> MintedWaits:
    """What a reader that has read up to ``after`` (generation, ordinal; None: nothing of this room) gets of
    the waits ``kept`` (the newest ends at ordinal ``last``): those past its ordinal in the same generation,
    every one kept in another."""
    if after is not None and after[0] == gen:
        fresh = max(0, min(len(kept), last - after[1]))
    else:
        fresh = len(kept)
    return MintedWaits(gen, last, total_ms, list(islice(kept, len(kept) - fresh, None)) if fresh else [])


@dataclass(slots=True)
class VisitorView:
    room_id: str
    gen: int
    state: ViewState
    room_state: EffectiveState
    target_url: str
    rate_per_minute: int
    position: int | None = None
    ticket: int | None = None
    handle: str | None = None
    ref: str | None = None
    eta_sec: int | None = None
    joined_ms: int | None = None
    opens_at_ms: int | None = None
    pre_count: int | None = None
    pass_expires_ms: int | None = None
    return_url: str | None = None
    reason: str | None = None
    new: bool = False
    draw_commitment: str | None = None  # while the doors are shut: the drop's published commitment
    queueing: str = "fifo"  # the room's method (model.QUEUEING_METHODS)
    # a random line, instead of a position: how many wait, the p25–p75 wait range (s), next minute's odds (%)
    waiting: int | None = None
    eta_low_sec: int | None = None
    eta_high_sec: int | None = None
    odds_pct: int | None = None
    lane: str | None = None  # the lane of a room with lanes (position and ETA are within it)

    @property
    def ahead(self) -> int | None:
        return None if self.position is None else self.position - 1


def eta_sec(places: int | None, room_state: EffectiveState, rate_per_minute: int) -> int | None:
    """Seconds until ``places`` more promotions at ``rate_per_minute`` (rounded up, at least 1).

    None when nothing is waiting (``places`` None or 0) or the line does not move (the room is not
    active, or its rate is 0).
    """
    if not places or room_state != "active" or rate_per_minute <= 0:
        return None
    return max(1, -(-places * 60 // rate_per_minute))


def render_visitor_view(
    cfg: RoomConfig,
    gen: int,
    room_state: EffectiveState,
    now_wall: int,
    now_mono: int,
    *,
    reason: str | None,
    new: bool,
    n: int | None = None,
    handle: str | None = None,
    pre_count: int | None = None,
    finished_joined_ms: int | None = None,
    ticket_state: TicketState | None = None,
    ticket_reason: str | None = None,
    joined_ms: int | None = None,
    return_url: str | None = None,
    position: int | None = None,
    pass_at: int = 0,
    draw_commitment: str | None = None,
    waiting: int | None = None,
    lane: str | None = None,
    lane_ahead: int = 0,
) -> VisitorView:
    """The view of what a join or status resolved to, from raw numbers.

    ``reason``/``new``: why the presented token was not a live place, and whether a place was just
    made. Then one of: a pre-queue entry (``handle``, ``pre_count`` entries in all); a live ticket
    ``n`` in ``ticket_state`` (its own ``ticket_reason``, ``position`` while waiting, ``pass_at``
    monotonic ms while passed); or no live place (``n`` the number the token named, if any, and
    ``finished_joined_ms`` when that ticket is finished). ``joined_ms``/``return_url`` belong to the
    entry or ticket. ``now_wall``/``now_mono`` are the instant rendered at (ms). ``draw_commitment``:
    the drop's commitment, shown while the room is scheduled. ``waiting``: how many are in line (read
    for a random line, whose visitors are shown a range instead of a position). ``lane``: the ticket's
    lane in a room with lanes; then ``position`` and ``waiting`` are its lane's, and ``lane_ahead``
    counts everyone waiting in the lanes a priority room releases before it (``lane_view``).
    """
    view = VisitorView(
        room_id=cfg.id,
        gen=gen,
        state="expired",
        room_state=room_state,
        target_url=cfg.target_url,
        rate_per_minute=cfg.rate_per_minute,
        reason=reason,
        new=new,
        opens_at_ms=cfg.opens_at_ms,
        draw_commitment=draw_commitment if room_state == "scheduled" else None,
        queueing=cfg.queueing,
    )
    if handle is not None:
        view.state = "scheduled"
        view.handle = handle
        view.joined_ms = joined_ms
        view.pre_count = pre_count
        view.return_url = return_url
        return view
    if ticket_state is None or n is None:
        if room_state == "bypass" and finished_joined_ms is None and n is None:
            view.state = "bypass"
        if finished_joined_ms is not None:
            view.joined_ms = finished_joined_ms
        return view
    view.ticket = n
    view.ref = make_ref(cfg.id, gen, n)
    view.joined_ms = joined_ms
    view.return_url = return_url
    view.reason = ticket_reason if reason is None else reason
    view.state = ticket_state
    if cfg.lanes:
        view.lane = lane
    if ticket_state == "waiting" and cfg.lanes:
        _lane_view(view, cfg, room_state, lane, position, waiting, lane_ahead)
    elif ticket_state == "waiting" and cfg.queueing == "random":
        view.waiting = waiting
        span = wait_range(waiting, room_state, cfg.rate_per_minute)
        if span is not None:
            view.eta_low_sec, view.eta_high_sec = span
        view.odds_pct = next_minute_odds(waiting, room_state, cfg.rate_per_minute)
    elif ticket_state == "waiting":
        view.position = position
        view.eta_sec = eta_sec(position, room_state, cfg.rate_per_minute)
    elif ticket_state == "passed":
        view.pass_expires_ms = now_wall + (pass_at + cfg.passed_ttl_sec * 1000 - now_mono)
    return view


def lane_rate(lanes: Sequence[Lane], lane: str | None, rate_per_minute: int) -> int:
    """The releases a minute a lane can count on: the room's rate × its share (a lower bound: the other
    lanes may leave it theirs), the room's rate for a priority lane (after the lanes ahead of it)."""
    for spec in lanes:
        if spec.id == lane and spec.share is not None:
            return rate_per_minute * spec.share // 100
    return rate_per_minute


def _lane_view(
    view: VisitorView,
    cfg: RoomConfig,
    room_state: EffectiveState,
    lane: str | None,
    position: int | None,
    waiting: int | None,
    ahead: int,
) -> None:
    """A waiting place in a room with lanes: its position in its lane; its ETA from the lane's rate,
    counting the people a priority room releases first."""
    running = room_state == "active"
    if cfg.queueing != "random":
        view.position = position
        places = None if position is None else position + ahead
        view.eta_sec = lane_eta_sec(cfg.lanes, lane, places, running, cfg.rate_per_minute)
        return
    view.waiting = waiting
    rate = lane_rate(cfg.lanes, lane, cfg.rate_per_minute)
    span = wait_range(waiting, room_state, rate)
    first = eta_sec(ahead, room_state, cfg.rate_per_minute) or 0
    if span is not None:
        view.eta_low_sec, view.eta_high_sec = span[0] + first, span[1] + first
    view.odds_pct = next_minute_odds(waiting, room_state, max(0, rate - ahead))


def lane_ahead(room: Room, lane: str | None) -> int:
    """How many wait in the lanes a priority room releases before ``lane`` (0 under share)."""
    if lane is None:
        return 0
    return sum(room.lane_waiting(other) for other in ahead_lanes(room.cfg.lanes, lane))


def visitor_view(room: Room, found: Lookup) -> VisitorView:
    """The view of ``found`` in a live room, now (every stream frame renders one)."""
    cfg, gen, state = room.cfg, room.gen, room.effective_state()
    clock = room.clock
    wall, mono = clock.wall_ms(), clock.mono_ms()
    record = room.draw_record
    commitment = record.commitment if record is not None and record.drawn is None else None
    if found.pre is not None:
        pre = found.pre
        return render_visitor_view(
            cfg,
            gen,
            state,
            wall,
            mono,
            reason=found.reason,
            new=found.new,
            draw_commitment=commitment,
            handle=pre.handle,
            pre_count=len(room.prequeue),
            joined_ms=pre.joined_ms,
            return_url=pre.return_url,
        )
    t = found.ticket
    if t is None:
        finished = found.finished
        return render_visitor_view(
            cfg,
            gen,
            state,
            wall,
            mono,
            reason=found.reason,
            new=found.new,
            draw_commitment=commitment,
            n=found.n,
            finished_joined_ms=None if finished is None else finished.joined_ms,
        )
    return render_visitor_view(
        cfg,
        gen,
        state,
        wall,
        mono,
        reason=found.reason,
        new=found.new,
        draw_commitment=commitment,
        n=t.n,
        ticket_state=t.state,
        ticket_reason=t.reason,
        joined_ms=t.joined_ms,
        return_url=t.return_url,
        position=room.lane_position(t) if t.state == "waiting" else None,
        pass_at=t.pass_at,
        waiting=_waiting(room, t) if t.state == "waiting" and cfg.queueing == "random" else None,
        lane=t.lane,
        lane_ahead=lane_ahead(room, t.lane) if t.state == "waiting" else 0,
    )


def _waiting(room: Room, t: Ticket) -> int:
    """How many wait in the ticket's lane (the whole line when the room has no lanes)."""
    if room.cfg.lanes and t.lane is not None:
        return room.lane_waiting(t.lane)
    return len(room.line)


def render_stats(
    cfg: RoomConfig,
    gen: int,
    room_state: EffectiveState,
    now_wall: int,
    *,
    waiting: int,
    pre_queue: int,
    sessions: int,
    passes: int,
    slot_holders: int,
    joins_last_minute: int,
    passed_last_minute: int,
    head_joined_ms: int | None,
    joins_total: int,
    passes_total: int,
    unscoped_checks: int,
    blocked_returns: int,
    next_ticket: int,
    rule_counts: Sequence[tuple[int, int | None]],
    created_ms: int | None = None,
    refused_full: int = 0,
    sessions_revoked: int = 0,
    access_counts: Mapping[str, tuple[int, int | None]] | None = None,
    lane_counts: Sequence[tuple[int, int]] = (),
) -> dict[str, Any]:
    """The room stats of the operator API, from raw counts.

    ``passes`` counts unused passes, ``slot_holders`` those of them holding a capacity slot;
    ``head_joined_ms`` is when the ticket at the front of the line joined (None: nobody waits);
    ``rule_counts`` holds (matches, last match ms) for each of ``cfg.rules``, in order; ``created_ms`` is
    when this generation of the room began (epoch ms; None or 0 when unknown: a room restored from a
    checkpoint written before it was kept); ``access_counts`` (matches, last match ms) by access rule key;
    ``lane_counts``: (waiting, released in the last minute) of each of ``cfg.lanes``, in order (a room
    without lanes has none, and its stats carry no ``laneStats``).
    """
    oldest = 0.0 if head_joined_ms is None else max(0.0, (now_wall - head_joined_ms) / 1000.0)
    out = {
        "effectiveState": room_state,
        "generation": gen,
        "waiting": waiting,
        "preQueue": pre_queue,
        "activeSessions": sessions,
        "pendingEntry": passes,
        "passesOutstanding": passes,
        "holdingPasses": passes - slot_holders,
        "occupancy": sessions + slot_holders,
        "capacity": cfg.max_concurrent,
        "joinsLastMinute": joins_last_minute,
        "passedLastMinute": passed_last_minute,
        "oldestWaitSec": round(oldest, 3),
        "estWaitSec": eta_sec(waiting, room_state, cfg.rate_per_minute),
        "joinsTotal": joins_total,
        "passesTotal": passes_total,
        "unscopedChecks": unscoped_checks,
        "blockedReturnUrls": blocked_returns,
        "refusedFull": refused_full,
        "sessionsRevoked": sessions_revoked,
        "nextTicket": next_ticket,
        "createdAt": created_ms or None,
        "rules": [
            {**rule.to_public(), "matchCount": matches, "lastMatchAt": last}
            for rule, (matches, last) in zip(cfg.rules, rule_counts, strict=True)
        ],
        "accessRules": [
            {**rule.to_public(secrets=False), "matchCount": hits[0], "lastMatchAt": hits[1]}
            for rule in cfg.access_rules
            for hits in [(access_counts or {}).get(rule.key, (0, None))]
        ],
    }
    if cfg.lanes:
        out["laneStats"] = render_lane_stats(cfg, room_state, lane_counts)
    return out


def render_lane_stats(
    cfg: RoomConfig, room_state: EffectiveState, lane_counts: Sequence[tuple[int, int]]
) -> list[dict[str, Any]]:
    """Each lane's figures for its operators: how many wait in it, its share or priority, the ETA of
    its last place (the lane's rate, after the lanes a priority room releases first) and how many
    it released in the last minute."""
    counts = list(lane_counts) + [(0, 0)] * (len(cfg.lanes) - len(lane_counts))
    waiting = {lane.id: counts[i][0] for i, lane in enumerate(cfg.lanes)}
    out: list[dict[str, Any]] = []
    for i, lane in enumerate(cfg.lanes):
        ahead = sum(waiting[other] for other in ahead_lanes(cfg.lanes, lane.id))
        places = waiting[lane.id] + ahead if waiting[lane.id] else 0
        row: dict[str, Any] = {"id": lane.id, "waiting": waiting[lane.id]}
        if lane.share is not None:
            row["sharePct"] = lane.share
        else:
            row["priority"] = lane.priority
        row["etaSec"] = lane_eta_sec(cfg.lanes, lane.id, places, room_state == "active", cfg.rate_per_minute)
        row["releasedLastMinute"] = counts[i][1]
        out.append(row)
    return out


def render_ticket(
    room_id: str,
    gen: int,
    n: int,
    now_wall: int,
    now_mono: int,
    *,
    state: TicketState | None,
    reason: str | None,
    joined_ms: int,
    passed_ms: int | None,
    waited_ms: int | None,
    position: int | None = None,
    has_cookie: bool = False,
    seen_mono: int = 0,
    pass_deadline_mono: int | None = None,
    holds_slot: bool = False,
    session_deadline_mono: int | None = None,
    lane: str | None = None,
) -> dict[str, Any]:
    """One ticket as the drill-down shows it (``GET /api/admin/rooms/<id>/visitors/<n>``), from raw numbers.

    ``state`` None: a finished ticket (shown as expired, with how it ended). Both stores call this: the memory
    store from a live ``Room``, the Valkey store from the describe script's record."""
    base: dict[str, Any] = {"ticket": n, "ref": make_ref(room_id, gen, n), "generation": gen}
    if state is None:
        return {
            **base,
            "state": "expired",
            "reason": reason,
            "position": None,
            "joined": joined_ms,
            "passed": passed_ms,
            "waited": None if waited_ms is None else waited_ms / 1000.0,
            "onSite": False,
            "bound": None,
        }
    out: dict[str, Any] = {
        **base,
        "state": state,
        "reason": reason,
        "position": position,
        "joined": joined_ms,
        "passed": passed_ms,
        "onSite": state == "admitted",
        "bound": {"cookie": has_cookie, "fingerprint": True},
        "lastSeenSecAgo": round((now_mono - seen_mono) / 1000, 1),
    }
    if passed_ms is None:
        out["waiting"] = round((now_wall - joined_ms) / 1000.0, 3)
    else:
        out["waited"] = (waited_ms or 0) / 1000.0
    if state == "passed" and pass_deadline_mono is not None:
        out["passExpiresInSec"] = round((pass_deadline_mono - now_mono) / 1000, 1)
        out["holdsSlot"] = holds_slot
    if state == "admitted" and session_deadline_mono is not None:
        out["sessionExpiresInSec"] = round((session_deadline_mono - now_mono) / 1000, 1)
    if lane is not None:  # a room with lanes: the lane it waits (or waited) in; position stays the whole line's
        out["lane"] = lane
    return out
