"""One room's live state and every rule of the line.

Read this with the guide's "Passes vs sessions" and "Absent holders do not hold slots" at hand:

* Time is integer milliseconds (monotonic for pacing and clocks, wall for records), so the same
  arithmetic runs in Lua on the Valkey store.
* Outflow: credit accrues at ``ratePerMinute`` on the monotonic clock; unused credit banks at most
  one slot. Paused, bypass, scheduled or a rate of 0 promote nobody.
* Arrivals: ``joinsLastMinute`` counts the places minted in the last minute plus, in bypass (no line,
  nothing minted), every join and door check (``count_arrival``); ``joinsTotal`` counts places only.
  Bypass arrivals are counted per second of the monotonic clock (``[second, count]`` buckets, at most
  a minute's worth), so a busy room in bypass costs a bounded amount of memory and O(1) per arrival;
  a bucket of second ``s`` counts while ``s * 1000 > now - 60_000``: as one place minted at the first
  millisecond of that second would.
* Capacity (``maxConcurrent``): live sessions + unused passes still holding their slot. A slot is
  held for the claim window (min(120 s, passedTtlSec)), or until the holder — never told — has been
  unseen for ``presenceSec``.
* At their turn, an absent holder (unseen for ``presenceSec``) is promoted in order without a slot
  and without costing the rate.
* At the door a pass holding its slot walks in; otherwise it takes a free slot only when no older
  bounced pass-holder is waiting; otherwise it is bounced and keeps its pass while it polls.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from queue_manager.clock import Clock
from queue_manager.engine import draw as draw_rules
from queue_manager.engine.draw import Drawn, DrawRecord
from queue_manager.engine.errors import EngineError
from queue_manager.engine.events import Event
from queue_manager.engine.line import Line
from queue_manager.engine.model import ClientId, RoomConfig
from queue_manager.engine.randomness import SYSTEM_RANDOM, RandomSource
from queue_manager.engine.states import DoorState, EffectiveState
from queue_manager.engine.targeting import match as match_rule
from queue_manager.engine.ticket import Finished, PreEntry, Ticket, make_ref
from queue_manager.engine.view import (
    WAITS_KEPT,
    MintedWaits,
    VisitorView,
    render_stats,
    render_ticket,
    render_visitor_view,
    waits_after,
)

FINISHED_KEEP = 50_000
BOUNCED_GRACE_SEC = 30  # how long a bounced pass-holder unseen keeps a claim on the next free slot (presence off)
TOUCH_EVERY_MS = 60_000  # session slides reach the journal at most this often per session
SLOT = 60_000  # credit units per slot: ratePerMinute × elapsed ms accrues credit exactly, in integers


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


class Room:
    """One room generation's live state.

    The operations (``join``, ``status``, ``check``, ``tick``, ``eject``, ``purge``, ``flush`` …) decide what
    happens; each change they make goes through one public *transition* (``join_line``,
    ``promote``, ``admit``, ``expire_pass`` …), which changes the state and emits its event. A rebuild
    from the journal (``replay.py``) calls the same transitions, so live play and replay cannot drift
    apart. A transition decides nothing: the caller has checked that it applies (the ticket is in the
    state the transition names) and picked the instant ``now`` (monotonic ms).

    ``rng`` is where pre-queue handles and a drop's seed come from (the system's secure source
    unless given); the draw's order is a function of the seed (``engine/draw.py``).
    """

    def __init__(
        self,
        cfg: RoomConfig,
        gen: int,
        clock: Clock,
        events: list[Event] | None = None,
        *,
        rng: RandomSource = SYSTEM_RANDOM,
    ) -> None:
        self.cfg = cfg
        self.gen = gen
        self.clock = clock
        self.rng = rng
        #: admission maintenance (the fleet's pop-maintenance flag): an active room reads as paused, and a
        #: pass already handed out is not turned into an admission at the door
        self.held = False
        self.next_n = 1
        self.tickets: dict[int, Ticket] = {}
        self.line = Line()
        self.per_ident: dict[str, int] = {}
        self.passes: set[int] = set()
        self.sessions: set[int] = set()
        self.slot_holders: set[int] = set()
        self.bounced: set[int] = set()
        self._pass_heap: list[tuple[int, int]] = []
        self._slot_heap: list[tuple[int, int]] = []
        self._session_heap: list[tuple[int, int]] = []
        self.finished: OrderedDict[int, Finished] = OrderedDict()
        self.refs: dict[str, list[int]] = {}
        self.prequeue: dict[str, PreEntry] = {}
        self.pq_per_ident: dict[str, int] = {}
        self.drawn: dict[str, int] = {}
        #: the drop's committed seed and, once drawn, the draw (None: never scheduled)
        self.draw_record: DrawRecord | None = None
        self.credit = 0  # in SLOT units
        self.last_tick = clock.mono_ms()
        self.created_ms = clock.wall_ms()
        # shared with the Engine, so drained events keep the order they happened in
        self.events: list[Event] = [] if events is None else events
        self.purged_handles: OrderedDict[str, None] = OrderedDict()
        self.event_seq = 0  # per room generation: (room, gen, seq) names an event uniquely
        self.join_times: deque[int] = deque()
        # bypass arrivals per second, [second (mono ms // 1000), count]: in joinsLastMinute, never journaled
        self.arrival_buckets: deque[list[int]] = deque()
        self.pass_times: deque[int] = deque()
        self.joins_total = 0
        self.passes_total = 0
        # the waits (minted − joined, ms) of the latest passes minted from the line: the newest is pass
        # number passes_total of this generation (promote() appends one wait per pass it counts)
        self.waits: deque[int] = deque(maxlen=WAITS_KEPT)
        self.wait_ms_total = 0  # the sum of every wait of this generation's passes (ms), kept or not
        self.unscoped_checks = 0
        self.blocked_returns = 0
        self.ejected_total = 0

    # ------------------------------------------------------------------ helpers

    def emit(self, type_: str, **data: Any) -> None:
        """Record one change as the next Event of this room (what the journal stores and a rebuild replays)."""
        self.event_seq += 1
        self.events.append(Event(type_, self.cfg.id, self.gen, self.clock.wall_ms(), data, seq=self.event_seq))

    def effective_state(self, now_ms: int | None = None) -> EffectiveState:
        if self.cfg.state == "bypass":
            return "bypass"
        opens = self.cfg.opens_at_ms
        if opens is not None and (self.clock.wall_ms() if now_ms is None else now_ms) < opens:
            return "scheduled"
        if self.held:
            return "paused"
        return self.cfg.state

    def _absent(self, seen: int, now: int) -> bool:
        presence = self.cfg.presence_sec
        return presence is not None and now - seen >= presence * 1000

    def owns(self, holder: Ticket | PreEntry, client: ClientId) -> bool:
        """Cookie first (a different cookie is a different browser), then the fingerprints."""
        if holder.cookie is not None and client.cookie is not None:
            return holder.cookie == client.cookie
        if client.fp == holder.fp:
            return True
        return client.fp2 is not None and holder.fp2 is not None and client.fp2 == holder.fp2

    def _slot_deadline(self, t: Ticket) -> int:
        deadline = t.pass_at + self.cfg.claim_window_sec * 1000
        if not t.told and self.cfg.presence_sec is not None:
            deadline = min(deadline, t.seen + self.cfg.presence_sec * 1000)
        return deadline

    def _session_deadline(self, t: Ticket) -> int:
        deadline = t.session_last + self.cfg.session_ttl_sec * 1000
        if self.cfg.session_max_sec is not None:
            deadline = min(deadline, t.session_start + self.cfg.session_max_sec * 1000)
        return deadline

    def occupancy(self) -> int:
        return len(self.sessions) + len(self.slot_holders)

    def _active_bounced(self, now: int, older_than: int | None = None) -> int:
        grace = (self.cfg.presence_sec or BOUNCED_GRACE_SEC) * 1000
        count = 0
        for n in list(self.bounced):
            t = self.tickets.get(n)
            if t is None or t.state != "passed" or t.slot or t.bounced_at is None:
                self.bounced.discard(n)
                continue
            # the claim lasts while the holder is seen: at the door, polling /api/status or holding
            # the /events stream. One whose grace ran out is not counted, but kept: raising
            # presenceSec (or the holder being seen again) revives it
            if now - max(t.bounced_at, t.seen) < grace and (older_than is None or n < older_than):
                count += 1
        return count

    def _free_slots(self, now: int, older_than: int | None = None) -> int | None:
        cap = self.cfg.max_concurrent
        if cap is None:
            return None
        return cap - self.occupancy() - self._active_bounced(now, older_than)

    def see(self, holder: Ticket | PreEntry) -> None:
        holder.seen = self.clock.mono_ms()

    def count_arrival(self) -> None:
        """A visitor reached the room in bypass (a join, or a door check): counted in ``joinsLastMinute``
        only. Nothing is minted, so ``joinsTotal`` stays as it is, and nothing is journaled: these are
        kept apart from the journaled joins, in per-second buckets (``arrival_buckets``), and a room
        rebuilt from the journal starts them afresh. The first arrival of a second opens its bucket and
        drops the buckets that left the window, so at most a minute's worth is ever kept."""
        second = self.clock.mono_ms() // 1000
        buckets = self.arrival_buckets
        if buckets and buckets[-1][0] >= second:
            buckets[-1][1] += 1
            return
        buckets.append([second, 1])
        self.arrivals_last_minute()

    # ------------------------------------------------------------------ time

    def sweep(self, now: int) -> None:
        """Release slots, expire passes and end sessions whose clocks have run out."""
        heap = self._slot_heap
        while heap and heap[0][0] <= now:
            _, n = heapq.heappop(heap)
            t = self.tickets.get(n)
            if t is None or n not in self.slot_holders:
                continue
            real = self._slot_deadline(t)
            if real <= now:
                # a pass that lapses at this instant is not told twice: its expire (below) says it all
                self.release_slot(t, journal=t.pass_at + self.cfg.passed_ttl_sec * 1000 > now)
            else:
                heapq.heappush(heap, (real, n))
        heap = self._pass_heap
        ttl = self.cfg.passed_ttl_sec * 1000
        while heap and heap[0][0] <= now:
            _, n = heapq.heappop(heap)
            t = self.tickets.get(n)
            if t is None or t.state != "passed":
                continue
            if t.pass_at + ttl <= now:
                self.expire_pass(t)
            else:
                heapq.heappush(heap, (t.pass_at + ttl, n))
        heap = self._session_heap
        while heap and heap[0][0] <= now:
            _, n = heapq.heappop(heap)
            t = self.tickets.get(n)
            if t is None or t.state != "admitted":
                continue
            real = self._session_deadline(t)
            if real <= now:
                self.end_session(t)
            else:
                heapq.heappush(heap, (real, n))

    def _maybe_draw(self, now_ms: int) -> None:
        opens = self.cfg.opens_at_ms
        if not self.prequeue or (opens is not None and now_ms < opens):
            return  # a cancelled drop (opensAt null) with people waiting opens now
        self.draw()

    def draw_seed(self) -> tuple[bytes, bool]:
        """The seed the next draw uses: the committed one, else (a drop scheduled before seeds were
        committed) a fresh one, published with the draw. The flag says which: True for a fresh one."""
        record = self.draw_record
        if record is not None and record.drawn is None:
            return record.seed, False
        return self.rng.draw_seed(), True

    def draw(self) -> None:
        """Draw the pre-queue into the line now, in the order qm-draw-v1 gives for the drop's seed."""
        seed, fresh = self.draw_seed()
        self.apply_draw(draw_order(self.prequeue.values(), seed), seed=seed if fresh else None)

    def commit_draw(self, seed: bytes) -> None:
        """Transition: a drop was scheduled (or moved) for ``cfg.opens_at_ms``: ``seed`` is its secret,
        its commitment published from now on. Not an event of its own: the room change that scheduled
        it carries the seed (``seed`` in its data)."""
        now = self.clock.wall_ms()
        record = self.draw_record
        if record is None:
            self.draw_record = DrawRecord(seed, now, self.cfg.opens_at_ms)
        else:
            self.draw_record = record.replaced(seed, now, self.cfg.opens_at_ms)

    def apply_draw(self, order: list[str], *, seed: bytes | None = None) -> None:
        """Transition: the pre-queue becomes the FIFO line in ``order`` (drawn once, then recorded).

        ``seed``: the draw had no commitment before (see ``draw_seed``): it is recorded with the draw.
        """
        handles, groups = draw_rules.freeze((e.handle, e.ident) for e in self.prequeue.values())
        numbers = []
        for handle in order:
            entry = self.prequeue.pop(handle)
            t = self._mint(
                entry.ident,
                entry.fp,
                entry.fp2,
                entry.cookie,
                entry.joined_ms,
                entry.return_url,
                charge=True,
                count=False,
            )
            t.seen = entry.seen
            self.drawn[handle] = t.n
            numbers.append(t.n)
        self.pq_per_ident.clear()
        now = self.clock.wall_ms()
        record = self.draw_record
        if seed is not None:
            record = self.draw_record = DrawRecord(seed, now, self.cfg.opens_at_ms)
        if record is not None:  # (none: a journal written before draws were committed)
            record.drawn = Drawn(handles, groups, list(order), now, numbers[0] if numbers else self.next_n)
        if seed is not None:
            self.emit("prequeue.draw", order=order, tickets=numbers, seed=seed.hex())
        else:
            self.emit("prequeue.draw", order=order, tickets=numbers)

    def advance(self) -> None:
        """Bring clocks up to date; cheap when nothing is due. Called before every read or change."""
        self._maybe_draw(self.clock.wall_ms())
        self.sweep(self.clock.mono_ms())

    def tick(self) -> int:
        """The one-second tick: credit the elapsed time and promote. Returns how many were promoted."""
        now = self.clock.mono_ms()
        elapsed = max(0, now - self.last_tick)
        self.last_tick = now
        self.advance()
        self.last_minute(self.join_times)  # keep the per-minute windows bounded
        self.arrivals_last_minute()
        self.last_minute(self.pass_times)
        state = self.effective_state()
        moving = state == "active" and self.cfg.rate_per_minute > 0
        if moving:
            self.credit += self.cfg.rate_per_minute * elapsed
        promoted = 0
        while moving:
            head = self.line.head()
            if head is None:
                break
            t = self.tickets[head[1]]
            if self._absent(t.seen, now):
                self.promote(t, slot=False, now=now)
                promoted += 1
                continue
            if self.credit < SLOT:
                break
            free = self._free_slots(now)
            if free is not None and free <= 0:
                break
            self.credit -= SLOT
            self.promote(t, slot=True, now=now)
            promoted += 1
        if self.credit > SLOT:
            self.credit = SLOT  # the one-slot bank
        return promoted

    # ------------------------------------------------------------------ transitions
    #
    # Live play and replay both change the room only through these. Each names what happens, leaves
    # every index (line, per-address counts, pass/slot/session sets, deadline heaps, Refs) consistent
    # with the tickets, and emits its event (a replay discards them: the journal already has them).

    def join_line(self, client: ClientId, joined_ms: int, return_url: str | None, reason: str | None) -> Ticket:
        """A new place at the back of the line, charged to the address and counted as a join.

        ``reason`` says why the visitor's presented token was not a live place (kept on the ticket).
        """
        t = self._mint(client.ident, client.fp, client.fp2, client.cookie, joined_ms, return_url, charge=True)
        t.reason = reason
        self.emit("join", n=t.n, reason=reason, **_arrival(client, joined_ms, return_url))
        return t

    def join_prequeue(self, client: ClientId, handle: str, joined_ms: int, return_url: str | None) -> PreEntry:
        """A pre-queue entry (before the doors open): no number yet, counted against preQueueMaxPerIp."""
        now = self.clock.mono_ms()
        entry = PreEntry(handle, client.ident, client.fp, client.fp2, client.cookie, joined_ms, now, return_url)
        self.prequeue[handle] = entry
        self.pq_per_ident[client.ident] = self.pq_per_ident.get(client.ident, 0) + 1
        self.joins_total += 1
        self.join_times.append(now)
        self.emit("prequeue.join", h=handle, **_arrival(client, joined_ms, return_url))
        return entry

    def promote(self, t: Ticket, *, slot: bool, now: int) -> None:
        """A waiting ticket gets its pass (holding a capacity slot when ``slot``); the pass expires
        ``passedTtlSec`` after ``now``. The event records the credit left after it."""
        self._leave_line(t)
        now_ms = self.clock.wall_ms()
        t.state = "passed"
        t.pass_at = now
        if t.passed_ms is None:
            t.passed_ms = now_ms
            t.waited_ms = max(0, now_ms - t.joined_ms)
        t.told = False
        t.bounced_at = None
        self.passes.add(t.n)
        heapq.heappush(self._pass_heap, (now + self.cfg.passed_ttl_sec * 1000, t.n))
        self._grant_slot(t, slot, now)
        self.passes_total += 1
        wait_ms = now_ms - t.joined_ms
        if wait_ms > 0:  # a clock set back since the join: no negative wait
            self.waits.append(wait_ms)
            self.wait_ms_total += wait_ms
        else:
            self.waits.append(0)
        self.pass_times.append(now)
        self.emit("promote", n=t.n, slot=slot, credit=self.credit)

    def admit(self, t: Ticket, door_hash: bytes, now: int) -> None:
        """A pass-holder walks in: the pass (and any slot or bounced claim) becomes a live session
        keyed by ``door_hash``, starting at ``now``."""
        self.passes.discard(t.n)
        self.slot_holders.discard(t.n)
        self.bounced.discard(t.n)
        t.slot = False
        t.bounced_at = None
        t.state = "admitted"
        t.door = door_hash
        t.session_start = t.session_last = t.session_touched = now
        self.sessions.add(t.n)
        heapq.heappush(self._session_heap, (self._session_deadline(t), t.n))
        self.emit("admit", n=t.n, door=door_hash.hex())

    def renew_door(self, t: Ticket, door_hash: bytes, now: int) -> None:
        """The cookie holder of a live session is let in again with a new door key (the old one void);
        the session slides to ``now``."""
        t.door = door_hash
        self._slide(t, now, journal=False)
        self.emit("admit", n=t.n, door=door_hash.hex(), reclaim=True)

    def restore_door(self, t: Ticket, door_hash: bytes | None, session_last: int) -> None:
        """A door renewal is taken back (its journal commit failed): the old key and slide again."""
        t.door = door_hash
        t.session_last = session_last

    def revoke_admission(self, t: Ticket, *, slot: bool, bounced_at: int | None) -> None:
        """An admission is taken back (its journal commit failed): the session is a pending pass again,
        with the slot and the bounced claim it had before."""
        self.sessions.discard(t.n)
        t.door = None
        t.state = "passed"
        t.bounced_at = bounced_at
        self.passes.add(t.n)
        self._grant_slot(t, slot, self.clock.mono_ms())
        if bounced_at is not None and not slot:
            self.bounced.add(t.n)

    def touch_session(self, t: Ticket, now: int) -> None:
        """A session's slide to ``now`` reaches the journal (at most once a minute per session)."""
        t.session_last = t.session_touched = now
        self.emit("session.touch", n=t.n)

    def reclaim_session(self, t: Ticket) -> None:
        """The cookie holder takes their session back: a fresh pass, the old door key void."""
        now = self.clock.mono_ms()
        self.sessions.discard(t.n)
        t.door = None
        t.state = "passed"
        t.pass_at = now
        t.told = True
        self.passes.add(t.n)
        heapq.heappush(self._pass_heap, (now + self.cfg.passed_ttl_sec * 1000, t.n))
        self._grant_slot(t, True, now)
        self.emit("reclaim", n=t.n)

    def bounce(self, t: Ticket, now: int) -> None:
        """The door turns a pass without a slot away: it keeps its pass and, from ``now``, a claim on
        the next free slot (see ``_active_bounced``)."""
        t.bounced_at = now
        self.bounced.add(t.n)
        self.emit("bounce", n=t.n)

    def release_slot(self, t: Ticket, *, journal: bool = True) -> None:
        """An unused pass stops holding its capacity slot (claim window over, or its holder absent).
        ``journal`` False: no event (the pass expires at the same instant and its ``expire`` says it)."""
        self.slot_holders.discard(t.n)
        t.slot = False
        if journal:
            self.emit("slot.release", n=t.n)

    def expire_pass(self, t: Ticket) -> None:
        """An unused pass runs out: the ticket is finished (``expired``)."""
        self._finish(t, "expired")
        self.emit("expire", n=t.n)

    def end_session(self, t: Ticket) -> None:
        """A session idles out or reaches sessionMaxSec: the ticket is finished (``expired``)."""
        self._finish(t, "expired")
        self.emit("session.end", n=t.n)

    def update_return_url(self, holder: Ticket | PreEntry, return_url: str | None) -> None:
        """A held place (ticket or pre-queue entry) is sent back to a different page when it gets in."""
        holder.return_url = return_url
        if isinstance(holder, Ticket):
            self.emit("return.update", n=holder.n, ret=return_url)
        else:
            self.emit("return.update", h=holder.handle, ret=return_url)

    def eject_ticket(self, t: Ticket) -> None:
        """An operator revokes the pass and any session: the visitor goes to the back of the line,
        waiting again (``ejected``); the place is not charged to the address again."""
        self._leave_line(t)
        self._drop_pass_and_session(t)
        t.state = "waiting"
        t.reason = "ejected"
        t.line_seq = self.line.push(t.n)
        self.ejected_total += 1
        self.emit("eject", n=t.n)

    def forget_finished(self, n: int) -> bool:
        """An operator ejects a finished ticket: its record and Ref are forgotten. False: no such record."""
        if self.finished.pop(n, None) is None:
            return False
        self._forget_ref(n)
        self.emit("eject", n=n, forgotten=True)
        return True

    def empty_line(self) -> int:
        """Every waiting ticket is finished (``purged``) and the pre-queue dropped (its handles
        remembered as purged); passes and sessions stay. Returns how many places went."""
        numbers = self.line.clear()
        for n in numbers:
            t = self.tickets.get(n)
            if t is not None:
                t.line_seq = 0
                self._finish(t, "purged")
        self.per_ident.clear()
        dropped = len(self.prequeue)
        for handle in self.prequeue:
            self.purged_handles[handle] = None
        while len(self.purged_handles) > FINISHED_KEEP:
            self.purged_handles.popitem(last=False)
        self.prequeue.clear()
        self.pq_per_ident.clear()
        self.emit("purge", count=len(numbers) + dropped)
        return len(numbers) + dropped

    def release_all(self) -> int:
        """Every pass and every live session ends at once: each such ticket is finished (``flushed``),
        its slot, bounced claim and door key gone with it; the line, the pre-queue and the room stay.
        Returns how many tickets were released.

        One event for the lot (``flush`` with the count), never one per ticket, and the three deadline
        heaps are emptied whole: every entry in them names a pass, a slot or a session, and none is left."""
        numbers = sorted(self.passes | self.sessions)
        for n in numbers:
            t = self.tickets.get(n)
            if t is not None:
                self._finish(t, "flushed")
        self.passes.clear()
        self.sessions.clear()
        self.slot_holders.clear()
        self.bounced.clear()
        self._pass_heap.clear()
        self._slot_heap.clear()
        self._session_heap.clear()
        self.emit("flush", count=len(numbers))
        return len(numbers)

    def unmint(self, n: int) -> Ticket | Finished | None:
        """A join is taken back (its journal commit failed): ticket ``n`` leaves wherever it is (line,
        pass, session or finished record), uncharged, its Ref forgotten; the number stays used.
        Returns what was removed (None: nothing held that number). The join counters are the caller's."""
        t = self.tickets.pop(n, None)
        gone: Ticket | Finished | None = t
        if t is not None:
            self._leave_line(t)
            self._drop_pass_and_session(t)
        else:
            gone = self.finished.pop(n, None)
        if gone is not None:
            self._forget_ref(n)
        return gone

    def withdraw_prequeue(self, handle: str) -> PreEntry | None:
        """A pre-queue join is taken back (its journal commit failed). None: no such entry."""
        entry = self.prequeue.pop(handle, None)
        if entry is not None:
            left = self.pq_per_ident.get(entry.ident, 0) - 1
            if left > 0:
                self.pq_per_ident[entry.ident] = left
            else:
                self.pq_per_ident.pop(entry.ident, None)
        return entry

    def apply_config(self, cfg: RoomConfig, *, pacing: bool = True) -> None:
        """New settings. A URL rule that did not change keeps its match counters; with ``pacing``, a
        change of state or rate restarts the outflow clock (credit capped at the one-slot bank unless
        active). Deadlines the new settings shorten are the caller's (``reschedule``)."""
        old = self.cfg
        kept = {(r.id, r.pattern, r.action): r for r in old.rules}
        for rule in cfg.rules:
            prev = kept.get((rule.id, rule.pattern, rule.action))
            if prev is not None:
                rule.matches, rule.last_match_ms = prev.matches, prev.last_match_ms
        self.cfg = cfg
        if pacing and (old.state != cfg.state or old.rate_per_minute != cfg.rate_per_minute):
            self.last_tick = self.clock.mono_ms()
            if cfg.state != "active":
                self.credit = min(self.credit, SLOT)

    # ------------------------------------------------------------------ the transitions' helpers

    def _mint(
        self,
        ident: str,
        fp: bytes,
        fp2: bytes | None,
        cookie: bytes | None,
        joined_ms: int,
        return_url: str | None,
        *,
        charge: bool,
        count: bool = True,
    ) -> Ticket:
        if not self.line:
            self._settle_credit()  # credit earned while nobody waited banks at most one slot
        n = self.next_n
        self.next_n += 1
        t = Ticket(
            n=n,
            ident=ident,
            fp=fp,
            fp2=fp2,
            cookie=cookie,
            joined_ms=joined_ms,
            seen=self.clock.mono_ms(),
            return_url=return_url,
        )
        t.line_seq = self.line.push(n)
        self.tickets[n] = t
        if charge:
            self._charge(t)
        self.refs.setdefault(make_ref(self.cfg.id, self.gen, n), []).append(n)
        if count:
            self.joins_total += 1
            self.join_times.append(self.clock.mono_ms())
        return t

    def _charge(self, t: Ticket) -> None:
        self.per_ident[t.ident] = self.per_ident.get(t.ident, 0) + 1
        t.charged = True

    def _settle_credit(self) -> None:
        """Credit the time since the last tick now, capped at the one-slot bank."""
        now = self.clock.mono_ms()
        if self.effective_state() == "active" and self.cfg.rate_per_minute > 0:
            elapsed = max(0, now - self.last_tick)
            self.credit = min(SLOT, self.credit + self.cfg.rate_per_minute * elapsed)
        else:
            self.credit = min(SLOT, self.credit)
        self.last_tick = now

    def _leave_line(self, t: Ticket) -> None:
        if t.line_seq:
            self.line.remove(t.line_seq)
            t.line_seq = 0
        if t.charged:
            t.charged = False
            left = self.per_ident.get(t.ident, 0) - 1
            if left > 0:
                self.per_ident[t.ident] = left
            else:
                self.per_ident.pop(t.ident, None)

    def _grant_slot(self, t: Ticket, slot: bool, now: int) -> None:
        t.slot = slot
        if slot:
            self.slot_holders.add(t.n)
            heapq.heappush(self._slot_heap, (self._slot_deadline(t), t.n))

    def _drop_pass_and_session(self, t: Ticket) -> None:
        self.passes.discard(t.n)
        self.sessions.discard(t.n)
        self.slot_holders.discard(t.n)
        self.bounced.discard(t.n)
        t.slot = False
        t.door = None
        t.bounced_at = None

    def _finish(self, t: Ticket, reason: str) -> None:
        self._leave_line(t)
        self._drop_pass_and_session(t)
        self.tickets.pop(t.n, None)
        self.finished[t.n] = Finished(t.joined_ms, t.passed_ms, t.waited_ms, reason, self.clock.wall_ms())
        while len(self.finished) > FINISHED_KEEP:
            gone, _ = self.finished.popitem(last=False)
            self._forget_ref(gone)

    def _forget_ref(self, n: int) -> None:
        """A ticket nobody can look up any more no longer needs its Ref (keeps memory bounded)."""
        ref = make_ref(self.cfg.id, self.gen, n)
        numbers = self.refs.get(ref)
        if numbers is not None:
            if n in numbers:
                numbers.remove(n)
            if not numbers:
                del self.refs[ref]

    # ------------------------------------------------------------------ visitor operations

    def resolve(self, presented: Presented | None, client: ClientId) -> Lookup:
        """What a presented token stands for, for this client. Never mints."""
        if presented is None:
            return Lookup()
        if presented.gen != self.gen:
            return Lookup(reason="previous_generation")
        if presented.handle is not None:
            entry = self.prequeue.get(presented.handle)
            if entry is not None:
                return Lookup(pre=entry) if self.owns(entry, client) else Lookup(reason="not_owner")
            n = self.drawn.get(presented.handle)
            if n is None:
                return Lookup(reason="purged" if presented.handle in self.purged_handles else "expired")
        else:
            n = presented.n
        assert n is not None
        t = self.tickets.get(n)
        if t is not None:
            return Lookup(ticket=t, n=n) if self.owns(t, client) else Lookup(n=n, reason="not_owner")
        fin = self.finished.get(n)
        if fin is not None:
            return Lookup(finished=fin, n=n, reason=fin.reason)
        return Lookup(n=n, reason="expired")

    def join(self, client: ClientId, presented: Presented | None, return_url: str | None) -> Lookup:
        """A visitor asks for a place. Re-presenting a held place returns it; anything else mints."""
        self.advance()
        found = self.resolve(presented, client)
        if found.ticket is not None:
            t = found.ticket
            self.see(t)
            if return_url is not None and return_url != t.return_url:
                self.update_return_url(t, return_url)
            if t.state == "admitted" and client.cookie is not None and t.cookie == client.cookie:
                self.reclaim_session(t)
            return found
        if found.pre is not None:
            self.see(found.pre)
            if return_url is not None and return_url != found.pre.return_url:
                self.update_return_url(found.pre, return_url)
            return found
        state = self.effective_state()
        if state == "bypass":
            self.count_arrival()
            return Lookup(reason=found.reason)
        now_ms = self.clock.wall_ms()
        if state == "scheduled":
            limit = self.cfg.prequeue_max_per_ip
            if limit is not None and self.pq_per_ident.get(client.ident, 0) >= limit:
                raise _identity_limit()
            entry = self.join_prequeue(client, self.rng.token_hex(8), now_ms, return_url)
            return Lookup(pre=entry, reason=found.reason, new=True)
        limit = self.cfg.queue_max_per_ip
        if limit is not None and self.per_ident.get(client.ident, 0) >= limit:
            raise _identity_limit()
        t = self.join_line(client, now_ms, return_url, found.reason)
        return Lookup(ticket=t, n=t.n, reason=found.reason, new=True)

    def status(self, client: ClientId, presented: Presented | None) -> Lookup:
        """A poll (or a stream frame): marks the holder seen, and told when a pass is shown."""
        self.advance()
        found = self.resolve(presented, client)
        if found.ticket is not None:
            self.see(found.ticket)
            if found.ticket.state == "passed":
                found.ticket.told = True
        elif found.pre is not None:
            self.see(found.pre)
        return found

    def check(
        self,
        client: ClientId,
        presented: Presented | None,
        door_hash: bytes | None,
        url: str | None,
        new_door: NewDoor,
    ) -> CheckResult:
        """The door: admit (starting or sliding the session) or say why not.

        ``new_door`` is the (raw, hash) door key to issue if somebody walks in, or a callable minting one
        only when it is needed.
        """
        self.advance()
        now = self.clock.mono_ms()
        early, rule_id = self._door_prelude(url)
        if early is not None:
            if early.state == "bypass":
                self.count_arrival()  # every page a bypass room guards is an arrival (what autoActivate watches)
            return early
        if presented is None:
            return CheckResult(False, reason="no_ticket", rule=rule_id)
        found = self.resolve(presented, client)
        if found.pre is not None:
            return CheckResult(False, reason="waiting", rule=rule_id)
        t = self.tickets.get(found.n) if found.n is not None else None
        if t is None:
            return CheckResult(False, reason=found.reason or "expired", rule=rule_id)
        if t.state == "admitted":
            if door_hash is not None and t.door is not None and door_hash == t.door:
                self._slide(t, now)
                return CheckResult(
                    True, state="admitted", ticket=t, rule=rule_id, session_expires_ms=self._session_expires_ms(t)
                )
            if client.cookie is not None and t.cookie == client.cookie:
                new_door = _mint_door(new_door)
                self.renew_door(t, new_door[1], now)
                return CheckResult(
                    True,
                    state="admitted",
                    door_key=new_door[0],
                    ticket=t,
                    rule=rule_id,
                    session_expires_ms=self._session_expires_ms(t),
                )
            return CheckResult(False, reason="session_elsewhere", ticket=t, rule=rule_id)
        if found.ticket is None:
            return CheckResult(False, reason=found.reason or "not_owner", rule=rule_id)
        if t.state == "waiting":
            reason = (
                "ejected" if t.reason == "ejected" else "paused" if self.effective_state() == "paused" else "waiting"
            )
            return CheckResult(False, reason=reason, ticket=t, rule=rule_id)
        # t.state == "passed"
        self.see(t)
        if self.held:  # admission maintenance: the pass waits, unspent, until it is over
            return CheckResult(False, reason="paused", ticket=t, rule=rule_id)
        if not t.slot:
            free = self._free_slots(now, older_than=t.n)
            if free is not None and free <= 0:
                self.bounce(t, now)
                return CheckResult(False, reason="at_capacity", ticket=t, rule=rule_id)
        new_door = _mint_door(new_door)
        self.admit(t, new_door[1], now)
        return CheckResult(
            True,
            state="admitted",
            door_key=new_door[0],
            ticket=t,
            rule=rule_id,
            session_expires_ms=self._session_expires_ms(t),
        )

    def _door_prelude(self, url: str | None) -> tuple[CheckResult | None, str | None]:
        """Bypass and URL targeting, counted once per door check (a bypass arrival is counted by
        ``check`` alone: a door replay re-presents a visitor already seen)."""
        if self.effective_state() == "bypass":
            return CheckResult(True, state="bypass"), None
        rule_id = None
        if url is None:
            self.unscoped_checks += 1
        elif self.cfg.rules:
            rule = match_rule(self.cfg.rules, url)
            if rule is not None:
                rule.matches += 1
                rule.last_match_ms = self.clock.wall_ms()
                rule_id = rule.id
            if rule is None or rule.action == "skip":
                return CheckResult(True, state="unprotected", rule=rule_id), rule_id
        return None, rule_id

    def door_replay(self, presented: Presented, door_hash: bytes, url: str | None) -> CheckResult | None:
        """The hot path: a live session's own door key slides it. None: not that case, do the full check.

        The door key itself is the proof (only the browser that walked in holds it), so nothing else is
        looked at; when it does not match, nothing has been counted and the caller runs ``check``.
        """
        if presented.gen != self.gen or presented.n is None:
            return None
        t = self.tickets.get(presented.n)
        if t is None or t.state != "admitted" or t.door != door_hash:
            return None
        self.advance()
        if self.tickets.get(presented.n) is not t or t.state != "admitted":  # the sweep just ended it
            return None
        early, rule_id = self._door_prelude(url)
        if early is not None:
            return early
        self._slide(t, self.clock.mono_ms())
        return CheckResult(
            True, state="admitted", ticket=t, rule=rule_id, session_expires_ms=self._session_expires_ms(t)
        )

    def _slide(self, t: Ticket, now: int, *, journal: bool = True) -> None:
        """A door check slides the session; the journal hears of it at most once a minute per session."""
        t.session_last = now
        if journal and now - t.session_touched >= TOUCH_EVERY_MS:
            self.touch_session(t, now)

    def reschedule(self) -> None:
        """Settings that shorten a clock changed: push fresh deadlines so the sweep sees them now."""
        now = self.clock.mono_ms()
        for n in self.sessions:
            heapq.heappush(self._session_heap, (self._session_deadline(self.tickets[n]), n))
        for n in self.slot_holders:
            heapq.heappush(self._slot_heap, (self._slot_deadline(self.tickets[n]), n))
        for n in self.passes:
            heapq.heappush(self._pass_heap, (self.tickets[n].pass_at + self.cfg.passed_ttl_sec * 1000, n))
        self.sweep(now)

    def _session_expires_ms(self, t: Ticket) -> int:
        return self.clock.wall_ms() + (self._session_deadline(t) - self.clock.mono_ms())

    # ------------------------------------------------------------------ operator operations

    def eject(self, n: int) -> bool:
        """Revoke the pass, drop any session and send the visitor to the back of the line."""
        self.advance()
        t = self.tickets.get(n)
        if t is None:
            return self.forget_finished(n)
        self.eject_ticket(t)
        return True

    def purge(self) -> int:
        """Empty the line; passes, sessions and the room itself survive."""
        self.advance()
        return self.empty_line()

    def flush(self) -> int:
        """Release every admitted visitor's pass and session at once; the line and the room survive."""
        self.advance()
        return self.release_all()

    # ------------------------------------------------------------------ reading

    def position(self, t: Ticket) -> int | None:
        return self.line.position(t.line_seq) if t.line_seq else None

    def last_minute(self, times: deque[int]) -> int:
        cutoff = self.clock.mono_ms() - 60_000
        while times and times[0] <= cutoff:
            times.popleft()
        return len(times)

    def arrivals_last_minute(self) -> int:
        """The bypass arrivals of the last minute. A bucket counts while its second's first millisecond
        would (``last_minute``'s rule: ``s * 1000 > now - 60_000``); older buckets are dropped."""
        cutoff = self.clock.mono_ms() - 60_000
        buckets = self.arrival_buckets
        while buckets and buckets[0][0] * 1000 <= cutoff:
            buckets.popleft()
        return sum(count for _, count in buckets)

    def oldest_wait_sec(self) -> float:
        head = self.line.head()
        if head is None:
            return 0.0
        return max(0.0, (self.clock.wall_ms() - self.tickets[head[1]].joined_ms) / 1000.0)

    def minted_waits(self, after: tuple[int, int] | None) -> MintedWaits:
        """The waits of this generation's latest passes that a reader which has read up to ``after``
        (generation, pass ordinal) has not read (see ``view.waits_after``)."""
        return waits_after(self.gen, self.passes_total, self.wait_ms_total, self.waits, after)

    def stats(self) -> dict[str, Any]:
        self.advance()
        head = self.line.head()
        return render_stats(
            self.cfg,
            self.gen,
            self.effective_state(),
            self.clock.wall_ms(),
            waiting=len(self.line),
            pre_queue=len(self.prequeue),
            sessions=len(self.sessions),
            passes=len(self.passes),
            slot_holders=len(self.slot_holders),
            joins_last_minute=self.last_minute(self.join_times) + self.arrivals_last_minute(),
            passed_last_minute=self.last_minute(self.pass_times),
            head_joined_ms=None if head is None else self.tickets[head[1]].joined_ms,
            joins_total=self.joins_total,
            passes_total=self.passes_total,
            unscoped_checks=self.unscoped_checks,
            blocked_returns=self.blocked_returns,
            next_ticket=self.next_n,
            rule_counts=[(r.matches, r.last_match_ms) for r in self.cfg.rules],
            created_ms=self.created_ms,
        )

    def lookup(self, query: str) -> dict[str, Any]:
        """The visitor drill-down: by ticket number or Ref code."""
        self.advance()
        q = query.strip()
        if q.isascii() and q.isdigit():
            if len(q) > 15:
                raise EngineError(404, "no_ticket", "No such ticket in this room.", query=q[:32])
            return self.describe(int(q))
        numbers = self.refs.get(q.upper())
        if not numbers:
            raise EngineError(404, "no_ticket", f"No ticket {query!r} in this room's current generation.", query=query)
        if len(numbers) > 1:
            return {"candidates": [self.describe(n) for n in numbers], "ref": q.upper()}
        return self.describe(numbers[0])

    def describe(self, n: int) -> dict[str, Any]:
        now_wall, now_mono = self.clock.wall_ms(), self.clock.mono_ms()
        t = self.tickets.get(n)
        if t is None:
            fin = self.finished.get(n)
            if fin is None:
                raise EngineError(404, "no_ticket", f"No ticket {n} in this room's current generation.", ticket=n)
            return render_ticket(
                self.cfg.id,
                self.gen,
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
            self.cfg.id,
            self.gen,
            n,
            now_wall,
            now_mono,
            state=t.state,
            reason=t.reason,
            joined_ms=t.joined_ms,
            passed_ms=t.passed_ms,
            waited_ms=t.waited_ms,
            position=self.position(t),
            has_cookie=t.cookie is not None,
            seen_mono=t.seen,
            pass_deadline_mono=t.pass_at + self.cfg.passed_ttl_sec * 1000 if t.state == "passed" else None,
            holds_slot=t.slot,
            session_deadline_mono=self._session_deadline(t) if t.state == "admitted" else None,
        )

    def waiting_tickets(self) -> Iterable[int]:
        return iter(self.line)


NewDoor = tuple[str, bytes] | Callable[[], tuple[str, bytes]]


def _mint_door(new_door: NewDoor) -> tuple[str, bytes]:
    return new_door() if callable(new_door) else new_door


def _arrival(client: ClientId, joined_ms: int, return_url: str | None) -> dict[str, Any]:
    """What a join or pre-queue join event records about who arrived (docs/events.md)."""
    return {
        "ident": client.ident,
        "fp": client.fp.hex(),
        "fp2": _hex(client.fp2),
        "ck": _hex(client.cookie),
        "joined": joined_ms,
        "ret": return_url,
    }


def _hex(value: bytes | None) -> str | None:
    return None if value is None else value.hex()


def _identity_limit() -> EngineError:
    err = EngineError(
        429,
        "queue_identity_limit",
        "Too many places in this line are already held from your address. Try again later.",
    )
    err.headers["Retry-After"] = "30"
    return err


def draw_order(entries: Iterable[PreEntry], seed: bytes) -> list[str]:
    """The round-robin draw: an identity's k-th entry is drawn behind every identity's (k-1)-th.

    The order is qm-draw-v1 of ``seed`` and the frozen pre-queue (``engine/draw.py``).
    """
    handles, groups = draw_rules.freeze((e.handle, e.ident) for e in entries)
    return draw_rules.draw_order(seed, handles, groups)


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
        position=room.position(t) if t.state == "waiting" else None,
        pass_at=t.pass_at,
    )
