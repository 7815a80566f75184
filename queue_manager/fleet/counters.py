"""The fleet view of the counters (STORE=valkey): what the console and GET /api/admin/health add up.

Every 5 s each instance writes its own counters — origin errors per room and phase, visitor
disconnects, protection, unknown-room checks, blocked return URLs, rejected tokens, refused key
checks, rate-limited checks and the other diagnostic counters — as JSON to ``<prefix>ctr:<instance
id>``, expiring after 15 s, and lists itself in ``<prefix>ctrs`` (a sorted set: instance id → when
its key expires), so a reader finds the live keys without scanning the keyspace. A clean stop
deletes both at once; a stopped or killed instance drops out of the sum within 15 s.

``view`` answers health: this instance's counters as they are now, plus every other live
instance's key as read from Valkey at that moment. When Valkey cannot be read, ``partial`` is true
and the sum is this instance's own plus what it last read of the others within 15 s.

/metrics never reads this: each instance reports its own process there, and Prometheus sums.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from queue_manager.background import Job, stop_if_cancelled
from queue_manager.clock import Clock
from queue_manager.metrics import Counters, from_wire, to_wire, total
from queue_manager.store.valkey.keys import counters_index_key, counters_key

if TYPE_CHECKING:
    from redis.asyncio import Redis

log = logging.getLogger("queue_manager.fleet")

WRITE_EVERY_MS = 5_000
EXPIRE_MS = 15_000


class FleetCounters:
    def __init__(
        self,
        redis: Redis,
        prefix: str,
        instance_id: str,
        clock: Clock,
        *,
        down: Callable[[], bool] = lambda: False,
        every_ms: int = WRITE_EVERY_MS,
        expire_ms: int = EXPIRE_MS,
    ) -> None:
        self.redis = redis
        self.prefix = prefix
        self.instance_id = instance_id
        self.key = counters_key(prefix, instance_id)
        self.index = counters_index_key(prefix)
        self.clock = clock
        self.down = down  # Valkey known unreachable (the store's breaker): no read is tried
        self.every_ms = max(1, every_ms)
        self.expire_ms = max(self.every_ms, expire_ms)
        #: this instance's counters as they are now (the composition root points it at the live ones)
        self.source: Callable[[], Counters] = Counters
        self._others: dict[str, tuple[Counters, int]] = {}  # instance id -> (its counters, wall ms read)
        self.job = Job("qm-fleet-counters", self._run)

    async def publish(self) -> None:
        """Write this instance's counters, expiring after ``expire_ms``, and list it in the index (instance
        id → when its key expires; the entries past that are dropped here, so the index stays the fleet's size)."""
        body = json.dumps(to_wire(self.source()), separators=(",", ":"))
        now = self.clock.wall_ms()
        await self.redis.set(self.key, body, px=self.expire_ms)
        await self.redis.zadd(self.index, {self.instance_id: now + self.expire_ms})
        await self.redis.zremrangebyscore(self.index, "-inf", now)

    async def live_instances(self) -> list[str]:
        """Every instance listed live in the index now (this one included once it has written)."""
        listed = await self.redis.zrangebyscore(self.index, self.clock.wall_ms(), "+inf")
        return sorted(w.decode() if isinstance(w, bytes) else str(w) for w in listed)

    async def read_others(self) -> dict[str, Counters]:
        """Every other live instance's counters, as Valkey holds them now: the index names them (no SCAN of
        the keyspace), one MGET reads them."""
        listed = await self.redis.zrangebyscore(self.index, self.clock.wall_ms(), "+inf")
        ids = [w.decode() if isinstance(w, bytes) else str(w) for w in listed]
        ids = [w for w in ids if w != self.instance_id]
        if not ids:
            return {}
        values = await self.redis.mget([counters_key(self.prefix, w) for w in ids])
        out: dict[str, Counters] = {}
        for who, raw in zip(ids, values, strict=True):
            if raw is None:  # expired between the index read and the MGET
                continue
            try:
                data: Any = json.loads(raw)
            except ValueError:
                continue
            out[who] = from_wire(data)
        return out

    async def view(self) -> tuple[Counters, dict[str, Any]]:
        """The sum over the live instances and health's ``fleet`` block ``{instances, partial}``."""
        own = self.source()
        now = self.clock.wall_ms()
        partial = True
        if not self.down():
            try:
                others = await self.read_others()
            except Exception as exc:
                log.debug("fleet counters: %s", exc)
            else:
                self._others = {who: (c, now) for who, c in others.items()}
                partial = False
        if partial:  # what was last read within the expiry, like a key that had not expired yet
            self._others = {who: seen for who, seen in self._others.items() if now - seen[1] < self.expire_ms}
        parts = [own, *(c for c, _ in self._others.values())]
        return total(parts), {"instances": len(parts), "partial": partial}

    def start(self) -> None:
        self.job.start()

    async def stop(self) -> None:
        """Stop writing, and take this instance out of the sum at once."""
        await self.job.stop()
        with contextlib.suppress(Exception):
            await self.redis.delete(self.key)
            await self.redis.zrem(self.index, self.instance_id)

    async def _run(self) -> None:
        while True:
            try:
                await self.publish()
            except Exception as exc:  # Valkey unreachable: the key expires, the others count without us
                log.debug("fleet counters: %s", exc)
            stop_if_cancelled()  # a driver mid-call may take the stop's cancel for its own: the loop ends anyway
            await asyncio.sleep(self.every_ms / 1000)
