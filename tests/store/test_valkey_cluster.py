"""ValkeyStore on a Valkey cluster (``TEST_VALKEY_CLUSTER_URL``; skipped without one): rooms spread
over the masters, each room's scripts run on the master of its slot, and the scripts survive a
master that does not have them (NOSCRIPT)."""

from __future__ import annotations

import hashlib
import uuid
from typing import Any, cast

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from queue_manager.clock import FakeClock
from queue_manager.engine.model import ClientId
from queue_manager.engine.visitor import Presented
from queue_manager.store.valkey.client import cluster_url, is_cluster
from queue_manager.store.valkey.keys import ROOM_KEYS, fleet_prefix, room_key, script_keys
from queue_manager.store.valkey.scripts import Script

from .conftest import TARGET, RecordingJournal, make_valkey

ROOMS = [f"room-{i}" for i in range(12)]
QUIET = {"presenceSec": 3600, "sessionTtlSec": 3600, "passedTtlSec": 3600}


def visitor(i: int) -> ClientId:
    return ClientId(ident=f"10.1.0.{i}", fp=f"fp-{i}".encode(), cookie=f"ck-{i}".encode())


def test_cluster_urls() -> None:
    assert cluster_url("redis+cluster://h:7000") == "redis://h:7000"
    assert cluster_url("valkeys+cluster://u:p@h:7000/0?socket_timeout=5") == "rediss://u:p@h:7000/0?socket_timeout=5"
    assert cluster_url("redis://h:6379/1") is None
    assert fleet_prefix("qm:", False) == "qm:" and fleet_prefix("qm:", True) == "qm:{~fleet}"


def test_every_script_key_of_a_room_is_in_its_slot() -> None:
    from redis.crc import key_slot

    for room in ROOMS:
        keys = script_keys("qm:", room)
        assert len(keys) == len(ROOM_KEYS)
        assert {key_slot(k.encode()) for k in keys} == {key_slot(room.encode())}


async def test_rooms_spread_over_the_masters_and_each_runs_there(cluster: tuple[Redis, str]) -> None:
    client, prefix = cluster
    assert is_cluster(client)
    nodes = cast(RedisCluster, client)
    clock = FakeClock()
    journal = RecordingJournal()
    store = await make_valkey(client, prefix, clock, journal)
    try:
        for room in ROOMS:
            await store.upsert_room({"id": room, "targetUrl": TARGET, "ratePerMinute": 60, **QUIET})
        masters: dict[str, str] = {}
        for room in ROOMS:
            node = nodes.get_node_from_key(room_key(prefix, room, "st"))
            masters[room] = node.name
            # the room's state is on that master itself (asked directly, not through the cluster client)
            direct = Redis(host=node.host, port=node.port)
            try:
                assert await direct.exists(room_key(prefix, room, "st"), room_key(prefix, room, "cfg")) == 2
            finally:
                await direct.aclose()
        assert len(set(masters.values())) >= 2, masters
        assert len(set(masters.values())) == len(nodes.get_primaries())  # 12 rooms reach all 3 masters

        for room in ROOMS:
            for i in range(5):
                view = await store.join(room, visitor(i), None, None)
                assert view.state == "waiting" and view.ticket == i + 1
        status = await store.status("room-3", visitor(2), Presented(gen=1, n=3))
        assert (status.ticket, status.position) == (3, 3)
        for _ in range(3):
            clock.advance(1)
            ticked = await store.tick()
            assert set(ROOMS) <= ticked
        for room in ROOMS:
            stats = await store.get_room(room)
            assert stats["passesTotal"] == 3 and stats["waiting"] == 2, (room, stats)
        listed = [r["id"] for r in await store.list_rooms()]
        assert listed == ROOMS  # creation order, across masters

        await store.delete_room("room-5")
        assert "room-5" not in [r["id"] for r in await store.list_rooms()]
        types = [e.type for e in journal.events]
        assert types.count("room.create") == len(ROOMS) and types.count("room.delete") == 1
    finally:
        await store.close()


async def test_scripts_are_loaded_on_every_master_at_a_noscript(cluster: tuple[Redis, str]) -> None:
    """Scripts no master has seen (as after a restart or failover; no SCRIPT FLUSH, which would hit the
    tests running beside this one): a pipeline over every master and single calls load them and go on."""
    client, prefix = cluster
    nodes = cast(RedisCluster, client)
    clock = FakeClock()
    store = await make_valkey(client, prefix, clock)
    try:
        for room in ROOMS[:6]:
            await store.upsert_room({"id": room, "targetUrl": TARGET, "ratePerMinute": 60, **QUIET})
            await store.join(room, visitor(1), None, None)
        for name in ("tick", "join", "stats"):
            source = store._calls.scripts[name].source + f"\n-- {uuid.uuid4().hex}\n"
            store._calls.scripts[name] = Script(name, source, hashlib.sha1(source.encode()).hexdigest())
        assert await nodes.script_exists(store._calls.scripts["tick"].sha) == [False]
        clock.advance(1)
        assert set(ROOMS[:6]) <= await store.tick()  # a pipeline over every master: NOSCRIPT, loaded, again
        assert await nodes.script_exists(store._calls.scripts["tick"].sha) == [True]  # on every master
        view = await store.join("room-0", visitor(2), None, None)
        assert view.ticket == 2
        stats: dict[str, Any] = await store.get_room("room-4")
        assert stats["passesTotal"] == 1
    finally:
        await store.close()


async def registry_is_a_superset(client: Redis, prefix: str) -> None:
    """An id in the registry with no room (a create that failed between its two adds) is skipped by the
    tick and the list; a room deleted and created again stays registered, in its new place in the order."""
    from queue_manager.store.valkey.keys import rooms_key

    clock = FakeClock()
    store = await make_valkey(client, prefix, clock)
    try:
        for room in ("a", "b"):
            await store.upsert_room({"id": room, "targetUrl": TARGET, **QUIET})
        await client.zadd(rooms_key(prefix), {"ghost": 0})  # registered, never created
        clock.advance(1)
        assert {"a", "b"} <= await store.tick()
        assert [r["id"] for r in await store.list_rooms()] == ["a", "b"]
        await store.delete_room("a")
        assert [r["id"] for r in await store.list_rooms()] == ["b"]
        await store.upsert_room({"id": "a", "targetUrl": TARGET, **QUIET})
        assert [r["id"] for r in await store.list_rooms()] == ["b", "a"]
        registered = [m.decode() for m in await client.zrange(rooms_key(prefix), 0, -1)]
        assert registered == ["ghost", "b", "a"]
    finally:
        await store.close()


async def test_the_registry_is_a_superset_of_the_rooms_on_a_cluster(cluster: tuple[Redis, str]) -> None:
    await registry_is_a_superset(*cluster)
