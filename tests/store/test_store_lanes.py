"""Priority lanes on both stores: the ``lanes`` field and its 400s, a join's lane (the default lane,
a lane a grant names, ``unknown_lane``, a re-join keeping its lane), release by share and by priority,
position and ETA within the lane, the operator's ``laneStats``, a live change of the lanes, and the
lanes surviving the journal's replay and a checkpoint."""

from __future__ import annotations

from typing import Any
from unittest.mock import ANY

import pytest
from redis.asyncio import Redis

from queue_manager.clock import FakeClock
from queue_manager.engine import snapshot
from queue_manager.engine.errors import EngineError
from queue_manager.engine.replay import replay
from queue_manager.engine.visitor import Presented
from queue_manager.store.memory import MemoryStore

from .conftest import TARGET, Env, RecordingJournal, Visitor, make_valkey

QUIET = {"presenceSec": None, "queueMaxPerIp": None}
SHARES = [{"id": "members", "share": 70}, {"id": "public", "share": 30}]
PRIORITIES = [{"id": "public", "priority": 10}, {"id": "vip", "priority": 90}]


async def raises(coro: Any) -> EngineError:
    with pytest.raises(EngineError) as info:
        await coro
    return info.value


async def join(env: Env, lane: str | None = None) -> Visitor:
    v = env.visitor()
    view = await env.store.join(v.room_id, v.client, None, None, lane=lane)
    assert view.ticket is not None
    v.token = Presented(gen=view.gen, n=view.ticket)
    return v


async def promoted_lanes(env: Env, lanes_of: dict[int, str]) -> list[str]:
    return [lanes_of[int(e.data["n"])] for e in env.events() if e.type == "promote"]


async def test_the_field_and_its_400s(stores: Env) -> None:
    env = stores
    room = await env.room()
    assert room["lanes"] == []
    assert "laneStats" not in room
    bad: list[Any] = [
        "members",
        [{"id": "Members", "share": 100}],
        [{"id": "a", "share": 50}, {"id": "a", "share": 50}],
        [{"id": "a", "share": 60}, {"id": "b", "share": 30}],
        [{"id": "a", "share": 50}, {"id": "b", "priority": 50}],
        [{"id": "a"}],
        [{"id": "a", "priority": 0}],
        [{"id": "a", "priority": 101}],
        [{"id": "a", "priority": True}],
        [{"id": "a", "priority": 5, "colour": "red"}],
        [{"id": f"l{i}", "priority": 1} for i in range(9)],
        [{"id": "a" * 33, "priority": 1}],
    ]
    for value in bad:
        err = await raises(env.store.upsert_room({"id": "r", "lanes": value}))
        assert (err.status, err.code) == (400, "invalid_lanes"), value
        assert err.message
    room, _, _ = await env.store.upsert_room({"id": "r", "lanes": SHARES})
    assert room["lanes"] == SHARES
    assert [row["id"] for row in room["laneStats"]] == ["members", "public"]
    room, _, _ = await env.store.upsert_room({"id": "r", "lanes": None})
    assert room["lanes"] == [] and "laneStats" not in room


async def test_a_room_without_lanes_shows_no_lane(stores: Env) -> None:
    env = stores
    await env.room(**QUIET)
    v = env.visitor()
    view = await v.join()
    assert view.lane is None and view.position == 1
    err = await raises(env.store.join("r", env.visitor().client, None, None, lane="members"))
    assert (err.status, err.code) == (400, "unknown_lane")
    assert "lane" not in await env.describe(v)


async def test_joins_go_to_the_default_lane_unless_a_grant_names_one(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=0, lanes=SHARES, **QUIET)
    first = env.visitor()
    view = await first.join()
    assert (view.lane, view.position) == ("members", 1)  # the first lane listed is the default
    public = [await join(env, "public") for _ in range(2)]
    second = await join(env, "members")
    assert [(await v.status()).position for v in public] == [1, 2]
    assert (await second.status()).position == 2
    err = await raises(env.store.join("r", env.visitor().client, None, None, lane="staff"))
    assert (err.status, err.code) == (400, "unknown_lane")
    # presenting a held place keeps its lane, whatever lane the new call names
    again = await env.store.join("r", public[1].client, public[1].token, None, lane="members")
    assert (again.ticket, again.lane, again.position) == (public[1].n, "public", 2)
    # the drill-down names the lane; its position is the whole line's
    seen = await env.describe(public[1])
    assert (seen["lane"], seen["position"]) == ("public", 3)
    assert (await env.stats())["waiting"] == 4


async def test_shares_split_each_minute_by_weight_and_give_away_what_an_empty_lane_leaves(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=0, lanes=SHARES, **QUIET)
    lanes_of: dict[int, str] = {}
    for lane in ["members"] * 20 + ["public"] * 4:
        v = await join(env, lane)
        lanes_of[v.n] = lane
    env.events()
    await env.store.upsert_room({"id": "r", "ratePerMinute": 60})
    await env.run(10)
    order = await promoted_lanes(env, lanes_of)
    assert len(order) == 10
    assert order.count("members") == 7 and order.count("public") == 3
    # smooth: never more than 3 members in a row while the public lane waits
    assert "members" * 4 not in "".join("members" if x == "members" else "p" for x in order)
    await env.run(10)
    order = await promoted_lanes(env, lanes_of)
    assert order.count("public") == 1  # the public lane ran dry: the rest went to members
    assert len(order) == 10
    stats = await env.stats()
    assert [(r["id"], r["waiting"], r["sharePct"]) for r in stats["laneStats"]] == [
        ("members", 4, 70),
        ("public", 0, 30),
    ]
    assert sum(r["releasedLastMinute"] for r in stats["laneStats"]) == 20


async def test_priority_serves_the_higher_lane_first(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=0, lanes=PRIORITIES, **QUIET)
    lanes_of: dict[int, str] = {}
    publics = []
    for lane in ["public", "public", "vip", "public", "vip"]:
        v = await join(env, lane)
        lanes_of[v.n] = lane
        if lane == "public":
            publics.append(v)
    # the public lane's position is its own; its ETA counts the two VIPs released first
    view = await publics[0].status()
    assert (view.lane, view.position, view.eta_sec) == ("public", 1, None)  # rate 0: no ETA
    await env.store.upsert_room({"id": "r", "ratePerMinute": 60})
    view = await publics[0].status()
    assert (view.position, view.eta_sec) == (1, 3)
    stats = await env.stats()
    assert [(r["id"], r["waiting"], r["priority"], r["etaSec"]) for r in stats["laneStats"]] == [
        ("public", 3, 10, 5),
        ("vip", 2, 90, 2),
    ]
    env.events()
    await env.run(5)
    assert await promoted_lanes(env, lanes_of) == ["vip", "vip", "public", "public", "public"]


async def test_share_eta_uses_the_lane_rate(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=0, lanes=SHARES, **QUIET)
    members = [await join(env, "members") for _ in range(3)]
    public = [await join(env, "public") for _ in range(3)]
    await env.store.upsert_room({"id": "r", "ratePerMinute": 60})
    # members: 42 a minute for 70 %; public: 18 a minute for 30 %
    assert (await members[2].status()).eta_sec == 5  # ceil(3 × 60 / 42)
    assert (await public[2].status()).eta_sec == 10  # ceil(3 × 60 / 18)


async def test_removing_a_lane_moves_its_people_to_the_default_lane_in_join_order(stores: Env) -> None:
    env = stores
    three = [{"id": "public", "share": 50}, {"id": "members", "share": 30}, {"id": "press", "share": 20}]
    await env.room(ratePerMinute=0, lanes=three, **QUIET)
    a = await join(env, "public")
    b = await join(env, "members")
    c = await join(env, "public")
    d = await join(env, "members")
    await env.store.upsert_room({"id": "r", "lanes": [{"id": "public", "share": 60}, {"id": "press", "share": 40}]})
    views = [await v.status() for v in (a, b, c, d)]
    assert [(view.lane, view.position) for view in views] == [("public", i) for i in (1, 2, 3, 4)]
    # lanes gone altogether: one line again, nobody shows a lane
    await env.store.upsert_room({"id": "r", "lanes": []})
    views = [await v.status() for v in (a, b, c, d)]
    assert [(view.lane, view.position) for view in views] == [(None, i) for i in (1, 2, 3, 4)]
    # lanes back: everyone waiting is in the default lane
    await env.store.upsert_room({"id": "r", "lanes": PRIORITIES})
    assert [(await v.status()).lane for v in (a, b)] == ["public", "public"]


async def test_an_ejected_place_goes_to_the_back_of_its_own_lane(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=60, lanes=PRIORITIES, **QUIET)
    vip = await join(env, "vip")
    await env.run(1)
    assert (await vip.status()).state == "passed"
    await join(env, "vip")
    await env.store.upsert_room({"id": "r", "ratePerMinute": 0})
    await env.store.eject("r", str(vip.n))
    view = await vip.status()
    assert (view.state, view.lane, view.position) == ("waiting", "vip", 2)


async def test_the_journal_and_a_checkpoint_keep_the_lanes(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=0, lanes=SHARES, **QUIET)
    for lane in ["public", "members", "public", "members", "members"]:
        await join(env, lane)
    await env.store.upsert_room({"id": "r", "ratePerMinute": 60})
    await env.run(3)
    events = env.events()
    rebuilt = replay(events, env.clock)
    stats = await env.stats()
    assert [len(rebuilt.lane_lines[lane]) for lane in ("members", "public")] == [
        r["waiting"] for r in stats["laneStats"]
    ]
    # the deficit counters came back too: the next picks are the live room's
    restored = snapshot.load(snapshot.dump(rebuilt), env.clock, [])
    assert restored.lane_credit == rebuilt.lane_credit
    assert {n: t.lane for n, t in restored.tickets.items()} == {n: t.lane for n, t in rebuilt.tickets.items()}
    assert [list(restored.lane_lines[k]) for k in ("members", "public")] == [
        list(rebuilt.lane_lines[k]) for k in ("members", "public")
    ]


async def test_a_valkey_checkpoint_keeps_lanes_places_and_counters(valkey: tuple[Redis, str]) -> None:
    """Export a room with lanes from one Valkey prefix and import it under another: every place keeps
    its lane and position, and the deficit counters pick the same next lane."""
    client, prefix = valkey
    clock = FakeClock()
    source = await make_valkey(client, prefix + "a:", clock)
    target = await make_valkey(client, prefix + "b:", clock)
    try:
        env = Env("valkey", source, clock)
        await env.room(ratePerMinute=0, lanes=SHARES, **QUIET)
        visitors = [await join(env, lane) for lane in ["public", "members", "public", "members", "members"]]
        await source.upsert_room({"id": "r", "ratePerMinute": 60})
        await env.run(2)
        doc = await source.export_room("r")
        assert doc["laneCredit"]
        assert {t["lane"] for t in doc["tickets"]} == {"members", "public"}
        await target.import_room(doc)
        assert await target.export_room("r") == {**doc, "refWall": ANY, "refMono": ANY}
        for v in visitors:
            here = await source.status("r", v.client, v.token)
            there = await target.status("r", v.client, v.token)
            assert (there.state, there.lane, there.position) == (here.state, here.lane, here.position)
        await source.tick()
        await target.tick()
        clock.advance(1)
        await source.tick()
        await target.tick()
        # the same lanes released (the last minute's releases are not in a checkpoint: compare the lines)
        rows = [await store.get_room("r") for store in (source, target)]
        assert [[(r["id"], r["waiting"], r["etaSec"]) for r in room["laneStats"]] for room in rows] == [
            [(r["id"], r["waiting"], r["etaSec"]) for r in rows[0]["laneStats"]]
        ] * 2
        assert rows[0]["passesTotal"] == rows[1]["passesTotal"]
    finally:
        await source.close()
        await target.close()


async def test_a_bounded_tick_releases_lanes_as_an_unbounded_one(valkey: tuple[Redis, str]) -> None:
    """Three promotions per script call (the store calls again): absent holders at the lanes' heads and the
    share releases come out as from the memory store, which has no such budget."""
    client, prefix = valkey
    clock = FakeClock()
    journal = RecordingJournal()
    bounded = await make_valkey(client, prefix, clock, journal, promote_max=3)
    memory = MemoryStore(clock)
    try:
        body = {"id": "r", "targetUrl": TARGET, "ratePerMinute": 0, "presenceSec": 5, "queueMaxPerIp": None}
        body["lanes"] = SHARES
        for store in (bounded, memory):
            await store.upsert_room(body)
        envs = [Env("valkey", bounded, clock), Env("memory", memory, clock)]
        lanes = ["public", "members", "members", "public", "members", "public", "members"] * 2
        early = [[await join(env, lane) for lane in lanes] for env in envs]
        clock.advance(10)  # everyone so far is absent now
        late = [[await join(env, lane) for lane in lanes[:6]] for env in envs]
        for store in (bounded, memory):
            await store.upsert_room({"id": "r", "ratePerMinute": 600})
        clock.advance(1)
        for store in (bounded, memory):
            await store.tick()
        views = [
            [(v.state, v.lane, v.position) for v in [await env.store.status("r", x.client, x.token) for x in a + b]]
            for env, a, b in zip(envs, early, late, strict=True)
        ]
        assert views[0] == views[1]
        assert all(state == "passed" for state, _, _ in views[0][: len(lanes)])  # the absent, released free
        assert sum(state == "passed" for state, _, _ in views[0]) > len(lanes)  # and some of the present
        assert (await bounded.get_room("r"))["laneStats"] == (await memory.get_room("r"))["laneStats"]
    finally:
        await bounded.close()
