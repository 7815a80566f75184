"""One room's live state, and the transitions that change it.

Read this with the guide's "Passes vs sessions" and "Absent holders do not hold slots" at hand:

* Time is integer milliseconds (monotonic for pacing and clocks, wall for records), so the same
  arithmetic runs in Lua on the Valkey store. ``advance`` brings the clocks up to date before every
  read or change: a drop that is due is drawn (``engine/drop.py``), and slots, passes and sessions
  whose deadlines (``engine/deadlines.py``) have passed are released, expired and ended.
* Outflow: credit accrues at ``ratePerMinute`` on the monotonic clock (in ``SLOT`` units per slot);
  unused credit banks at most one slot. The one-second tick that spends it is ``engine/outflow.py``.
* Capacity (``maxConcurrent``): live sessions + unused passes still holding their slot. A slot is
  held for the claim window (min(120 s, passedTtlSec)), or until the holder — never told — has been
  unseen for ``presenceSec``. A bounced pass-holder keeps a claim on the next free slot while seen.

What visitors and operators ask of a room is decided in ``engine/visitor.py`` and
``engine/operator.py``; what a room reports is read in ``engine/report.py`` and ``engine/view.py``.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict, deque
from typing import Any

from queue_manager.clock import Clock
from queue_manager.engine import draw as draw_rules
from queue_manager.engine.deadlines import session_deadline, slot_deadline
from queue_manager.engine.draw import Drawn, DrawRecord
from queue_manager.engine.drop import maybe_draw
from queue_manager.engine.events import Event, arrival_data
from queue_manager.engine.lanes import default_lane
from queue_manager.engine.line import Line
from queue_manager.engine.model import ClientId, RoomConfig
from queue_manager.engine.outflow import SLOT, settle_credit
from queue_manager.engine.randomness import SYSTEM_RANDOM, RandomSource
from queue_manager.engine.states import EffectiveState
from queue_manager.engine.ticket import Finished, PreEntry, Ticket, make_ref
from queue_manager.engine.view import WAITS_KEPT

FINISHED_KEEP = 50_000
BOUNCED_GRACE_SEC = 30  # how long a bounced pass-holder unseen keeps a claim on the next free slot (presence off)
TOUCH_EVERY_MS = 60_000  # session slides reach the journal at most this often per session


class Room:
    """One room generation's live state.

    The operations (``visitor.join``, ``visitor.check``, ``outflow.tick``, ``operator.eject`` …) decide what
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
        #: with lanes (cfg.lanes), each lane's own line beside the whole line: a waiting ticket is in both
        self.lane_lines: dict[str, Line] = {lane.id: Line() for lane in cfg.lanes}
        #: the lanes' deficit counters (share rooms; engine/lanes.pick_lane)
        self.lane_credit: dict[str, int] = {}
        #: (mono ms, lane) of each pass minted from a lane in the last minute
        self.lane_pass_times: deque[tuple[int, str]] = deque()
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
        #: access rule key -> (matches, wall ms of the last); a changed rule has a new key and counts anew
        self.access_hits: dict[str, tuple[int, int | None]] = {}
        self.refused_full = 0  # new joins refused while the line was full (maxWaiting, maxWaitSec)
        self.sessions_revoked = 0  # live sessions the site ended (X-QM-Command: revoke, /api/sessions/revoke)
        self.ejected_total = 0

    # ------------------------------------------------------------------ the state, read

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

    def free_slots(self, now: int, older_than: int | None = None) -> int | None:
        """Capacity slots free at ``now`` (None: no cap); a bounced pass-holder's claim counts as taken
        (only those older than ticket ``older_than``, when given)."""
        cap = self.cfg.max_concurrent
        if cap is None or self.cfg.queueing == "passthrough":  # passthrough: no limit
            return None
        return cap - self.occupancy() - self._active_bounced(now, older_than)

    def position(self, t: Ticket) -> int | None:
        return self.line.position(t.line_seq) if t.line_seq else None

    def lane_position(self, t: Ticket) -> int | None:
        """The place's position in its own lane (its position in the line when the room has no lanes)."""
        line = self.lane_lines.get(t.lane) if t.lane is not None else None
        if line is None or not t.lane_seq:
            return self.position(t)
        return line.position(t.lane_seq)

    def lane_waiting(self, lane_id: str) -> int:
        line = self.lane_lines.get(lane_id)
        return 0 if line is None else len(line)

    # ------------------------------------------------------------------ time

    def advance(self) -> None:
        """Bring clocks up to date; cheap when nothing is due. Called before every read or change."""
        if self.prequeue:
            maybe_draw(self, self.clock.wall_ms())
        self.sweep(self.clock.mono_ms())

    def sweep(self, now: int) -> None:
        """Release slots, expire passes and end sessions whose clocks have run out."""
        heap = self._slot_heap
        while heap and heap[0][0] <= now:
            _, n = heapq.heappop(heap)
            t = self.tickets.get(n)
            if t is None or n not in self.slot_holders:
                continue
            real = slot_deadline(self.cfg, t)
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
            real = session_deadline(self.cfg, t)
            if real <= now:
                self.end_session(t)
            else:
                heapq.heappush(heap, (real, n))

    def reschedule(self) -> None:
        """Settings that shorten a clock changed: push fresh deadlines so the sweep sees them now."""
        now = self.clock.mono_ms()
        for n in self.sessions:
            heapq.heappush(self._session_heap, (session_deadline(self.cfg, self.tickets[n]), n))
        for n in self.slot_holders:
            heapq.heappush(self._slot_heap, (slot_deadline(self.cfg, self.tickets[n]), n))
        for n in self.passes:
            heapq.heappush(self._pass_heap, (self.tickets[n].pass_at + self.cfg.passed_ttl_sec * 1000, n))
        self.sweep(now)

    def slide(self, t: Ticket, now: int, *, journal: bool = True) -> None:
        """A door check slides the session; the journal hears of it at most once a minute per session."""
        t.session_last = now
        if journal and now - t.session_touched >= TOUCH_EVERY_MS:
            self.touch_session(t, now)

    # ------------------------------------------------------------------ transitions
    #
    # Live play and replay both change the room only through these. Each names what happens, leaves
    # every index (line, per-address counts, pass/slot/session sets, deadline heaps, Refs) consistent
    # with the tickets, and emits its event (a replay discards them: the journal already has them).

    def join_line(
        self, client: ClientId, joined_ms: int, return_url: str | None, reason: str | None, lane: str | None = None
    ) -> Ticket:
        """A new place at the back of the line (of ``lane``, with lanes), charged to the address and
        counted as a join.

        ``reason`` says why the visitor's presented token was not a live place (kept on the ticket).
        """
        t = self._mint(
            client.ident, client.fp, client.fp2, client.cookie, joined_ms, return_url, charge=True, lane=lane
        )
        t.reason = reason
        if lane is None:
            self.emit("join", n=t.n, reason=reason, **arrival_data(client, joined_ms, return_url))
        else:
            self.emit("join", n=t.n, reason=reason, **arrival_data(client, joined_ms, return_url), ln=lane)
        return t

    def join_prequeue(
        self, client: ClientId, handle: str, joined_ms: int, return_url: str | None, lane: str | None = None
    ) -> PreEntry:
        """A pre-queue entry (before the doors open): no number yet, counted against preQueueMaxPerIp."""
        now = self.clock.mono_ms()
        entry = PreEntry(handle, client.ident, client.fp, client.fp2, client.cookie, joined_ms, now, return_url, lane)
        self.prequeue[handle] = entry
        self.pq_per_ident[client.ident] = self.pq_per_ident.get(client.ident, 0) + 1
        self.joins_total += 1
        self.join_times.append(now)
        extra = {} if lane is None else {"ln": lane}
        self.emit("prequeue.join", h=handle, **arrival_data(client, joined_ms, return_url), **extra)
        return entry

    def merge_prequeue(
        self, client: ClientId, handle: str, joined_ms: int, return_url: str | None, lane: str | None
    ) -> PreEntry:
        """A sign-up a pre-queue shard took joins this room's pre-queue (``prequeue.merge``, Valkey only):
        as it was signed up, counted as a join, without a join time (the shard's minute counted it)."""
        now = self.clock.mono_ms()
        entry = PreEntry(handle, client.ident, client.fp, client.fp2, client.cookie, joined_ms, now, return_url, lane)
        self.prequeue[handle] = entry
        self.pq_per_ident[client.ident] = self.pq_per_ident.get(client.ident, 0) + 1
        self.joins_total += 1
        return entry

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

        ``seed``: the draw had no commitment before (see ``drop.draw_seed``): it is recorded with the draw.
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
                lane=entry.lane,
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
        # the order is qm-draw-v1 of the seed and the pre-queue, both in the journal: the event names its size
        first = numbers[0] if numbers else self.next_n
        if seed is not None:
            self.emit("prequeue.draw", count=len(numbers), first=first, seed=seed.hex())
        else:
            self.emit("prequeue.draw", count=len(numbers), first=first)

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
        if self.cfg.lanes:
            if t.lane is not None:
                self.lane_pass_times.append((now, t.lane))
            self.emit("promote", n=t.n, slot=slot, credit=self.credit, lc=dict(self.lane_credit))
        else:
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
        heapq.heappush(self._session_heap, (session_deadline(self.cfg, t), t.n))
        self.emit("admit", n=t.n, door=door_hash.hex())

    def renew_door(self, t: Ticket, door_hash: bytes, now: int) -> None:
        """The cookie holder of a live session is let in again with a new door key (the old one void);
        the session slides to ``now``."""
        t.door = door_hash
        self.slide(t, now, journal=False)
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

    def revoke_session(self, t: Ticket) -> None:
        """The site ends a live session (its visitor is done): the ticket is finished (``revoked``) and
        its slot is free at once, for the next promotion."""
        self._finish(t, "revoked")
        self.sessions_revoked += 1
        self.emit("session.revoke", n=t.n)

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
        self._lane_push(t)
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
        for lane_line in self.lane_lines.values():
            lane_line.clear()
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
        """New settings. A URL rule (or an access rule) that did not change keeps its match counters; with ``pacing``, a
        change of state or rate restarts the outflow clock (credit capped at the one-slot bank unless
        active). Deadlines the new settings shorten are the caller's (``reschedule``)."""
        old = self.cfg
        kept = {(r.id, r.pattern, r.action): r for r in old.rules}
        for rule in cfg.rules:
            prev = kept.get((rule.id, rule.pattern, rule.action))
            if prev is not None:
                rule.matches, rule.last_match_ms = prev.matches, prev.last_match_ms
        if self.access_hits:  # an access rule keeps its counters while its key (id and content) is unchanged
            keys = {rule.key for rule in cfg.access_rules}
            self.access_hits = {k: v for k, v in self.access_hits.items() if k in keys}
        self.cfg = cfg
        if old.lanes != cfg.lanes:
            self.regroup_lanes()
        if pacing and (old.state != cfg.state or old.rate_per_minute != cfg.rate_per_minute):
            self.last_tick = self.clock.mono_ms()
            if cfg.state != "active":
                self.credit = min(self.credit, SLOT)

    def regroup_lanes(self) -> None:
        """The room's lanes changed: each lane's line is made again from the whole line, front to back
        (the order people joined in). A waiting place, or a pre-queue entry, whose lane is gone moves to
        the default lane; with no lanes left, nobody has one. The deficit counters start again."""
        lanes = {lane.id for lane in self.cfg.lanes}
        fallback = default_lane(self.cfg.lanes)
        self.lane_lines = {lane.id: Line() for lane in self.cfg.lanes}
        self.lane_credit.clear()
        for n in self.line:
            t = self.tickets[n]
            t.lane = t.lane if t.lane in lanes else fallback
            t.lane_seq = 0
            self._lane_push(t)
        for entry in self.prequeue.values():
            entry.lane = entry.lane if entry.lane in lanes else fallback

    # ------------------------------------------------------------------ the transitions' helpers

    def _lane_push(self, t: Ticket) -> None:
        """Put a waiting ticket at the back of its lane's line (the default lane when its own is gone)."""
        if not self.cfg.lanes:
            t.lane, t.lane_seq = None, 0
            return
        if t.lane not in self.lane_lines:
            t.lane = default_lane(self.cfg.lanes)
        assert t.lane is not None
        t.lane_seq = self.lane_lines[t.lane].push(t.n)

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
        lane: str | None = None,
    ) -> Ticket:
        if not self.line:
            settle_credit(self)  # credit earned while nobody waited banks at most one slot
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
            lane=lane,
        )
        t.line_seq = self.line.push(n)
        if self.cfg.lanes:  # without lanes a ticket has none (the store refuses a lane the room lacks)
            self._lane_push(t)
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

    def _leave_line(self, t: Ticket) -> None:
        if t.line_seq:
            self.line.remove(t.line_seq)
            t.line_seq = 0
        if t.lane_seq:
            lane_line = self.lane_lines.get(t.lane) if t.lane is not None else None
            if lane_line is not None:
                lane_line.remove(t.lane_seq)
            t.lane_seq = 0
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
            heapq.heappush(self._slot_heap, (slot_deadline(self.cfg, t), t.n))

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
