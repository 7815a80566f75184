"""What only the Valkey store has: several instances on one line, the journal and its compensations,
fenced rooms, driver errors, script reloads, bounded scripts, round trips, keys, the shared clock,
and checkpoints that round-trip with engine/snapshot.py."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis import exceptions as rx
from redis.asyncio import Redis

from queue_manager.clock import FakeClock
from queue_manager.engine import operator, snapshot
from queue_manager.engine import visitor as visits
from queue_manager.engine.engine import Engine
from queue_manager.engine.errors import EngineError
from queue_manager.engine.events import Event
from queue_manager.engine.model import ClientId
from queue_manager.engine.ticket import make_ref
from queue_manager.engine.visitor import Presented
from queue_manager.store.base import JournalCommitFailed, StoreUnavailable
from queue_manager.store.memory import MemoryStore
from queue_manager.store.valkey import SharedClock, ValkeyStore
from queue_manager.store.valkey import store as store_module
from queue_manager.store.valkey.breaker import ValkeyUnreachable
from queue_manager.store.valkey.errors import RoomFenced, is_unavailable_reply, translate
from queue_manager.store.valkey.keys import ROOM_KEYS, room_key, rooms_key, script_keys
from queue_manager.store.valkey.scripts import Script
from queue_manager.store.valkey.takebacks import REPORT_EVERY_SEC

from .conftest import TARGET, RecordingJournal, make_valkey, store_as_before, stored_tickets

QUIET = {"presenceSec": None, "queueMaxPerIp": None}


def client(i: int, ident: str | None = None) -> ClientId:
    return ClientId(ident=ident or f"10.1.0.{i}", fp=f"fp{i}".encode(), cookie=f"ck{i}".encode())


def door(i: int) -> tuple[str, bytes]:
    raw = f"dk-{i}-{uuid.uuid4().hex}"
    return raw, hashlib.sha256(raw.encode()).digest()[:16]


@pytest.fixture
async def one(valkey: tuple[Redis, str]) -> AsyncIterator[tuple[ValkeyStore, FakeClock, RecordingJournal]]:
    redis, prefix = valkey
    clock, journal = FakeClock(), RecordingJournal()
    store = await make_valkey(redis, prefix, clock, journal)
    yield store, clock, journal
    await store.close()


# ---------------------------------------------------------------------- several instances


@pytest.mark.parametrize(("rate", "seconds"), [(60, 60), (6000, 20)])
async def test_three_instances_ticking_one_room_promote_at_the_configured_rate(
    valkey: tuple[Redis, str], rate: int, seconds: int
) -> None:
    """Each instance ticks every second, a third of a second apart, on clocks a few ms apart (their
    anchors to Valkey's TIME): together they credit what one ticker would, not three times it."""
    redis, prefix = valkey
    offsets = (0, 3, -2)  # ms: where each instance's shared clock landed
    clocks = [FakeClock(mono=1000 + off / 1000) for off in offsets]
    stores = [await make_valkey(redis, prefix, c) for c in clocks]
    await stores[0].upsert_room({"id": "r", "targetUrl": TARGET, "ratePerMinute": rate, **QUIET})
    filler = ClientId(ident="192.0.2.1", fp=b"filler")
    for _ in range(rate * seconds // 60 + 50):
        await stores[0].join("r", filler, None, None)
    for _ in range(seconds):
        for i, store in enumerate(stores):
            for c in clocks:
                c.advance(0.333 if i < 2 else 0.334)
            await store.tick()
    stats = await stores[1].get_room("r")
    expected = rate * seconds // 60
    assert abs(stats["passesTotal"] - expected) <= 2, (stats["passesTotal"], expected)
    for store in stores:
        await store.close()


async def test_instances_share_one_line_tickets_refs_and_config(valkey: tuple[Redis, str]) -> None:
    redis, prefix = valkey
    clock = FakeClock()
    a, b = await make_valkey(redis, prefix, clock), await make_valkey(redis, prefix, clock)
    await a.upsert_room({"id": "r", "targetUrl": TARGET, **QUIET})
    views = []
    for i in range(20):  # alternating instances: each one's Ref window goes stale and is refreshed
        store = (a, b)[i % 2] if i < 10 else (a, a, b)[i % 3]
        views.append(await store.join("r", client(i), None, None))
    assert [v.ticket for v in views] == list(range(1, 21))
    assert [v.position for v in views] == list(range(1, 21))
    for v in views:
        assert v.ticket is not None and v.ref == make_ref("r", 1, v.ticket)
        answer = await (b if v.ticket % 2 else a).lookup("r", str(v.ref))
        assert answer["ticket"] == v.ticket
    await a.upsert_room({"id": "r", "rate": 7, "rules": [{"pattern": "/x/*", "action": "skip"}]})
    view = await b.status("r", client(0), Presented(gen=1, n=1))
    assert view.rate_per_minute == 7  # b's copy of the config followed a's change
    result = await b.check("r", client(0), Presented(gen=1, n=1), None, f"{TARGET}/x/1", door(0))
    assert result.state == "unprotected" and (await a.get_room("r"))["rules"][0]["matchCount"] == 1
    await a.close()
    await b.close()


async def _interleaved(store: ValkeyStore, other: ValkeyStore, change: dict[str, Any]) -> list[tuple[str, str]]:
    """Make ``other`` apply ``change`` right after ``store``'s next config read, before the script
    that writes (the window a compare-and-set has to close); returns the scripts ``store`` ran and
    how each answered."""
    ran: list[tuple[str, str]] = []
    runner = store._runner
    real_eval = runner.calls.eval
    real_read = runner.read_config

    async def recording_eval(name: str, room_id: str, args: Any) -> Any:
        reply = await real_eval(name, room_id, args)
        ran.append((name, str(reply["k"])))
        return reply

    async def read_then_change(room_id: str, rule_stats: bool = False) -> Any:
        out = await real_read(room_id, rule_stats)
        runner.read_config = real_read  # type: ignore[method-assign]
        await other.upsert_room({"id": room_id, **change})
        return out

    runner.calls.eval = recording_eval  # type: ignore[method-assign]
    runner.read_config = read_then_change  # type: ignore[method-assign]
    return ran


async def test_a_state_changed_between_the_config_read_and_the_write_refuses_the_upsert(
    valkey: tuple[Redis, str],
) -> None:
    """The condition is checked against the config version the writing script insists on: the
    script answers 'cfg' (changing nothing), the arguments are built again on the new config, and
    the check refuses there."""
    redis, prefix = valkey
    clock = FakeClock()
    a, b = await make_valkey(redis, prefix, clock), await make_valkey(redis, prefix, clock)
    await a.upsert_room({"id": "r", "targetUrl": TARGET, "state": "bypass", "rate": 30})
    ran = await _interleaved(a, b, {"state": "paused"})
    with pytest.raises(EngineError) as info:
        await a.upsert_room({"id": "r", "state": "active"}, expect_state="bypass")
    assert (info.value.status, info.value.code, info.value.extra) == (409, "state_changed", {"state": "paused"})
    assert ran == [("cfg", "ok"), ("upsert", "cfg")]  # the write saw a newer config and did nothing
    room = await b.get_room("r")
    assert (room["state"], room["ratePerMinute"]) == ("paused", 30)
    await a.close()
    await b.close()


async def test_another_field_changed_between_the_read_and_the_write_keeps_the_condition(
    valkey: tuple[Redis, str],
) -> None:
    redis, prefix = valkey
    clock = FakeClock()
    a, b = await make_valkey(redis, prefix, clock), await make_valkey(redis, prefix, clock)
    await a.upsert_room({"id": "r", "targetUrl": TARGET, "state": "bypass", "rate": 30})
    ran = await _interleaved(a, b, {"rate": 45})
    room, _, fields = await a.upsert_room({"id": "r", "state": "active"}, expect_state="bypass")
    assert fields == ["state"] and (room["state"], room["ratePerMinute"]) == ("active", 45)  # b's change kept
    assert [name for name, _ in ran] == ["cfg", "upsert", "upsert", "stats"]
    assert ran[1] == ("upsert", "cfg") and ran[2] == ("upsert", "ok")
    await a.close()
    await b.close()


# ---------------------------------------------------------------------- the journal


async def test_a_join_whose_commit_fails_is_taken_back(one: Any) -> None:
    store, _clock, journal = one
    await store.upsert_room({"id": "r", "targetUrl": TARGET, "queueMaxPerIp": 1})
    journal.events.clear()
    journal.fail_next = 1
    with pytest.raises(StoreUnavailable):
        await store.join("r", client(1, "203.0.113.9"), None, None)
    assert [(e.type, e.data) for e in journal.events] == [("join.revoke", {"n": 1})]
    stats = await store.get_room("r")
    assert (stats["waiting"], stats["joinsTotal"], stats["joinsLastMinute"]) == (0, 0, 0)
    assert await store.places_held("r", "203.0.113.9") == 0
    with pytest.raises(EngineError):
        await store.lookup("r", make_ref("r", 1, 1))
    view = await store.join("r", client(1, "203.0.113.9"), None, None)  # not counted against the ceiling
    assert view.ticket == 2 and view.position == 1


async def test_take_backs_while_the_journal_fails_are_summed_up_not_warned_one_by_one(
    one: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # PostgreSQL down: each join's commit fails, and so does the commit of its join.revoke. The joins
    # are taken back all the same (their revoke events wait with the failed commits).
    store, _clock, journal = one
    now = [0.0]
    store.takebacks.clock = lambda: now[0]
    await store.upsert_room({"id": "r", "targetUrl": TARGET, "queueMaxPerIp": None})
    journal.fail_next = 6
    with caplog.at_level(logging.DEBUG, logger="queue_manager.store.valkey"):
        for i in range(3):
            with pytest.raises(JournalCommitFailed):
                await store.join("r", client(i + 1), None, None)
        now[0] += REPORT_EVERY_SEC
        await store.tick()  # the rest of the burst is summed up once due
    assert (await store.get_room("r"))["waiting"] == 0
    for n in (1, 2, 3):
        with pytest.raises(EngineError):
            await store.lookup("r", str(n))  # taken back
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [m for m in warned if "could not take back" in m], warned
    summaries = [m for m in warned if m.startswith("took back")]
    assert [m.split(" whose")[0] for m in summaries] == ["took back 1 join", "took back 2 joins"], summaries
    assert all("journal down (test)" in m for m in summaries)
    each = [
        r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG and "took back a join" in r.getMessage()
    ]
    assert len(each) == 3 and store.takebacks.total == 3 and store.takebacks.failed == 0


async def test_a_take_back_that_cannot_be_made_is_warned(one: Any, caplog: pytest.LogCaptureFixture) -> None:
    store, _clock, _journal = one
    # whatever level an earlier test in this worker left on the package's loggers, this one hears warnings
    caplog.set_level(logging.WARNING, logger="queue_manager.store.valkey")
    await store.upsert_room({"id": "r", "targetUrl": TARGET, "queueMaxPerIp": None})

    class FencedMeanwhile(RecordingJournal):
        async def commit(self, events: list[Event]) -> None:
            await store.fence("r")  # the room is being rebuilt: the take-back is refused
            raise StoreUnavailable("journal down (test)")

    store.journal = FencedMeanwhile()
    with pytest.raises(JournalCommitFailed):
        await store.join("r", client(1), None, None)
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any(m.startswith("room r: could not take back a join") for m in warned), warned
    assert store.takebacks.failed == 1 and store.takebacks.total == 0


async def test_a_pre_queue_join_whose_commit_fails_is_taken_back(one: Any) -> None:
    store, clock, journal = one
    await store.upsert_room(
        {"id": "r", "targetUrl": TARGET, "opensAt": clock.wall_ms() + 60_000, "preQueueMaxPerIp": 1}
    )
    journal.fail_next = 1
    with pytest.raises(StoreUnavailable):
        await store.join("r", client(1, "203.0.113.9"), None, None)
    (revoke,) = [e for e in journal.events if e.type == "prequeue.revoke"]
    assert set(revoke.data) == {"h"}
    stats = await store.get_room("r")
    assert (stats["preQueue"], stats["joinsTotal"]) == (0, 0)
    view = await store.join("r", client(1, "203.0.113.9"), None, None)
    assert view.state == "scheduled" and view.pre_count == 1


async def test_an_admission_whose_commit_fails_is_pending_again_with_its_slot(one: Any) -> None:
    store, clock, journal = one
    await store.upsert_room({"id": "r", "targetUrl": TARGET, "maxConcurrent": 1, **QUIET})
    me = client(1)
    token = Presented(gen=1, n=(await store.join("r", me, None, None)).ticket)
    clock.advance(1)
    await store.tick()
    await store.status("r", me, token)  # told
    before = await store.lookup("r", "1")
    journal.events.clear()
    journal.fail_next = 1
    first = door(1)
    with pytest.raises(StoreUnavailable):
        await store.check("r", me, token, None, None, first)
    assert [(e.type, e.data) for e in journal.events] == [("admit.revoke", {"n": 1, "door": first[1].hex()})]
    after = await store.lookup("r", "1")
    assert after == before  # passed, holding its slot, the same claim window
    assert (await store.get_room("r"))["occupancy"] == 1
    assert await store.door_replay("r", token, first[1], None) is None  # the lost key opens nothing
    retry = door(2)
    result = await store.check("r", me, token, first[1], None, retry)  # a fresh key, not session_elsewhere
    assert result.admit and result.door_key == retry[0]


async def test_a_reclaim_at_the_door_whose_commit_fails_keeps_the_old_key(one: Any) -> None:
    store, clock, journal = one
    await store.upsert_room({"id": "r", "targetUrl": TARGET, **QUIET})
    me = client(1)
    token = Presented(gen=1, n=(await store.join("r", me, None, None)).ticket)
    clock.advance(1)
    await store.tick()
    first = door(1)
    assert (await store.check("r", me, token, None, None, first)).admit
    journal.fail_next = 1
    with pytest.raises(StoreUnavailable):
        await store.check("r", me, token, None, None, door(2))  # the cookie without the key: reclaim
    replay = await store.door_replay("r", token, first[1], None)
    assert replay is not None and replay.admit


async def test_commit_comes_before_the_answer(one: Any) -> None:
    store, _clock, _journal = one
    order: list[str] = []

    class Slow(RecordingJournal):
        async def commit(self, events: list[Event]) -> None:
            await asyncio.sleep(0.01)
            order.append("commit")
            await super().commit(events)

    store.journal = Slow()
    await store.upsert_room({"id": "r", "targetUrl": TARGET})
    await store.join("r", client(1), None, None)
    order.append("answered")
    assert order == ["commit", "commit", "answered"]
    assert [e.type for e in store.journal.events] == ["room.create", "join"]


# ---------------------------------------------------------------------- fences and errors


async def test_a_fenced_room_answers_unavailable_never_no_room(one: Any) -> None:
    store, _clock, _ = one
    await store.upsert_room({"id": "r", "targetUrl": TARGET})
    await store.upsert_room({"id": "s", "targetUrl": TARGET})
    await store.fence("r")
    for coro in (
        store.join("r", client(1), None, None),
        store.status("r", client(1), None),
        store.check("r", client(1), None, None, None, door(1)),
        store.lookup("r", "1"),
        store.get_room("r"),
        store.upsert_room({"id": "r", "rate": 5}),
        store.delete_room("r"),
    ):
        with pytest.raises(RoomFenced):
            await coro
    assert await store.room_exists("r")
    store.config_fresh_sec = 0  # no recently confirmed copy: the policy read meets the fence too
    with pytest.raises(RoomFenced):
        await store.room_policy("r")
    assert await store.room_exists("r")
    assert [room["id"] for room in await store.list_rooms()] == ["s"]
    assert await store.tick() >= {"s"}
    await store.unfence("r")
    assert (await store.join("r", client(1), None, None)).ticket == 1


def test_a_cluster_that_cannot_place_a_command_now_is_store_unavailable() -> None:
    from redis import exceptions as rx

    for exc in (rx.ClusterError("TTL exhausted."), rx.SlotNotCoveredError("Slot 7 not covered")):
        with pytest.raises(StoreUnavailable) as caught, translate("r"):
            raise exc
        assert not isinstance(caught.value, RoomFenced)


async def test_an_unreachable_valkey_is_store_unavailable() -> None:
    store = ValkeyStore("redis://127.0.0.1:1/15", prefix="qmtest:x:", clock=FakeClock())
    with pytest.raises(StoreUnavailable):
        await store.start()
    with pytest.raises(StoreUnavailable):
        await store.join("r", client(1), None, None)
    await store.close()


async def test_the_tick_probes_through_the_hold_so_the_fast_answers_end_once_valkey_answers(one: Any) -> None:
    store, clock, _journal = one
    await store.upsert_room({"id": "r", "targetUrl": TARGET, "ratePerMinute": 0, **QUIET})
    me = client(1)
    token = Presented(gen=1, n=(await store.join("r", me, None, None)).ticket)
    store.breaker.failed(False)  # a failure a moment ago: held as down for the next 5 s
    with pytest.raises(ValkeyUnreachable):
        await store.status("r", me, token)  # the fast answer
    clock.advance(1)
    await store.tick()  # a second later Valkey answers the tick's probe: not held any longer
    assert not store.breaker.down and not store.breaker.probing
    assert (await store.status("r", me, token)).position == 1


async def test_while_valkey_is_unreachable_the_tick_probe_keeps_the_hold() -> None:
    store = ValkeyStore("redis://127.0.0.1:1/15", prefix="qmtest:x:", clock=FakeClock())
    try:
        store.breaker.failed(False)
        with pytest.raises(ValkeyUnreachable):
            await store.tick()  # its probe failed: the rest of the tick answers at once
        assert store.breaker.down and not store.breaker.probing and store.breaker.trips == 1
        with pytest.raises(ValkeyUnreachable):
            await store.join("r", client(1), None, None)
    finally:
        await store.close()


def test_driver_errors_map_once() -> None:
    cases: list[tuple[Exception, type[Exception]]] = [
        (rx.ConnectionError("Connection refused"), StoreUnavailable),
        (rx.TimeoutError("Timeout reading from socket"), StoreUnavailable),
        (rx.BusyLoadingError("Redis is loading the dataset in memory"), StoreUnavailable),
        (rx.OutOfMemoryError("command not allowed when used memory > 'maxmemory'."), StoreUnavailable),
        (rx.ResponseError("MASTERDOWN Link with MASTER is down"), StoreUnavailable),
        (rx.TryAgainError("Multiple keys request during rehashing"), StoreUnavailable),
        (rx.ReadOnlyError("You can't write against a read only replica."), StoreUnavailable),
        (
            rx.ResponseError("ERR user_script:1: OOM command not allowed when used memory > 'maxmemory'"),
            StoreUnavailable,
        ),
        (rx.ResponseError("QM fenced"), RoomFenced),
        (rx.ResponseError("QM no_room"), EngineError),
        (ConnectionResetError(104, "reset"), StoreUnavailable),
        (rx.ResponseError("ERR wrong number of arguments"), rx.ResponseError),
    ]
    for raised, expected in cases:
        with pytest.raises(expected) as info, translate("r"):
            raise raised
        if expected is EngineError:
            assert info.value.code == "no_room"  # type: ignore[attr-defined]
    assert is_unavailable_reply("LOADING Valkey is loading") and not is_unavailable_reply("ERR syntax error")


async def test_scripts_are_reloaded_after_noscript(one: Any) -> None:
    store, _clock, _ = one
    await store.upsert_room({"id": "r", "targetUrl": TARGET})
    original = store._calls.scripts["status"]
    source = original.source + f"\n-- {uuid.uuid4().hex}\n"  # a script this server has never seen
    store._calls.scripts["status"] = Script("status", source, hashlib.sha1(source.encode()).hexdigest())
    view = await store.status("r", client(1), None)
    assert view.state == "expired" and view.ticket is None


async def test_maxmemory_policy_is_read_at_start(one: Any) -> None:
    store, _clock, _ = one
    assert store.maxmemory_policy is not None


# ---------------------------------------------------------------------- bounded scripts and round trips


async def test_bounded_sweeps_and_promotions_give_the_same_answers(valkey: tuple[Redis, str]) -> None:
    redis, prefix = valkey
    clock = FakeClock()
    journal = RecordingJournal()
    store = await make_valkey(redis, prefix, clock, journal, sweep_max=2, promote_max=3)
    await store.upsert_room({"id": "r", "targetUrl": TARGET, "ratePerMinute": 1_000_000, "passedTtlSec": 10, **QUIET})
    for i in range(20):
        await store.join("r", client(i), None, None)
    clock.advance(1)
    await store.tick()  # 20 promotions, three per call
    assert (await store.get_room("r"))["passesOutstanding"] == 20
    clock.advance(10)
    stats = await store.get_room("r")  # 20 passes expire at once, two per call
    assert stats["passesOutstanding"] == 0
    types = [e.type for e in journal.events]
    assert types.count("promote") == 20 and types.count("expire") == 20
    assert [e.seq for e in journal.events] == list(range(1, len(journal.events) + 1))
    await store.close()


async def test_one_round_trip_per_visitor_operation(one: Any) -> None:
    store, clock, _ = one
    calls: list[str] = []
    redis = store._redis
    real_evalsha = redis.evalsha

    async def counting(sha: str, *args: Any) -> Any:
        calls.append(next(s.name for s in store._calls.scripts.values() if s.sha == sha))
        return await real_evalsha(sha, *args)

    await store.upsert_room({"id": "r", "targetUrl": TARGET, "rules": [{"pattern": "/s/*"}], **QUIET})
    me = client(1)
    await store.join("r", me, None, None)  # warms this process's Ref window
    redis.evalsha = counting
    view = await store.join("r", client(2), None, None)
    token = Presented(gen=1, n=1)
    assert view.ticket == 2
    await store.status("r", me, token)
    clock.advance(1)
    await store.tick()
    dk = door(1)
    await store.check("r", me, token, None, f"{TARGET}/s/1", dk)
    assert await store.door_replay("r", token, dk[1], f"{TARGET}/s/2") is not None
    await store.lookup("r", "2")
    await store.eject("r", "2")
    await store.purge("r")
    await store.get_room("r")
    assert calls == ["join", "status", "check", "door_replay", "lookup", "eject", "purge", "stats"]
    # the HTTP layer asks for the room's policy and existence on every request: no round trip while
    # a script confirmed this process's copy of the config within config_fresh_sec
    real_exists = redis.exists

    async def counting_exists(*keys: Any) -> Any:
        calls.append("exists")
        return await real_exists(*keys)

    redis.exists = counting_exists
    calls.clear()
    policy = await store.room_policy("r")
    assert policy is not None and policy.target_url == TARGET and await store.room_exists("r")
    assert calls == []
    store.config_fresh_sec = 0
    assert await store.room_policy("r") is not None and await store.room_exists("r")
    assert calls == ["cfg", "exists"]
    # the tick is the registry read plus one pipeline (counted apart: evalsha on the pipeline)


async def test_a_bypass_arrival_is_counted_in_the_one_round_trip(one: Any) -> None:
    store, clock, journal = one
    calls: list[str] = []
    redis = store._redis
    real_evalsha = redis.evalsha

    async def counting(sha: str, *args: Any) -> Any:
        calls.append(next(s.name for s in store._calls.scripts.values() if s.sha == sha))
        return await real_evalsha(sha, *args)

    await store.upsert_room({"id": "r", "targetUrl": TARGET, "state": "bypass", **QUIET})
    await store.join("r", client(1), None, None)  # warms this process's Ref window
    journal.events.clear()
    redis.evalsha = counting
    view = await store.join("r", client(2), None, None)
    result = await store.check("r", client(2), None, None, f"{TARGET}/x", door(2))
    assert view.state == "bypass" and result.state == "bypass"
    assert calls == ["join", "check"] and journal.events == []
    stats = await store.get_room("r")
    assert (stats["joinsLastMinute"], stats["joinsTotal"]) == (3, 0)
    # one counter per second of the monotonic clock, not one entry per arrival
    assert await redis.zcard(room_key(store.prefix, "r", "jt")) == 0
    second = str(clock.mono_ms() // 1000).encode()
    assert await redis.hgetall(room_key(store.prefix, "r", "ab")) == {second: b"3"}


# ---------------------------------------------------------------------- keys


async def test_every_key_is_under_the_prefix_and_the_room_tag(one: Any) -> None:
    store, clock, _ = one
    await store.upsert_room({"id": "r", "targetUrl": TARGET, "maxConcurrent": 2, "opensAt": clock.wall_ms() + 1000})
    for i in range(3):
        await store.join("r", client(i), None, None)
    clock.advance(2)
    await store.tick()
    await store.check("r", client(0), None, None, None, door(0))
    await store.purge("r")
    keys = sorted([k.decode() async for k in store._redis.scan_iter(match=f"{store.prefix}*")])
    assert keys and all(k.startswith(store.prefix) for k in keys)
    room_keys = [k for k in keys if "{r}" in k]
    assert set(keys) - set(room_keys) == {f"{store.prefix}rooms", f"{store.prefix}rooms:seq"}
    assert {k.rsplit(":", 1)[1] for k in room_keys} <= set(ROOM_KEYS)
    assert script_keys(store.prefix, "r")[0] == room_key(store.prefix, "r", "st")
    await store.delete_room("r")
    left = sorted([k.decode() async for k in store._redis.scan_iter(match=f"{store.prefix}{{r}}*")])
    assert {k.rsplit(":", 1)[1] for k in left} <= {"meta", "arch0", "arch1", "arch2"}


# ---------------------------------------------------------------------- the shared clock


async def test_shared_clock_is_anchored_to_valkey_time(valkey: tuple[Redis, str]) -> None:
    redis, prefix = valkey
    clock = SharedClock()
    with pytest.raises(StoreUnavailable):
        clock.mono_ms()
    a = ValkeyStore(redis, prefix=prefix, clock=clock)
    await a.start()
    seconds, micros = await redis.time()
    valkey_ms = seconds * 1000 + micros // 1000
    assert abs(clock.mono_ms() - valkey_ms) < 50
    other = SharedClock()
    await other.anchor(redis)
    assert abs(other.mono_ms() - clock.mono_ms()) < 50  # two instances read one timeline
    walls = [clock.wall_ms() for _ in range(100)]
    assert walls == sorted(walls) and abs(walls[0] - time.time() * 1000) < 1000
    await a.upsert_room({"id": "r", "targetUrl": TARGET})
    assert (await a.join("r", client(1), None, None)).ticket == 1


async def test_a_store_that_could_not_anchor_at_start_anchors_on_first_contact(valkey: tuple[Redis, str]) -> None:
    redis, prefix = valkey
    clock = SharedClock()
    store = ValkeyStore(redis, prefix=prefix, clock=clock)  # start() never ran (Valkey was down at boot)
    await store.upsert_room({"id": "r", "targetUrl": TARGET})
    assert clock.anchored
    assert (await store.join("r", client(1), None, None)).ticket == 1


# ---------------------------------------------------------------------- checkpoints


def _python_room() -> tuple[Engine, FakeClock]:
    """A Python room with something in every part of the checkpoint."""
    clock = FakeClock()
    engine = Engine(clock)
    room, _, _ = engine.upsert(
        {
            "id": "cp",
            "targetUrl": TARGET,
            "ratePerMinute": 60,
            "maxConcurrent": 2,
            "presenceSec": 30,
            "passedTtlSec": 200,
            "queueMaxPerIp": 5,
            "brand": {
                "displayName": "Checkpoint",
                "background": "#ffffff",
                "accent": "#1d4ed8",
                "message": {"th": "รอสักครู่"},
                "logo": {
                    "type": "image/svg+xml",
                    "data": "PHN2ZyB4bWxucz0iaHR0cDovL3d3dy53My5vcmcvMjAwMC9zdmciPjwvc3ZnPg==",
                },
            },
        }
    )
    clients = [client(i, f"198.51.100.{i % 2}") for i in range(8)]
    tokens = [
        visits.join(room, c, None, "https://shop.example/ret" if i == 0 else None).ticket for i, c in enumerate(clients)
    ]
    for _ in range(3):
        clock.advance(1)
        engine.tick()
    t0 = tokens[0]
    assert t0 is not None
    visits.check(room, clients[0], Presented(gen=1, n=t0.n), None, None, door(0))
    operator.eject(room, tokens[5].n)  # type: ignore[union-attr]
    clock.advance(250)
    engine.tick()  # passes expire: finished records
    visits.check(room, clients[3], Presented(gen=1, n=tokens[3].n), None, None, door(3))  # type: ignore[union-attr]
    engine.schedule("cp", {"opensAt": clock.wall_ms() + 10_000})
    pre = [visits.join(room, client(10 + i), None, None).pre for i in range(3)]
    operator.purge(room)
    for i in range(2):
        visits.join(room, client(20 + i), None, None)
    engine.schedule("cp", {"opensAt": None})  # the second pre-queue is drawn
    engine.schedule("cp", {"opensAt": clock.wall_ms() + 5_000})
    engine.schedule("cp", {"opensAt": clock.wall_ms() + 6_000})  # a commitment replaced before its draw
    visits.join(room, client(30), None, None)
    assert room.draw_record is not None and len(room.draw_record.previous) == 1
    assert pre and room.prequeue and room.drawn and room.purged_handles and room.finished and room.line
    return engine, clock


def _relative(doc: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint with its monotonic instants relative to its own refMono (what a rebase keeps)."""
    out = dict(doc)
    ref = out.pop("refMono")
    out.pop("refWall")
    out["lastTick"] -= ref
    tickets = []
    for t in out["tickets"]:
        t = dict(t)
        for key in ("passAt", "sessStart", "sessLast", "sessTouched"):
            if t[key]:
                t[key] -= ref
        if t["bouncedAt"] is not None:
            t["bouncedAt"] -= ref
        tickets.append(t)
    out["tickets"] = tickets
    return out


async def test_a_python_checkpoint_round_trips_through_valkey(one: Any) -> None:
    store, clock, _ = one
    engine, _py_clock = _python_room()
    doc = snapshot.dump(engine.rooms["cp"])
    clock.advance(12_345)  # another process, another monotonic origin
    await store.import_room(doc)
    again = await store.export_room("cp")
    assert _relative(again) == _relative(doc)
    assert again["config"]["brand"]["logo"]["data"] == doc["config"]["brand"]["logo"]["data"]
    # and back: a Valkey export loads into the Python engine and dumps the same document
    loaded = snapshot.load(again, FakeClock(mono=5_000), [])
    assert _relative(snapshot.dump(loaded)) == _relative(again)


async def test_after_an_import_both_stores_go_on_alike(one: Any) -> None:
    store, clock, journal = one
    engine, _py_clock = _python_room()
    doc = snapshot.dump(engine.rooms["cp"])
    mem_clock = FakeClock(wall_ms=clock.wall_ms(), mono=clock.mono())
    memory = MemoryStore(mem_clock)
    memory.engine.rooms["cp"] = snapshot.load(doc, mem_clock, memory.engine.events)
    memory.engine.generations["cp"] = doc["gen"]
    await store.import_room(doc)
    assert await store.get_room("cp") == await memory.get_room("cp")
    # the waits' running sum carries over; the waits one by one start afresh on both
    assert doc["counters"]["waitMsTotal"] > 0
    imported = await store.sample_rooms({})
    assert imported == await memory.sample_rooms({})
    assert imported[1]["cp"].total_ms == doc["counters"]["waitMsTotal"] and imported[1]["cp"].waits_ms == []
    for _ in range(40):
        for c in (clock, mem_clock):
            c.advance(1)
        assert await store.tick() == await memory.tick()
        assert await store.get_room("cp") == await memory.get_room("cp")
    cursor = {"cp": (doc["gen"], imported[1]["cp"].last)}
    assert await store.sample_rooms(cursor) == await memory.sample_rooms(cursor)
    for n in range(1, doc["next"] + 2):
        try:
            m: Any = await memory.lookup("cp", str(n))
        except EngineError as exc:
            m = (exc.code, exc.message)
        try:
            v: Any = await store.lookup("cp", str(n))
        except EngineError as exc:
            v = (exc.code, exc.message)
        assert v == m
    seqs = [e.seq for e in journal.events]
    assert seqs == list(range(doc["seq"] + 1, doc["seq"] + 1 + len(seqs)))  # the journal's seq goes on


async def test_a_generation_seen_deleted_is_never_imported_again(one: Any) -> None:
    """A rebuild that read the journal before the room's deletion landed finds the generation deleted
    here: nothing is put back. A later generation of the same room imports as usual."""
    store, _clock, _ = one
    await store.upsert_room({"id": "gone", "targetUrl": TARGET})
    for i in range(3):
        await store.join("gone", client(i), None, None)
    doc = await store.export_room("gone")
    await store.delete_room("gone")
    assert await store.import_room(doc) is False
    assert not await store.room_exists("gone")
    assert await store.redis.zscore(rooms_key(store.prefix), "gone") is None  # not left in the registry
    await store.upsert_room({"id": "gone", "targetUrl": TARGET})  # made again: the next generation
    again = await store.export_room("gone")
    assert again["gen"] == doc["gen"] + 1
    await store.fence("gone")
    assert await store.import_room(again) is True
    assert await store.room_exists("gone")


async def test_an_import_replaces_the_room_and_lifts_its_fence(one: Any) -> None:
    store, _clock, _ = one
    await store.upsert_room({"id": "cp", "targetUrl": TARGET})
    for i in range(5):
        await store.join("cp", client(i), None, None)
    await store.fence("cp")
    engine, _ = _python_room()
    doc = snapshot.dump(engine.rooms["cp"])
    await store.import_room(doc)
    assert not await store._redis.exists(room_key(store.prefix, "cp", "fence"))
    room = await store.get_room("cp")
    assert room["nextTicket"] == doc["next"] and room["waiting"] == len(doc["line"])


def _watch_imports(store: ValkeyStore, between: Any = None) -> list[tuple[str, int]]:
    """Record each import call (its script and the payload's length) and run ``between(calls)`` after
    each; returns the record."""
    calls: list[tuple[str, int]] = []
    once = store._runner.once

    async def watched(name: str, room_id: str, args: Any = (), now: Any = None) -> Any:
        reply = await once(name, room_id, args, now)
        if name.startswith("import"):
            calls.append((name, len(args[-1])))
            if between is not None:
                await between(calls)
        return reply

    store._runner.once = watched  # type: ignore[method-assign]
    return calls


async def test_a_large_checkpoint_is_imported_in_parts_and_fenced_until_the_last(
    one: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A room too large for one call is imported part by part (``IMPORT_PART`` list elements each), so
    Valkey never spends one long call on it; until the last part is in, the room answers unavailable."""
    store, clock, _ = one
    monkeypatch.setattr(store_module, "IMPORT_PART", 8)
    engine, _py_clock = _python_room()
    doc = snapshot.dump(engine.rooms["cp"])
    fenced_between: list[bool] = []

    async def between(calls: list[tuple[str, int]]) -> None:
        fence = await store._redis.get(room_key(store.prefix, "cp", "fence"))
        fenced_between.append(fence is not None)
        if fence is not None:
            with pytest.raises(StoreUnavailable):
                await store.status("cp", client(0), Presented(gen=doc["gen"], n=doc["line"][0]))

    calls = _watch_imports(store, between)
    clock.advance(12_345)
    assert await store.import_room(doc) is True
    names = [name for name, _ in calls]
    assert names[0] == "import" and set(names[1:]) == {"import_part"} and len(names) > 10
    assert fenced_between == [True] * (len(names) - 1) + [False]  # fenced by the import until its last part
    assert _relative(await store.export_room("cp")) == _relative(doc)
    await store.status("cp", client(0), Presented(gen=doc["gen"], n=doc["line"][0]))


async def test_an_import_taken_over_mid_way_leaves_the_room_fenced_for_the_next(
    one: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another rebuild that begins while an import is in parts clears the room and fences it as its own:
    the first import's next part is refused (StoreUnavailable), and the room stays fenced until a whole
    import is in."""
    store, _clock, _ = one
    monkeypatch.setattr(store_module, "IMPORT_PART", 8)
    engine, _py_clock = _python_room()
    doc = snapshot.dump(engine.rooms["cp"])

    taken: list[bool] = []

    async def taken_over(calls: list[tuple[str, int]]) -> None:
        if len(calls) == 2 and not taken:
            taken.append(True)
            await store._redis.set(room_key(store.prefix, "cp", "fence"), b"import:another")

    calls = _watch_imports(store, taken_over)
    with pytest.raises(StoreUnavailable):
        await store.import_room(doc)
    assert len(calls) == 3 and calls[-1][0] == "import_part"
    assert await store._redis.get(room_key(store.prefix, "cp", "fence")) == b"import:another"
    with pytest.raises(StoreUnavailable):
        await store.get_room("cp")
    calls.clear()
    assert await store.import_room(doc) is True  # the next rebuild: a whole import, the fence lifted
    assert _relative(await store.export_room("cp")) == _relative(doc)


# ---------------------------------------------------------------------- ticket records

DEFAULTED = {"n", "s", "pa", "ss", "sla", "st"}  # never stored while they hold their default (n: never)


async def test_a_ticket_record_leaves_out_the_fields_at_their_default(one: Any) -> None:
    store, clock, _ = one
    await store.upsert_room({"id": "r", "targetUrl": TARGET, "maxConcurrent": 1, **QUIET})
    me, key = client(1), door(1)
    token = Presented(gen=1, n=(await store.join("r", me, None, None)).ticket)
    await store.join("r", client(2), None, None)
    waiting = await stored_tickets(store.redis, store.prefix, "r")
    assert sorted(waiting) == [1, 2]
    for rec in waiting.values():
        assert not DEFAULTED & rec.keys(), rec
        assert {"id", "fp", "ck", "j", "sn", "rf"} <= rec.keys()
    clock.advance(1)
    await store.tick()
    passed = (await stored_tickets(store.redis, store.prefix, "r"))[1]
    assert passed["s"] == "passed" and passed["pa"] == clock.mono_ms()
    assert not {"n", "ss", "sla", "st"} & passed.keys()
    assert (await stored_tickets(store.redis, store.prefix, "r"))[2] == waiting[2]  # not written again
    clock.advance(1)
    result = await store.check("r", me, token, None, None, key)
    assert result.admit and result.ticket is not None
    assert (result.ticket.n, result.ticket.state, result.ticket.pass_at) == (1, "admitted", passed["pa"])
    admitted = (await stored_tickets(store.redis, store.prefix, "r"))[1]
    assert admitted["s"] == "admitted" and admitted["ss"] == admitted["sla"] == admitted["st"] == clock.mono_ms()
    assert "n" not in admitted
    # what is read back has the defaults: a waiting ticket's view and drill-down
    view = await store.status("r", client(2), Presented(gen=1, n=2))
    assert (view.state, view.ticket, view.position) == ("waiting", 2, 1)
    assert (await store.lookup("r", "2"))["state"] == "waiting"


async def test_records_stored_with_their_defaults_read_and_change_as_before(one: Any) -> None:
    """A rolling upgrade: the records an older server stored (n and every default written) are read and
    changed as the new ones are; the memory store, driven alike, is the reference."""
    store, clock, _ = one
    mem_clock = FakeClock(wall_ms=clock.wall_ms(), mono=clock.mono())
    memory = MemoryStore(mem_clock)

    async def both(call: Any) -> Any:
        got, want = await call(store), await call(memory)
        assert got == want
        return got

    def advance(seconds: float) -> None:
        clock.advance(seconds)
        mem_clock.advance(seconds)

    body = {"id": "r", "targetUrl": TARGET, "maxConcurrent": 2, "ratePerMinute": 60, **QUIET}
    await both(lambda s: s.upsert_room(body))
    people = [client(i) for i in range(5)]
    tokens = []
    for c in people:
        view = await both(lambda s, c=c: s.join("r", c, None, None))
        tokens.append(Presented(gen=1, n=view.ticket))
    assert await store_as_before(store.redis, store.prefix, "r") == 5
    older = await stored_tickets(store.redis, store.prefix, "r")
    assert older[3]["n"] == 3 and older[3]["s"] == "waiting" and older[3]["sla"] == 0

    # the presence mark of a replica's frame (lua/seen.lua) finds an older waiting record, and a new one
    advance(2)
    await store.mark_seen("r", 1, [3])
    memory.engine.rooms["r"].tickets[3].seen = mem_clock.mono_ms()  # the mark, on the reference
    marked = await stored_tickets(store.redis, store.prefix, "r")
    assert marked[3] == {**older[3], "sn": clock.mono_ms()}
    for n in range(1, 6):
        await both(lambda s, n=n: s.lookup("r", str(n)))
    for c, token in zip(people, tokens, strict=True):
        await both(lambda s, c=c, token=token: s.status("r", c, token))
    marks = await stored_tickets(store.redis, store.prefix, "r")  # each written whole by its status
    assert not any(DEFAULTED & rec.keys() for rec in marks.values()), marks
    advance(2)
    await store.mark_seen("r", 1, [4])
    memory.engine.rooms["r"].tickets[4].seen = mem_clock.mono_ms()
    assert (await stored_tickets(store.redis, store.prefix, "r"))[4] == {**marks[4], "sn": clock.mono_ms()}

    await store_as_before(store.redis, store.prefix, "r")
    for _ in range(3):
        advance(1)
        await both(lambda s: s.tick())
    await both(lambda s: s.get_room("r"))
    await store_as_before(store.redis, store.prefix, "r")  # passes now, with ss, sla, st 0 written
    key = door(1)
    assert (await both(lambda s: s.check("r", people[0], tokens[0], None, None, key))).admit
    await store_as_before(store.redis, store.prefix, "r")  # a session, with n written
    advance(61)
    await both(lambda s: s.door_replay("r", tokens[0], key[1], None))
    await both(lambda s: s.eject("r", "2"))  # a pass sent back to the line: waiting again
    await store_as_before(store.redis, store.prefix, "r")
    for _ in range(5):
        advance(20)
        await both(lambda s: s.tick())
    for n in range(1, 6):
        await both(lambda s, n=n: s.lookup("r", str(n)))
    await both(lambda s: s.get_room("r"))
    for c, token in zip(people, tokens, strict=True):
        await both(lambda s, c=c, token=token: s.status("r", c, token))
    await store_as_before(store.redis, store.prefix, "r")
    assert _relative(await store.export_room("r")) == _relative(snapshot.dump(memory.engine.rooms["r"]))


async def test_full_records_are_stored_with_every_field_as_a_release_from_before_reads_them(
    valkey: tuple[Redis, str],
) -> None:
    """TICKET_RECORDS=full: every record a script writes, and every record an import writes, carries ``n``
    and each default (the form a release from before the short records reads), and reads back the same."""
    redis, prefix = valkey
    clock = FakeClock()
    store = await make_valkey(redis, prefix, clock, RecordingJournal(), full_records=True)
    try:
        await store.upsert_room({"id": "r", "targetUrl": TARGET, "maxConcurrent": 1, **QUIET})
        me, key = client(1), door(1)
        token = Presented(gen=1, n=(await store.join("r", me, None, None)).ticket)
        await store.join("r", client(2), None, None)
        clock.advance(1)
        await store.tick()
        clock.advance(1)
        assert (await store.check("r", me, token, None, None, key)).admit
        records = await stored_tickets(store.redis, store.prefix, "r")
        assert {n: rec["s"] for n, rec in records.items()} == {1: "admitted", 2: "waiting"}
        for n, rec in records.items():
            assert DEFAULTED <= rec.keys() and rec["n"] == n, rec
        assert records[2]["pa"] == records[2]["ss"] == records[2]["sla"] == records[2]["st"] == 0
        view = await store.status("r", client(2), Presented(gen=1, n=2))
        assert (view.state, view.ticket, view.position) == ("waiting", 2, 1)
        doc = await store.export_room("r")
        await store.import_room(doc)
        for n, rec in (await stored_tickets(store.redis, store.prefix, "r")).items():
            assert DEFAULTED <= rec.keys() and rec["n"] == n, rec
        assert (await store.lookup("r", "2"))["state"] == "waiting"
    finally:
        await store.close()


async def test_the_registry_is_a_superset_of_the_rooms(valkey: tuple[Redis, str]) -> None:
    from .test_valkey_cluster import registry_is_a_superset

    await registry_is_a_superset(*valkey)
