"""The checkpoint policy: which rooms get a new checkpoint, folded from PostgreSQL alone, and when.

A checkpoint (format v1 of docs/events.md) is a room generation folded up to a seq; a rebuild
replays the newest one plus the events after it. A room is due when ``every_events`` events were
journaled since its newest checkpoint, or when the oldest event after it is ``every_ms`` old. One
instance of the fleet checkpoints at a time (an advisory lock, ``checkpoint_lease``); each room
generation keeps its newest ``SNAPSHOTS_KEPT`` checkpoints.

Example::

    checkpoints = Checkpoints(db, JournalReader(db))
    saved = await checkpoints.checkpoint_due(every_events=10_000, every_ms=3_600_000)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

from queue_manager.engine.events import Event
from queue_manager.engine.replay import ReplayDeleted, ReplayFenced, fold
from queue_manager.journal.database import Database
from queue_manager.journal.reader import SNAPSHOT_TIMEOUT_SEC, JournalReader, pack_snapshot

log = logging.getLogger("queue_manager.journal")


async def fold_off_loop(events: list[Event], base: Mapping[str, Any] | None) -> dict[str, Any]:
    """``fold`` in a worker thread: a large room's tail (a drop's sign-ups and its draw: hundreds of
    thousands of events) takes seconds to fold, which on the event loop would stop every request and
    stream of the leader for as long; in a thread the loop keeps its turns. The fold reads only its own
    arguments."""
    return await asyncio.to_thread(fold, events, base, lost_logo=_lost_logo)


def _lost_logo(room: str, gen: int, seq: int) -> None:
    log.warning(
        "checkpoint of %s: the room change at generation %d seq %d names a logo the journal does not hold; "
        "the checkpoint has no logo",
        room,
        gen,
        seq,
    )


CHECKPOINT_EVERY = 10_000  # events since a room's last checkpoint that make it "busy"
CHECKPOINT_GROWTH = 4  # ...and at least a quarter of the entries that checkpoint held
SNAPSHOTS_KEPT = 2  # checkpoints kept per room generation


class Checkpoints:
    """Saving checkpoints and deciding which rooms need one (see the module docstring)."""

    def __init__(self, db: Database, reader: JournalReader) -> None:
        self.db = db
        self.reader = reader
        self._s = db.sql_schema

    async def save_snapshot(self, snapshot: Mapping[str, Any]) -> bool:
        """Store a checkpoint (format v1); keeps the newest ``SNAPSHOTS_KEPT`` of its generation.
        Returns False when one with the same (room, gen, seq) was already there."""
        if snapshot.get("v") != 1:
            raise ValueError(f"not a checkpoint of format v1: v={snapshot.get('v')!r}")
        room, gen, seq = str(snapshot["room"]), int(snapshot["gen"]), int(snapshot["seq"])
        rows = await self.reader.fetch(
            f"""WITH ins AS (
                    INSERT INTO {self._s}.room_snapshots (room, gen, seq, packed, entries)
                    VALUES ($1, $2, $3, $4, $6) ON CONFLICT DO NOTHING RETURNING 1
                ), old AS (
                    DELETE FROM {self._s}.room_snapshots
                    WHERE room = $1 AND gen = $2 AND seq < $3 AND seq NOT IN (
                        SELECT seq FROM {self._s}.room_snapshots WHERE room = $1 AND gen = $2 AND seq < $3
                        ORDER BY seq DESC LIMIT $5)
                    RETURNING 1
                )
                SELECT (SELECT count(*) FROM ins) AS inserted""",
            room,
            gen,
            seq,
            await pack_snapshot(snapshot),
            SNAPSHOTS_KEPT - 1,
            sum(len(snapshot.get(part) or ()) for part in ("tickets", "prequeue", "finished")),
            within_sec=SNAPSHOT_TIMEOUT_SEC,
        )
        return bool(rows[0]["inserted"])

    async def busy_rooms(self, threshold: int = CHECKPOINT_EVERY) -> list[tuple[str, int, int, int]]:
        """Rooms with at least ``threshold`` events since their last checkpoint, and at least a
        CHECKPOINT_GROWTH-th of the entries that checkpoint held (tickets, pre-queue entries, finished
        records): a checkpoint costs in proportion to the room it holds, so a room of a million is
        checkpointed every 250,000 events, not every 10,000 (each event pays a bounded share, and a
        rebuild replays at most about a quarter of the room after its checkpoint).
        (room, gen, checkpoint seq, newest seq)."""
        rows = await self.reader.fetch(
            f"""SELECT r.id, r.gen, coalesce(c.seq, 0) AS base, e.head
                FROM {self._s}.rooms r
                CROSS JOIN LATERAL (SELECT max(seq) AS head FROM {self._s}.events
                                    WHERE room = r.id AND gen = r.gen) e
                LEFT JOIN LATERAL (SELECT seq, coalesce(entries, 0) AS entries FROM {self._s}.room_snapshots
                                   WHERE room = r.id AND gen = r.gen ORDER BY seq DESC LIMIT 1) c ON true
                WHERE NOT r.deleted
                  AND e.head - coalesce(c.seq, 0) >= greatest($1, coalesce(c.entries, 0) / $2)
                ORDER BY e.head - coalesce(c.seq, 0) DESC""",
            threshold,
            CHECKPOINT_GROWTH,
        )
        return [(r["id"], r["gen"], r["base"], r["head"]) for r in rows]

    async def quiet_rooms(self, age_ms: int) -> list[str]:
        """Rooms with events after their newest checkpoint, the oldest of them committed ``age_ms`` ago
        or more: a checkpoint at least that often while a room changes at all."""
        rows = await self.reader.fetch(
            f"""SELECT r.id FROM {self._s}.rooms r
                LEFT JOIN LATERAL (SELECT max(seq) AS seq FROM {self._s}.room_snapshots
                                   WHERE room = r.id AND gen = r.gen) c ON true
                WHERE NOT r.deleted
                  AND (SELECT committed_at FROM {self._s}.events e
                       WHERE e.room = r.id AND e.gen = r.gen AND e.seq > coalesce(c.seq, 0)
                       ORDER BY e.seq LIMIT 1) <= now() - make_interval(secs => $1::float8 / 1000)""",
            age_ms,
        )
        return [r["id"] for r in rows]

    async def checkpoint_due(self, every_events: int, every_ms: int) -> list[tuple[str, int]]:
        """Under the lease, checkpoint every room with ``every_events`` events since its newest checkpoint,
        and every room whose oldest event after it is ``every_ms`` old. Returns (room, seq) of each saved."""
        done: list[tuple[str, int]] = []
        async with self.checkpoint_lease() as held:
            if not held:
                return done
            due = [room for room, _gen, _base, _head in await self.busy_rooms(every_events)]
            due += [room for room in await self.quiet_rooms(every_ms) if room not in due]
            for room in due:
                try:
                    snap = await self.checkpoint(room)
                except ReplayFenced as fenced:  # a journal this build cannot read: leave it for a newer one
                    log.warning("checkpoint of %s skipped: %s", room, fenced)
                    continue
                if snap is not None:
                    done.append((room, int(snap["seq"])))
        return done

    async def checkpoint(self, room: str, dump: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """Fold ``room``'s journal into a new checkpoint (read from PostgreSQL only) and save it.

        With ``dump`` given, that document is saved instead. Returns the checkpoint saved (the
        latest one when nothing new was journaled), None for a deleted or unknown room. A journal
        this build cannot read raises ``ReplayFenced``.
        """
        if dump is not None:
            await self.save_snapshot(dump)
            return dict(dump)
        rows = await self.reader.fetch(f"SELECT gen, deleted FROM {self._s}.rooms WHERE id = $1", room)
        if not rows or rows[0]["deleted"]:
            return None
        gen = int(rows[0]["gen"])
        base = await self.reader.latest_snapshot(room, gen)
        after = 0 if base is None else int(base["seq"])
        events: list[Event] = []
        for event in await self.reader.read_events(room, gen, after):
            if event.seq != after + len(events) + 1:
                break  # fold the gap-free prefix only: a later seq may still be in flight elsewhere
            events.append(event)
        if not events:
            return base
        try:
            snap = await fold_off_loop(events, base)
        except ReplayDeleted:
            return None
        await self.save_snapshot(snap)
        return snap

    @contextlib.asynccontextmanager
    async def checkpoint_lease(self) -> AsyncIterator[bool]:
        """One checkpointer at a time across the fleet: yields True when this instance holds the lease."""
        key = f"qm.checkpoint:{self.db.schema}"
        async with self.db.acquire() as conn:
            held = bool(await conn.fetchval("SELECT pg_try_advisory_lock(hashtext($1))", key))
            try:
                yield held
            finally:
                if held:
                    await conn.execute("SELECT pg_advisory_unlock(hashtext($1))", key)

    async def checkpoint_busy_rooms(self, threshold: int = CHECKPOINT_EVERY) -> list[tuple[str, int]]:
        """Under the lease, checkpoint every busy room. Returns (room, seq) of each checkpoint saved."""
        done: list[tuple[str, int]] = []
        async with self.checkpoint_lease() as held:
            if not held:
                return done
            for room, _gen, _base, _head in await self.busy_rooms(threshold):
                snap = await self.checkpoint(room)
                if snap is not None:
                    done.append((room, int(snap["seq"])))
        return done
