"""The fleet's shared alert state against a real Valkey: saves fenced on the leader epoch, reports per field."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from queue_manager.fleet.leader import LeaderLease
from queue_manager.jobs.shared import ValkeyShared
from queue_manager.store.valkey import keys

URL = os.environ.get("TEST_VALKEY_URL", "redis://127.0.0.1:6379/15")


@pytest.fixture
async def client() -> AsyncIterator[Redis]:
    c = Redis.from_url(URL, socket_connect_timeout=2)
    try:
        await c.ping()
    except Exception:
        await c.aclose()
        if os.environ.get("QM_REQUIRE_VALKEY") == "1" or os.environ.get("CI"):
            pytest.fail(f"Valkey at {URL} is required and unreachable")
        pytest.skip("Valkey unreachable")
    prefix = f"qmtest:{uuid.uuid4().hex[:8]}:"
    c.qm_prefix = prefix  # type: ignore[attr-defined]
    yield c
    found = [k async for k in c.scan_iter(match=f"{prefix}*")]
    if found:
        await c.delete(*found)
    await c.aclose()


async def test_only_the_current_leader_saves_and_a_deposed_one_is_refused(client: Redis) -> None:
    prefix = client.qm_prefix  # type: ignore[attr-defined]
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


async def test_a_reset_epoch_cannot_roll_the_state_back(client: Redis) -> None:
    prefix = client.qm_prefix  # type: ignore[attr-defined]
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


async def test_reports_are_one_field_each_and_removable(client: Redis) -> None:
    prefix = client.qm_prefix  # type: ignore[attr-defined]
    shared = ValkeyShared(client, prefix, LeaderLease(client, prefix, "a", 60_000))
    await shared.report("alerts:storage", "i:a", {"ok": True})
    await shared.report("alerts:storage", "i:b", {"ok": False})
    assert await shared.reports("alerts:storage") == {"i:a": {"ok": True}, "i:b": {"ok": False}}
    await shared.report("alerts:storage", "i:b", None)
    assert await shared.reports("alerts:storage") == {"i:a": {"ok": True}}
    assert await client.hlen(keys.alerts_storage_key(prefix)) == 1
