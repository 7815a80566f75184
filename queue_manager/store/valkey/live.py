"""The live streams' reads on a Valkey store: a waiting visitor's frame from this instance's replica of the
line when it can be, from the store (``status_many``) when not.

Each room with streams in this process, or polled here within POLL_IDLE_SEC, has a ``LineReplica``
(replica.py), followed on the room's line feed (a sharded pub/sub channel, keys.py ``lf``) by one
subscription per process (on a cluster, a connection per master holding such a room) and loaded from a
snapshot when it starts, on a gap in the feed, on a new generation and after a reconnect. A stream's
store read leaves a ``Seen`` (its view, the ticket's line sequence, the feed sequence and config version
read at); its next frames are answered here while

- the replica is in sync, of the same generation, and has applied at least that feed sequence,
- the ticket is still in the line (its line sequence present),
- the room's config version and admission maintenance are as at the read (so is the effective state: a
  config change moves the version; a room read before its opening instant is never answered here),
- the room is FIFO without lanes and the view was a waiting ticket's position.

Anything else reads the store, which knows what a replica does not (a ticket promoted, left, ejected). A
frame answered here is the store's view with the replica's position (and its ETA): nothing is written.
A poll (``/api/status``, ``poll``) is answered the same way from the ``Seen`` its ticket's last store read
here left (kept for the last POLL_MEMOS tickets polled), when it presents the same ticket from the same
client (address, fingerprints and cookie all equal), and once Valkey has said, in a read made after the
poll arrived, that the room is still where the replica is (``room_head``: there, of the replica's
generation, not fenced, its feed not behind the replica's). A room lost from Valkey, rolled back or being
rebuilt is so answered by the store, as before (503 ``storage_unavailable`` until it is rebuilt). The
polls of a room that arrive while such a read is out share the next one (batches.py).
The presence marks those frames would have written go in one batched call per room (lua/seen.lua) at most
every ``mark_every`` seconds per ticket (at most a quarter of the room's presence window). Far back in a
long line (position > FAR_POSITION) a visitor's frame changes at most every FAR_EVERY seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from queue_manager.engine.model import ClientId
from queue_manager.engine.view import VisitorView, eta_sec
from queue_manager.engine.visitor import Presented
from queue_manager.store.valkey.batches import RoomBatches
from queue_manager.store.valkey.replica import LineReplica

if TYPE_CHECKING:
    from queue_manager.store.valkey.store import ValkeyStore

log = logging.getLogger("queue_manager.store.valkey.live")

FAR_POSITION = 1000  # beyond this place in line a visitor's frame changes at most every FAR_EVERY seconds
FAR_EVERY = 5.0
MARKS_PER_CALL = 1000  # tickets one seen.lua call marks
BEHIND_SEC = 2.0  # a replica behind what a store read saw for this long reads a new snapshot (a lost message)
POLL_MEMOS = 50_000  # the tickets whose last poll's Seen is kept (about 1 KB each), the least recent dropped
HEADS_BATCH = 100_000  # polls that wait for one read of the room's head (all of them, in practice)
POLL_IDLE_SEC = 60.0  # a room polled (and without streams) keeps its replica this long after its last poll
POLL_SEC = 0.1  # how long the follower waits for a message before it looks at its rooms again
RETRY_SEC = 1.0  # after a lost subscription or a failed snapshot


class Seen:
    """What a stream's last store read saw, and the view it last showed."""

    __slots__ = ("cv", "every", "gen", "held", "lf", "lseq", "marked", "n", "quiet_until", "view")

    def __init__(
        self, view: VisitorView, lseq: int | None, lf: int, cv: int, held: bool, every: float, now: float
    ) -> None:
        self.view = view
        self.gen = view.gen
        self.n = view.ticket
        self.lseq = lseq
        self.lf = lf
        self.cv = cv
        self.held = held
        self.every = every  # how often its ticket is marked seen
        self.marked = now  # the store read marked it
        self.quiet_until = 0.0


class LiveLines:
    """This process's replicas of the lines its streams wait in, and the reads that use them."""

    def __init__(self, store: ValkeyStore, *, mark_every: float = 10.0) -> None:
        self.store = store
        self.mark_every = mark_every
        self.replicas: dict[str, LineReplica] = {}
        self.marks: dict[str, dict[int, int]] = {}  # room -> ticket -> generation, to be marked seen
        #: a test's hook: a feed message for which it answers True is dropped (as if lost on the way)
        self.drop: Callable[[str, bytes], bool] | None = None
        self.snapshots = 0  # snapshots read (a replica started or resynchronised)
        self.polls_local = 0  # polls answered here (the rest read the store)
        self.heads = 0  # the reads of a polled room's head in Valkey (one for the polls that wait together)
        # a polled room's head in Valkey, read once for every poll that arrived while the last read was out
        self._heads: RoomBatches[tuple[LineReplica, int, int], bool] = RoomBatches(self._head_call, batch=HEADS_BATCH)
        self.poll_memos = POLL_MEMOS
        # (room, gen, ticket) -> the client that polled it and what its last store read here saw
        self._polled: OrderedDict[tuple[str, int, int], tuple[ClientId, Seen]] = OrderedDict()
        self._streamed: set[str] = set()  # rooms with streams in this process
        self._poll_rooms: dict[str, float] = {}  # room -> when it was last polled (loop time)
        self._channels: dict[bytes, str] = {}
        self._subscribed: set[bytes] = set()
        self._follower: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ the rooms followed

    def open(self, room_id: str) -> None:
        """This process has streams of ``room_id``: follow its line."""
        self._streamed.add(room_id)
        self._follow_room(room_id)

    def _follow_room(self, room_id: str) -> None:
        if room_id not in self.replicas:
            replica = self.replicas[room_id] = LineReplica()
            channel = self.store.line_channel(room_id)
            # its snapshot is read once the subscription is confirmed (at once if it still is)
            replica.stale = channel in self._subscribed
            self._channels[channel] = room_id
        if self._follower is None or self._follower.done():
            self._follower = asyncio.get_running_loop().create_task(self._follow())

    def close(self, room_id: str) -> None:
        """No stream of ``room_id`` is left here: its replica goes (once nobody polls it either)."""
        self._streamed.discard(room_id)
        if room_id not in self._poll_rooms:
            self._drop(room_id)

    def _drop(self, room_id: str) -> None:
        if self.replicas.pop(room_id, None) is not None:
            self._channels.pop(self.store.line_channel(room_id), None)

    async def stop(self) -> None:
        tasks = [t for t in (self._follower, *self._tasks) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(BaseException):
                await t
        self._follower = None
        await self._heads.stop()

    # ------------------------------------------------------------------ reads

    async def read(
        self, room_id: str, asks: Sequence[tuple[ClientId, Presented | None]]
    ) -> list[tuple[VisitorView, object]]:
        """The store's views of ``asks`` (status_many), each with what its next frames are answered from."""
        fed = await self.store.status_many_fed(room_id, asks)
        now = asyncio.get_running_loop().time()
        held = self.store.held
        copy = self.store.config_copy(room_id)
        local = copy is not None and copy.cfg.queueing == "fifo" and not copy.cfg.lanes
        every = self.mark_every
        if copy is not None and copy.cfg.presence_sec is not None:
            every = min(every, copy.cfg.presence_sec / 4)
        replica = self.replicas.get(room_id)
        if replica is not None and fed:
            replica.saw(max(f[2] for f in fed))  # a replica behind what the store answered: a message lost?
        out: list[tuple[VisitorView, object]] = []
        for view, lseq, lf, cv in fed:
            # a room before its opening instant turns active with the clock, not with a change: the store answers
            answerable = (
                local
                and lseq is not None
                and view.state == "waiting"
                and view.position is not None
                and view.room_state != "scheduled"
            )
            out.append((view, Seen(view, lseq if answerable else None, lf, cv, held, every, now)))
        return out

    def local(self, room_id: str, memo: object, now: float) -> tuple[bool, VisitorView | None]:
        """The next frame of a stream from the replica: (False, None) when the store must answer; else
        (True, the view to send, or None when the visitor's numbers are unchanged)."""
        if not isinstance(memo, Seen) or memo.lseq is None or memo.n is None:
            return False, None
        replica = self.replicas.get(room_id)
        if replica is None or memo.held != self.store.held:
            return False, None
        if not replica.holds(memo.gen, memo.lf, memo.cv, memo.lseq):
            return False, None
        if now - memo.marked >= memo.every:
            memo.marked = now
            marks = self.marks.get(room_id)
            if marks is None:
                marks = self.marks[room_id] = {}
            marks[memo.n] = memo.gen
        if now < memo.quiet_until:  # far back: still in line, the next numbers later
            return True, None
        view = memo.view
        position = replica.index.rank(memo.lseq)
        if position == view.position:
            return True, None
        shown = VisitorView(**{name: getattr(view, name) for name in _VIEW_FIELDS})
        shown.position = position
        shown.eta_sec = eta_sec(position, view.room_state, view.rate_per_minute)
        memo.view = shown
        if position > FAR_POSITION:
            memo.quiet_until = now + FAR_EVERY
        return True, shown

    # ------------------------------------------------------------------ polls

    async def poll(self, room_id: str, client: ClientId, presented: Presented | None) -> VisitorView | None:
        """A poll's view from the replica (the ticket's last store read here, its position now), or None:
        the store must answer (nothing kept of this ticket and client, something but the position may
        have changed, or the room is not in Valkey where the replica is: lost, rolled back, fenced)."""
        if presented is None or presented.n is None:
            return None
        key = (room_id, presented.gen, presented.n)
        kept = self._polled.get(key)
        if kept is None or kept[0] != client:
            return None
        replica = self.replicas.get(room_id)
        if replica is None or not replica.synced:
            return None
        memo = kept[1]
        loop = asyncio.get_running_loop()
        self._poll_rooms[room_id] = loop.time()
        if memo.lseq is None or not replica.holds(memo.gen, memo.lf, memo.cv, memo.lseq):
            return None
        if not await self._heads.join(room_id, (replica, replica.gen, replica.lf)):
            return None
        answered, view = self.local(room_id, memo, loop.time())
        if not answered:
            return None
        self._polled.move_to_end(key)
        self.polls_local += 1
        return view if view is not None else memo.view

    async def _head_call(
        self, room_id: str, asks: list[tuple[LineReplica, int, int]]
    ) -> Callable[[], Awaitable[list[bool | BaseException]]]:
        """Whether the room in Valkey is where each ask's replica was when it asked: there, of that
        generation, not fenced, its feed sequence not behind the replica's. Valkey's feed sequence only
        grows, so one behind what a replica applied means the room was rolled back (restored from an
        older copy): that replica loads a new snapshot."""
        gen, lf, fenced = await self.store.room_head(room_id)
        answers: list[bool | BaseException] = []
        for replica, at_gen, at_lf in asks:
            if gen == at_gen and lf < at_lf and self.replicas.get(room_id) is replica:
                replica.unsync()
            answers.append(gen == at_gen and lf >= at_lf and not fenced)
        self.heads += 1

        async def finish() -> list[bool | BaseException]:
            return answers

        return finish

    async def poll_read(self, room_id: str, client: ClientId, presented: Presented | None) -> VisitorView:
        """A poll read from the store (status_many, one ask), its Seen kept for the ticket's next polls."""
        ((view, memo),) = await self.read(room_id, [(client, presented)])
        if isinstance(memo, Seen) and memo.lseq is not None and memo.n is not None:
            self._poll_rooms[room_id] = asyncio.get_running_loop().time()
            self._follow_room(room_id)
            key = (room_id, memo.gen, memo.n)
            self._polled[key] = (client, memo)
            self._polled.move_to_end(key)
            while len(self._polled) > self.poll_memos:
                self._polled.popitem(last=False)
        return view

    def _idle_polls(self, now: float) -> None:
        """Rooms nobody polled within POLL_IDLE_SEC: their tickets' memos go, and their replicas unless
        streams follow them."""
        idle = [room for room, at in self._poll_rooms.items() if now - at > POLL_IDLE_SEC]
        if not idle:
            return
        for room_id in idle:
            del self._poll_rooms[room_id]
            if room_id not in self._streamed:
                self._drop(room_id)
        gone = set(idle)
        for key in [k for k in self._polled if k[0] in gone]:
            del self._polled[key]

    # ------------------------------------------------------------------ following the feeds

    async def _follow(self) -> None:
        """One subscription for every room followed: messages applied in feed order, snapshots read when
        a replica needs one, the presence marks sent about once a second."""
        loop = asyncio.get_running_loop()
        while self.replicas:
            pubsub = self.store.redis.pubsub()
            # on a cluster each sharded channel is read from the master of its slot (redis-py's cluster
            # pub/sub keeps a connection per master, follows MOVED and polls them in turn)
            receive = pubsub.get_sharded_message if self.store.cluster else pubsub.get_message
            subscribed = self._subscribed = set()
            try:
                last_marks = loop.time()
                while self.replicas:
                    wanted = set(self._channels)
                    if wanted - subscribed:
                        await pubsub.ssubscribe(*(wanted - subscribed))
                        subscribed |= wanted
                    if subscribed - wanted:
                        await pubsub.sunsubscribe(*(subscribed - wanted))
                        subscribed &= wanted
                    message = await receive(timeout=POLL_SEC)
                    if message is not None:
                        self._on_message(message)
                    now = loop.time()
                    self._check(now)
                    if now - last_marks >= 1.0:
                        last_marks = now
                        self._send_marks()
                        self._idle_polls(now)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("line feed subscription lost (%s): replicas resynchronise", exc)
                for replica in self.replicas.values():
                    replica.unsync()
                    replica.stale = False  # read again once subscribed again
                await asyncio.sleep(RETRY_SEC)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()

    def _on_message(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        channel = message.get("channel")
        room_id = self._channels.get(channel) if isinstance(channel, bytes) else None
        replica = None if room_id is None else self.replicas.get(room_id)
        if replica is None or room_id is None:
            return
        if kind in ("ssubscribe", b"ssubscribe"):
            replica.unsync()  # subscribed from now on: the snapshot follows
            return
        data = message.get("data")
        if not isinstance(data, bytes):
            return
        drop = self.drop
        if drop is not None and drop(room_id, data):
            return
        replica.apply(data)

    def _check(self, now: float) -> None:
        """Snapshots for the replicas that need one; a replica left behind what a read saw resynchronises."""
        for room_id, replica in self.replicas.items():
            if replica.synced and replica.wanted > replica.lf:
                if not replica.wanted_since:
                    replica.wanted_since = now
                elif now - replica.wanted_since >= BEHIND_SEC:
                    replica.unsync()
            elif replica.wanted_since:
                replica.wanted_since = 0.0
            if replica.stale:
                replica.stale = False
                replica.wanted_since = 0.0
                self._spawn(self._snapshot(room_id, replica))

    async def _snapshot(self, room_id: str, replica: LineReplica) -> None:
        try:
            snap = await self.store.line_snapshot(room_id)
        except Exception as exc:
            log.warning("room %s: line snapshot failed (%s)", room_id, exc)
            snap = None
        else:
            self.snapshots += 1
        if self.replicas.get(room_id) is not replica:
            return
        if snap is None:  # no such room (now), or no answer: asked again; the store answers its streams meanwhile
            await asyncio.sleep(RETRY_SEC)
            replica.unsync()
            return
        replica.load(*snap)

    def _send_marks(self) -> None:
        marks, self.marks = self.marks, {}
        for room_id, tickets in marks.items():
            by_gen: dict[int, list[int]] = {}
            for n, gen in tickets.items():
                by_gen.setdefault(gen, []).append(n)
            for gen, numbers in by_gen.items():
                for start in range(0, len(numbers), MARKS_PER_CALL):
                    self._spawn(self._mark(room_id, gen, numbers[start : start + MARKS_PER_CALL]))

    async def _mark(self, room_id: str, gen: int, numbers: list[int]) -> None:
        try:
            await self.store.mark_seen(room_id, gen, numbers)
        except Exception as exc:  # the next marks come with the next frames; the store read marks too
            log.warning("room %s: presence marks failed (%s)", room_id, exc)

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


_VIEW_FIELDS = tuple(VisitorView.__dataclass_fields__)
