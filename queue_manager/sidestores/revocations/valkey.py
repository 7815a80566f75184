"""STORE=valkey: the edge passes' revocation list in the shared Valkey (the interface: ``base.RevocationList``).

One sorted set per room, ``<prefix>passrev:<room>``: member = pass id, score = the wall ms its entry
may go. A read drops what is due first; the key itself expires with its latest entry. A flush's cutoff is
kept the same way in ``<prefix>passflush:<room>``: member = the cutoff (s), score = the wall ms it may go;
the cutoff in force is the largest member not yet due.
"""

from __future__ import annotations

from collections.abc import Sequence

from redis.asyncio import Redis
from redis.exceptions import RedisError

from queue_manager.clock import Clock
from queue_manager.store.base import StoreUnavailable
from queue_manager.store.valkey import keys


class ValkeyRevocations:
    """The revoked pass ids and flush cutoffs of every room, in Valkey for the fleet."""

    def __init__(self, client: Redis, prefix: str, clock: Clock) -> None:
        self.client = client
        self.prefix = prefix
        self.clock = clock

    async def revoke(self, room_id: str, ids: Sequence[str], until_ms: int) -> None:
        if not ids:
            return
        key = keys.pass_revoked_key(self.prefix, room_id)
        try:
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.zadd(key, dict.fromkeys(ids, until_ms), gt=True)
                pipe.pexpireat(key, until_ms, gt=True)
                pipe.pexpireat(key, until_ms, nx=True)
                await pipe.execute()
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(f"valkey: {type(exc).__name__}") from exc

    async def revoked(self, room_id: str) -> list[str]:
        key = keys.pass_revoked_key(self.prefix, room_id)
        try:
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.zremrangebyscore(key, "-inf", self.clock.wall_ms())
                pipe.zrange(key, 0, -1)
                _, members = await pipe.execute()
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(f"valkey: {type(exc).__name__}") from exc
        return sorted(m.decode() if isinstance(m, bytes) else str(m) for m in members)

    async def revoke_before(self, room_id: str, before_sec: int, until_ms: int) -> None:
        key = keys.pass_flushed_key(self.prefix, room_id)
        try:
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.zadd(key, {str(before_sec): until_ms}, gt=True)
                pipe.pexpireat(key, until_ms, gt=True)
                pipe.pexpireat(key, until_ms, nx=True)
                await pipe.execute()
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(f"valkey: {type(exc).__name__}") from exc

    async def revoked_before(self, room_id: str) -> int | None:
        key = keys.pass_flushed_key(self.prefix, room_id)
        try:
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.zremrangebyscore(key, "-inf", self.clock.wall_ms())
                pipe.zrange(key, 0, -1)
                _, members = await pipe.execute()
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(f"valkey: {type(exc).__name__}") from exc
        cutoffs = [int(m.decode() if isinstance(m, bytes) else m) for m in members]
        return max(cutoffs) if cutoffs else None
