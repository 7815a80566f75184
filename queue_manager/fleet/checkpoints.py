"""The leader's checkpoints of each room, folded from PostgreSQL alone."""

from __future__ import annotations

from typing import Any

from queue_manager.config import Settings
from queue_manager.journal.pg import PgJournal


class Checkpoints:
    """Every RESYNC_MS on the leader: each room with CHECKPOINT_EVERY_EVENTS events since its newest
    checkpoint, or whose oldest event after it is CHECKPOINT_EVERY_MS old, gets a new one. A rebuild then
    replays that checkpoint and a bounded tail."""

    def __init__(self, settings: Settings, journal: PgJournal) -> None:
        self.every_events = settings.checkpoint_every_events
        self.every_ms = settings.checkpoint_every_ms
        self.journal = journal
        self.saved = 0
        self.last: dict[str, Any] | None = None

    async def round(self) -> list[tuple[str, int]]:
        saved = await self.journal.checkpoint_due(self.every_events, self.every_ms)
        for room_id, seq in saved:
            self.saved += 1
            self.last = {"roomId": room_id, "seq": seq, "at": self.journal.clock.wall_ms()}
        return saved
