"""Rooms rebuilt from the events journal when their Valkey state is lost, rolled back or fenced.

Every RESYNC_MS (``reconcile_loop.py``) :meth:`Recovery.reconcile` compares each room's position in the
journal with its state in Valkey and rebuilds the rooms behind it from the latest checkpoint plus the
events after it. The other way round, a room whose journal reads behind what it was seen holding
(``journal_marks.py``: PostgreSQL restored from an older copy under this Valkey) is reported as ahead of
the journal and never rebuilt from that older journal.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from queue_manager.background import stop_if_cancelled
from queue_manager.config import Settings
from queue_manager.engine.replay import ReplayDeleted, ReplayFenced, rebuilt
from queue_manager.fleet.connection import FleetConnection, first_words
from queue_manager.fleet.gapwatch import GapWatch
from queue_manager.fleet.journal_marks import Ahead, JournalMarks
from queue_manager.fleet.room_watch import RoomWatch
from queue_manager.fleet.storage_watch import StorageWatch
from queue_manager.journal.pg import PgJournal
from queue_manager.store.valkey.heads import LiveHead, live_heads

log = logging.getLogger("queue_manager.backend")


class Recovery:
    """The rooms being rebuilt, the rooms that cannot be, the rooms ahead of the journal, and the counts."""

    def __init__(
        self,
        settings: Settings,
        journal: PgJournal,
        connection: FleetConnection,
        rooms: RoomWatch,
        storage: StorageWatch,
        gaps: GapWatch,
    ) -> None:
        self.valkey_prefix = settings.valkey_prefix
        self.journal = journal
        self.connection = connection
        self.store = connection.store
        self.rooms = rooms
        self.storage = storage
        self.gaps = gaps
        self.recovering: set[str] = set()
        self.rebuilt_total = 0
        self.rollbacks_total = 0  # rooms found behind the journal (Valkey restored from an older copy)
        self.logos_lost_total = 0  # room changes rebuilt whose logo reference matched no logo held
        self.last_rebuild: dict[str, Any] | None = None
        self.unrebuildable: dict[str, str] = {}  # room -> why its journal could not be replayed (fence kind)
        # rooms whose journal reads behind what it was seen holding: PostgreSQL restored under a newer Valkey
        self.marks = JournalMarks(connection.redis, connection.prefix)
        self.ahead: dict[str, Ahead] = {}
        self.live_ahead: dict[str, LiveHead] = {}  # their Valkey state, and their journal, as last read
        self.journal_ahead: dict[str, tuple[int, int] | None] = {}
        #: set to run the next reconcile now rather than at the end of RESYNC_MS
        self.wake = asyncio.Event()
        journal.on_conflict = self.on_conflict

    async def on_conflict(self, rooms: set[tuple[str, int]]) -> None:
        """The journal refused events whose seq it already holds: those rooms' Valkey state is behind
        it. Fence them before their callers are answered (so no compensation runs on the old state),
        and rebuild now rather than at the next RESYNC_MS."""
        for room_id, _gen in sorted(rooms):
            self.recovering.add(room_id)
            try:
                await self.store.fence(room_id)
            finally:
                self.recovering.discard(room_id)
        self.wake.set()

    async def reconcile(self) -> list[str]:
        """Rooms whose Valkey state is lost (flushed), rolled back (restored from an older copy: its seq
        is behind the journal's) or fenced: rebuild them from the latest checkpoint plus the events after
        it, and load them into Valkey atomically. A rolled-back room is fenced first, so it answers 503
        storage_unavailable instead of serving (and minting on) the old state meanwhile.

        The journal is read before Valkey: whatever the journal holds was in Valkey before, so a
        Valkey seq below it can only be a rollback, never a commit racing this check.

        The other way round, a room whose journal reads behind the furthest it was seen holding
        (journal_marks.py: PostgreSQL restored from an older copy under this Valkey) is reported in
        ``ahead`` and never rebuilt from that older journal. The marks are read before the journal."""
        marks, flagged = await self.marks.read()
        mark = self.rooms.mark()
        positions = await self.journal.positions()
        heads = {room: (gen, seq) for room, (gen, seq, deleted) in positions.items() if not deleted}
        ahead = JournalMarks.ahead(marks, flagged, {room: (g, s) for room, (g, s, _) in positions.items()})
        new = {room: a for room, a in ahead.items() if room not in flagged}
        if new:
            log.error(
                "rooms ahead of the events journal (PostgreSQL restored under a Valkey that holds newer state?), "
                "not rebuilt from it: %s",
                ", ".join(sorted(new)),
            )
            await self.marks.flag(new)
        self.ahead = ahead
        await self.marks.raise_to({room: pos for room, pos in heads.items() if room not in ahead})
        self.rooms.refresh(positions, mark)
        self.unrebuildable = {room: kind for room, kind in self.unrebuildable.items() if room in heads}
        live = await live_heads(self.connection.redis, self.valkey_prefix, set(heads) | set(ahead))
        self.live_ahead = {room: live[room] for room in ahead}
        self.journal_ahead = {
            room: (positions[room][0], positions[room][1]) if room in positions else None for room in ahead
        }
        try:
            if self.connection.lease.leader:
                watched = {room: head for room, head in heads.items() if room not in ahead}
                await self.gaps.round(watched, live, maintenance=self.journal.maintenance)
            else:
                await self.gaps.refresh()
        except Exception as exc:  # tried again next round
            stop_if_cancelled()
            log.warning("journal gaps: %s", first_words(exc))
        rebuilt = []
        held: dict[str, int] | None = None  # read once, when a room needs a rebuild
        for room_id, (gen, seq) in sorted(heads.items()):
            if room_id in ahead:  # never replace Valkey's newer state with the older journal's
                continue
            if room_id in self.rooms.deleting:  # deleted from Valkey, its room.delete not yet read back
                continue
            why = live[room_id].behind(gen, seq)
            if why is None:
                continue
            if held is None:
                held = await self.storage.spool_held()
            if held:
                # spooled events are not in the journal yet: a rebuild now would drop them. The room stays
                # fenced (503, never no_room) until every spool has drained, then it is rebuilt in full.
                if self.unrebuildable.get(room_id) != "spool_pending":
                    log.warning(
                        "rebuild of %s (%s) waits: the spools of %s hold events the journal has not yet",
                        room_id,
                        why,
                        ", ".join(sorted(held)),
                    )
                self.unrebuildable[room_id] = "spool_pending"
                await self.store.fence(room_id)
                continue
            self.recovering.add(room_id)
            try:
                if await self._rebuild(room_id, gen, why):
                    rebuilt.append(room_id)
            finally:
                self.recovering.discard(room_id)
        return rebuilt

    async def _rebuild(self, room_id: str, gen: int, why: str) -> bool:
        """One room rebuilt from its latest checkpoint and the events after it; False when it is not (deleted
        meanwhile, or fenced because its journal cannot be replayed)."""
        if why.startswith("rolled back"):
            log.warning("room %s: Valkey state %s: fenced until rebuilt", room_id, why)
            await self.store.fence(room_id)
            self.rollbacks_total += 1
        base = await self.journal.latest_snapshot(room_id, gen)
        events = await self.journal.read_events(room_id, gen, int(base["seq"]) if base else 0)
        try:
            # off the event loop, as a checkpoint's fold: a room of a million takes tens of seconds to load
            # and replay, and this instance's requests and streams go on meanwhile
            doc = await asyncio.to_thread(rebuilt, events, self.connection.clock, base, lost_logo=self._lost_logo)
        except ReplayDeleted:
            return False
        except ReplayFenced as fenced:
            # the room stays fenced (503 everywhere, never no_room) until a build that can read its
            # journal rebuilds it; a gap may be a commit still in flight: retried every RESYNC_MS
            if room_id not in self.unrebuildable:
                log.warning("rebuild of %s fenced (%s): %s", room_id, fenced.kind, fenced.reason)
            self.unrebuildable[room_id] = fenced.kind
            await self.store.fence(room_id)
            return False
        self.unrebuildable.pop(room_id, None)
        if not await self.store.import_room(doc):
            log.info("room %s: not rebuilt, its generation %d was deleted meanwhile", room_id, gen)
            return False
        self.rebuilt_total += 1
        start = int(base["seq"]) if base else 0
        self.last_rebuild = {
            "roomId": room_id,
            "generation": gen,
            "why": why,
            "fromCheckpointSeq": start,
            "events": len(events),
            "seq": int(doc["seq"]),
        }
        log.warning(
            "room %s rebuilt from the journal (%s; generation %d: checkpoint seq %d + %d events)",
            room_id,
            why,
            gen,
            start,
            len(events),
        )
        return True

    def _lost_logo(self, room_id: str, gen: int, seq: int) -> None:
        """A rebuild met a logo reference that matched no logo the room held (a journal cut that no
        checkpoint covers): the room is rebuilt without its logo, logged and counted."""
        self.logos_lost_total += 1
        log.warning(
            "rebuild of %s: the room change at generation %d seq %d names a logo the journal does not hold; "
            "the room is rebuilt without a logo (upload it again)",
            room_id,
            gen,
            seq,
        )

    async def mark_journal(self) -> None:
        """Raise the journal marks to the journal's positions now (the rooms found ahead keep theirs)."""
        heads = await self.journal.heads()
        await self.marks.raise_to({room: pos for room, pos in heads.items() if room not in self.ahead})

    def ahead_report(self) -> dict[str, dict[str, Any]]:
        """room -> where its Valkey state, its journal mark and its journal stand (lists of [gen, seq])."""
        out: dict[str, dict[str, Any]] = {}
        for room, (mark, found) in sorted(self.ahead.items()):
            live, now = self.live_ahead.get(room), self.journal_ahead.get(room)
            out[room] = {
                "valkey": [live.gen, live.seq] if live is not None and live.gen is not None else None,
                "journalSeen": list(mark),  # the furthest the journal was seen holding before
                "journal": list(now) if now is not None else None,  # the journal now (None: room unknown)
                "journalWhenFound": list(found) if found is not None else None,
            }
        return out

    def recovering_rooms(self) -> set[str]:
        return self.recovering | set(self.unrebuildable) | self.store.fenced_recently(30.0)
