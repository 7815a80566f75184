"""What a visitor asks of a room: a place (``join``), a poll (``status``), the door (``check``).

Each operation brings the room's clocks up to date (``Room.advance``), decides what happens for the
token the visitor presented, and makes every change through one of the room's transitions
(``join_line``, ``admit``, ``bounce`` …), which emit the events a rebuild replays. ``door_replay`` is
the door's hot path: a live session's own door key slides it; ``revoke`` is the site ending a session.

The rules at the door (read with the guide's "Absent holders do not hold slots"): a pass holding its
slot walks in; otherwise it takes a free slot only when no older bounced pass-holder is waiting;
otherwise it is bounced and keeps its pass while it polls. A bypass room lets everyone through and
counts each join and door check as an arrival (``joinsLastMinute``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from queue_manager.engine.deadlines import session_deadline
from queue_manager.engine.errors import EngineError
from queue_manager.engine.lanes import lane_for
from queue_manager.engine.minute import count_arrival
from queue_manager.engine.model import ClientId
from queue_manager.engine.states import DoorState
from queue_manager.engine.targeting import match as match_rule
from queue_manager.engine.ticket import Finished, PreEntry, Ticket
from queue_manager.engine.view import eta_sec

if TYPE_CHECKING:
    from queue_manager.engine.room import Room


@dataclass(frozen=True, slots=True)
class Presented:
    """A verified visitor token: a ticket number or a pre-queue handle, in a room generation."""

    gen: int
    n: int | None = None
    handle: str | None = None


@dataclass(slots=True)
class Lookup:
    """What a join or status resolved a presented token to."""

    ticket: Ticket | None = None
    pre: PreEntry | None = None
    finished: Finished | None = None
    n: int | None = None
    reason: str | None = None  # why the presented token was not (or no longer) a live place
    new: bool = False


@dataclass(slots=True)
class CheckResult:
    admit: bool
    state: DoorState | None = None
    reason: str | None = None
    door_key: str | None = None  # raw key, only when a new one was issued
    ticket: Ticket | None = None
    session_expires_ms: int | None = None
    rule: str | None = None


#: the (raw, hash) door key to issue if somebody walks in, or a callable minting one only when needed
NewDoor = tuple[str, bytes] | Callable[[], tuple[str, bytes]]


def identity_limit() -> EngineError:
    """The refusal of a place (or pre-queue entry) beyond the address's ceiling (queueMaxPerIp, preQueueMaxPerIp)."""
    err = EngineError(
        429,
        "queue_identity_limit",
        "Too many places in this line are already held from your address. Try again later.",
    )
    err.headers["Retry-After"] = "30"
    return err


def queue_full() -> EngineError:
    """The refusal of a new place while the line is full (maxWaiting people, or an estimated wait
    past maxWaitSec). Those already in line keep their places; the visitor may try again later."""
    err = EngineError(
        503,
        "queue_full",
        "The line is full right now. Try again later.",
        state="full",  # the gated wait's state name (services/gated_wait.py)
        retryAfterSec=60,
    )
    err.headers["Retry-After"] = "60"
    return err


def room_closed() -> EngineError:
    """The refusal of a place in a closed room (``queueing: reject``): nobody joins; the waiting page
    shows the room's closed page instead."""
    return EngineError(403, "room_closed", "This waiting room is closed.")


def line_full(room: Room) -> bool:
    """Whether a new place would go past the room's maxWaiting, or its estimated wait past maxWaitSec
    (the same estimate the waiting page shows, for the place a new join would take)."""
    cfg = room.cfg
    waiting = len(room.line)
    if cfg.max_waiting is not None and waiting >= cfg.max_waiting:
        return True
    if cfg.max_wait_sec is not None:
        eta = eta_sec(waiting + 1, room.effective_state(), cfg.rate_per_minute)
        return eta is not None and eta > cfg.max_wait_sec
    return False


def owns(holder: Ticket | PreEntry, client: ClientId) -> bool:
    """Cookie first (a different cookie is a different browser), then the fingerprints."""
    if holder.cookie is not None and client.cookie is not None:
        return holder.cookie == client.cookie
    if client.fp == holder.fp:
        return True
    return client.fp2 is not None and holder.fp2 is not None and client.fp2 == holder.fp2


def resolve(room: Room, presented: Presented | None, client: ClientId) -> Lookup:
    """What a presented token stands for in ``room``, for this client. Never mints."""
    if presented is None:
        return Lookup()
    if presented.gen != room.gen:
        return Lookup(reason="previous_generation")
    if presented.handle is not None:
        entry = room.prequeue.get(presented.handle)
        if entry is not None:
            return Lookup(pre=entry) if owns(entry, client) else Lookup(reason="not_owner")
        n = room.drawn.get(presented.handle)
        if n is None:
            return Lookup(reason="purged" if presented.handle in room.purged_handles else "expired")
    else:
        n = presented.n
    assert n is not None
    t = room.tickets.get(n)
    if t is not None:
        return Lookup(ticket=t, n=n) if owns(t, client) else Lookup(n=n, reason="not_owner")
    fin = room.finished.get(n)
    if fin is not None:
        return Lookup(finished=fin, n=n, reason=fin.reason)
    return Lookup(n=n, reason="expired")


def join(
    room: Room, client: ClientId, presented: Presented | None, return_url: str | None, lane: str | None = None
) -> Lookup:
    """A visitor asks for a place. Re-presenting a held place returns it (in the lane it holds); anything
    else mints, in ``lane`` (None: the room's default lane; an id the room has not: ``400 unknown_lane``)."""
    lane = lane_for(room.cfg.lanes, lane)
    room.advance()
    found = resolve(room, presented, client)
    if found.ticket is not None:
        t = found.ticket
        t.seen = room.clock.mono_ms()
        if return_url is not None and return_url != t.return_url:
            room.update_return_url(t, return_url)
        if t.state == "admitted" and client.cookie is not None and t.cookie == client.cookie:
            room.reclaim_session(t)
        return found
    if found.pre is not None:
        found.pre.seen = room.clock.mono_ms()
        if return_url is not None and return_url != found.pre.return_url:
            room.update_return_url(found.pre, return_url)
        return found
    state = room.effective_state()
    if state == "bypass":
        count_arrival(room.arrival_buckets, room.clock.mono_ms())
        return Lookup(reason=found.reason)
    method = room.cfg.queueing
    if method == "reject":
        raise room_closed()
    now_ms = room.clock.wall_ms()
    if state == "scheduled":
        limit = room.cfg.prequeue_max_per_ip
        if limit is not None and room.pq_per_ident.get(client.ident, 0) >= limit:
            raise identity_limit()
        entry = room.join_prequeue(client, room.rng.token_hex(8), now_ms, return_url, lane)
        return Lookup(pre=entry, reason=found.reason, new=True)
    limit = room.cfg.queue_max_per_ip
    if limit is not None and room.per_ident.get(client.ident, 0) >= limit:
        raise identity_limit()
    if method != "passthrough" and line_full(room):
        room.refused_full += 1
        raise queue_full()
    t = room.join_line(client, now_ms, return_url, found.reason, lane)
    if method == "passthrough" and state == "active":  # no line: the pass at once, counted like any other
        room.promote(t, slot=False, now=room.clock.mono_ms())
    return Lookup(ticket=t, n=t.n, reason=found.reason, new=True)


def status(room: Room, client: ClientId, presented: Presented | None) -> Lookup:
    """A poll (or a stream frame): marks the holder seen, and told when a pass is shown."""
    room.advance()
    found = resolve(room, presented, client)
    if found.ticket is not None:
        found.ticket.seen = room.clock.mono_ms()
        if found.ticket.state == "passed":
            found.ticket.told = True
    elif found.pre is not None:
        found.pre.seen = room.clock.mono_ms()
    return found


def check(
    room: Room,
    client: ClientId,
    presented: Presented | None,
    door_hash: bytes | None,
    url: str | None,
    new_door: NewDoor,
) -> CheckResult:
    """The door: admit (starting or sliding the session) or say why not.

    ``new_door`` is the (raw, hash) door key to issue if somebody walks in, or a callable minting one
    only when it is needed. In a closed room (``queueing: reject``) only a live session walks on; every
    other refusal is ``room_closed``.
    """
    result = _check(room, client, presented, door_hash, url, new_door)
    if not result.admit and room.cfg.queueing == "reject" and result.state is None:
        result.reason = "room_closed"
    return result


def _check(
    room: Room,
    client: ClientId,
    presented: Presented | None,
    door_hash: bytes | None,
    url: str | None,
    new_door: NewDoor,
) -> CheckResult:
    room.advance()
    now = room.clock.mono_ms()
    early, rule_id = _door_prelude(room, url)
    if early is not None:
        if early.state == "bypass":
            # every page a bypass room guards is an arrival (what autoActivate watches)
            count_arrival(room.arrival_buckets, room.clock.mono_ms())
        return early
    if presented is None:
        return CheckResult(False, reason="no_ticket", rule=rule_id)
    found = resolve(room, presented, client)
    if found.pre is not None:
        return CheckResult(False, reason="waiting", rule=rule_id)
    t = room.tickets.get(found.n) if found.n is not None else None
    if t is None:
        return CheckResult(False, reason=found.reason or "expired", rule=rule_id)
    if t.state == "admitted":
        if door_hash is not None and t.door is not None and door_hash == t.door:
            room.slide(t, now)
            return CheckResult(
                True, state="admitted", ticket=t, rule=rule_id, session_expires_ms=_session_expires_ms(room, t)
            )
        if client.cookie is not None and t.cookie == client.cookie:
            new_door = _mint_door(new_door)
            room.renew_door(t, new_door[1], now)
            return CheckResult(
                True,
                state="admitted",
                door_key=new_door[0],
                ticket=t,
                rule=rule_id,
                session_expires_ms=_session_expires_ms(room, t),
            )
        return CheckResult(False, reason="session_elsewhere", ticket=t, rule=rule_id)
    if found.ticket is None:
        return CheckResult(False, reason=found.reason or "not_owner", rule=rule_id)
    if t.state == "waiting":
        reason = "ejected" if t.reason == "ejected" else "paused" if room.effective_state() == "paused" else "waiting"
        return CheckResult(False, reason=reason, ticket=t, rule=rule_id)
    # t.state == "passed"
    t.seen = room.clock.mono_ms()
    if room.held:  # admission maintenance: the pass waits, unspent, until it is over
        return CheckResult(False, reason="paused", ticket=t, rule=rule_id)
    if room.cfg.queueing == "reject":  # closed: a pass handed out before is not spent
        return CheckResult(False, reason="room_closed", ticket=t, rule=rule_id)
    if not t.slot:
        free = room.free_slots(now, older_than=t.n)
        if free is not None and free <= 0:
            room.bounce(t, now)
            return CheckResult(False, reason="at_capacity", ticket=t, rule=rule_id)
    new_door = _mint_door(new_door)
    room.admit(t, new_door[1], now)
    return CheckResult(
        True,
        state="admitted",
        door_key=new_door[0],
        ticket=t,
        rule=rule_id,
        session_expires_ms=_session_expires_ms(room, t),
    )


def door_replay(room: Room, presented: Presented, door_hash: bytes, url: str | None) -> CheckResult | None:
    """The hot path: a live session's own door key slides it. None: not that case, do the full check.

    The door key itself is the proof (only the browser that walked in holds it), so nothing else is
    looked at; when it does not match, nothing has been counted and the caller runs ``check``.
    """
    if presented.gen != room.gen or presented.n is None:
        return None
    t = room.tickets.get(presented.n)
    if t is None or t.state != "admitted" or t.door != door_hash:
        return None
    room.advance()
    if room.tickets.get(presented.n) is not t or t.state != "admitted":  # the sweep just ended it
        return None
    early, rule_id = _door_prelude(room, url)
    if early is not None:
        return early
    room.slide(t, room.clock.mono_ms())
    return CheckResult(True, state="admitted", ticket=t, rule=rule_id, session_expires_ms=_session_expires_ms(room, t))


def revoke(room: Room, gen: int | None, n: int | None, door_hash: bytes) -> int | None:
    """The site ends a visitor's live session (``X-QM-Command: revoke``, ``POST /api/sessions/revoke``):
    the session whose door key hashes to ``door_hash`` (ticket ``n`` when the caller knows it, else the
    room's session holding that key), in generation ``gen`` (None: the room's own). Its ticket is finished
    (``revoked``) and its slot is free at once. Returns the ticket's number, or None when no live session
    of this room holds that key (unknown, already ended, another generation): nothing changes then."""
    if gen is not None and gen != room.gen:
        return None
    room.advance()
    if n is not None:
        t = room.tickets.get(n)
    else:
        t = next((room.tickets[m] for m in sorted(room.sessions) if room.tickets[m].door == door_hash), None)
    if t is None or t.state != "admitted" or t.door != door_hash:
        return None
    room.revoke_session(t)
    return t.n


def _door_prelude(room: Room, url: str | None) -> tuple[CheckResult | None, str | None]:
    """Bypass and URL targeting, counted once per door check (a bypass arrival is counted by
    ``check`` alone: a door replay re-presents a visitor already seen)."""
    if room.effective_state() == "bypass":
        return CheckResult(True, state="bypass"), None
    rule_id = None
    if url is None:
        room.unscoped_checks += 1
    elif room.cfg.rules:
        rule = match_rule(room.cfg.rules, url)
        if rule is not None:
            rule.matches += 1
            rule.last_match_ms = room.clock.wall_ms()
            rule_id = rule.id
        if rule is None or rule.action == "skip":
            return CheckResult(True, state="unprotected", rule=rule_id), rule_id
    return None, rule_id


def _session_expires_ms(room: Room, t: Ticket) -> int:
    """When the session ends if it is not slid again, in wall ms (what the door tells the visitor)."""
    return room.clock.wall_ms() + (session_deadline(room.cfg, t) - room.clock.mono_ms())


def _mint_door(new_door: NewDoor) -> tuple[str, bytes]:
    return new_door() if callable(new_door) else new_door
