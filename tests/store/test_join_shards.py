"""A FIFO room's joins taken in shards on the Valkey store (``joinShards``, store/valkey/line_merge.py): each
join is stamped by its instance's clock, rounds put the shards' joins in line in the order of their stamps,
and a join that reached its shard late is put at the start of the next round. The bound the docs state is
checked over a simulated crowd: three instances with clocks apart, joins whose calls take from 1 ms to
far past the lag a round leaves, and rounds every 20 ms."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass

import orjson
import pytest
from redis.asyncio import Redis

from queue_manager.clock import FakeClock
from queue_manager.engine.errors import EngineError
from queue_manager.engine.model import ClientId
from queue_manager.engine.randomness import SeededRandom
from queue_manager.engine.replay import replay
from queue_manager.store.valkey import ValkeyStore
from queue_manager.store.valkey import store as store_module
from queue_manager.store.valkey.arguments import client_args, presented_args
from queue_manager.store.valkey.keys import room_key
from queue_manager.store.valkey.line_merge import LAG_MS
from queue_manager.store.valkey.shards import shard_id, shard_ids, shard_of_ident

from .conftest import TARGET, RecordingJournal, make_valkey

SHARDS = 3
SKEW_MS = 2  # how far apart the instances' clocks are, at most, in the simulation


def person(i: int) -> ClientId:
    return ClientId(ident=f"203.0.113.{i % 250}", fp=f"fp{i}".encode(), cookie=f"ck{i}".encode())


def set_wall(clock: FakeClock, wall_ms: int) -> None:
    clock.step_wall((wall_ms - clock.wall_ms()) / 1000)


async def _room(redis: Redis, prefix: str, **fields: object) -> tuple[ValkeyStore, FakeClock, RecordingJournal]:
    clock, journal = FakeClock(), RecordingJournal()
    store = await make_valkey(redis, prefix, clock, journal, rng=SeededRandom(21))
    body = {"id": "r", "targetUrl": TARGET, "ratePerMinute": 0, "presenceSec": None, "queueMaxPerIp": None}
    await store.upsert_room({**body, "joinShards": SHARDS, **fields})
    return store, clock, journal


async def _take(store: ValkeyStore, i: int, handle: str) -> None:
    """Visitor ``i``'s join as its instance's call reaches the shard of its address (stamped by that clock)."""
    k = 1 + shard_of_ident(person(i).ident, SHARDS - 1)
    args = [*client_args(person(i)), *presented_args(None), "", handle, ""]
    with pytest.raises(store_module._Pending):
        await store._joins.join(shard_id("r", k, SHARDS), args)


async def _outcome(redis: Redis, prefix: str, handle: str) -> int | str:
    """The ticket number a round put the join in line as, or its refusal's code."""
    got = (await redis.hget(room_key(prefix, "r", "mgd"), handle)).decode()
    return got[1:] if got.startswith("-") else int(orjson.loads(got)["n"])


async def test_a_join_is_answered_with_its_place_once_a_round_puts_it_in_line(valkey: tuple[Redis, str]) -> None:
    redis, prefix = valkey
    store, clock, journal = await _room(redis, prefix)
    try:
        assert sorted(await store.shards.present("r")) == sorted(shard_ids("r", SHARDS))

        async def time_passes() -> None:  # the rounds take what is older than LAG_MS by this store's clock
            while True:
                await asyncio.sleep(0.005)
                clock.advance(0.01)

        ticking = asyncio.create_task(time_passes())
        try:
            views = [await store.join("r", person(i), None, None) for i in range(6)]
        finally:
            ticking.cancel()
        assert [v.ticket for v in views] == [1, 2, 3, 4, 5, 6]  # one after the other: in that order
        assert all(v.new and v.state == "waiting" for v in views)
        assert [v.position for v in views] == [1, 2, 3, 4, 5, 6]
        # the joins are the room's, journaled as joins at their stamps; each shard took and let go of its own
        joins = [e for e in journal.events if e.room == "r" and e.type == "join"]
        assert [e.data["n"] for e in joins] == [1, 2, 3, 4, 5, 6]
        taken = [e.data["h"] for e in journal.events if e.type == "prequeue.join"]
        drained = [h for e in journal.events if e.type == "prequeue.drain" for h in e.data["h"]]
        assert sorted(taken) == sorted(drained) and len(taken) == 6
        rebuilt = replay([e for e in journal.events if e.room == "r"], FakeClock())
        assert sorted(rebuilt.tickets) == [1, 2, 3, 4, 5, 6]
        assert [rebuilt.tickets[n].joined_ms for n in range(1, 7)] == [e.data["joined"] for e in joins]
        # a visitor presenting their ticket is the room's, as always
        again = await store.join("r", person(0), views[0] and _presented(views[0]), None)
        assert again.ticket == 1
    finally:
        await store.close()


def _presented(view: object) -> object:
    from queue_manager.engine.visitor import Presented

    return Presented(gen=view.gen, n=view.ticket)  # type: ignore[attr-defined]


async def test_refusals_are_the_join_s_own(valkey: tuple[Redis, str]) -> None:
    redis, prefix = valkey
    store, clock, _journal = await _room(redis, prefix, maxWaiting=2)
    try:
        handles = [f"{i:016x}" for i in range(4)]
        for i, h in enumerate(handles):
            await _take(store, i, h)
        clock.advance(1)
        assert await store.shards.lines.round("r", SHARDS) == 2
        outcomes = [await _outcome(redis, prefix, h) for h in handles]
        assert sorted(o for o in outcomes if isinstance(o, int)) == [1, 2]
        assert [o for o in outcomes if isinstance(o, str)] == ["queue_full", "queue_full"]
        assert (await store.get_room("r"))["refusedFull"] == 2
    finally:
        await store.close()


async def test_a_shard_gone_or_a_room_changed_sends_the_join_to_the_room(valkey: tuple[Redis, str]) -> None:
    redis, prefix = valkey
    store, _clock, _journal = await _room(redis, prefix)
    try:
        for sid in shard_ids("r", SHARDS):
            await store._delete(sid)
        view = await store.join("r", person(1), None, None)  # no shard: the room joins it at once
        assert view.ticket == 1
        with pytest.raises(EngineError) as err:
            await store.upsert_room({"id": "r", "queueing": "random"})
        assert err.value.code == "invalid_field" and err.value.extra["field"] == "joinShards"
        await store.upsert_room({"id": "r", "joinShards": 1})
        await store.tick()
        assert await store.shards.present("r") == []
    finally:
        await store.close()


@dataclass(order=True)
class _Call:
    at: int  # the true instant it runs in Valkey
    kind: str
    visitor: int = -1
    instance: int = -1
    stamp: int = 0  # what its instance's clock read when it made the call


async def test_the_inversion_between_two_joins_is_bounded_by_the_late_one_s_delay(valkey: tuple[Redis, str]) -> None:
    """Over a simulated crowd: whenever a join stamped ``a`` is behind one stamped ``b`` > ``a``, the first
    one's call took longer than LAG_MS (less the clocks' difference) to reach its shard, and ``b`` - ``a`` is at
    most what it took beyond that."""
    redis, prefix = valkey
    merger, mclock, journal = await _room(redis, prefix)
    offsets = [0, SKEW_MS, -SKEW_MS]  # each instance's clock against the true time
    instances = [(await make_valkey(redis, prefix, FakeClock(), journal, rng=SeededRandom(30 + i))) for i in range(3)]
    try:
        start = mclock.wall_ms()
        rng = random.Random(5)
        calls: list[_Call] = []
        for v in range(400):
            made = start + v * 2  # a join every 2 ms
            inst = v % 3
            delay = rng.choice([1, 2, 3, 5, 8, 20, 40, 120, 250])  # most fast, some far past LAG_MS
            calls.append(_Call(made + delay, "join", v, inst, made + offsets[inst]))
        calls += [_Call(start + t, "round") for t in range(0, 1400, 20)]
        calls.sort()
        for call in calls:
            if call.kind == "round":
                set_wall(mclock, call.at)
                await merger.shards.lines.round("r", SHARDS)
            else:
                clock = instances[call.instance]._runner.clock
                assert isinstance(clock, FakeClock)
                set_wall(clock, call.stamp)
                await _take(instances[call.instance], call.visitor, f"{call.visitor:016x}")
        set_wall(mclock, start + 10_000)
        await merger.shards.lines.round("r", SHARDS, everything=True)
        placed = {c.visitor: await _outcome(redis, prefix, f"{c.visitor:016x}") for c in calls if c.kind == "join"}
        assert sorted(placed.values()) == list(range(1, 401))  # everyone in line once
        joins = [c for c in calls if c.kind == "join"]
        inversions = 0
        for a in joins:
            for b in joins:
                if a.stamp < b.stamp and placed[a.visitor] > placed[b.visitor]:
                    inversions += 1
                    late = (a.at - (a.stamp - offsets[a.instance])) - LAG_MS + 2 * SKEW_MS
                    assert late > 0, (a, b)  # only a late join is ever behind a later one
                    assert b.stamp - a.stamp <= late, (a, b)  # by at most its lateness
        assert inversions > 0  # the crowd had late joins, and they were placed as stated
    finally:
        for inst in instances:
            await inst.close()
        await merger.close()
