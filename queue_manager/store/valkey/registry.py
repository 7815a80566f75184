"""The registry of rooms: every room's id in one sorted set, in creation order (``rooms``, scored from
``rooms:seq``). No script touches it (on a cluster it lives in another slot than any room), so the
store adds a room before and after the script that creates or imports it, and takes it out after the
one that deletes it."""

from __future__ import annotations

from queue_manager.store.valkey.arguments import text
from queue_manager.store.valkey.calls import ScriptCalls
from queue_manager.store.valkey.errors import translate
from queue_manager.store.valkey.keys import room_key, rooms_key, rooms_seq_key


class RoomRegistry:
    def __init__(self, calls: ScriptCalls) -> None:
        self._calls = calls

    async def ids(self) -> list[str]:
        """Every room's id, oldest first."""
        calls = self._calls
        with translate(None, calls.breaker):
            return [text(i) for i in await calls.redis.zrange(rooms_key(calls.prefix), 0, -1)]

    async def live(self, room_id: str) -> bool:
        """The room's keys exist (its state, or its fence while it is rebuilt)."""
        calls = self._calls
        with translate(room_id, calls.breaker):
            tag = calls.slot_id(room_id)
            count = await calls.redis.exists(room_key(calls.prefix, tag, "st"), room_key(calls.prefix, tag, "fence"))
        return bool(count)

    async def register(self, room_id: str, score: float | None = None) -> float:
        """Add ``room_id`` unless it is there (its score: the creation order); called before and after
        the script that creates or imports the room. Returns the room's score."""
        calls = self._calls
        key = rooms_key(calls.prefix)
        with translate(room_id, calls.breaker):
            if score is None:
                held = await calls.redis.zscore(key, room_id)
                if held is not None:
                    return float(held)
                score = float(await calls.redis.incr(rooms_seq_key(calls.prefix)))
            await calls.redis.zadd(key, {room_id: score}, nx=True)
        return score

    async def unregister(self, room_id: str) -> None:
        """Take ``room_id`` out after the script that deleted it, and put it back if the room exists
        again (another instance created it meanwhile: its second add may have come first)."""
        calls = self._calls
        with translate(room_id, calls.breaker):
            await calls.redis.zrem(rooms_key(calls.prefix), room_id)
        if await self.live(room_id):
            await self.register(room_id)
