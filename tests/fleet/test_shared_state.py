"""The fleet's shared alert state against a real Valkey: saves fenced on the leader epoch, reports per field."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from queue_manager.fleet.leader import LeaderLease
from queue_manager.jobs.shared_state_valkey import ValkeyShared
from queue_manager.store.valkey import keys
from tests.fleet.test_leader import _cleanup


@pytest.fixture(autouse=True)
async def _clean(client: Redis, prefix: str) -> AsyncIterator[None]:
    yield
    await _cleanup(client, prefix)


async def test_only_the_current_leader_saves_and_a_deposed_one_is_refused(client: Redis, prefix: str) -> None:
    a, b = LeaderLease(client, prefix, "a", 60_000), LeaderLease(client, prefix, "b", 60_000)
    assert await a.try_acquire() and not await b.try_acquire()
    shared_a, shared_b = ValkeyShared(client, prefix, a), ValkeyShared(client, prefix, b)
    assert await shared_a.save("alerts:state", {"open": {"x": 1}})
    assert not await shared_b.save("alerts:state", {"open": {}})  # not the leader
    assert await shared_b.load("alerts:state") == {"open": {"x": 1}}  # any instance reads it
    # a takes too long: its lease lapses, b leads under a newer epoch, a's late save is refused
    await client.delete(keys.leader_key(prefix))
    assert await b.try_acquire()
    assert not await shared_a.save("alerts:state", {"open": {"late": True}})
    assert await shared_b.save("alerts:state", {"open": {"y": 2}})
    assert await shared_a.load("alerts:state") == {"open": {"y": 2}}


async def test_a_reset_epoch_cannot_roll_the_state_back(client: Redis, prefix: str) -> None:
    a = LeaderLease(client, prefix, "a", 60_000)
    await client.set(keys.leader_epoch_key(prefix), 41)
    assert await a.try_acquire() and a.epoch == 42
    shared = ValkeyShared(client, prefix, a)
    assert await shared.save("alerts:state", {"open": {"incident": 1}})
    # somebody deletes leader:epoch by hand; the next leader starts again at 1
    await client.delete(keys.leader_key(prefix), keys.leader_epoch_key(prefix))
    b = LeaderLease(client, prefix, "b", 60_000)
    assert await b.try_acquire() and b.epoch == 1
    shared_b = ValkeyShared(client, prefix, b)
    assert not await shared_b.save("alerts:state", {"open": {}})
    assert shared_b.refused_stale == 1
    assert await shared_b.load("alerts:state") == {"open": {"incident": 1}}
    # deleting both keys together is the documented reset
    await client.delete(keys.alerts_state_key(prefix))
    assert await shared_b.save("alerts:state", {"open": {}})


async def test_reports_are_one_field_each_and_removable(client: Redis, prefix: str) -> None:
    shared = ValkeyShared(client, prefix, LeaderLease(client, prefix, "a", 60_000))
    await shared.report("alerts:storage", "i:a", {"ok": True})
    await shared.report("alerts:storage", "i:b", {"ok": False})
    assert await shared.reports("alerts:storage") == {"i:a": {"ok": True}, "i:b": {"ok": False}}
    await shared.report("alerts:storage", "i:b", None)
    assert await shared.reports("alerts:storage") == {"i:a": {"ok": True}}
    assert await client.hlen(keys.alerts_storage_key(prefix)) == 1
