"""The edge passes' revocation list on both kinds: entries kept until their passes could no longer be
valid, the later expiry winning, rooms apart; on Valkey the key itself expires with its last entry."""

from __future__ import annotations

import time

from redis.asyncio import Redis

from queue_manager.clock import FakeClock
from queue_manager.sidestores.revocations.base import RevocationList
from queue_manager.sidestores.revocations.memory import MemoryRevocations
from queue_manager.sidestores.revocations.valkey import ValkeyRevocations
from queue_manager.store.valkey import keys


def near_now() -> FakeClock:
    return FakeClock(wall_ms=int(time.time() * 1000))  # near the real clock: Valkey expires keys by it


async def test_in_this_process() -> None:
    clock = near_now()
    await entries_last_until_their_passes_are_gone(clock, MemoryRevocations(clock))


async def test_in_valkey(valkey: tuple[Redis, str]) -> None:
    client, prefix = valkey
    clock = near_now()
    await entries_last_until_their_passes_are_gone(clock, ValkeyRevocations(client, prefix, clock), client, prefix)


async def entries_last_until_their_passes_are_gone(
    clock: FakeClock, revs: RevocationList, client: Redis | None = None, prefix: str = ""
) -> None:
    now = clock.wall_ms()
    await revs.revoke("shop", ["b", "a"], now + 60_000)
    await revs.revoke("shop", ["c"], now + 120_000)
    await revs.revoke("shop", [], now + 999_000)  # nothing to list: nothing written
    await revs.revoke("other", ["z"], now + 60_000)
    assert await revs.revoked("shop") == ["a", "b", "c"]
    assert await revs.revoked("other") == ["z"]
    assert await revs.revoked("empty") == []
    await revs.revoke("shop", ["a"], now + 30_000)  # an earlier expiry never shortens an entry
    clock.advance(60)
    assert await revs.revoked("shop") == ["c"]
    assert await revs.revoked("other") == []
    if client is not None:
        ttl = await client.pttl(keys.pass_revoked_key(prefix, "shop"))
        assert 0 < ttl <= 120_000  # the key goes with its latest entry, never before
    clock.advance(60)
    assert await revs.revoked("shop") == []
