"""The leader lease against a real Valkey (Redis 7): exactly one leads, fencing, hand-back, outage."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from queue_manager.fleet.leader import LeaderLease


async def _cleanup(client: Redis, prefix: str) -> None:
    keys = [k async for k in client.scan_iter(match=f"{prefix}*")]
    if keys:
        await client.delete(*keys)


async def test_exactly_one_instance_leads(client: Redis, prefix: str) -> None:
    leases = [LeaderLease(client, prefix, f"i{n}", 2000) for n in range(3)]
    try:
        results = await asyncio.gather(*(lease.try_acquire() for lease in leases))
        assert results.count(True) == 1
        for _ in range(3):  # renewals keep the same leader and epoch
            results = await asyncio.gather(*(lease.try_acquire() for lease in leases))
            assert results.count(True) == 1
        leader = next(lease for lease in leases if lease.leader)
        assert leader.epoch >= 1
    finally:
        await _cleanup(client, prefix)


async def test_clean_stop_hands_the_lease_back_at_once(client: Redis, prefix: str) -> None:
    a, b = LeaderLease(client, prefix, "a", 60_000), LeaderLease(client, prefix, "b", 60_000)
    try:
        assert await a.try_acquire()
        assert not await b.try_acquire()
        first_epoch = a.epoch
        await a.release()
        assert not a.leader
        assert await b.try_acquire()  # no need to wait out the 60 s lease
        assert b.epoch == first_epoch + 1
    finally:
        await _cleanup(client, prefix)


async def test_expired_lease_passes_on_and_fences_the_old_leader(client: Redis, prefix: str) -> None:
    a, b = LeaderLease(client, prefix, "a", 1000), LeaderLease(client, prefix, "b", 1000)
    try:
        assert await a.try_acquire()
        assert await a.fenced_set(f"{prefix}state", "from-a")
        await client.delete(a.key)  # a paused past its lease: the key is gone
        assert await b.try_acquire()
        assert await b.fenced_set(f"{prefix}state", "from-b")
        # a still believes it leads (it has not renewed yet), but its writes are fenced out
        assert a.leader
        assert not await a.fenced_set(f"{prefix}state", "stale")
        assert await client.get(f"{prefix}state") == b"from-b"
        assert not await a.try_acquire()  # and at its next renewal it learns it lost
    finally:
        await _cleanup(client, prefix)


async def test_nobody_leads_while_valkey_is_unreachable() -> None:
    dead = Redis.from_url("redis://127.0.0.1:1/15", socket_connect_timeout=0.2)
    lease = LeaderLease(dead, "qmtest:", "a", 1000)
    lease.leader = True  # it led before the outage
    assert not await lease.try_acquire()
    assert not lease.leader
    await dead.aclose()


async def test_an_answer_to_the_lease_tells_the_store_valkey_is_reachable(client: Redis, prefix: str) -> None:
    heard: list[str] = []
    a = LeaderLease(client, prefix, "a", 2000, reached=lambda: heard.append("a"))
    b = LeaderLease(client, prefix, "b", 2000, reached=lambda: heard.append("b"))
    try:
        assert await a.try_acquire()
        assert not await b.try_acquire()  # refused the lease, but Valkey answered
        assert heard == ["a", "b"]
    finally:
        await _cleanup(client, prefix)
    dead = Redis.from_url("redis://127.0.0.1:1/15", socket_connect_timeout=0.2)
    silent = LeaderLease(dead, "qmtest:", "c", 1000, reached=lambda: heard.append("c"))
    assert not await silent.try_acquire()
    assert heard == ["a", "b"]  # no answer, nothing told
    await dead.aclose()
