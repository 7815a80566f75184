"""STORE=valkey: the entry book in the shared Valkey (the interface: ``base.EntryBook``).

A spent token id is ``<prefix>ejti:<room>:<sha256>`` set with NX until the token's exp (one command:
two instances spending one id at once, one wins); a user key's place is ``<prefix>esub:<room>:<sha256>``,
claimed with ``SET NX GET`` (the first join wins, the other reads the winner's place in the same command);
the counts are the hash ``<prefix>etally:<room>``.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from redis.asyncio import Redis
from redis.exceptions import RedisError

from queue_manager.clock import Clock
from queue_manager.sidestores.entrybook.base import digest
from queue_manager.store.base import StoreUnavailable
from queue_manager.store.valkey import keys

T = TypeVar("T")


async def _call(command: Awaitable[T]) -> T:
    try:
        return await command
    except (RedisError, OSError) as exc:
        raise StoreUnavailable(f"valkey: {type(exc).__name__}") from exc


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class ValkeyEntryBook:
    """Spent ids, places and counts of every room, in Valkey for the fleet."""

    def __init__(self, client: Redis, prefix: str, clock: Clock) -> None:
        self.client = client
        self.prefix = prefix
        self.clock = clock

    async def spend(self, room_id: str, jti: str, until_ms: int) -> bool:
        key = keys.entry_jti_key(self.prefix, room_id, digest(jti))
        ttl = max(1, until_ms - self.clock.wall_ms())
        return bool(await _call(self.client.set(key, b"1", nx=True, px=ttl)))

    async def forget(self, room_id: str, jti: str) -> None:
        await _call(self.client.delete(keys.entry_jti_key(self.prefix, room_id, digest(jti))))

    async def claim_place(self, room_id: str, sub: str, ticket: str, ttl_ms: int) -> str | None:
        key = keys.entry_sub_key(self.prefix, room_id, digest(sub))
        held = await _call(self.client.set(key, ticket, nx=True, px=max(1, ttl_ms), get=True))
        return None if held is None else _text(held)

    async def set_place(self, room_id: str, sub: str, ticket: str, ttl_ms: int) -> None:
        key = keys.entry_sub_key(self.prefix, room_id, digest(sub))
        await _call(self.client.set(key, ticket, px=max(1, ttl_ms)))

    async def drop_place(self, room_id: str, sub: str) -> None:
        await _call(self.client.delete(keys.entry_sub_key(self.prefix, room_id, digest(sub))))

    async def place(self, room_id: str, sub: str) -> str | None:
        held = await _call(self.client.get(keys.entry_sub_key(self.prefix, room_id, digest(sub))))
        return None if held is None else _text(held)

    async def tally(self, room_id: str, name: str, n: int = 1) -> None:
        await _call(self.client.hincrby(keys.entry_tally_key(self.prefix, room_id), name, n))

    async def tallies(self, room_id: str) -> dict[str, int]:
        raw = await _call(self.client.hgetall(keys.entry_tally_key(self.prefix, room_id)))
        return {_text(k): int(v) for k, v in raw.items()}
