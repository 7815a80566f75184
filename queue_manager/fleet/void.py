"""Seqs nobody can recover closed with ``seq.void`` events, then the room rebuilt from the journal."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from queue_manager.config import Settings
from queue_manager.fleet.connection import FleetConnection
from queue_manager.fleet.gapwatch import GapWatch, VoidRefused, outbox_row
from queue_manager.fleet.recovery import Recovery
from queue_manager.fleet.storage_watch import StorageWatch
from queue_manager.journal.gaps import JournalGaps
from queue_manager.journal.pg import PgJournal
from queue_manager.store.valkey.heads import live_heads
from queue_manager.store.valkey.keys import room_key

log = logging.getLogger("queue_manager.backend")


class JournalVoid:
    """``POST /api/admin/rooms/<id>/journal/void``: what it checks, what it writes, what it rebuilds."""

    def __init__(
        self,
        settings: Settings,
        journal: PgJournal,
        connection: FleetConnection,
        storage: StorageWatch,
        gaps: GapWatch,
        recovery: Recovery,
    ) -> None:
        self.valkey_prefix = settings.valkey_prefix
        self.instance_id = settings.instance_id
        self.journal = journal
        self.connection = connection
        self.storage = storage
        self.gaps = gaps
        self.recovery = recovery

    async def void(self, room_id: str, seqs: list[int], by: str) -> dict[str, Any]:
        """Close seqs of ``room_id``'s current generation that nobody can recover with ``seq.void`` events,
        then rebuild the room from the journal (so the live line holds nothing the journal does not).

        Refused (``VoidRefused``) unless every seq is missing from the journal, within what was minted, not
        in Valkey's outbox (the leader commits those itself), no spool holds events the journal lacks and
        journal maintenance is off: a void must never stand where a writer could still commit."""
        if self.journal.maintenance:
            raise VoidRefused(
                409, "journal_maintenance", "Journal maintenance is on: the spools hold the journal's writes."
            )
        positions = await self.journal.positions()
        if room_id not in positions or positions[room_id][2]:
            raise VoidRefused(404, "no_room", f"The journal holds no room {room_id!r}.")
        gen, top, _ = positions[room_id]
        redis = self.connection.redis
        live = (await live_heads(redis, self.valkey_prefix, [room_id]))[room_id]
        minted = max(top, live.seq if live.gen == gen else 0)
        beyond = [s for s in seqs if s > minted]
        if beyond:
            raise VoidRefused(
                409, "not_missing", f"Seqs {beyond} were never minted (the newest is {minted}).", seqs=beyond
            )
        held = await self.gaps.gaps.present(room_id, gen, min(seqs) - 1, max(seqs))
        if held & set(seqs):
            there = sorted(held & set(seqs))
            raise VoidRefused(409, "not_missing", f"The journal holds seqs {there}: they are no gap.", seqs=there)
        outbox = room_key(self.valkey_prefix, room_id, "ob")
        in_outbox: list[int] = []
        for seq in seqs:
            members: list[Any] = await redis.zrangebyscore(outbox, seq, seq)
            for member in members:
                if outbox_row(room_id, member)[0] == gen:
                    in_outbox.append(seq)
        if in_outbox:
            raise VoidRefused(
                409,
                "in_outbox",
                f"Valkey's outbox holds seqs {in_outbox}: the leader commits them to the journal itself.",
                seqs=in_outbox,
            )
        spools = await self.storage.spool_held()
        if spools:
            raise VoidRefused(
                409,
                "spool_pending",
                f"The spools of {', '.join(sorted(spools))} hold events the journal does not have yet: one of them "
                "may be a missing seq. Let them drain first.",
                instances=sorted(spools),
            )
        now = self.journal.clock.wall_ms()
        rows = [JournalGaps.void_row(room_id, gen, seq, now, self.instance_id, {"by": by}) for seq in sorted(seqs)]
        _, collided = await self.gaps.gaps.complete(rows)
        landed = sorted(key[2] for key in collided)  # a writer's commit came first: that event stands
        voided = [s for s in sorted(seqs) if s not in landed]
        self.gaps.voided_total += len(voided)
        log.warning("journal: room %s generation %d: seqs %s voided by %s", room_id, gen, voided, by)
        # rebuilt from the journal now: the live state loses whatever the voided events had done
        self.recovery.unrebuildable.pop(room_id, None)
        with contextlib.suppress(Exception):
            await self.connection.store.fence(room_id)
        self.recovery.wake.set()
        return {"roomId": room_id, "generation": gen, "voided": voided, "committedMeanwhile": landed}
