"""Events: every state change the engine makes, in the form a journal stores and a rebuild replays.

A new kind of change gets a new ``type``; changing what an existing type means stamps it with the
next ``lv`` (``EVENT_LOG_VERSION``). A rebuild that meets an unknown type or a newer ``lv`` must
fence the room instead of skipping the event.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from queue_manager.engine.model import ClientId

# 2: join carries ``reason``, promote carries ``credit``; new types slot.release and return.update;
# a bounced claim whose grace ran out is kept (docs/events.md). Events stamped lv 1 still replay.
# 3: the room change that schedules a drop carries its committed ``seed``, and the draw's order is
# qm-draw-v1 of it (a draw without a committed seed carries its own). lv 1 and 2 still replay.
# 4: prequeue.draw names how many were drawn (``count``) from which ticket number (``first``), no longer the
# order and the numbers: the order is qm-draw-v1 of the seed and the pre-queue replayed. lv 1-3 still replay.
EVENT_LOG_VERSION = 4

# Every type this build writes (and can replay).
EVENT_TYPES = frozenset(
    {
        "room.create",
        "room.update",
        "room.delete",
        "room.schedule",
        "join",
        "prequeue.join",
        "prequeue.draw",
        "promote",
        "admit",
        "admit.revoke",
        "reclaim",
        "bounce",
        "eject",
        "purge",
        "flush",
        "expire",
        "session.end",
        "session.touch",
        "join.revoke",
        "prequeue.revoke",
        "slot.release",
        "return.update",
        "seq.void",
    }
)

# A seq whose event nobody can recover (lost with its writer and with Valkey), closed by an operator: replay
# passes over it. Written by the journal, never by a room script.
VOID_TYPE = "seq.void"


@dataclass(slots=True)
class Event:
    type: str
    room: str
    gen: int
    ts: int  # wall ms
    data: dict[str, Any] = field(default_factory=dict)
    seq: int = 0  # per (room, gen), from 1: the event's identity and its replay order
    lv: int = EVENT_LOG_VERSION

    def as_dict(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "room": self.room,
            "gen": self.gen,
            "seq": self.seq,
            "ts": self.ts,
            "lv": self.lv,
            "data": self.data,
        }


def arrival_data(client: ClientId, joined_ms: int, return_url: str | None) -> dict[str, Any]:
    """What a join or pre-queue join event records about who arrived (docs/events.md)."""
    return {
        "ident": client.ident,
        "fp": client.fp.hex(),
        "fp2": None if client.fp2 is None else client.fp2.hex(),
        "ck": None if client.cookie is None else client.cookie.hex(),
        "joined": joined_ms,
        "ret": return_url,
    }
