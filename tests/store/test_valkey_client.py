"""The Valkey client a store opens from a URL (store/valkey/client.py): a burst beyond its connections
waits instead of failing, and commands are packed by hiredis to exactly the bytes redis-py's own packer
writes."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from redis.asyncio import Redis
from redis.asyncio.connection import Connection
from redis.exceptions import MaxConnectionsError

from queue_manager.store.valkey import ValkeyStore
from queue_manager.store.valkey import client as client_module
from queue_manager.store.valkey.client import PackedConnection, WaitingConnectionPool

from .conftest import VALKEY_URL, valkey_client


async def test_more_concurrent_commands_than_connections_wait_for_one() -> None:
    probe = await valkey_client()  # skips (or fails under QM_REQUIRE_VALKEY) when Valkey is down
    await probe.aclose()
    store = ValkeyStore(VALKEY_URL, prefix=f"qmtest:{uuid.uuid4().hex[:12]}:")
    try:
        pool = store.redis.connection_pool
        assert isinstance(pool, WaitingConnectionPool) and pool.connection_class is PackedConnection
        assert pool.max_connections == client_module.POOL_CONNECTIONS
        burst = client_module.POOL_CONNECTIONS * 3 // 2
        held = await asyncio.gather(*(store.places_held("r", f"203.0.113.{i % 250}") for i in range(burst)))
        assert held == [0] * burst  # none failed with "too many connections"
    finally:
        await store.close()


def test_the_hiredis_packer_writes_what_redis_py_writes() -> None:
    fast, plain = PackedConnection(), Connection()
    commands: list[tuple[object, ...]] = [
        ("SCRIPT LOAD", "return 1"),
        ("EVALSHA", "a" * 40, 2, b"qm:{r}:st", b"qm:{r}:t", "1795990044546", "", '["0A1B2C","3D4E5F"]'),
        ("SET", "k", 1.5),
        ("SET", "k", -3),
        ("SET", "k", 10**20),
        ("HSET", b"k", "f", memoryview(b"xy")),
        ("ECHO", "h\u00e9llo \u2603"),
    ]
    for args in commands:
        assert b"".join(fast.pack_command(*args)) == b"".join(plain.pack_command(*args)), args


async def test_a_full_pool_waits_in_order_and_gives_up_after_its_wait() -> None:
    probe = await valkey_client()
    await probe.aclose()
    pool = WaitingConnectionPool.from_url(VALKEY_URL, max_connections=2, wait_sec=0.5)
    client = Redis.from_pool(pool)
    try:
        first = await pool.get_connection()
        second = await pool.get_connection()
        waiting = asyncio.ensure_future(pool.get_connection())
        await asyncio.sleep(0)
        assert not waiting.done()
        await pool.release(first)  # handed to the waiter
        third = await asyncio.wait_for(waiting, 5)
        assert third is first
        with pytest.raises(MaxConnectionsError):  # nobody releases: the wait ends with the pool's error
            await pool.get_connection()
        await pool.release(second)
        await pool.release(third)
        assert await client.ping()
    finally:
        await client.aclose()
