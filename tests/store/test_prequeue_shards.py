"""A drop's pre-queue over several hash slots on the Valkey store (``preQueueShards``): sign-ups go to the
shard of their address, a handle is answered by its shard, the draw merges every shard into the room and
draws everyone exactly once, and the room's journal alone rebuilds it. The shards are hidden rooms: not
listed, not reachable by id, merged and deleted when the room no longer wants them."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from queue_manager.clock import FakeClock
from queue_manager.engine import draw as draw_rules
from queue_manager.engine.errors import EngineError
from queue_manager.engine.model import ClientId
from queue_manager.engine.randomness import SeededRandom
from queue_manager.engine.replay import replay
from queue_manager.engine.visitor import Presented
from queue_manager.store.valkey import ValkeyStore
from queue_manager.store.valkey import shard_merge as merge_module
from queue_manager.store.valkey.keys import room_key
from queue_manager.store.valkey.shards import (
    handle_in,
    is_shard,
    shard_id,
    shard_ids,
    shard_of_handle,
    shard_of_ident,
)

from .conftest import TARGET, RecordingJournal, make_valkey

PEOPLE = 40
SHARDS = 4


def person(i: int) -> ClientId:
    return ClientId(ident=f"198.51.100.{i}", fp=f"fp{i}".encode(), cookie=f"ck{i}".encode())


async def _drop(
    redis: Redis, prefix: str, *, shards: int = SHARDS, people: int = PEOPLE
) -> tuple[ValkeyStore, FakeClock, RecordingJournal, list[Presented]]:
    clock, journal = FakeClock(), RecordingJournal()
    store = await make_valkey(redis, prefix, clock, journal, rng=SeededRandom(11), draw_chunk=8)
    opens = clock.wall_ms() + 60_000
    body = {"id": "r", "targetUrl": TARGET, "opensAt": opens, "ratePerMinute": 0, "presenceSec": None}
    await store.upsert_room({**body, "preQueueShards": shards, "queueMaxPerIp": None})
    held = []
    for i in range(people):
        view = await store.join("r", person(i), None, None)
        assert view.handle is not None and view.ticket is None and view.room_id == "r"
        held.append(Presented(gen=view.gen, handle=view.handle))
    return store, clock, journal, held


async def _held_in(redis: Redis, prefix: str, room_id: str) -> set[str]:
    return {h.decode() for h in await redis.hkeys(room_key(prefix, room_id, "pq"))}


async def test_sign_ups_spread_over_the_shards_of_their_address(valkey: tuple[Redis, str]) -> None:
    redis, prefix = valkey
    store, _clock, journal, held = await _drop(redis, prefix)
    try:
        sids = shard_ids("r", SHARDS)
        assert sorted(await store.shards.present("r")) == sorted(sids)
        where = {"r": await _held_in(redis, prefix, "r")} | {s: await _held_in(redis, prefix, s) for s in sids}
        assert sum(len(v) for v in where.values()) == PEOPLE
        assert all(where.values())  # every shard took some
        for p in held:  # each entry lives in the shard its handle names
            k = shard_of_handle(str(p.handle), SHARDS)
            assert p.handle in where["r" if k == 0 else shard_id("r", k, SHARDS)]
        # a poll and a re-join by handle are answered by the shard, as the room's, with the whole count and
        # the room's drop's commitment
        record = (await store.draw_state("r")).record
        assert record is not None
        for i, p in enumerate(held):
            view = await store.status("r", person(i), p)
            assert (view.room_id, view.gen, view.handle, view.pre_count) == ("r", p.gen, p.handle, PEOPLE)
            assert view.draw_commitment == record.commitment
            again = await store.join("r", person(i), p, None)
            assert again.handle == p.handle
        # a shard rebuilt from its journal holds no copy of the commitment: its visitors are shown the room's
        for sid in sids:
            await redis.delete(room_key(prefix, sid, "draw"))
        assert {(await store.status("r", person(i), p)).draw_commitment for i, p in enumerate(held)} == {
            record.commitment
        }
        views = await store.status_many("r", [(person(i), p) for i, p in enumerate(held)])
        assert [v.handle for v in views] == [p.handle for p in held]
        assert {v.pre_count for v in views} == {PEOPLE}
        # the door of a pre-queue entry: waiting, from its shard
        checked = await store.check("r", person(3), held[3], None, None, (b"k" * 32, b"d" * 32))
        assert (checked.admit, checked.reason) == (False, "waiting")
        # the shards' sign-ups are journaled in the shards, the room's in the room
        signed = {e.data["h"]: e.room for e in journal.events if e.type == "prequeue.join"}
        assert len(signed) == PEOPLE and {is_shard(r) for r in signed.values()} == {True, False}
        # listed, read and counted as one room
        rooms = await store.list_rooms()
        assert [r["id"] for r in rooms] == ["r"] and rooms[0]["preQueue"] == PEOPLE
        assert (await store.draw_state("r")).pre_count == PEOPLE
    finally:
        await store.close()


async def test_the_draw_merges_every_shard_and_draws_everyone_once(
    valkey: tuple[Redis, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    redis, prefix = valkey
    monkeypatch.setattr(merge_module, "MERGE_PART", 3)  # merged and drained in parts
    store, clock, journal, held = await _drop(redis, prefix)
    try:
        clock.advance(61)
        views = [await store.status("r", person(i), p) for i, p in enumerate(held)]
        assert sorted(v.ticket for v in views if v.ticket is not None) == list(range(1, PEOPLE + 1))
        record = (await store.draw_state("r")).record
        assert record is not None and record.drawn is not None
        drawn = record.drawn
        assert sorted(drawn.handles) == sorted(str(p.handle) for p in held)
        assert drawn.order == draw_rules.draw_order(record.seed, drawn.handles, drawn.groups)
        for view, p in zip(views, held, strict=True):
            assert drawn.order[view.ticket - 1] == p.handle  # type: ignore[operator]
        merged = [h["h"] for e in journal.events if e.type == "prequeue.merge" for h in e.data["entries"]]
        drained = [h for e in journal.events if e.type == "prequeue.drain" for h in e.data["h"]]
        assert sorted(merged) == sorted(drained) and len(merged) == len(set(merged)) > 0
        # the merge is in the room's journal before the shard let its entries go
        order = [(e.type, e.room) for e in journal.events if e.type in ("prequeue.merge", "prequeue.drain")]
        assert order.index(("prequeue.merge", "r")) < min(i for i, (t, _) in enumerate(order) if t == "prequeue.drain")
        # the room's journal alone rebuilds it: the same tickets for the same handles
        rebuilt = replay([e for e in journal.events if e.room == "r"], FakeClock())
        assert dict(rebuilt.drawn) == {str(p.handle): int(v.ticket) for p, v in zip(held, views, strict=True)}  # type: ignore[arg-type]
        # every shard's journal rebuilds it too: emptied
        for sid in shard_ids("r", SHARDS):
            shard = replay([e for e in journal.events if e.room == sid], FakeClock())
            assert not shard.prequeue
        # shards nobody wants any more are deleted by the tick
        await store.tick()
        assert await store.shards.present("r") == []
        assert [e.type for e in journal.events if e.room == shard_ids("r", SHARDS)[0]][-1] == "room.delete"
        # a handle whose shard is gone is still answered (by the room)
        again = await store.status("r", person(0), held[0])
        assert again.ticket == views[0].ticket
    finally:
        await store.close()


async def test_two_instances_merging_at_once_add_each_entry_once(valkey: tuple[Redis, str]) -> None:
    redis, prefix = valkey
    store, clock, journal, held = await _drop(redis, prefix)
    other = await make_valkey(redis, prefix, clock, journal, rng=SeededRandom(12))
    try:
        now = await store._runner.now()
        await asyncio.gather(store.shards.merge("r", now, reopen=True), other.shards.merge("r", now, reopen=True))
        assert await _held_in(redis, prefix, "r") == {str(p.handle) for p in held}
        for sid in shard_ids("r", SHARDS):
            assert await _held_in(redis, prefix, sid) == set()
        merged = [h["h"] for e in journal.events if e.type == "prequeue.merge" for h in e.data["entries"]]
        assert len(merged) == len(set(merged))
        # reopened: a new sign-up goes to its shard again
        late = next(i for i in range(1000, 2000) if shard_of_ident(person(i).ident, SHARDS) == 2)
        view = await store.join("r", person(late), None, None)
        assert view.handle in await _held_in(redis, prefix, shard_id("r", 2, SHARDS))
        for i, p in enumerate(held):  # every earlier entry answered by the room now
            assert (await store.status("r", person(i), p)).handle == p.handle
    finally:
        await other.close()
        await store.close()


async def test_a_change_of_the_count_merges_first_and_a_cancel_draws_the_shards(valkey: tuple[Redis, str]) -> None:
    redis, prefix = valkey
    store, clock, _journal, held = await _drop(redis, prefix)
    try:
        await store.upsert_room({"id": "r", "preQueueShards": 2})
        assert sorted(await store.shards.present("r")) == shard_ids("r", 2)
        for i, p in enumerate(held):  # nobody lost: each answered wherever their entry went
            assert (await store.status("r", person(i), p)).pre_count == PEOPLE
        # a change that neither moves the drop nor the count leaves every entry where it is
        before = {s: await _held_in(redis, prefix, s) for s in shard_ids("r", 2)}
        await store.upsert_room({"id": "r", "name": "Drop"})
        assert {s: await _held_in(redis, prefix, s) for s in shard_ids("r", 2)} == before
        config = await store._runner.read_config(shard_ids("r", 2)[0])
        assert config[0] is not None and config[0].cfg.name == "Drop"
        # moving the drop leaves the shards as they are (they are merged by its draw whenever it comes) and
        # shows their visitors the new commitment
        await store.schedule("r", {"opensAt": clock.wall_ms() + 120_000})
        assert {s: await _held_in(redis, prefix, s) for s in shard_ids("r", 2)} == before
        record = (await store.draw_state("r")).record
        assert record is not None
        assert {(await store.status("r", person(i), p)).draw_commitment for i, p in enumerate(held)} == {
            record.commitment
        }
        # cancelling the drop draws everyone at once, shards included
        await store.schedule("r", {"opensAt": None})
        views = [await store.status("r", person(i), p) for i, p in enumerate(held)]
        assert sorted(v.ticket for v in views if v.ticket is not None) == list(range(1, PEOPLE + 1))
        assert await store.shards.present("r") == []
    finally:
        await store.close()


async def test_purge_export_and_delete_take_the_shards_along(valkey: tuple[Redis, str]) -> None:
    redis, prefix = valkey
    store, _clock, _journal, held = await _drop(redis, prefix)
    try:
        doc = await store.export_room("r")
        assert len(doc["prequeue"]) == PEOPLE
        # the export reopened the shards: new sign-ups spread again
        view = await store.join("r", person(500), None, None)
        assert view.pre_count == PEOPLE + 1
        assert await store.purge("r") == PEOPLE + 1
        assert (await store.status("r", person(0), held[0])).reason == "purged"
        await store.delete_room("r")
        assert await store.shards.present("r") == []
        # of a shard, as of any deleted room, only its generation counter is kept (a rebuild never revives it)
        left = [k async for k in redis.scan_iter(match=f"{prefix}{{r~*")]
        assert left and all(k.endswith(b"}:meta") for k in left)
    finally:
        await store.close()


async def test_a_shard_is_no_room_of_its_own(valkey: tuple[Redis, str]) -> None:
    redis, prefix = valkey
    store, _clock, _journal, _held = await _drop(redis, prefix, people=4)
    try:
        sid = shard_ids("r", SHARDS)[0]
        assert not await store.room_exists(sid)
        assert await store.room_policy(sid) is None
        for call in (store.get_room(sid), store.purge(sid), store.delete_room(sid), store.export_room(sid)):
            with pytest.raises(EngineError) as err:
                await call
            assert err.value.code == "no_room"
        with pytest.raises(EngineError) as err:
            await store.upsert_room({"id": sid, "name": "mine"})
        assert err.value.code == "invalid_room_id"
    finally:
        await store.close()


def test_shard_ids_are_spread_over_the_slot_ranges() -> None:
    from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

    for room in ("drop", "launch-2026", "r"):
        for count in (2, 3, 5, 16):
            ranges = {key_slot(i.encode()) * count // REDIS_CLUSTER_HASH_SLOTS for i in [room, *shard_ids(room, count)]}
            assert len(ranges) == count  # one shard per equal range of slots
            assert all(is_shard(s) and s.startswith(room + "~") for s in shard_ids(room, count))


def test_a_handle_names_its_shard() -> None:
    rng = SeededRandom(3)
    for count in (2, 3, 7):
        for k in range(count):
            assert shard_of_handle(handle_in(rng, k, count), count) == k


async def test_a_cancel_from_an_instance_whose_copy_is_behind_still_draws_the_shards(
    valkey: tuple[Redis, str],
) -> None:
    redis, prefix = valkey
    clock, journal = FakeClock(), RecordingJournal()
    store = await make_valkey(redis, prefix, clock, journal, rng=SeededRandom(5))
    other = await make_valkey(redis, prefix, clock, journal, rng=SeededRandom(6))
    try:
        opens = clock.wall_ms() + 60_000
        await store.upsert_room({"id": "r", "targetUrl": TARGET, "opensAt": opens, "ratePerMinute": 0})
        await other.get_room("r")  # its copy: no shards
        await store.upsert_room({"id": "r", "preQueueShards": SHARDS})
        # every sign-up in a hidden shard: the room's own pre-queue stays empty
        people = [i for i in range(200) if shard_of_ident(person(i).ident, SHARDS) != 0][:PEOPLE]
        held = [await store.join("r", person(i), None, None) for i in people]
        assert await _held_in(redis, prefix, "r") == set()
        await other.schedule("r", {"opensAt": None})  # its draw is due, merged first (draw_due)
        assert [e.data["count"] for e in journal.events if e.type == "prequeue.draw"] == [PEOPLE]
        views = [
            await other.status("r", person(i), Presented(gen=v.gen, handle=v.handle))
            for i, v in zip(people, held, strict=True)
        ]
        assert sorted(v.ticket for v in views if v.ticket is not None) == list(range(1, PEOPLE + 1))
    finally:
        await other.close()
        await store.close()


async def test_on_a_cluster_each_shard_has_a_master_of_its_own_and_the_drop_draws(
    cluster: tuple[Redis, str],
) -> None:
    from typing import cast

    from redis.asyncio.cluster import RedisCluster

    client, prefix = cluster
    nodes = cast(RedisCluster, client)
    store, clock, _journal, held = await _drop(client, prefix, shards=3, people=30)
    try:
        masters = {nodes.get_node_from_key(room_key(prefix, rid, "st")).name for rid in ["r", *shard_ids("r", 3)]}
        assert len(masters) == 3  # the cluster's slots are split evenly: one master each
        for sid in shard_ids("r", 3):
            assert await _held_in(client, prefix, sid)  # each took sign-ups on its own master
        clock.advance(61)
        views = [await store.status("r", person(i), p) for i, p in enumerate(held)]
        assert sorted(v.ticket for v in views if v.ticket is not None) == list(range(1, 31))
        record = (await store.draw_state("r")).record
        assert record is not None and record.drawn is not None
        assert sorted(record.drawn.handles) == sorted(str(p.handle) for p in held)
    finally:
        await store.close()
