"""Rebuild a room generation from its journal: an optional checkpoint, then its events in order.

Replay makes no decision of its own. It does not sweep, tick or draw: a ``join`` mints exactly
ticket ``n`` at the back, ``promote`` promotes exactly ``n`` with the recorded ``slot``, a draw applies
the recorded order, and every lapse (``expire``, ``session.end``, ``slot.release``) is applied only
because the journal says it happened. Each event is applied through the same public ``Room``
transition live play used to make it (``Room.join_line``, ``Room.promote``, ``Room.admit`` …);
a handler only checks that the event fits the state and reads its fields.

Time comes from the events: each one is applied on a clock whose wall reading is the event's
``ts`` exactly, so every instant a transition stamps from the wall clock (a ticket's ``passed``, a
finished record's end, a draw's instants) is the journaled one. Its monotonic reading is the newest
``ts`` so far: events of one room come from several instances whose clocks differ by a few
milliseconds, so ``ts`` can step back a little from one ``seq`` to the next, and deadlines must not.
The result is then rebased onto the live clock through a checkpoint dump/load, which also marks
every holder seen (as a restart does).

The journal is guarded per event: a type this build cannot apply, an ``lv`` newer than
``EVENT_LOG_VERSION``, a gap in ``seq`` or an event that contradicts the state it lands on raises
``ReplayFenced``: the room stays fenced until a build that can read it runs the rebuild. Nothing is
ever skipped, except an event whose ``seq`` was already folded in (a replay never applies the same
``(room, gen, seq)`` twice).

A room change journals its logo's bytes only when the logo is new (``RoomConfig.to_event``); an
unchanged logo goes by reference (type, sha256, bytes) and replay takes the bytes from the logo the
room holds at that point (from the checkpoint or an earlier event). A reference that matches nothing
(a journal read from a cut no checkpoint covers) leaves the room without a logo: the rebuild goes on
and ``lost_logo`` is told (the fleet logs and counts it), since a logo is no reason to fence a line.

Outflow credit is not journaled per tick. Replay credits the time between events as ticks at
``ratePerMinute`` would (capped at the one-slot bank), takes the exact figure from a ``promote``
event's ``credit`` when it carries one, and credits the time up to the rebuild. It is exact while
the room's pacing is steady; around a pause, a rate change or a drop opening it can differ from the
live room by at most one tick's accrual.

Example::

    room = replay(journal_events, clock)                       # from room.create
    room = replay(later_events, clock, base=checkpoint_dict)   # from a checkpoint
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from queue_manager.clock import Clock
from queue_manager.engine.brand import resolve_logo
from queue_manager.engine.draw import SEED_BYTES
from queue_manager.engine.drop import draw_order, draw_seed
from queue_manager.engine.errors import EngineError
from queue_manager.engine.events import EVENT_LOG_VERSION, VOID_TYPE, Event
from queue_manager.engine.minute import MINUTE_MS, last_minute
from queue_manager.engine.model import ClientId
from queue_manager.engine.outflow import SLOT
from queue_manager.engine.randomness import SYSTEM_RANDOM, RandomSource
from queue_manager.engine.room import Room
from queue_manager.engine.snapshot import SnapshotError, config_from_public, dump, load
from queue_manager.engine.states import TicketState
from queue_manager.engine.ticket import Ticket

# told (room, gen, seq) of a room change whose logo reference matched no logo the room held
LostLogo = Callable[[str, int, int], None]


class ReplayFenced(Exception):
    """The journal cannot be applied by this build; the room stays fenced (never skip an event).

    ``kind`` says why: ``unknown_type`` / ``newer_lv`` (a newer build wrote it: wait for one),
    ``gap`` (a seq is missing: possibly a commit still in flight on another instance — retry),
    ``inconsistent`` (an event contradicts the state), ``checkpoint`` (unreadable checkpoint).
    """

    def __init__(self, room: str, reason: str, seq: int | None = None, kind: str = "inconsistent") -> None:
        super().__init__(f"room {room!r} fenced: {reason}")
        self.room = room
        self.reason = reason
        self.seq = seq
        self.kind = kind


class ReplayDeleted(Exception):
    """The generation ended (``room.delete``): there is no room to rebuild."""

    def __init__(self, room: str, gen: int, seq: int) -> None:
        super().__init__(f"room {room!r} generation {gen} was deleted (seq {seq})")
        self.room = room
        self.gen = gen
        self.seq = seq


class _Inconsistent(Exception):
    """An event contradicts the state it lands on (raised inside a handler, turned into a fence)."""


class ReplayClock:
    """The clock replay runs on (milliseconds): monotonic reads ``at``, the newest event ``ts`` so far;
    wall reads ``wall``, the ``ts`` of the event being applied (``at`` unless it stepped back)."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.wall = at

    def set(self, at: int) -> None:
        """Both readings at ``at`` (between events: the checkpoint's instant, the rebuild's)."""
        self.at = self.wall = at

    def apply_at(self, ts: int) -> None:
        """The instant of the next event: its own ``ts`` on the wall, never back on the monotonic clock."""
        self.at = max(self.at, ts)
        self.wall = ts

    def mono(self) -> float:
        return self.at / 1000

    def mono_ms(self) -> int:
        return self.at

    def wall_ms(self) -> int:
        return self.wall


# ------------------------------------------------------------------------------------ the driver


def replay(
    events: Iterable[Event],
    clock: Clock,
    base: Mapping[str, Any] | None = None,
    *,
    room_events: list[Event] | None = None,
    rng: RandomSource = SYSTEM_RANDOM,
    lost_logo: LostLogo | None = None,
) -> Room:
    """Rebuild one room generation and hand it back live on ``clock``.

    ``events`` are that generation's journal (any order; those at or below the checkpoint's ``seq``
    are ignored). ``room_events`` is the list the rebuilt room emits into (the engine's, normally);
    ``rng`` is the random source it draws from from then on (replay itself never draws).
    ``lost_logo`` is called with each room change whose logo reference matched no logo the room held.
    Raises ``ReplayFenced`` or ``ReplayDeleted``.
    """
    room, target = _caught_up(events, clock, base, lost_logo)
    out = load(dump(room), clock, [] if room_events is None else room_events, rng=rng)
    shift = clock.mono_ms() - target
    out.join_times = deque(t + shift for t in room.join_times)
    out.pass_times = deque(t + shift for t in room.pass_times)
    out.lane_pass_times = deque((t + shift, lane) for t, lane in room.lane_pass_times)
    now = clock.mono_ms()
    last_minute(out.join_times, now)
    last_minute(out.pass_times, now)
    while out.lane_pass_times and out.lane_pass_times[0][0] <= now - MINUTE_MS:
        out.lane_pass_times.popleft()
    return out


def rebuilt(
    events: Iterable[Event], clock: Clock, base: Mapping[str, Any] | None = None, *, lost_logo: LostLogo | None = None
) -> dict[str, Any]:
    """The rebuilt room generation as a checkpoint at the later of its last event and ``clock``'s now: what
    ``dump(replay(...))`` holds, for a store that loads it (and rebases its instants onto its own clock),
    without loading the room a second time onto ``clock`` (a room of a million: ~11 s each way)."""
    room, _ = _caught_up(events, clock, base, lost_logo)
    return dump(room)


def _caught_up(
    events: Iterable[Event], clock: Clock, base: Mapping[str, Any] | None, lost_logo: LostLogo | None
) -> tuple[Room, int]:
    """The folded room brought to the later of its last event and ``clock``'s now (wall ms, returned)."""
    room, rclock = _fold(events, base, lost_logo)
    target = max(rclock.at, clock.wall_ms())
    rclock.set(target)
    _accrue(room, target)
    return room, target


def fold(
    events: Iterable[Event], base: Mapping[str, Any] | None = None, lost_logo: LostLogo | None = None
) -> dict[str, Any]:
    """A new checkpoint: ``base`` plus ``events``, as of the last event (what a checkpointer saves)."""
    room, _ = _fold(events, base, lost_logo)
    return dump(room)


class _Ctx:
    """One replay run: the room being rebuilt and what its handlers remember between events."""

    def __init__(self, room: Room, lost_logo: LostLogo | None = None) -> None:
        self.room = room
        self.deleted = False
        self.lost_logo = lost_logo
        self.seq = 0  # the event being applied
        # what an admission replaced, for an admit.revoke later in the same run
        self.admitted_from: dict[int, tuple[bool, int | None]] = {}  # the pass's slot, bounced claim
        self.reclaimed_from: dict[int, tuple[bytes | None, int]] = {}  # the door key, session_last


def _fold(
    events: Iterable[Event], base: Mapping[str, Any] | None, lost_logo: LostLogo | None = None
) -> tuple[Room, ReplayClock]:
    ordered = sorted(events, key=lambda e: e.seq)
    ctx: _Ctx | None = None
    rclock: ReplayClock
    sink: list[Event] = []
    if base is not None:
        name = str(base.get("room", "?"))
        if base.get("v") != 1:
            raise ReplayFenced(
                name, f"checkpoint format v{base.get('v')!r} is not one this build reads", kind="checkpoint"
            )
        try:
            rclock = ReplayClock(int(base["refWall"]))
            ctx = _Ctx(load(base, rclock, sink), lost_logo)
        except (SnapshotError, KeyError, TypeError, ValueError) as err:
            raise ReplayFenced(name, f"checkpoint unreadable: {err}", kind="checkpoint") from err
        room_id, gen = ctx.room.cfg.id, ctx.room.gen
    else:
        if not ordered:
            raise ValueError("nothing to replay: no checkpoint and no events")
        room_id, gen = ordered[0].room, ordered[0].gen
        rclock = ReplayClock(ordered[0].ts)
    for ev in ordered:
        if ev.room != room_id or ev.gen != gen:
            raise ReplayFenced(room_id, f"event of {ev.room!r} generation {ev.gen} in the journal of generation {gen}")
        last = 0 if ctx is None else ctx.room.event_seq
        if ev.seq <= last:
            continue  # already folded in (the checkpoint, or a duplicate): never applied twice
        if ev.seq != last + 1:
            raise ReplayFenced(
                room_id,
                f"journal gap: seq {last + 1} missing before {ev.seq} (generation {gen}). If no instance's spool "
                f"holds it, close it with POST /api/admin/rooms/{room_id}/journal/void",
                ev.seq,
                "gap",
            )
        if ev.type == VOID_TYPE and ctx is not None:
            ctx.room.event_seq = ev.seq  # an event nobody could recover, closed by an operator: nothing to apply
            continue
        handler = HANDLERS.get(ev.type)
        if handler is None:
            raise ReplayFenced(room_id, f"unknown event type {ev.type!r}", ev.seq, "unknown_type")
        if ev.lv > EVENT_LOG_VERSION:
            raise ReplayFenced(
                room_id, f"event {ev.type!r} has lv {ev.lv}, newer than {EVENT_LOG_VERSION}", ev.seq, "newer_lv"
            )
        if ctx is not None and ctx.deleted:
            raise ReplayFenced(room_id, f"{ev.type!r} after room.delete", ev.seq)
        rclock.apply_at(ev.ts)
        try:
            if ctx is None:
                if ev.type != "room.create":
                    raise ReplayFenced(room_id, f"journal starts with {ev.type!r}, not room.create", ev.seq)
                config, lost = resolve_logo(ev.data["config"], None)
                ctx = _Ctx(Room(config_from_public(config), gen, rclock, sink), lost_logo)
                if lost and lost_logo is not None:
                    lost_logo(room_id, gen, ev.seq)
                _commit(ctx.room, ev.data)
            else:
                _accrue(ctx.room, rclock.at)
                ctx.seq = ev.seq
                handler(ctx, ev.data)
        except ReplayFenced:
            raise
        except (_Inconsistent, EngineError, KeyError, TypeError, ValueError, AttributeError) as err:
            raise ReplayFenced(room_id, f"{ev.type} (seq {ev.seq}) does not fit the state: {err}", ev.seq) from err
        ctx.room.event_seq = ev.seq
        sink.clear()
    if ctx is None:
        raise ValueError("nothing to replay: the checkpoint and the events are empty")
    if ctx.deleted:
        raise ReplayDeleted(room_id, gen, ctx.room.event_seq)
    rclock.set(rclock.at)  # as of the last event: a checkpoint folded here reads one instant
    return ctx.room, rclock


# ------------------------------------------------------------------------------ pacing (credit)


def _accrue(room: Room, now: int) -> None:
    """Credit the time since ``last_tick`` as the ticks would have (one-slot bank), up to ``now``."""
    cfg = room.cfg
    credit = room.credit
    if cfg.state == "active" and cfg.rate_per_minute > 0:
        start = room.last_tick
        if cfg.opens_at_ms is not None:
            start = max(start, cfg.opens_at_ms)  # replay's clock: monotonic == wall
        if now > start:
            credit += cfg.rate_per_minute * (now - start)
    room.credit = min(SLOT, credit)
    room.last_tick = max(room.last_tick, now)


# ------------------------------------------------------------------------------------- handlers


def _ticket(room: Room, n: Any, *states: TicketState) -> Ticket:
    t = room.tickets.get(int(n))
    if t is None:
        raise _Inconsistent(f"ticket {n} is not live")
    if states and t.state not in states:
        raise _Inconsistent(f"ticket {n} is {t.state}, not {'/'.join(states)}")
    return t


def _opt_bytes(value: Any) -> bytes | None:
    return None if value is None else bytes.fromhex(str(value))


def _bytes(value: Any, name: str) -> bytes:
    if value is None:
        raise _Inconsistent(f"{name} is missing")
    return bytes.fromhex(str(value))


def _room_config(ctx: _Ctx, data: Mapping[str, Any], *, pacing: bool) -> None:
    room = ctx.room
    held = None if room.cfg.brand is None else room.cfg.brand.logo
    config, lost = resolve_logo(data["config"], held)
    if lost and ctx.lost_logo is not None:
        ctx.lost_logo(room.cfg.id, room.gen, ctx.seq)
    cfg = config_from_public(config)
    if cfg.id != room.cfg.id:
        raise _Inconsistent(f"config of room {cfg.id!r}")
    room.apply_config(cfg, pacing=pacing)


def _client(data: Mapping[str, Any]) -> ClientId:
    """Who arrived, as a join or pre-queue join event records it."""
    fp = _bytes(data["fp"], "fp")
    return ClientId(str(data["ident"]), fp, _opt_bytes(data.get("fp2")), _opt_bytes(data.get("ck")))


def _room_create(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    raise _Inconsistent("room.create inside a generation")


def _commit(room: Room, data: Mapping[str, Any]) -> None:
    """A room change that scheduled a drop carries its seed: committed again, at the event's instant."""
    seed = data.get("seed")
    if seed is not None:
        room.commit_draw(_seed(seed))


def _seed(value: Any) -> bytes:
    seed = bytes.fromhex(str(value))
    if len(seed) != SEED_BYTES:
        raise _Inconsistent(f"a draw seed of {len(seed)} bytes")
    return seed


def _room_update(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    _room_config(ctx, data, pacing=True)
    _commit(ctx.room, data)


def _room_schedule(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    _room_config(ctx, data, pacing=False)
    _commit(ctx.room, data)


def _room_delete(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    ctx.deleted = True


def _join(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    room = ctx.room
    n = int(data["n"])
    if n < room.next_n:
        raise _Inconsistent(f"join mints {n}, the room's next ticket is {room.next_n}")
    room.next_n = n  # numbers above next_n were taken by joins that never reached the journal
    room.join_line(_client(data), int(data["joined"]), data.get("ret"), data.get("reason"), _lane(data))


def _new_handle(room: Room, data: Mapping[str, Any]) -> str:
    """The handle a pre-queue entry joins under: never one the room used before."""
    handle = str(data["h"])
    if handle in room.prequeue or handle in room.drawn:
        raise _Inconsistent(f"pre-queue handle {handle} already used")
    return handle


def _prequeue_join(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    handle = _new_handle(ctx.room, data)
    ctx.room.join_prequeue(_client(data), handle, int(data["joined"]), data.get("ret"), _lane(data))


def _prequeue_merge(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    """The sign-ups of a pre-queue shard joining its room's pre-queue (store/valkey/shards.py)."""
    room = ctx.room
    for entry in data["entries"]:
        handle = _new_handle(room, entry)
        room.merge_prequeue(_client(entry), handle, int(entry["joined"]), entry.get("ret"), _lane(entry))


def _prequeue_drain(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    """A pre-queue shard's entries gone to its room: each leaves as a taken-back sign-up does."""
    room = ctx.room
    for handle in data["h"]:
        entry = room.withdraw_prequeue(str(handle))
        if entry is None:
            raise _Inconsistent(f"drained pre-queue handle {handle} is not in the pre-queue")
        room.joins_total = max(0, room.joins_total - 1)
        _forget_join_time(room, entry.joined_ms)


def _lane(data: Mapping[str, Any]) -> str | None:
    """The lane a join names (``ln``, only in a room with lanes); None: the room has none."""
    lane = data.get("ln")
    return None if lane is None else str(lane)


def _prequeue_draw(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    room = ctx.room
    first = room.next_n
    seed = data.get("seed")
    fresh = None if seed is None else _seed(seed)  # a draw without a committed seed carries its own
    if "order" in data:  # lv 1-3: the event lists the order and the numbers
        order = [str(h) for h in data["order"]]
        if len(order) != len(room.prequeue) or set(order) != set(room.prequeue):
            raise _Inconsistent("the drawn order is not the pre-queue")
        room.apply_draw(order, seed=fresh)
        if [int(n) for n in data["tickets"]] != list(range(first, room.next_n)):
            raise _Inconsistent(f"draw minted {first}..{room.next_n - 1}, the journal says {data['tickets']}")
        return
    count, at = int(data["count"]), int(data["first"])
    if count != len(room.prequeue) or at != first:
        raise _Inconsistent(
            f"the draw names {count} from {at}, the pre-queue holds {len(room.prequeue)} and numbering is at {first}"
        )
    if fresh is None:
        seed_used, made = draw_seed(room)
        if made:
            raise _Inconsistent("a draw without a seed, and none committed")
    else:
        seed_used = fresh
    room.apply_draw(draw_order(room.prequeue.values(), seed_used), seed=fresh)


def _promote(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    room = ctx.room
    t = _ticket(room, data["n"], "waiting")
    now = room.clock.mono_ms()
    slot = bool(data["slot"])
    credit = data.get("credit")
    if isinstance(credit, int) and not isinstance(credit, bool):
        room.credit = credit  # exact: the credit right after this promotion (before the tick's cap)
    elif slot:
        room.credit = max(0, room.credit - SLOT)
    room.last_tick = now
    counters = data.get("lc")
    if isinstance(counters, dict):  # a room with lanes: the deficit counters right after this pick
        room.lane_credit = {str(k): int(v) for k, v in counters.items()}
    room.promote(t, slot=slot, now=now)


def _admit(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    room = ctx.room
    door = _bytes(data["door"], "door")
    now = room.clock.mono_ms()
    if data.get("reclaim"):
        t = _ticket(room, data["n"], "admitted")
        ctx.reclaimed_from[t.n] = (t.door, t.session_last)
        ctx.admitted_from.pop(t.n, None)
        room.renew_door(t, door, now)
        return
    t = _ticket(room, data["n"], "passed")
    ctx.admitted_from[t.n] = (t.slot, t.bounced_at if t.n in room.bounced else None)
    ctx.reclaimed_from.pop(t.n, None)
    room.admit(t, door, now)


def _admit_revoke(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    """An admission whose commit failed is taken back exactly (as lua/revoke.lua does): the pass is
    pending again with the slot (and bounced claim) it had; a door reclaim gets its old door key back.

    Nothing happens when that admission is not what the room holds (it never reached the journal, or
    the session ended or took a newer door key since). When the admission is older than the
    checkpoint the replay started from, what it replaced is not known: ``reclaim``/``prev`` in the
    event are used when present, else a slot-holding pass is assumed."""
    room = ctx.room
    t = room.tickets.get(int(data["n"]))
    if t is None or t.state != "admitted" or t.door != _bytes(data["door"], "door"):
        return
    reclaimed = ctx.reclaimed_from.pop(t.n, None)
    if reclaimed is None and t.n not in ctx.admitted_from and data.get("reclaim"):
        reclaimed = (_opt_bytes(data.get("prev")), t.session_last)
    if reclaimed is not None:
        room.restore_door(t, *reclaimed)
        return
    slot, bounced_at = ctx.admitted_from.pop(t.n, (True, None))
    room.revoke_admission(t, slot=slot, bounced_at=bounced_at)


def _session_touch(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    t = _ticket(ctx.room, data["n"], "admitted")
    ctx.room.touch_session(t, ctx.room.clock.mono_ms())


def _expire(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    ctx.room.expire_pass(_ticket(ctx.room, data["n"], "passed"))


def _session_end(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    ctx.room.end_session(_ticket(ctx.room, data["n"], "admitted"))


def _session_revoke(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    ctx.room.revoke_session(_ticket(ctx.room, data["n"], "admitted"))


def _reclaim(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    ctx.room.reclaim_session(_ticket(ctx.room, data["n"], "admitted"))


def _bounce(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    ctx.room.bounce(_ticket(ctx.room, data["n"], "passed"), ctx.room.clock.mono_ms())


def _slot_release(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    ctx.room.release_slot(_ticket(ctx.room, data["n"], "passed"))


def _return_update(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    ret = data.get("ret")
    if data.get("h") is not None:
        entry = ctx.room.prequeue.get(str(data["h"]))
        if entry is None:
            raise _Inconsistent(f"pre-queue handle {data['h']} is not live")
        ctx.room.update_return_url(entry, ret)
    else:
        ctx.room.update_return_url(_ticket(ctx.room, data["n"]), ret)


def _eject(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    room = ctx.room
    n = int(data["n"])
    if data.get("forgotten"):
        if not room.forget_finished(n):
            raise _Inconsistent(f"ticket {n} has no finished record to forget")
        return
    room.eject_ticket(_ticket(room, n))


def _purge(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    room = ctx.room
    count = len(room.line) + len(room.prequeue)
    if "count" in data and int(data["count"]) != count:
        raise _Inconsistent(f"purge of {count} places, the journal says {data['count']}")
    room.empty_line()


def _flush(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    room = ctx.room
    count = len(room.passes | room.sessions)
    if "count" in data and int(data["count"]) != count:
        raise _Inconsistent(f"flush of {count} passes and sessions, the journal says {data['count']}")
    room.release_all()


def _forget_join_time(room: Room, at: int) -> None:
    """The per-minute window forgets a revoked join (replay's monotonic clock is the wall clock)."""
    with contextlib.suppress(ValueError):
        room.join_times.remove(at)


def _join_revoke(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    """A join whose commit failed is taken back as if never minted (its number stays used). A join
    that never reached the journal leaves nothing to take back but its number."""
    room = ctx.room
    n = int(data["n"])
    room.next_n = max(room.next_n, n + 1)
    gone = room.unmint(n)
    if gone is not None:
        room.joins_total = max(0, room.joins_total - 1)
        _forget_join_time(room, gone.joined_ms)


def _prequeue_revoke(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    """The same for a pre-queue entry — or for the ticket it was drawn as meanwhile."""
    room = ctx.room
    handle = str(data["h"])
    entry = room.withdraw_prequeue(handle)
    if entry is not None:
        joined = entry.joined_ms
    elif handle in room.drawn:
        gone = room.unmint(room.drawn.pop(handle))
        if gone is None:
            return
        joined = gone.joined_ms
    else:
        return  # the entry never reached the journal
    room.joins_total = max(0, room.joins_total - 1)
    _forget_join_time(room, joined)


def _void(ctx: _Ctx, data: Mapping[str, Any]) -> None:
    """``seq.void``: an event nobody could recover, closed by an operator; it changes nothing (the fold passes
    over it before the clock and the pacing, since its instant is when it was written, not when it happened)."""


Handler = Callable[[_Ctx, Mapping[str, Any]], None]

# Every type this build can replay (docs/events.md). ``slot.release`` and ``return.update`` and the
# ``reason`` / ``credit`` fields came with events v2; a v1 journal (without them) still replays.
HANDLERS: dict[str, Handler] = {
    "room.create": _room_create,
    "room.update": _room_update,
    "room.schedule": _room_schedule,
    "room.delete": _room_delete,
    "join": _join,
    "prequeue.join": _prequeue_join,
    "prequeue.draw": _prequeue_draw,
    "prequeue.merge": _prequeue_merge,
    "prequeue.drain": _prequeue_drain,
    "promote": _promote,
    "admit": _admit,
    "admit.revoke": _admit_revoke,
    "session.touch": _session_touch,
    "session.end": _session_end,
    "session.revoke": _session_revoke,
    "reclaim": _reclaim,
    "bounce": _bounce,
    "expire": _expire,
    "eject": _eject,
    "purge": _purge,
    "flush": _flush,
    "join.revoke": _join_revoke,
    "prequeue.revoke": _prequeue_revoke,
    "slot.release": _slot_release,
    "return.update": _return_update,
    VOID_TYPE: _void,
}
