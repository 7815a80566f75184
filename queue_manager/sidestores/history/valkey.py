"""Bot protection's refusals per room and hour, counted for the whole fleet (STORE=valkey).

Each instance counts the joins it refused (``blocked``) or let through with a warning (``warned``) in
memory and adds them to ``<prefix>hist:ref:<hour>`` (HINCRBY, one pipeline) about once a second
(``FLUSH_SEC``), never one round trip per request; the hash expires three hours after it was last added
to. The leader reads the hour's hash (one HGETALL) when it writes the open hour; the counts are
absolute, so reading them twice adds nothing. A clean stop flushes what is held. Counts that Valkey could
not take are held for the next flush (bounded).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from queue_manager.background import Job, stop_if_cancelled
from queue_manager.store.valkey.keys import history_refusals_key

if TYPE_CHECKING:
    from redis.asyncio import Redis

log = logging.getLogger("queue_manager.history")

FLUSH_SEC = 1.0
EXPIRE_SEC = 3 * 3600
HELD_MAX = 10_000  # (room, hour, kind) entries held while Valkey is unreachable


class SharedRefusals:
    """The :class:`~queue_manager.sidestores.history.base.RefusalCounts` of STORE=valkey: the fleet's tallies."""

    def __init__(self, redis: Redis, prefix: str, *, flush_sec: float = FLUSH_SEC) -> None:
        self.redis = redis
        self.prefix = prefix
        self.flush_sec = flush_sec
        self._held: dict[tuple[int, str], int] = {}  # (hour, "<room>|b"/"<room>|w") -> count
        self._job = Job("qm-history-refusals", self._run)
        self.dropped = 0

    def add(self, room: str, hour: int, kind: str) -> None:
        key = (hour, f"{room}|{'b' if kind == 'blocked' else 'w'}")
        if key not in self._held and len(self._held) >= HELD_MAX:
            self.dropped += 1
            return
        self._held[key] = self._held.get(key, 0) + 1

    async def flush(self) -> None:
        held, self._held = self._held, {}
        if not held:
            return
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                for (hour, field), n in held.items():
                    pipe.hincrby(history_refusals_key(self.prefix, hour), field, n)
                for hour in {h for h, _ in held}:
                    pipe.expire(history_refusals_key(self.prefix, hour), EXPIRE_SEC)
                await pipe.execute()
        except BaseException:
            for key, n in held.items():
                self._held[key] = self._held.get(key, 0) + n
            raise

    async def read(self, hour: int) -> dict[str, tuple[int, int]]:
        """The hour's counts as Valkey holds them (what every instance has flushed; this instance's own at most
        ``FLUSH_SEC`` behind, and flushed before the last write of a clean stop)."""
        raw = await self.redis.hgetall(history_refusals_key(self.prefix, hour))
        counts: dict[str, list[int]] = {}
        for key, value in raw.items():
            field = key.decode() if isinstance(key, bytes) else str(key)
            room, _, kind = field.rpartition("|")
            pair = counts.setdefault(room, [0, 0])
            pair[0 if kind == "b" else 1] += int(value)
        return {room: (b, w) for room, (b, w) in counts.items()}

    def start(self) -> None:
        self._job.start()

    async def stop(self) -> None:
        await self._job.stop()
        with contextlib.suppress(Exception):
            await self.flush()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.flush_sec)
            try:
                await self.flush()
            except Exception as exc:
                stop_if_cancelled()
                log.debug("history refusals: %s", type(exc).__name__)
            stop_if_cancelled()  # a write under way took the stop's cancel for its own
