"""The rooms this instance knows exist, kept current by its own commits and by the other instances' hints.

The store commits every change through :class:`RoomWatch`: the journal first, then the rooms created,
deleted or changed are known here at once and announced to the other instances (a ``rooms`` hint), which
re-read those rooms' configs now rather than within RESYNC_MS.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

from queue_manager.engine.events import Event
from queue_manager.fleet.hints import Hints
from queue_manager.journal.pg import PgJournal
from queue_manager.store.valkey import ValkeyStore

#: at most this many config re-reads run at once after a ``rooms`` hint
MAX_REREADS = 100


class RoomWatch:
    """The journal as the store sees it, and the set of rooms the journal says exist (``known``)."""

    def __init__(self, journal: PgJournal) -> None:
        self.journal = journal
        self.known: set[str] = set()  # refreshed from the journal every RESYNC_MS (recovery.py)
        #: creations and deletions known since a refresh began reading the journal, each with its tick:
        #: a refresh's read may predate them, so they are applied again on top of what it read
        self._recent: list[tuple[int, set[str], set[str]]] = []
        self._tick = 0
        #: rooms deleted here (or heard deleted) whose deletion the journal has not shown yet -> the generation
        #: deleted (None: heard from another instance). Valkey no longer holds them while the journal may
        #: still read them alive: never known, never rebuilt, until the journal shows the deletion or a newer
        #: generation of the room.
        self.deleting: dict[str, int | None] = {}
        self._store: ValkeyStore | None = None
        self._hints: Hints | None = None
        self._rereads: set[asyncio.Task[None]] = set()

    def announce_through(self, store: ValkeyStore, hints: Hints) -> None:
        """The store that commits through this watch, and the hints it announces on: both ride the one
        Valkey connection, which is made after this watch (the store is handed it)."""
        self._store, self._hints = store, hints

    async def commit(self, events: list[Event]) -> None:
        # a deletion is in flight from before its commit: the script has already removed the room from Valkey
        for e in events:
            if e.type == "room.delete":
                self.deleting[e.room] = e.gen
        await self.journal.commit(events)
        created: set[str] = set()
        deleted: set[str] = set()
        changed: set[str] = set()
        for e in events:  # in order: the last of a create and a delete of one room wins
            if e.type == "room.create":
                created.add(e.room)
                deleted.discard(e.room)
            elif e.type == "room.delete":
                deleted.add(e.room)
                created.discard(e.room)
            elif e.type in ("room.update", "room.schedule"):
                changed.add(e.room)
        if created or deleted or changed:
            self.committed(created, deleted)
            if self._hints is not None:
                await self._hints.publish(
                    "rooms", created=sorted(created), deleted=sorted(deleted), changed=sorted(changed - deleted)
                )

    def committed(self, created: set[str], deleted: set[str]) -> None:
        """Room creations and deletions this instance journaled: known at once (a room created a moment
        before Valkey lost it answers 503 while it is rebuilt, never no_room)."""
        self.known |= created
        self.known -= deleted
        for room in created:
            self.deleting.pop(room, None)
        for room in deleted:
            self.deleting.setdefault(room, None)
        self._tick += 1
        self._recent.append((self._tick, set(created), set(deleted)))

    def mark(self) -> int:
        """Taken before a refresh reads the journal: :meth:`refresh` keeps what was learnt after it."""
        return self._tick

    def refresh(self, positions: Mapping[str, tuple[int, int, bool]], mark: int) -> None:
        """The journal's rooms (room -> generation, head, deleted) as read after ``mark``. A creation or
        deletion known since then (committed here or hinted while the read was under way) is applied on
        top, and a room still being deleted stays unknown until the journal shows it deleted (or a newer
        generation): a room deleted a moment ago must answer 404, never 503 "being rebuilt"."""
        known = {room for room, (_gen, _head, deleted) in positions.items() if not deleted}
        later = [entry for entry in self._recent if entry[0] > mark]
        for _tick, created, deleted in later:
            known |= created
            known -= deleted
        for room, gen in list(self.deleting.items()):
            seen = positions.get(room)
            if seen is not None and (seen[2] or (gen is not None and seen[0] > gen)):
                del self.deleting[room]  # the journal has the deletion, or the room was made again since
            else:
                known.discard(room)
        self.known = known
        self._recent = later

    def on_hint(self, hint: dict[str, Any]) -> None:
        """Another instance's ``rooms`` hint."""
        created, deleted, changed = (hint.get(k) for k in ("created", "deleted", "changed"))
        fresh = {str(r) for r in created} if isinstance(created, list) else set()
        self.committed(fresh, {str(r) for r in deleted} if isinstance(deleted, list) else set())
        # re-read the config that gates the room's requests now (onBackendDown, protection), not within RESYNC_MS
        for room_id in sorted(fresh | ({str(r) for r in changed} if isinstance(changed, list) else set())):
            if len(self._rereads) < MAX_REREADS:
                task = asyncio.create_task(self._reread_config(room_id))
                self._rereads.add(task)
                task.add_done_callback(self._rereads.discard)

    async def _reread_config(self, room_id: str) -> None:
        if self._store is None:
            return
        with contextlib.suppress(Exception):  # best effort: the RESYNC_MS re-read repairs it
            await self._store.get_room(room_id)
