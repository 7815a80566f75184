"""Where each room's live state in Valkey stands, for the rebuild check (``fleet/recovery.py``).

A room's Valkey state is never behind the journal: every event is minted in Valkey first and
committed to PostgreSQL after. So, against the journal's newest committed ``(gen, seq)`` of a room:

* no state at all (and no ``meta`` that remembers a later delete): lost (flushed) — rebuild;
* an older generation, or the same generation with a smaller ``seq``: rolled back (Valkey restored
  from an older copy) — fence, then rebuild;
* fenced: a rebuild was started (here or elsewhere) and has not finished — rebuild.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from queue_manager.store.valkey.errors import translate
from queue_manager.store.valkey.keys import room_key

if TYPE_CHECKING:
    from redis.asyncio import Redis


@dataclass(frozen=True, slots=True)
class LiveHead:
    gen: int | None  # the live generation (None: no live state)
    seq: int  # its newest event's seq
    meta_gen: int  # the last generation this room id had in Valkey (kept across deletes)
    fenced: bool

    def behind(self, gen: int, seq: int) -> str | None:
        """Why the live state must be rebuilt from a journal whose newest event is (gen, seq); None: it need not."""
        if self.fenced:
            return "fenced"
        if self.gen is None:
            return None if self.meta_gen >= gen else "lost"  # meta_gen >= gen: deleted here, commit in flight
        if self.gen < gen:
            return "rolled back (older generation)"
        if self.gen == gen and self.seq < seq:
            return f"rolled back (seq {self.seq} behind the journal's {seq})"
        return None


async def live_heads(redis: Redis, prefix: str, room_ids: Iterable[str]) -> dict[str, LiveHead]:
    """room -> its ``LiveHead``, for every room in ``room_ids``. One round trip."""
    ids = list(room_ids)
    if not ids:
        return {}
    with translate():
        async with redis.pipeline(transaction=False) as pipe:
            for room_id in ids:
                pipe.hmget(room_key(prefix, room_id, "st"), "gen", "seq")
                pipe.hget(room_key(prefix, room_id, "meta"), "gen")
                pipe.exists(room_key(prefix, room_id, "fence"))
            replies = await pipe.execute()
    out: dict[str, LiveHead] = {}
    for i, room_id in enumerate(ids):
        (gen, seq), meta_gen, fenced = replies[3 * i : 3 * i + 3]
        out[room_id] = LiveHead(None if gen is None else int(gen), int(seq or 0), int(meta_gen or 0), bool(fenced))
    return out
