"""The replica of the line (store/valkey/replica.py, live.py): a waiting visitor's frame answered from an
instance's replica equals the store's ``status_many`` view of the same visitor, after joins, leaves,
promotions, ejects, a purge and a new generation; a replica that missed feed messages, or started
mid-stream, resynchronises before it answers again. Valkey only: the memory store answers every frame in
its own process. With ``TEST_VALKEY_CLUSTER_URL`` (``make test-cluster``) each test runs on the cluster too,
where the feeds are sharded channels on the masters holding the rooms' slots.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from queue_manager.clock import FakeClock
from queue_manager.engine.errors import EngineError
from queue_manager.engine.view import VisitorView
from queue_manager.store.base import StoreUnavailable
from queue_manager.store.valkey import ValkeyStore
from queue_manager.store.valkey.fenwick import LineIndex
from queue_manager.store.valkey.live import LiveLines, Seen

from .conftest import (
    CLUSTER_URL,
    TARGET,
    Env,
    RecordingJournal,
    Visitor,
    cluster_client,
    make_valkey,
    prefixed,
    valkey_client,
)

QUIET: dict[str, Any] = {"presenceSec": None, "queueMaxPerIp": None}


async def until(fn: Callable[[], bool], what: str, within: float = 8.0) -> None:
    """Wait for ``fn`` to hold (the feed and the snapshots arrive over the network)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while not fn():
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


@pytest.fixture(params=["valkey", *(["cluster"] if CLUSTER_URL else [])])
async def env(request: pytest.FixtureRequest) -> Iterator[Env]:  # type: ignore[misc]
    opened = await (cluster_client() if request.param == "cluster" else valkey_client())
    async for client, prefix in prefixed(opened):
        clock = FakeClock()
        journal = RecordingJournal()
        store = await make_valkey(client, prefix, clock, journal)
        try:
            yield Env(request.param, store, clock, journal, prefix, client)
        finally:
            await store.close()


async def memos(live: LiveLines, people: list[Visitor], room_id: str = "r") -> list[Seen]:
    read = await live.read(room_id, [(p.client, p.token) for p in people])
    out = [memo for _, memo in read]
    assert all(isinstance(m, Seen) for m in out)
    return out  # type: ignore[return-value]


async def in_sync(live: LiveLines, people: list[Visitor], room_id: str = "r") -> list[VisitorView]:
    """The store's views of ``people`` now, once the replica has applied every change they saw."""
    read = await live.read(room_id, [(p.client, p.token) for p in people])
    lf = max((m.lf for _, m in read if isinstance(m, Seen)), default=0)
    replica = live.replicas[room_id]
    await until(lambda: replica.synced and replica.lf >= lf, f"the replica at feed {lf}")
    return [view for view, _ in read]


def answered(live: LiveLines, memo: Seen, room_id: str = "r") -> VisitorView | None:
    """The replica's answer for ``memo``'s stream (None: the store must answer)."""
    ok, view = live.local(room_id, memo, asyncio.get_running_loop().time())
    if not ok:
        return None
    return view if view is not None else memo.view


async def test_frames_from_the_replica_equal_the_store_through_joins_leaves_promotions(env: Env) -> None:
    store: ValkeyStore = env.store
    live = store.lines
    await env.room(ratePerMinute=60, **QUIET)
    people = [env.visitor() for _ in range(30)]
    for p in people:
        await p.join()
    live.open("r")
    await until(lambda: live.replicas["r"].synced, "the first snapshot")
    seen = await memos(live, people)
    assert all(m.lseq is not None for m in seen)
    # joins behind them, three ejected from the middle (to the back of the line)
    late = [env.visitor() for _ in range(5)]
    for p in late:
        await p.join()
    ejected = (3, 10, 17)
    for i in ejected:
        await store.eject("r", str(people[i].n))
    views = await in_sync(live, people)
    for i, (memo, view) in enumerate(zip(seen, views, strict=True)):
        local = answered(live, memo)
        if i in ejected:
            assert local is None  # sent to the back: a new place the store read tells
        else:
            assert local == view
    assert answered(live, seen[20]) is not None and seen[20].view.position == 18
    # the tick promotes the heads: their frames go to the store, the others move up
    env.clock.advance(5)
    await store.tick()
    views = await in_sync(live, people)
    promoted = [i for i, v in enumerate(views) if v.state == "passed"]
    assert promoted
    for i, (memo, view) in enumerate(zip(seen, views, strict=True)):
        local = answered(live, memo)
        if i in promoted or i in ejected:
            assert local is None
        else:
            assert view.state == "waiting" and local == view


async def test_purge_and_a_new_generation_send_every_frame_to_the_store(env: Env) -> None:
    store: ValkeyStore = env.store
    live = store.lines
    await env.room(ratePerMinute=0, **QUIET)
    people = [env.visitor() for _ in range(8)]
    for p in people:
        await p.join()
    live.open("r")
    await until(lambda: live.replicas["r"].synced, "the first snapshot")
    seen = await memos(live, people)
    await in_sync(live, people)
    assert all(answered(live, m) is not None for m in seen)
    await store.purge("r")
    await in_sync(live, people)
    assert all(answered(live, m) is None for m in seen)
    again = [env.visitor() for _ in range(4)]
    for p in again:
        await p.join()
    seen = await memos(live, again)
    views = await in_sync(live, again)
    assert [answered(live, m) for m in seen] == views
    # a new generation: the replica starts over; the old generation's reads are never answered
    await store.delete_room("r")
    await env.room(ratePerMinute=0, **QUIET)
    fresh = [env.visitor() for _ in range(3)]
    for p in fresh:
        await p.join()
    await until(lambda: live.replicas["r"].synced and live.replicas["r"].gen == fresh[0].token.gen, "the new gen")  # type: ignore[union-attr]
    assert all(answered(live, m) is None for m in seen)
    seen = await memos(live, fresh)
    views = await in_sync(live, fresh)
    assert [answered(live, m) for m in seen] == views


async def test_a_replica_that_missed_messages_resynchronises(env: Env) -> None:
    store: ValkeyStore = env.store
    live = store.lines
    await env.room(ratePerMinute=0, **QUIET)
    people = [env.visitor() for _ in range(12)]
    for p in people:
        await p.join()
    live.open("r")
    await until(lambda: live.replicas["r"].synced, "the first snapshot")
    seen = await memos(live, people)
    await in_sync(live, people)
    dropped: list[bytes] = []

    def drop_next(count: int) -> None:
        """The next ``count`` feed messages are lost on the way."""
        dropped.clear()

        def drop(room: str, data: bytes) -> bool:
            if len(dropped) < count:
                dropped.append(data)
                return True
            return False

        live.drop = drop

    # the last changes are lost: the next read sees a feed sequence the replica never reached
    before = live.snapshots
    drop_next(4)
    for p in people[:4]:
        await store.eject("r", str(p.n))
    await until(lambda: len(dropped) == 4, "four messages dropped")
    views = await in_sync(live, people)
    assert live.snapshots > before
    for i, (memo, view) in enumerate(zip(seen, views, strict=True)):
        assert answered(live, memo) == (None if i < 4 else view)
    # a gap: one message dropped, the next one shows it
    seen = await memos(live, people)
    before = live.snapshots
    drop_next(1)
    await store.eject("r", str(people[6].n))
    await until(lambda: len(dropped) == 1, "a message dropped")
    await env.visitor().join()
    views = await in_sync(live, people)
    assert live.snapshots > before
    for i, (memo, view) in enumerate(zip(seen, views, strict=True)):
        assert answered(live, memo) == (None if i == 6 else view)


async def test_a_replica_started_mid_stream_answers_as_the_store(env: Env) -> None:
    store: ValkeyStore = env.store
    await env.room(ratePerMinute=0, **QUIET)
    people = [env.visitor() for _ in range(10)]
    for p in people:
        await p.join()
    for p in people[2:5]:
        await store.eject("r", str(p.n))
    # another instance, with streams of the room from now on
    other = await make_valkey(env.redis, env.prefix, env.clock, RecordingJournal())
    try:
        live = other.lines
        live.open("r")
        await until(lambda: live.replicas["r"].synced, "the other instance's snapshot")
        waiting = [p for i, p in enumerate(people) if not 2 <= i < 5]
        seen = await memos(live, waiting)
        for p in (env.visitor(), env.visitor()):
            await p.join()
        await store.eject("r", str(waiting[0].n))
        views = await in_sync(live, waiting)
        assert [answered(live, m) for m in seen[1:]] == views[1:]
        assert answered(live, seen[0]) is None
        assert [v.position for v in views[1:]] == list(range(1, len(waiting)))
    finally:
        await other.close()


async def test_answered_frames_write_nothing_but_batched_presence_marks(env: Env) -> None:
    store: ValkeyStore = env.store
    live = store.lines
    live.mark_every = 0.0  # every answered frame asks for a mark: sent together about once a second
    await env.room(ratePerMinute=0, presenceSec=40, queueMaxPerIp=None)
    people = [env.visitor() for _ in range(5)]
    for p in people:
        await p.join()
    live.open("r")
    await until(lambda: live.replicas["r"].synced, "the first snapshot")
    seen = await memos(live, people)
    await in_sync(live, people)
    env.clock.advance(7)
    for memo in seen:
        assert answered(live, memo) is not None
    assert (await env.describe(people[0]))["lastSeenSecAgo"] == 7.0  # nothing written by the frame itself

    async def marked() -> bool:
        return bool((await env.describe(people[4]))["lastSeenSecAgo"] == 0.0)

    loop = asyncio.get_running_loop()
    end = loop.time() + 8
    while not await marked():
        assert loop.time() < end, "the batched presence marks never came"
        await asyncio.sleep(0.05)
    for p in people:
        assert (await env.describe(p))["lastSeenSecAgo"] == 0.0


async def _polled(env: Env, count: int) -> tuple[ValkeyStore, LiveLines, list[Visitor]]:
    """A room of ``count`` waiting whose polls are answered from the replica, each polled once (a store
    read, kept), the replica those polls opened in sync."""
    store: ValkeyStore = env.store
    store.local_polls = True
    live = store.lines
    await env.room(ratePerMinute=0, **QUIET)
    people = [env.visitor() for _ in range(count)]
    for p in people:
        await p.join()
    first = [await store.status("r", p.client, p.token) for p in people]
    assert [v.position for v in first] == list(range(1, count + 1)) and live.polls_local == 0
    await until(lambda: "r" in live.replicas and live.replicas["r"].synced, "the replica, opened by the polls")
    return store, live, people


async def test_polls_are_answered_from_the_replica_after_their_first_store_read(env: Env) -> None:
    store, live, people = await _polled(env, 10)
    # the two ahead are sent to the back: the others move up, their polls answered here as the store would
    for p in people[:2]:
        await store.eject("r", str(p.n))
    truth = await in_sync(live, people[2:])
    polled = [await store.status("r", p.client, p.token) for p in people[2:]]
    assert live.polls_local == 8
    assert polled == truth and [v.position for v in polled] == list(range(1, 9))
    # the same ticket from another client: the store answers (and nothing local is kept for it)
    stranger = env.visitor()
    other = await store.status("r", stranger.client, people[5].token)
    assert (live.polls_local == 8 and other.state != "waiting") or other.position is None
    # promoted: the feed says its place left the line, so the store answers with the pass
    await store.upsert_room({"id": "r", "targetUrl": TARGET, "ratePerMinute": 60, **QUIET})
    env.clock.advance(2)
    await store.tick()
    views = await in_sync(live, people[2:])
    assert views[0].state == "passed"
    before = live.polls_local
    passed = await store.status("r", people[2].client, people[2].token)
    assert passed.state == "passed" and live.polls_local == before


async def _room_keys(env: Env, room_id: str = "r") -> list[bytes]:
    assert env.redis is not None
    return [k async for k in env.redis.scan_iter(match=f"{env.prefix}{{{room_id}}}:*", count=1000)]


async def test_a_poll_is_answered_here_only_while_valkey_holds_the_room_where_the_replica_is(env: Env) -> None:
    """Before a poll is answered from the replica, Valkey is asked (after the poll arrived) whether the room
    is still there, of the replica's generation, not fenced and not behind the replica: a room being
    rebuilt, rolled back to an older copy or lost is answered by the store (503 until it is rebuilt)."""
    redis = env.redis
    assert redis is not None
    store, live, people = await _polled(env, 6)
    await in_sync(live, people)
    assert [(await store.status("r", p.client, p.token)).position for p in people] == list(range(1, 7))
    assert live.polls_local == 6
    # polls that arrive together share one read of the room's head
    heads = live.heads
    together = await asyncio.gather(*(store.status("r", p.client, p.token) for p in people))
    assert [v.position for v in together] == list(range(1, 7))
    assert live.polls_local == 12 and 0 < live.heads - heads < 6

    # being rebuilt (fenced): the store answers, refusing
    fence = f"{env.prefix}{{r}}:fence".encode()
    await redis.set(fence, "1")
    with pytest.raises(StoreUnavailable):
        await store.status("r", people[0].client, people[0].token)
    assert live.polls_local == 12
    await redis.delete(fence)
    assert (await store.status("r", people[0].client, people[0].token)).position == 1
    assert live.polls_local == 13

    # rolled back: Valkey restored from a copy older than what the replica applied
    saved = {k: await redis.dump(k) for k in await _room_keys(env)}
    late = [env.visitor() for _ in range(3)]
    for p in late:
        await p.join()
    await in_sync(live, people)
    assert (await store.status("r", people[1].client, people[1].token)).position == 2
    assert live.polls_local == 14
    for k in await _room_keys(env):
        if k not in saved:
            await redis.delete(k)
    for k, value in saved.items():
        if value is not None:
            await redis.restore(k, 0, value, replace=True)
    truth = (await store.status_many("r", [(people[1].client, people[1].token)]))[0]
    assert await store.status("r", people[1].client, people[1].token) == truth
    assert live.polls_local == 14
    # the replica, ahead of Valkey, loaded the restored line anew; then it answers again
    _, restored_lf, _ = await store.room_head("r")
    replica = live.replicas["r"]
    await until(lambda: replica.synced and replica.lf == restored_lf, "the replica reloaded from the older copy")
    assert await store.status("r", people[1].client, people[1].token) == truth
    assert live.polls_local == 15

    # lost: every key of the room gone; the store answers (no such room), never the replica
    await redis.delete(*await _room_keys(env))
    with pytest.raises(EngineError):
        await store.status("r", people[2].client, people[2].token)
    assert live.polls_local == 15


async def test_each_room_is_followed_on_its_own_master(env: Env) -> None:
    """Rooms whose feeds live on different masters (on a cluster: three rooms, one a master) are each
    followed and answered from their replicas, and a room no longer followed is unsubscribed."""
    store: ValkeyStore = env.store
    live = store.lines
    rooms = _rooms_over_the_masters(store)
    people: dict[str, list[Visitor]] = {}
    for room_id in rooms:
        await env.room(room_id, ratePerMinute=0, **QUIET)
        people[room_id] = [env.visitor(room_id) for _ in range(4)]
        for p in people[room_id]:
            await p.join()
        live.open(room_id)
    for room_id in rooms:
        replica = live.replicas[room_id]
        await until(lambda replica=replica: replica.synced, f"{room_id}'s snapshot")  # type: ignore[misc]
    seen = {room_id: await memos(live, people[room_id], room_id) for room_id in rooms}
    for room_id in rooms:  # the head of each line leaves: the others move up, answered locally
        await store.eject(room_id, str(people[room_id][0].n))
    for room_id in rooms:
        views = await in_sync(live, people[room_id], room_id)
        assert [v.position for v in views[1:]] == [1, 2, 3]
        assert [answered(live, m, room_id) for m in seen[room_id][1:]] == views[1:]
    live.close(rooms[0])
    gone = store.line_channel(rooms[0])
    await until(lambda: gone not in live._subscribed, "the closed room unsubscribed")


def _rooms_over_the_masters(store: ValkeyStore) -> list[str]:
    """Three room ids; on a cluster, each on another master."""
    if not store.cluster:
        return ["ra", "rb", "rc"]
    client: Any = store.redis
    rooms: dict[str, str] = {}
    for i in range(200):
        room_id = f"r{i}"
        node = client.get_node_from_key(store.line_channel(room_id)).name
        rooms.setdefault(node, room_id)
    assert len(rooms) >= 3, rooms
    return sorted(rooms.values())[:3]


def test_the_line_index_counts_places_as_the_line_does() -> None:
    index = LineIndex([5, 9, 12])
    assert [index.rank(s) for s in (5, 9, 12)] == [1, 2, 3]
    index.remove(9)
    assert 9 not in index and index.rank(12) == 2
    for s in range(13, 5000):  # grows past its window, dropping the numbers gone below the head
        index.add(s)
    index.remove(5)
    assert index.rank(12) == 1 and index.rank(4999) == len(index) == 4988
    index.clear()
    assert len(index) == 0 and 12 not in index
