"""The hot lane on a Valkey cluster (store/valkey/cluster_lane.py), against a real cluster
(``TEST_VALKEY_CLUSTER_URL``; deselected without one): each room's visitor commands go over the lane
of the master that owns its slot, a slot moved to another master is followed (MOVED: the command ran
once, on the new owner) and its lane moves with it, a master the slot map still names but that is gone
hands the command to the cluster client, a command written and then cut off is not sent again, and a
master without the scripts gets them."""

from __future__ import annotations

import asyncio
import collections
import hashlib
import socket
import uuid
from collections.abc import AsyncIterator
from typing import cast

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot

from queue_manager.clock import FakeClock
from queue_manager.engine.model import ClientId
from queue_manager.engine.visitor import Presented
from queue_manager.fleet.connection import with_timeouts
from queue_manager.store.base import StoreUnavailable
from queue_manager.store.valkey import ValkeyStore
from queue_manager.store.valkey.client import open_client
from queue_manager.store.valkey.cluster_lane import ClusterLanes
from queue_manager.store.valkey.keys import room_key
from queue_manager.store.valkey.scripts import Script

from .conftest import CLUSTER_URL, TARGET, RecordingJournal

QUIET = {"presenceSec": 3600, "sessionTtlSec": 3600, "passedTtlSec": 3600}
Lanes = tuple[ValkeyStore, ClusterLanes, RedisCluster, str]


def visitor(i: int) -> ClientId:
    return ClientId(ident=f"10.2.0.{i}", fp=f"fp-{i}".encode(), cookie=f"ck-{i}".encode())


@pytest.fixture
async def lanes(cluster: tuple[Redis, str]) -> AsyncIterator[Lanes]:
    """A store opened from the cluster URL, as a server opens it, under the ``cluster`` fixture's prefix
    (whose keys that fixture deletes)."""
    _, prefix = cluster
    store = ValkeyStore(CLUSTER_URL, prefix=prefix, clock=FakeClock(), journal=RecordingJournal())
    await store.start()
    try:
        assert isinstance(store._calls.lane, ClusterLanes)
        yield store, store._calls.lane, cast(RedisCluster, store.redis), prefix
    finally:
        await store.close()


async def room_on(store: ValkeyStore, name: str) -> str:
    room = f"{name}-{uuid.uuid4().hex[:8]}"  # an id of its own: no other test's keys share its slot by design
    await store.upsert_room({"id": room, "targetUrl": TARGET, "ratePerMinute": 60, **QUIET})
    return room


def direct(node: ClusterNode) -> Redis:
    return Redis(host=node.host, port=int(node.port), decode_responses=True)


def owner(nodes: RedisCluster, key: str) -> ClusterNode:
    """The master the cluster client's slot map names for ``key``."""
    node = nodes.get_node_from_key(key)
    assert node is not None
    return node


async def calls(node: ClusterNode, command: str) -> int:
    """How many ``command`` the master itself has run (INFO commandstats; other tests only add to it)."""
    client = direct(node)
    try:
        stats = await client.info("commandstats")
    finally:
        await client.aclose()
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


async def test_each_rooms_commands_take_the_lane_of_the_master_that_owns_its_slot(lanes: Lanes) -> None:
    store, cl, nodes, prefix = lanes
    primaries = {n.name: n for n in nodes.get_primaries()}
    assert len(primaries) == 3
    rooms: dict[str, str] = {}  # master -> a room whose slot it owns
    while len(rooms) < 3:
        room = await room_on(store, "lane")
        rooms.setdefault(owner(nodes, room_key(prefix, room, "st")).name, room)
    handed = cl.handed_on
    for master, room in rooms.items():
        before = collections.Counter(cl.sent)
        served = {name: await calls(node, "evalsha") + await calls(node, "hget") for name, node in primaries.items()}
        view = await store.join(room, visitor(1), None, None)
        assert view.ticket is not None
        token = Presented(gen=view.gen, n=view.ticket)
        await store.check(room, visitor(1), token, None, None, ("raw", hashlib.sha256(b"raw").digest()[:16]))
        await store.status(room, visitor(1), token)
        assert await store.places_held(room, visitor(1).ident) == 1  # the HGET, on the same lane
        written = cl.sent - before
        assert set(written) == {master}, (room, master, written)  # the room's master only, no other lane
        assert written[master] >= 4
        node = primaries[master]
        assert await calls(node, "evalsha") + await calls(node, "hget") - served[master] >= written[master]
    assert cl.handed_on == handed  # nothing went through the cluster client
    assert cl.masters == sorted(primaries)  # one lane per master


async def move_slot(slot: int, source: ClusterNode, target: ClusterNode, everyone: list[ClusterNode]) -> None:
    """Move ``slot`` from ``source`` to ``target`` the way a resharding does: IMPORTING / MIGRATING,
    MIGRATE its keys, then every master told the new owner."""
    src, dst = direct(source), direct(target)
    try:
        src_id, dst_id = await src.execute_command("CLUSTER MYID"), await dst.execute_command("CLUSTER MYID")
        await dst.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", src_id)
        await src.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", dst_id)
        while keys := await src.execute_command("CLUSTER GETKEYSINSLOT", slot, 100):
            await src.execute_command("MIGRATE", target.host, target.port, "", 0, 5000, "KEYS", *keys)
        for node in [target, source, *[n for n in everyone if n.name not in (source.name, target.name)]]:
            client = direct(node)
            try:
                await client.execute_command("CLUSTER SETSLOT", slot, "NODE", dst_id)
            finally:
                await client.aclose()
    finally:
        await src.aclose()
        await dst.aclose()


async def test_a_slot_moved_to_another_master_is_followed_once_and_its_lane_moves_with_it(lanes: Lanes) -> None:
    store, cl, nodes, prefix = lanes
    room = await room_on(store, "moving")
    key = room_key(prefix, room, "st")
    assert (await store.join(room, visitor(1), None, None)).ticket == 1
    slot = key_slot(room.encode())
    source = owner(nodes, key)
    target = next(n for n in nodes.get_primaries() if n.name != source.name)
    await move_slot(slot, source, target, nodes.get_primaries())
    try:
        before, handed = collections.Counter(cl.sent), cl.handed_on
        view = await store.join(room, visitor(2), None, None)  # the old owner answers MOVED
        assert view.ticket == 2 and view.position == 2
        assert cl.handed_on == handed + 1  # that one command, sent on by the cluster client
        assert (cl.sent - before)[source.name] == 1
        assert owner(nodes, key).name == target.name  # the client's map learnt the owner

        before = collections.Counter(cl.sent)
        view = await store.join(room, visitor(3), None, None)
        assert view.ticket == 3 and view.position == 3  # every join ran exactly once
        assert cl.handed_on == handed + 1
        assert set(cl.sent - before) == {target.name}  # now over the new owner's lane
        stats = await store.get_room(room)
        assert stats["waiting"] == 3
    finally:
        await move_slot(slot, target, source, nodes.get_primaries())


def closed_port() -> int:
    sock = socket.create_server(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    sock.close()
    return port


async def test_a_master_the_map_still_names_but_that_is_gone_hands_the_command_to_the_cluster_client(
    lanes: Lanes,
) -> None:
    store, cl, nodes, prefix = lanes
    room = await room_on(store, "gone")
    key = room_key(prefix, room, "st")
    home = owner(nodes, key)
    await store.join(room, visitor(1), None, None)
    gone = ClusterNode("127.0.0.1", closed_port())
    nodes.nodes_manager.slots_cache[key_slot(room.encode())] = [gone]  # as after that master was removed
    before, handed = collections.Counter(cl.sent), cl.handed_on
    view = await store.join(room, visitor(2), None, None)
    assert view.ticket == 2
    assert cl.handed_on == handed + 1 and cl.sent - before == collections.Counter()  # nothing written
    assert gone.name not in cl.masters  # the lane to it was dropped
    assert owner(nodes, key).name == home.name  # the cluster client learnt the map again
    before = collections.Counter(cl.sent)
    assert (await store.join(room, visitor(3), None, None)).ticket == 3
    assert set(cl.sent - before) == {home.name} and cl.handed_on == handed + 1


async def test_a_command_cut_off_after_it_was_written_is_not_sent_again(lanes: Lanes) -> None:
    store, cl, nodes, _ = lanes
    room = await room_on(store, "cut")
    received: list[bytes] = []

    async def drop_after_reading(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.append(await reader.read(65536))  # the command arrives; no reply, the connection closes
        writer.close()

    server = await asyncio.start_server(drop_after_reading, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        nodes.nodes_manager.slots_cache[key_slot(room.encode())] = [ClusterNode("127.0.0.1", port)]
        handed = cl.handed_on
        with pytest.raises(StoreUnavailable):
            await store.join(room, visitor(1), None, None)
        assert len(received) == 1 and b"EVALSHA" in received[0]  # one connection, one attempt
        assert cl.handed_on == handed  # not handed to the cluster client either: the script may have run
    finally:
        server.close()
        await server.wait_closed()
        await nodes.nodes_manager.initialize()


async def test_a_master_without_the_scripts_gets_them_and_the_lane_carries_on(lanes: Lanes) -> None:
    store, cl, nodes, prefix = lanes
    owners: dict[str, str] = {}
    while len(owners) < 3:
        room = await room_on(store, "noscript")
        owners.setdefault(owner(nodes, room_key(prefix, room, "st")).name, room)
    source = store._calls.scripts["join"].source + f"\n-- {uuid.uuid4().hex}\n"  # a script no master has seen
    store._calls.scripts["join"] = Script("join", source, hashlib.sha1(source.encode()).hexdigest())
    handed = cl.handed_on
    for room in owners.values():
        assert (await store.join(room, visitor(1), None, None)).ticket == 1
    assert await nodes.script_exists(store._calls.scripts["join"].sha) == [True]  # on every master
    assert cl.handed_on == handed


async def test_only_a_plain_cluster_url_gets_lanes() -> None:
    plain = open_client("redis+cluster://u:secret@127.0.0.1:1?socket_timeout=2&socket_connect_timeout=1.5")
    tls = open_client("rediss+cluster://127.0.0.1:1")
    single = open_client("redis://127.0.0.1:1/3")
    try:
        made = ClusterLanes.for_url(
            "redis+cluster://u:secret@127.0.0.1:1?socket_timeout=2&socket_connect_timeout=1.5", plain
        )
        assert made is not None
        t = made._template
        assert (t.username, t.password, t.socket_timeout, t.connect_timeout) == ("u", "secret", 2.0, 1.5)
        assert ClusterLanes.for_url("rediss+cluster://127.0.0.1:1", tls) is None
        assert ClusterLanes.for_url("redis+cluster://127.0.0.1:1?health_check_interval=5", plain) is None
        assert ClusterLanes.for_url("redis://127.0.0.1:1/3", single) is None
        assert ClusterLanes.for_url("redis+cluster://127.0.0.1:1", single) is None
    finally:
        for client in (plain, tls, single):
            await client.aclose()
    store = ValkeyStore("rediss+cluster://127.0.0.1:1")
    try:
        assert store._calls.lane is None  # TLS: everything through redis-py
    finally:
        await store.close()
    store = ValkeyStore(with_timeouts("redis+cluster://127.0.0.1:1"))  # the URL a server opens
    try:
        assert isinstance(store._calls.lane, ClusterLanes)
    finally:
        await store.close()
