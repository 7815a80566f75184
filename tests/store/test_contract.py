"""The Store contract, behaviour by behaviour, against both stores (memory and valkey).

Everything goes through the contract's coroutines only; a ticket's inner state is read the way an
operator reads it (the drill-down, ``lookup``), which has no side effects on presence.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
from typing import Any

import pytest

from queue_manager.engine import draw as draw_rules
from queue_manager.engine.errors import EngineError
from queue_manager.engine.events import EVENT_LOG_VERSION
from queue_manager.engine.model import ClientId
from queue_manager.engine.outflow import SLOT
from queue_manager.engine.snapshot import config_from_public
from queue_manager.engine.ticket import make_ref
from queue_manager.engine.view import WAITS_KEPT
from queue_manager.engine.visitor import Presented
from queue_manager.sidestores.timeline.series import SeriesRecorder
from queue_manager.store.valkey.keys import room_key

from .conftest import TARGET, Env, make_valkey

QUIET = {"presenceSec": None, "queueMaxPerIp": None}
# Room "c48750", generation 1: tickets 35 and 153 share the Ref 8RGAF0 (tests/unit/test_engine_operator.py).
COLLIDING_ROOM, COLLIDING_PAIR, COLLIDING_REF = "c48750", (35, 153), "8RGAF0"


async def raises(coro: Any) -> EngineError:
    with pytest.raises(EngineError) as info:
        await coro
    return info.value


async def fill(env: Env, k: int, room_id: str = "r") -> None:
    client = ClientId(ident="192.0.2.1", fp=b"filler")
    for _ in range(k):
        await env.store.join(room_id, client, None, None)


async def until_passed(env: Env, v: Any, max_seconds: int = 600) -> None:
    for _ in range(max_seconds):
        if await env.state(v) == "passed":
            return
        await env.run(1)
    raise AssertionError(f"ticket {v.n} was never promoted")


# ---------------------------------------------------------------------- rooms


async def test_create_update_get_list_delete(stores: Env) -> None:
    env = stores
    room, created, fields = await env.store.upsert_room({"id": "shop", "targetUrl": TARGET, "rate": 30})
    assert created and fields == ["targetUrl", "ratePerMinute"]
    assert room["id"] == "shop" and room["ratePerMinute"] == 30 and room["rate"] == 30
    assert room["generation"] == 1 and room["waiting"] == 0 and room["nextTicket"] == 1
    room, created, fields = await env.store.upsert_room({"id": "shop", "state": "paused"})
    assert not created and fields == ["state"] and room["state"] == "paused"
    assert room["effectiveState"] == "paused" and room["ratePerMinute"] == 30
    await env.store.upsert_room({"id": "other", "targetUrl": TARGET})
    assert [r["id"] for r in await env.store.list_rooms()] == ["shop", "other"]
    assert (await env.store.get_room("shop"))["state"] == "paused"
    assert await env.store.room_exists("shop") and not await env.store.room_exists("nope")
    await env.store.delete_room("shop")
    assert not await env.store.room_exists("shop")
    assert [r["id"] for r in await env.store.list_rooms()] == ["other"]
    err = await raises(env.store.get_room("shop"))
    assert (err.status, err.code, err.extra) == (404, "no_room", {"roomId": "shop"})
    # a room created again goes to the end of the list, in a new generation
    again, created, _ = await env.store.upsert_room({"id": "shop", "targetUrl": TARGET})
    assert created and again["generation"] == 2 and again["state"] == "active"
    assert [r["id"] for r in await env.store.list_rooms()] == ["other", "shop"]
    assert env.types() == ["room.create", "room.update", "room.create", "room.delete", "room.create"]


async def test_room_events_carry_the_config_and_the_fields(stores: Env) -> None:
    env = stores
    await env.room(rate=10)
    await env.store.upsert_room({"id": "r", "maxConcurrent": 5, "name": "Shop"})
    await env.store.schedule("r", {"preQueueMaxPerIp": 3})
    events = env.events()
    assert [(e.type, e.gen, e.seq) for e in events] == [
        ("room.create", 1, 1),
        ("room.update", 1, 2),
        ("room.schedule", 1, 3),
    ]
    assert events[0].data["fields"] == ["targetUrl", "ratePerMinute"]
    assert events[1].data == {"fields": ["maxConcurrent", "name"], "config": events[1].data["config"]}
    assert events[1].data["config"]["maxConcurrent"] == 5 and events[1].data["config"]["name"] == "Shop"
    assert events[2].data["fields"] == ["preQueueMaxPerIp"] and events[2].data["config"]["preQueueMaxPerIp"] == 3
    assert all(e.ts == env.clock.wall_ms() and e.room == "r" and e.lv == EVENT_LOG_VERSION for e in events)


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"id": "r", "targetUrl": TARGET, "bogus": 1}, 400, "unknown_field"),
        ({"id": "r", "targetUrl": TARGET, "rate": 5, "ratePerMinute": 6}, 400, "conflicting_field"),
        ({"id": "dk_x", "targetUrl": TARGET}, 400, "invalid_room_id"),
        ({"id": "console", "targetUrl": TARGET}, 400, "invalid_room_id"),
        ({"id": 5, "targetUrl": TARGET}, 400, "invalid_room_id"),
        ({"targetUrl": TARGET}, 400, "invalid_room_id"),
        ({"id": "r"}, 400, "invalid_target_url"),
        ({"id": "r", "targetUrl": TARGET, "state": "nope"}, 400, "invalid_state"),
        ({"id": "r", "targetUrl": TARGET, "rate": -1}, 400, "invalid_rate"),
        ({"id": "r", "targetUrl": TARGET, "onBackendDown": "maybe"}, 400, "invalid_on_backend_down"),
    ],
)
async def test_refused_room_bodies(stores: Env, body: dict[str, Any], status: int, code: str) -> None:
    err = await raises(stores.store.upsert_room(body))
    assert (err.status, err.code) == (status, code)
    assert await stores.store.list_rooms() == []


async def test_a_refused_update_changes_nothing_and_a_refused_create_uses_no_generation(stores: Env) -> None:
    env = stores
    await env.room()
    await env.store.delete_room("r")
    await raises(env.store.upsert_room({"id": "r", "targetUrl": TARGET, "state": "nope"}))
    room = await env.room()
    assert room["generation"] == 2
    err = await raises(env.store.upsert_room({"id": "r", "maxConcurrent": 0}))
    assert err.code == "invalid_field" and err.extra == {"field": "maxConcurrent"}
    assert (await env.stats())["maxConcurrent"] is None


# ---------------------------------------------------------------------- compare-and-set state changes


async def test_an_upsert_expecting_the_current_state_applies(stores: Env) -> None:
    env = stores
    await env.room(state="bypass", rate=30)
    env.events()
    room, created, fields = await env.store.upsert_room({"id": "r", "state": "active"}, expect_state="bypass")
    assert not created and fields == ["state"] and room["state"] == "active" and room["ratePerMinute"] == 30
    assert (await env.stats())["effectiveState"] == "active"
    # any change may be made under the condition, not only a state change
    room, _, fields = await env.store.upsert_room({"id": "r", "rate": 60}, expect_state="active")
    assert fields == ["ratePerMinute"] and room["ratePerMinute"] == 60 and room["state"] == "active"
    assert env.types() == ["room.update", "room.update"]


async def test_an_upsert_expecting_another_state_is_refused_and_changes_nothing(stores: Env) -> None:
    env = stores
    await env.room(state="paused", rate=30)
    env.events()
    before = await env.stats()
    err = await raises(env.store.upsert_room({"id": "r", "state": "active", "rate": 90}, expect_state="bypass"))
    assert (err.status, err.code, err.message, err.extra) == (
        409,
        "state_changed",
        "r is paused now, not bypass",
        {"state": "paused"},
    )
    assert await env.stats() == before
    assert env.types() == []
    # without the condition the same change goes through
    room, _, _ = await env.store.upsert_room({"id": "r", "state": "active", "rate": 90})
    assert room["state"] == "active" and room["ratePerMinute"] == 90


async def test_an_upsert_expecting_a_state_never_creates_the_room(stores: Env) -> None:
    env = stores
    err = await raises(env.store.upsert_room({"id": "nope", "targetUrl": TARGET}, expect_state="active"))
    assert (err.status, err.code, err.extra) == (404, "no_room", {"roomId": "nope"})
    assert not await env.store.room_exists("nope") and await env.store.list_rooms() == []
    await env.room()
    await env.store.delete_room("r")
    err = await raises(env.store.upsert_room({"id": "r", "state": "active"}, expect_state="active"))
    assert err.code == "no_room" and not await env.store.room_exists("r")
    assert env.types() == ["room.create", "room.delete"]


async def test_a_state_changed_between_the_read_and_the_upsert_refuses_it(stores: Env) -> None:
    """What leader automation does: read the room, decide, change it on the condition that the state
    read still holds. An operator's change in between (here through another instance on the Valkey
    store) wins."""
    env = stores
    await env.room(state="bypass")
    other = env.store if env.kind == "memory" else await make_valkey(env.redis, env.prefix, env.clock)
    try:
        read = await env.store.get_room("r")
        assert read["state"] == "bypass"
        await other.upsert_room({"id": "r", "state": "paused"})  # the operator, a moment before
        err = await raises(env.store.upsert_room({"id": "r", "state": "active"}, expect_state=read["state"]))
        assert (err.code, err.extra) == ("state_changed", {"state": "paused"})
        assert (await other.get_room("r"))["state"] == "paused"
        assert (await env.stats())["state"] == "paused"
    finally:
        if other is not env.store:
            await other.close()


async def test_room_policy_and_match_rule(stores: Env) -> None:
    env = stores
    await env.room(
        returnOrigins=["https://shop.example", "https://*.cdn.example"],
        protection={"mode": "monitor"},
        rules=[{"pattern": "/shop/*", "action": "queue"}, {"pattern": "/free/*", "action": "skip", "id": "free"}],
    )
    policy = await env.store.room_policy("r")
    assert policy is not None
    assert policy.target_url == TARGET and policy.protection == {"mode": "monitor"} and policy.room_id == "r"
    assert [str(p) for p in policy.return_origins] == ["https://shop.example", "https://*.cdn.example"]
    assert policy.tag_origins == policy.return_origins  # tagOrigins null: the return origins
    assert policy.tag_allowed("https://a.cdn.example") and not policy.tag_allowed("https://evil.example")
    assert await env.store.room_policy("nope") is None
    v = env.visitor()
    await v.join()
    result = await v.check(f"{TARGET}/shop/a")
    assert result.rule == "r1" and not result.admit
    assert (await v.check(f"{TARGET}/free/b")).state == "unprotected"
    assert (await v.check(f"{TARGET}/else")).state == "unprotected"
    answer = await env.store.match_rule("r", f"{TARGET}/shop/x")
    assert answer["protected"] and answer["rule"]["id"] == "r1" and answer["rule"]["matchCount"] == 1
    assert answer["rule"]["lastMatchAt"] == env.clock.wall_ms()
    stats = await env.stats()
    assert [(r["id"], r["matchCount"]) for r in stats["rules"]] == [("r1", 1), ("free", 1)]
    # rule statistics follow a rule that is unchanged by an edit
    await env.store.upsert_room({"id": "r", "rules": [{"pattern": "/free/*", "action": "skip", "id": "free"}]})
    assert [(r["id"], r["matchCount"]) for r in (await env.stats())["rules"]] == [("free", 1)]
    none = await env.store.match_rule("r", f"{TARGET}/shop/x")
    assert none["rule"] is None and not none["protected"]
    await raises(env.store.match_rule("nope", TARGET))


# written as the rebuild writes it (engine/logo.py), so it is stored byte for byte
LOGO_SVG = (
    b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 4 4"><rect width="4" height="4" fill="#ffd166"></rect></svg>'
)
BRAND = {
    "displayName": "Acme",
    "background": "#0b1f3a",
    "accent": "#ffd166",
    "message": {"en": "Doors at nine", "ja": "9時開場"},
    "helpUrl": "https://help.acme.example/",
    "logo": {"type": "image/svg+xml", "data": base64.b64encode(LOGO_SVG).decode()},
}


async def test_a_brand_is_kept_with_the_room_and_every_instance_reads_it(stores: Env) -> None:
    env = stores
    await env.room(brand=BRAND)
    sha = hashlib.sha256(LOGO_SVG).hexdigest()
    read = (await env.store.get_room("r"))["brand"]
    # a read names the logo by hash and size; the bytes stay with the stored room
    assert read == {**BRAND, "logo": {"type": "image/svg+xml", "sha256": sha, "bytes": len(LOGO_SVG)}}
    assert [r["brand"] for r in await env.store.list_rooms()] == [read]
    other = env.store if env.kind == "memory" else await make_valkey(env.redis, env.prefix, env.clock)
    try:
        policy = await other.room_policy("r")
        assert policy is not None and policy.brand is not None
        assert policy.brand.logo is not None and policy.brand.logo.data == LOGO_SVG
        assert policy.brand.display_name == "Acme" and policy.brand.message_for("de") == "Doors at nine"
        # a change through one instance merges into the brand and reaches the other
        await other.upsert_room({"id": "r", "brand": {"accent": "#ffffff", "helpUrl": None}})
        if other is not env.store:
            env.store.config_fresh_sec = 0  # its copy is otherwise trusted for up to 2 s
        changed = await env.store.room_policy("r")
        assert changed is not None and changed.brand is not None
        assert (changed.brand.accent, changed.brand.help_url, changed.brand.logo) == (
            "#ffffff",
            None,
            policy.brand.logo,
        )
    finally:
        if other is not env.store:
            await other.close()
    events = env.events()
    # the journal carries the logo's bytes: a rebuild from it has the same brand
    assert events[0].data["config"]["brand"]["logo"]["data"] == BRAND["logo"]["data"]
    assert config_from_public(events[0].data["config"]).brand == policy.brand
    err = await raises(env.store.upsert_room({"id": "r", "brand": {"accent": "#333333"}}))
    assert err.code == "low_contrast" and err.extra["pair"] == ["#333333", "#0b1f3a"]
    assert (await env.store.room_policy("r")).brand == changed.brand  # type: ignore[union-attr]
    await env.store.upsert_room({"id": "r", "brand": None})
    assert (await env.store.get_room("r"))["brand"] is None
    assert (await env.store.room_policy("r")).brand is None  # type: ignore[union-attr]


# ---------------------------------------------------------------------- joining and the line


async def test_join_status_and_re_presenting(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=30, **QUIET)
    people = [env.visitor() for _ in range(4)]
    for p in people:
        view = await p.join(f"{TARGET}/cart")
        assert view.new and view.state == "waiting"
    view = await people[2].status()
    assert (view.state, view.ticket, view.position, view.ahead, view.eta_sec) == ("waiting", 3, 3, 2, 6)
    assert view.ref == make_ref("r", 1, 3) and view.return_url == f"{TARGET}/cart"
    assert view.joined_ms == env.clock.wall_ms() and view.gen == 1 and view.rate_per_minute == 30
    again = await people[2].join()
    assert not again.new and again.ticket == 3 and again.position == 3
    assert (await env.stats())["waiting"] == 4
    assert env.types() == ["room.create", "join", "join", "join", "join"]


async def test_join_events_carry_the_visitor(stores: Env) -> None:
    env = stores
    await env.room()
    env.events()
    client = ClientId(ident="203.0.113.7", fp=b"\x01\x02", fp2=b"\x03", cookie=b"\x04")
    await env.store.join("r", client, None, "https://shop.example/x")
    (event,) = env.events()
    assert event.type == "join" and event.seq == 2
    assert event.data == {
        "n": 1,
        "reason": None,  # no token was presented
        "ident": "203.0.113.7",
        "fp": "0102",
        "fp2": "03",
        "ck": "04",
        "joined": env.clock.wall_ms(),
        "ret": "https://shop.example/x",
    }


async def test_somebody_elses_token_gets_a_fresh_place(stores: Env) -> None:
    env = stores
    await env.room(**QUIET)
    owner, thief = env.visitor(), env.visitor()
    await owner.join()
    thief.token = owner.token
    assert (await thief.status()).reason == "not_owner"
    view = await thief.join()
    assert view.ticket == 2 and view.reason == "not_owner" and view.new
    check = await env.visitor().check()
    assert check.reason == "no_ticket"


async def test_a_token_of_a_ticket_nobody_holds_is_expired(stores: Env) -> None:
    env = stores
    await env.room()
    v = env.visitor()
    v.token = Presented(gen=1, n=99)
    view = await v.status()
    assert view.state == "expired" and view.reason == "expired" and view.ticket is None


async def test_promotion_at_the_configured_rate(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=60, **QUIET)
    await fill(env, 30)
    await env.run(10)
    stats = await env.stats()
    assert stats["passesTotal"] == 10 and stats["waiting"] == 20 and stats["passedLastMinute"] == 10
    await env.store.upsert_room({"id": "r", "rate": 600})
    await env.run(2)
    assert (await env.stats())["passesTotal"] == 30


async def test_promotion_at_6000_a_minute(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=6000, **QUIET)
    await fill(env, 700)
    await env.run(6)
    stats = await env.stats()
    assert stats["passesTotal"] == 600 and stats["waiting"] == 100


async def test_one_slot_bank_after_a_long_idle(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=60, **QUIET)
    await env.run(600)
    env.clock.advance(3600)  # and an hour without any tick
    await fill(env, 100)
    await env.run(1)
    assert (await env.stats())["passesTotal"] <= 2


async def test_paused_and_zero_rate_promote_nobody(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=600, state="paused", presenceSec=30, queueMaxPerIp=None)
    await fill(env, 5)
    v = env.visitor()
    await v.join()
    await env.run(120)
    assert (await env.stats())["passesTotal"] == 0
    assert (await v.check()).reason == "paused"
    await env.store.upsert_room({"id": "r", "state": "active", "rate": 0})
    await env.run(60)
    assert (await env.stats())["passesTotal"] == 0


async def test_bypass_has_no_line(stores: Env) -> None:
    env = stores
    await env.room(state="bypass", maxConcurrent=1)
    a, b = env.visitor(), env.visitor()
    assert (await a.join()).state == "bypass"
    assert (await b.join()).ticket is None
    assert (await a.check()).state == "bypass" and (await b.check()).admit
    assert (await env.stats())["waiting"] == 0


async def test_bypass_joins_and_door_checks_are_arrivals(stores: Env) -> None:
    """In bypass nobody is minted a place, yet every join and door check is an arrival: counted in
    joinsLastMinute (what threshold activation watches), never in joinsTotal, never journaled."""
    env = stores
    await env.room(state="bypass", rules=[{"pattern": "/free/*", "action": "skip"}], **QUIET)
    env.events()
    a, b = env.visitor(), env.visitor()
    assert (await a.join()).state == "bypass"
    assert (await a.join()).state == "bypass"  # bypass mints nothing: a second join is another arrival
    await b.join(f"{TARGET}/cart")
    assert (await a.check()).state == "bypass"
    assert (await b.check(f"{TARGET}/shop/1")).state == "bypass"
    assert (await b.check(f"{TARGET}/free/1")).state == "bypass"  # bypass comes before the URL rules
    stats = await env.stats()
    assert (stats["joinsLastMinute"], stats["joinsTotal"], stats["waiting"], stats["nextTicket"]) == (6, 0, 0, 1)
    assert (stats["unscopedChecks"], stats["rules"][0]["matchCount"]) == (0, 0)
    assert env.types() == []
    # the window is the last minute, on the monotonic clock
    await env.run(30)
    await a.check()
    assert (await env.stats())["joinsLastMinute"] == 7
    await env.run(30)
    assert (await env.stats())["joinsLastMinute"] == 1
    await env.run(30)
    assert (await env.stats())["joinsLastMinute"] == 0
    assert (await env.stats())["joinsTotal"] == 0


async def test_a_door_replay_or_a_held_place_in_bypass_is_no_new_arrival(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=60, sessionTtlSec=600, **QUIET)
    a, b = env.visitor(), env.visitor()
    await a.join()
    await b.join()
    await env.run(1)
    assert (await a.check()).state == "admitted" and a.token is not None and a.door is not None
    await env.store.upsert_room({"id": "r", "state": "bypass"})
    assert (await env.stats())["joinsLastMinute"] == 2  # the two places minted
    # the hot path re-presents a visitor already inside: not counted
    replay = await env.store.door_replay("r", a.token, a.door, None)
    assert replay is not None and replay.state == "bypass"
    # re-presenting a held place returns it: not counted either
    assert (await b.join()).ticket == b.n
    stats = await env.stats()
    assert (stats["joinsLastMinute"], stats["joinsTotal"]) == (2, 2)
    # a door check with the place held is: the door cannot tell it from any other page view
    assert (await b.check()).state == "bypass"
    stats = await env.stats()
    assert (stats["joinsLastMinute"], stats["joinsTotal"]) == (3, 2)
    # once the room queues again, a join is a place minted, counted once
    await env.store.upsert_room({"id": "r", "state": "active"})
    await env.visitor().join()
    stats = await env.stats()
    assert (stats["joinsLastMinute"], stats["joinsTotal"]) == (4, 3)


async def _arrivals_kept(env: Env) -> tuple[int, int]:
    """The arrivals a room in bypass holds in its window, and how many entries hold them (memory:
    the join instants and the per-second buckets; Valkey: the jt members and the ab fields)."""
    if env.kind == "memory":
        room = env.store.engine.rooms["r"]
        counted = len(room.join_times) + sum(count for _, count in room.arrival_buckets)
        return counted, len(room.join_times) + len(room.arrival_buckets)
    assert env.redis is not None
    joins = int(await env.redis.zcard(room_key(env.prefix, "r", "jt")))
    buckets = await env.redis.hgetall(room_key(env.prefix, "r", "ab"))
    return joins + sum(int(v) for v in buckets.values()), joins + len(buckets)


async def test_the_tick_keeps_the_arrivals_window_bounded(stores: Env) -> None:
    """Arrivals of a busy room in bypass are dropped from the window by the tick itself, also when
    nobody reads the room's stats."""
    env = stores
    await env.room(state="bypass", **QUIET)
    v = env.visitor()
    for _ in range(20):
        await v.check()
    await v.join()
    assert await _arrivals_kept(env) == (21, 1)  # one second: one bucket
    await env.run(59)
    assert await _arrivals_kept(env) == (21, 1)
    await env.run(1)
    assert await _arrivals_kept(env) == (0, 0)


async def test_arrivals_cost_one_bucket_per_second_however_many(stores: Env) -> None:
    """A busy room in bypass keeps one counter per second, never one entry per arrival: 10,000
    arrivals within one second are one bucket (memory) or one hash field (Valkey), and arrivals
    spread over two minutes with no tick at all never hold more than a minute's worth of buckets."""
    env = stores
    await env.room(state="bypass", **QUIET)
    v = env.visitor()
    for ms in range(1000):  # ten in each of the second's thousand milliseconds
        if ms:
            env.clock.advance(0.001)
        await asyncio.gather(*(v.check() for _ in range(10)))
    assert await _arrivals_kept(env) == (10_000, 1)
    assert (await env.stats())["joinsLastMinute"] == 10_000
    env.clock.advance(0.001)  # the next second
    await v.check()
    assert await _arrivals_kept(env) == (10_001, 2)
    most = 0
    for _ in range(120):  # a stalled ticker: the arrivals themselves drop what left the window
        env.clock.advance(1)
        for _ in range(3):
            await v.check()
        most = max(most, (await _arrivals_kept(env))[1])
    assert most == 60
    assert await _arrivals_kept(env) == (180, 60)
    assert (await env.stats())["joinsLastMinute"] == 180


async def test_queue_max_per_ip_is_429_with_retry_after_30(stores: Env) -> None:
    env = stores
    await env.room(queueMaxPerIp=2)
    mine = [env.visitor(ident="203.0.113.9") for _ in range(2)]
    for v in mine:
        await v.join()
    assert await env.store.places_held("r", "203.0.113.9") == 2
    env.events()
    err = await raises(env.visitor(ident="203.0.113.9").join())
    assert (err.status, err.code, err.headers) == (429, "queue_identity_limit", {"Retry-After": "30"})
    assert err.message == "Too many places in this line are already held from your address. Try again later."
    assert env.events() == []
    for v in mine:
        assert not (await v.join()).new  # re-presenting a held ticket is never charged
    assert (await env.visitor(ident="203.0.113.10").join()).ticket == 3
    # a place is freed when the ticket reaches the front, or is ejected
    await env.store.eject("r", str(mine[0].n))
    assert await env.store.places_held("r", "203.0.113.9") == 1
    assert (await env.visitor(ident="203.0.113.9").join()).ticket == 4
    assert await env.store.places_held("r", "nobody") == 0


# ---------------------------------------------------------------------- passes, capacity and the door


async def test_promotion_never_exceeds_max_concurrent(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=6000, maxConcurrent=5, **QUIET)
    await fill(env, 50)
    await env.run(1)
    assert (await env.stats())["passesTotal"] == 5
    await env.run(119)
    stats = await env.stats()
    assert stats["occupancy"] == 5 and stats["passesOutstanding"] == 5
    await env.run(1)  # the claim window of the first five ends: five more are promoted
    stats = await env.stats()
    assert stats["occupancy"] == 5 and stats["passesOutstanding"] == 10 and stats["holdingPasses"] == 5


async def test_ten_passes_five_slots_exactly_five_walk_in(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=6000, maxConcurrent=5, **QUIET)
    people = [env.visitor() for _ in range(10)]
    for p in people:
        await p.join()
    await env.run(121)
    results = [await p.check() for p in people]
    admitted = [p.n for p, r in zip(people, results, strict=True) if r.admit]
    assert admitted == [p.n for p in people[5:]]
    assert all(r.reason == "at_capacity" for r in results[:5])
    assert (await env.stats())["occupancy"] == 5
    assert env.types().count("bounce") == 5


async def test_unused_pass_holds_its_slot_for_the_claim_window_only(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=60, maxConcurrent=1, passedTtlSec=600, **QUIET)
    a, b = env.visitor(), env.visitor()
    await a.join()
    await b.join()
    await until_passed(env, a)
    await a.status()  # told
    await env.run(119)
    assert (await env.describe(a))["holdsSlot"] and await env.state(b) == "waiting"
    await env.run(1)
    d = await env.describe(a)
    assert d["state"] == "passed" and not d["holdsSlot"]
    assert (await env.describe(b))["holdsSlot"]


async def test_pass_expires_unused_and_keeps_its_record(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=60, passedTtlSec=200, **QUIET)
    a = env.visitor()
    joined = env.clock.wall_ms()
    await a.join()
    await env.run(5)
    passed = await env.describe(a)
    assert passed["passed"] == joined + 1000 and passed["waited"] == 1.0 and passed["passExpiresInSec"] == 196.0
    await env.run(195)
    assert await env.state(a) == "passed"
    await env.run(1)
    done = await env.describe(a)
    assert (done["state"], done["reason"], done["joined"], done["passed"], done["waited"]) == (
        "expired",
        "expired",
        joined,
        joined + 1000,
        1.0,
    )
    assert (await a.status()).reason == "expired" and (await a.check()).reason == "expired"
    assert "expire" in env.types()


def _slotless_setup() -> dict[str, Any]:
    return {"ratePerMinute": 60, "maxConcurrent": 1, "presenceSec": 30, "queueMaxPerIp": None}


async def _two_slotless_passes_and_a_session(env: Env) -> tuple[Any, Any, Any, Any]:
    """cap 1: D in session; A and B (absent at their turn) hold passes without slots; C waits."""
    await env.room(**_slotless_setup())
    d = env.visitor()
    await d.join()
    await until_passed(env, d)
    assert (await d.check()).admit
    await env.store.upsert_room({"id": "r", "state": "paused"})
    a, b, c = env.visitor(), env.visitor(), env.visitor()
    for v in (a, b, c):
        await v.join()
    for _ in range(31):
        env.clock.advance(1)
        await c.status()
        await env.store.tick()
    await env.store.upsert_room({"id": "r", "state": "active"})
    env.clock.advance(1)
    await c.status()
    await env.store.tick()
    for v in (a, b):
        d_ = await env.describe(v)
        assert d_["state"] == "passed" and not d_["holdsSlot"]
    assert await env.state(c) == "waiting"
    return a, b, c, d


async def test_bounced_holders_are_admitted_oldest_ticket_first(stores: Env) -> None:
    env = stores
    a, b, c, d = await _two_slotless_passes_and_a_session(env)
    assert (await b.check()).reason == "at_capacity"
    assert (await a.check()).reason == "at_capacity"
    await env.store.eject("r", str(d.n))  # a slot frees
    assert (await env.stats())["occupancy"] == 0
    assert (await b.check()).reason == "at_capacity"  # a is older and still polling
    env.clock.advance(1)
    await c.status()
    await env.store.tick()
    assert await env.state(c) == "waiting"  # nor does the freed slot go to a new promotion
    assert (await a.check()).admit  # a bounced itself: its own claim does not hold it back
    assert (await env.stats())["occupancy"] == 1


async def test_a_bounced_holder_that_stops_polling_loses_its_claim(stores: Env) -> None:
    env = stores
    a, b, c, d = await _two_slotless_passes_and_a_session(env)
    assert (await a.check()).reason == "at_capacity"
    assert (await b.check()).reason == "at_capacity"
    await env.store.eject("r", str(d.n))
    for _ in range(31):  # a goes quiet for presenceSec; b keeps polling
        env.clock.advance(1)
        await c.status()
        await env.store.tick()
        if (await b.check()).admit:
            break
    assert await env.state(b) == "admitted" and await env.state(a) == "passed"


async def test_a_bounced_holder_who_keeps_watching_keeps_its_claim(stores: Env) -> None:
    """The older bounced holder only watches the waiting page (status polls, as the /events stream's
    frames do) while the younger keeps trying the door: the freed slot waits for the older one."""
    env = stores
    a, b, c, d = await _two_slotless_passes_and_a_session(env)
    assert (await a.check()).reason == "at_capacity"
    assert (await b.check()).reason == "at_capacity"
    await env.store.eject("r", str(d.n))
    for _ in range(61):  # twice presenceSec past the bounce
        env.clock.advance(1)
        await a.status()
        await c.status()
        await env.store.tick()
        assert (await b.check()).reason == "at_capacity"
    assert await env.state(c) == "waiting"
    assert (await a.check()).admit
    assert await env.state(b) == "passed"


async def test_slotless_pass_takes_a_free_slot_when_no_older_holder_is_bounced(stores: Env) -> None:
    env = stores
    a, b, _c, d = await _two_slotless_passes_and_a_session(env)
    await env.store.eject("r", str(d.n))
    assert (await b.check()).admit
    assert (await a.check()).reason == "at_capacity"


async def test_presence_an_absent_head_is_promoted_without_a_slot_or_credit(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=60, maxConcurrent=1, presenceSec=5, queueMaxPerIp=None)
    gone, here = env.visitor(), env.visitor()
    await gone.join()
    await here.join()
    for _ in range(6):
        env.clock.advance(1)
        await here.status()
    await env.store.tick()
    g, h = await env.describe(gone), await env.describe(here)
    assert g["state"] == "passed" and not g["holdsSlot"]
    assert h["state"] == "passed" and h["holdsSlot"]  # the rate paid only for the present one
    events = [e for e in env.events() if e.type == "promote"]
    assert [(e.data["n"], e.data["slot"]) for e in events] == [(gone.n, False), (here.n, True)]
    assert events[0].data["credit"] - events[1].data["credit"] == SLOT  # only the present one spent credit


async def test_an_untold_holder_gives_the_slot_back_once_unseen(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=60, maxConcurrent=1, presenceSec=30, queueMaxPerIp=None)
    a, b = env.visitor(), env.visitor()
    await a.join()
    await b.join()
    await env.run(1)  # a promoted with a slot, never told
    for _ in range(30):
        env.clock.advance(1)
        await b.status()
        await env.store.tick()
    assert not (await env.describe(a))["holdsSlot"]
    assert (await env.describe(b))["holdsSlot"]


async def test_sessions_slide_and_end(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=60, sessionTtlSec=60, sessionMaxSec=300, maxConcurrent=3, **QUIET)
    a = env.visitor()
    await a.join()
    await env.run(1)
    first = await a.check()
    assert first.admit and first.door_key is not None
    assert first.session_expires_ms == env.clock.wall_ms() + 60_000
    for _ in range(4):
        await env.run(59)
        result = await a.check()
        assert result.admit and result.door_key is None
    assert (await env.describe(a))["sessionExpiresInSec"] == 60.0
    await env.run(60)
    assert await env.state(a) is None and (await env.stats())["occupancy"] == 0
    assert (await a.check()).reason == "expired"
    types = env.types()
    assert types.count("session.touch") == 2 and "session.end" in types  # slides at 118 s and 236 s
    # sessionMaxSec: ends 300 s after entry however often it slides
    b = env.visitor()
    await b.join()
    await env.run(1)
    assert (await b.check()).admit
    for _ in range(29):
        await env.run(10)
        assert (await b.check()).admit
    await env.run(10)
    assert await env.state(b) is None


async def test_a_slide_reaches_the_journal_at_most_once_a_minute(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=60, sessionTtlSec=600, **QUIET)
    a = env.visitor()
    await a.join()
    await env.run(1)
    await a.check()
    env.events()
    for _ in range(6):
        env.clock.advance(20)
        assert (await a.check()).admit
    assert env.types() == ["session.touch", "session.touch"]


async def test_door_keys_session_elsewhere_and_reclaim(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=60, maxConcurrent=1, **QUIET)
    owner = env.visitor()
    await owner.join()
    await env.run(1)
    thief = env.visitor(cookie=False)
    thief.client = ClientId(ident=thief.client.ident, fp=owner.client.fp)  # same fingerprint, no cookie
    thief.token = owner.token
    assert (await thief.check()).admit
    stranger = env.visitor()
    stranger.token = owner.token
    assert (await stranger.check()).reason == "session_elsewhere"
    back = await owner.check()  # no door key, but the cookie: reclaim at the door
    assert back.admit and back.door_key is not None
    assert (await thief.check()).reason == "session_elsewhere"
    assert (await env.stats())["occupancy"] == 1
    admits = [e for e in env.events() if e.type == "admit"]
    assert admits[-1].data == {"n": owner.n, "door": owner.door.hex(), "reclaim": True}
    # the waiting page of the cookie holder takes the session back as a fresh pass
    view = await owner.join()
    assert view.state == "passed" and view.ticket == owner.n
    assert "reclaim" in env.types()
    assert (await owner.check()).admit


async def test_door_replay_is_the_hot_path_of_a_live_session(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=60, sessionTtlSec=60, rules=[{"pattern": "/shop/*", "action": "queue"}], **QUIET)
    a = env.visitor()
    await a.join()
    await env.run(1)
    assert a.token is not None
    assert await env.store.door_replay("r", a.token, b"\x01" * 16, None) is None  # not admitted yet
    assert (await a.check(f"{TARGET}/shop/x")).admit
    assert a.door is not None
    env.events()
    before = await env.stats()
    env.clock.advance(30)
    result = await env.store.door_replay("r", a.token, a.door, f"{TARGET}/shop/y")
    assert result is not None and result.admit and result.state == "admitted" and result.door_key is None
    assert result.rule == "r1" and result.session_expires_ms == env.clock.wall_ms() + 60_000
    assert (await env.store.door_replay("r", a.token, a.door, f"{TARGET}/else")).state == "unprotected"  # type: ignore[union-attr]
    assert (await env.store.door_replay("r", a.token, a.door, None)).state == "admitted"  # type: ignore[union-attr]
    after = await env.stats()
    assert after["unscopedChecks"] == before["unscopedChecks"] + 1
    assert after["rules"][0]["matchCount"] == before["rules"][0]["matchCount"] + 1
    # a wrong key, another generation, a handle: not this path, and nothing counted
    assert await env.store.door_replay("r", a.token, b"\x02" * 16, None) is None
    assert await env.store.door_replay("r", Presented(gen=2, n=a.n), a.door, None) is None
    assert await env.store.door_replay("r", Presented(gen=1, handle="abc"), a.door, None) is None
    assert (await env.stats())["unscopedChecks"] == after["unscopedChecks"]
    assert env.types() == []
    err = await raises(env.store.door_replay("nope", a.token, a.door, None))
    assert err.code == "no_room"


async def test_door_replay_when_the_sweep_just_ended_the_session(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=60, sessionTtlSec=60, **QUIET)
    a = env.visitor()
    await a.join()
    await env.run(1)
    assert (await a.check()).admit and a.token is not None and a.door is not None
    env.clock.advance(61)  # idle past sessionTtlSec: the sweep ends it, and replay says "not me"
    assert await env.store.door_replay("r", a.token, a.door, None) is None
    assert "session.end" in env.types()
    assert (await a.check()).reason == "expired"


# ---------------------------------------------------------------------- scheduled drops


async def test_pre_queue_draw_and_its_cap(stores: Env) -> None:
    env = stores
    opens = env.clock.wall_ms() + 60_000
    await env.room(opensAt=opens, presenceSec=None, ratePerMinute=0, preQueueMaxPerIp=2)
    people = [env.visitor(ident=f"198.51.100.{i % 3}") for i in range(6)]
    for p in people:
        view = await p.join()
        assert view.state == "scheduled" and view.room_state == "scheduled" and view.handle is not None
        assert view.position is None and view.ahead is None and view.opens_at_ms == opens
    assert (await people[0].join()).pre_count == 6 and not (await people[0].join()).new
    err = await raises(env.visitor(ident="198.51.100.0").join())
    assert (err.status, err.code, err.headers) == (429, "queue_identity_limit", {"Retry-After": "30"})
    assert (await people[0].check()).reason == "waiting"
    stats = await env.stats()
    assert stats["preQueue"] == 6 and stats["waiting"] == 0 and stats["effectiveState"] == "scheduled"
    await env.run(59)
    assert (await env.stats())["preQueue"] == 6
    await env.run(1)
    positions = sorted([(await p.status()).position for p in people])  # type: ignore[type-var]
    assert positions == [1, 2, 3, 4, 5, 6]
    draws = [e for e in env.events() if e.type == "prequeue.draw"]
    assert len(draws) == 1
    assert draws[0].data == {"count": 6, "first": 1}
    record = (await env.store.draw_state("r")).record
    assert record is not None and record.drawn is not None
    order = record.drawn.order
    assert sorted(order) == sorted(p.token.handle for p in people)  # type: ignore[union-attr]
    assert record.drawn.first_ticket == 1
    stats = await env.stats()
    assert stats["joinsTotal"] == 6 and stats["waiting"] == 6 and stats["preQueue"] == 0
    # the draw is round robin: every identity's first entry before anybody's second
    owner = {p.token.handle: p.client.ident for p in people}  # type: ignore[union-attr]
    assert len({owner[h] for h in order[:3]}) == 3


async def test_the_draw_happens_on_any_call(stores: Env) -> None:
    env = stores
    await env.room(opensAt=env.clock.wall_ms() + 1000, presenceSec=None, ratePerMinute=0)
    people = [env.visitor() for _ in range(3)]
    for p in people:
        await p.join()
    env.clock.advance(1)
    view = await people[1].status()
    assert view.state == "waiting" and view.position is not None
    n = (await people[0].status()).ticket
    assert n is not None and (await env.describe(n))["state"] == "waiting"


async def test_schedule_route(stores: Env) -> None:
    env = stores
    await env.room(presenceSec=None, ratePerMinute=0)
    opens = env.clock.wall_ms() + 60_000
    room = await env.store.schedule("r", {"opensAt": opens, "preQueueMaxPerIp": 8})
    assert room["preQueueMaxPerIp"] == 8 and room["effectiveState"] == "scheduled"
    room = await env.store.schedule("r", {"opensAt": "2026-09-01T09:00:00Z"})
    assert room["opensAt"] == "2026-09-01T09:00:00.000Z" and room["preQueueMaxPerIp"] == 8
    for body, code in (
        ({}, "nothing_to_change"),
        ({"opens_at": 1}, "unknown_field"),
        ([], "bad_request"),
        ({"opensAt": "tomorrow"}, "invalid_opens_at"),
        ({"preQueueMaxPerIp": 0}, "invalid_field"),
    ):
        err = await raises(env.store.schedule("r", body))
        assert (err.status, err.code) == (400, code)
    err = await raises(env.store.schedule("nope", {"opensAt": None}))
    assert err.code == "no_room"
    people = [env.visitor() for _ in range(4)]
    for p in people:
        await p.join()
    env.events()
    room = await env.store.schedule("r", {"opensAt": None})  # cancelling draws the pre-queue now
    assert room["waiting"] == 4 and room["preQueue"] == 0 and room["opensAt"] is None
    assert env.types() == ["prequeue.draw", "room.schedule"]


async def test_cancelling_a_drop_through_an_update_draws_at_the_next_call(stores: Env) -> None:
    env = stores
    await env.room(opensAt=env.clock.wall_ms() + 3_600_000, presenceSec=None, ratePerMinute=0)
    people = [env.visitor() for _ in range(3)]
    for p in people:
        await p.join()
    await env.store.upsert_room({"id": "r", "opensAt": None})
    await env.run(1)
    for p in people:
        assert (await p.status()).ticket is not None


async def test_a_drop_commits_a_seed_and_its_draw_is_qm_draw_v1_of_it(stores: Env) -> None:
    env = stores
    opens = env.clock.wall_ms() + 60_000
    await env.room(opensAt=opens, presenceSec=None, ratePerMinute=0)
    created = env.events()[0]
    seed = bytes.fromhex(created.data["seed"])
    state = await env.store.draw_state("r")
    record = state.record
    assert record is not None and state.scheduled and state.pre_count == 0
    assert record.seed == seed and record.commitment == hashlib.sha256(seed).hexdigest()
    assert (record.committed_ms, record.opens_at_ms, record.previous, record.drawn) == (created.ts, opens, [], None)
    people = [env.visitor(ident=f"198.51.100.{i % 3}") for i in range(7)]
    for p in people:
        view = await p.join()
        assert view.draw_commitment == record.commitment  # shown while the doors are shut
    assert (await env.store.draw_state("r")).pre_count == 7
    env.clock.advance(60)
    state = await env.store.draw_state("r")  # a draw that is due happens before it is shown
    drawn = state.record.drawn if state.record is not None else None
    assert drawn is not None and not state.scheduled and state.pre_count == 0
    owner = {p.token.handle: p.client.ident for p in people}  # type: ignore[union-attr]
    handles, groups = draw_rules.freeze(owner.items())
    assert (drawn.handles, drawn.groups) == (handles, groups) and handles == sorted(owner)
    assert drawn.order == draw_rules.draw_order(seed, handles, groups)
    assert (drawn.at_ms, drawn.first_ticket) == (env.clock.wall_ms(), 1)
    draws = [e for e in env.events() if e.type == "prequeue.draw"]
    assert [e.data for e in draws] == [{"count": 7, "first": 1}]  # the order: qm-draw-v1 of the seed and the pre-queue
    for p in people:  # ticket n is the (n - first)-th of the order
        view = await p.status()
        assert view.ticket is not None and drawn.order[view.ticket - 1] == p.token.handle  # type: ignore[union-attr]
        assert view.draw_commitment is None


async def test_a_reschedule_commits_a_new_seed_and_lists_the_one_it_replaced(stores: Env) -> None:
    env = stores
    await env.room(presenceSec=None, ratePerMinute=0)
    assert (await env.store.draw_state("r")).record is None  # never scheduled
    opens = env.clock.wall_ms() + 60_000
    await env.store.schedule("r", {"opensAt": opens})
    first = (await env.store.draw_state("r")).record
    assert first is not None
    env.clock.advance(5)
    # neither the cap, nor the same instant again, nor another setting moves the commitment
    await env.store.schedule("r", {"preQueueMaxPerIp": 4})
    await env.store.schedule("r", {"opensAt": opens})
    await env.store.upsert_room({"id": "r", "ratePerMinute": 5, "opensAt": opens})
    assert (await env.store.draw_state("r")).record == first
    assert [e.data.get("seed") for e in env.events()] == [None, first.seed.hex(), None, None, None]
    await env.store.schedule("r", {"opensAt": opens + 1000})
    moved = (await env.store.draw_state("r")).record
    assert moved is not None and moved.seed != first.seed and moved.opens_at_ms == opens + 1000
    assert moved.previous == [(first.commitment, env.clock.wall_ms())]
    env.clock.advance(5)
    await env.store.upsert_room({"id": "r", "opensAt": opens + 2000})  # a room change moves it too
    again = (await env.store.draw_state("r")).record
    assert again is not None
    assert again.previous == [(first.commitment, first.committed_ms + 5000), (moved.commitment, env.clock.wall_ms())]
    assert [e.data["seed"] for e in env.events()] == [moved.seed.hex(), again.seed.hex()]
    err = await raises(env.store.draw_state("nope"))
    assert (err.status, err.code) == (404, "no_room")


async def test_a_cancelled_drop_is_drawn_from_its_committed_seed(stores: Env) -> None:
    env = stores
    await env.room(opensAt=env.clock.wall_ms() + 3_600_000, presenceSec=None, ratePerMinute=0)
    await env.room("empty", opensAt=env.clock.wall_ms() + 3_600_000)
    record = (await env.store.draw_state("r")).record
    assert record is not None
    people = [env.visitor() for _ in range(4)]
    for p in people:
        await p.join()
    await env.store.schedule("r", {"opensAt": None})
    drawn = (await env.store.draw_state("r")).record
    assert drawn is not None and drawn.drawn is not None and drawn.seed == record.seed
    assert drawn.drawn.order == draw_rules.draw_order(record.seed, drawn.drawn.handles, drawn.drawn.groups)
    # a drop cancelled with nobody waiting draws nothing; its doors are open
    await env.store.schedule("empty", {"opensAt": None})
    state = await env.store.draw_state("empty")
    assert state.record is not None and state.record.drawn is None and not state.scheduled


# ---------------------------------------------------------------------- operators


async def test_eject_sends_to_the_back_revokes_and_frees(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=60, maxConcurrent=1, **QUIET)
    people = [env.visitor() for _ in range(4)]
    for p in people:
        await p.join()
    await env.run(1)
    assert (await people[0].check()).admit
    answer = await env.store.eject("r", str(people[0].n))
    assert answer["state"] == "waiting" and answer["reason"] == "ejected" and answer["position"] == 4
    assert (await people[0].check()).reason == "ejected"
    assert (await env.stats())["occupancy"] == 0
    await env.run(1)
    assert await env.state(people[1]) == "passed"
    answer = await env.store.eject("r", make_ref("r", 1, people[2].n).lower())
    assert answer["ticket"] == people[2].n and answer["position"] == 3
    view = await people[2].status()
    assert view.state == "waiting" and view.reason == "ejected"
    err = await raises(env.store.eject("r", "42"))
    assert (err.status, err.code, err.message, err.extra) == (
        404,
        "no_ticket",
        "No ticket 42 in this room's current generation.",
        {"ticket": 42},
    )
    err = await raises(env.store.eject("r", " zzzzzz "))
    assert err.message == "No ticket ' zzzzzz ' in this room's current generation." and err.extra == {
        "query": " zzzzzz "
    }
    err = await raises(env.store.eject("r", "9" * 20))
    assert (err.code, err.message, err.extra) == ("no_ticket", "No such ticket in this room.", {"query": "9" * 20})
    assert env.types().count("eject") == 2


async def test_eject_of_a_finished_ticket_forgets_it(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=60, passedTtlSec=10, **QUIET)
    a = env.visitor()
    await a.join()
    await env.run(20)
    assert (await env.describe(a))["state"] == "expired"
    assert await env.store.eject("r", str(a.n)) == {"ticket": a.n, "state": "forgotten"}
    err = await raises(env.store.lookup("r", str(a.n)))
    assert (err.status, err.code) == (404, "no_ticket")
    ejects = [e for e in env.events() if e.type == "eject"]
    assert ejects[0].data == {"n": a.n, "forgotten": True}


async def test_a_ref_collision_lists_the_candidates_and_eject_refuses_it(stores: Env) -> None:
    env = stores
    lo, hi = COLLIDING_PAIR
    await env.room(COLLIDING_ROOM, **QUIET)
    await fill(env, hi, COLLIDING_ROOM)
    answer = await env.store.lookup(COLLIDING_ROOM, COLLIDING_REF.lower())
    assert answer["ref"] == COLLIDING_REF and [c["ticket"] for c in answer["candidates"]] == [lo, hi]
    err = await raises(env.store.eject(COLLIDING_ROOM, COLLIDING_REF))
    assert (err.status, err.code) == (409, "ambiguous_ref")
    assert [c["ticket"] for c in err.extra["candidates"]] == [lo, hi]


async def test_purge_empties_the_line_and_keeps_passes_and_sessions(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=60, maxConcurrent=5, queueMaxPerIp=2, presenceSec=None)
    people = [env.visitor(ident=f"203.0.113.{i % 2}") for i in range(4)]
    for p in people:
        await p.join()
    await env.run(2)
    assert (await people[0].check()).admit
    assert await env.store.purge("r") == 2
    assert (await env.stats())["waiting"] == 0
    assert (await people[0].check()).admit and (await people[1].check()).admit
    for p in people[2:]:
        assert (await p.status()).reason == "purged"
        assert (await env.describe(p))["reason"] == "purged"
    again = await people[2].join()
    assert again.new and again.reason == "purged" and again.ticket == 5
    assert [e.data for e in env.events() if e.type == "purge"] == [{"count": 2}]


async def test_flush_releases_every_pass_and_session_and_keeps_the_line(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=60, maxConcurrent=2, presenceSec=None)
    people = [env.visitor() for _ in range(4)]
    for p in people:
        await p.join()
    await env.run(3)
    assert (await people[0].check()).admit  # a live session
    assert await env.state(people[1]) == "passed"  # a pass not used yet
    assert (await env.stats())["waiting"] == 2  # the room is at its ceiling: nobody else moves
    await env.run(3)
    assert (await env.stats())["waiting"] == 2
    env.events()
    assert await env.store.flush("r") == 2
    stats = await env.stats()
    assert (stats["waiting"], stats["activeSessions"], stats["passesOutstanding"], stats["occupancy"]) == (2, 0, 0, 0)
    refused = await people[0].check()
    assert not refused.admit and refused.reason == "flushed"
    assert (await people[1].check()).reason == "flushed"
    for p in people[:2]:
        assert (await p.status()).reason == "flushed"
        assert (await env.describe(p))["reason"] == "flushed"
    # the line is untouched: the same two tickets, in order
    assert (await env.describe(people[2]))["position"] == 1
    assert (await env.describe(people[3]))["position"] == 2
    assert [(e.type, e.data) for e in env.events()] == [("flush", {"count": 2})]
    # the freed capacity lets the line move again
    await env.run(3)
    assert await env.state(people[2]) == "passed"
    again = await people[0].join()
    assert again.new and again.reason == "flushed" and again.ticket == 5
    # nothing left to release: a second flush is a no-op that still says so
    assert (await people[2].check()).admit
    assert await env.store.flush("r") == 2
    assert await env.store.flush("r") == 0


async def test_flush_of_no_room_is_no_room(stores: Env) -> None:
    err = await raises(stores.store.flush("nope"))
    assert (err.status, err.code) == (404, "no_room")


async def test_purged_pre_queue_handle_resolves_purged(stores: Env) -> None:
    env = stores
    await env.room(opensAt=env.clock.wall_ms() + 60_000)
    v = env.visitor()
    await v.join()
    assert await env.store.purge("r") == 1
    assert (await v.status()).reason == "purged"
    assert (await env.stats())["preQueue"] == 0


async def test_lookups(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=60, state="paused", **QUIET)
    v = env.visitor()
    joined = env.clock.wall_ms()
    await v.join()
    env.clock.advance(42)
    d = await env.store.lookup("r", f"  {make_ref('r', 1, v.n).lower()} ")
    assert d == {
        "ticket": 1,
        "ref": make_ref("r", 1, 1),
        "generation": 1,
        "state": "waiting",
        "reason": None,
        "position": 1,
        "joined": joined,
        "passed": None,
        "onSite": False,
        "bound": {"cookie": True, "fingerprint": True},
        "lastSeenSecAgo": 42.0,
        "waiting": 42.0,
    }
    for query, message in (
        ("7", "No ticket 7 in this room's current generation."),
        ("ZZZZZZ", "No ticket 'ZZZZZZ' in this room."),
        ("9" * 16, "No such ticket in this room."),
    ):
        err = await raises(env.store.lookup("r", query))
        assert (err.status, err.code, err.message) == (404, "no_ticket", message)
    err = await raises(env.store.lookup("nope", "1"))
    assert err.code == "no_room"


async def test_previous_generation(stores: Env) -> None:
    env = stores
    await env.room()
    old = [env.visitor() for _ in range(3)]
    for v in old:
        await v.join()
    refs = [make_ref("r", 1, v.n) for v in old]
    await env.store.delete_room("r")
    answer = await env.store.lookup("r", refs[2])  # the room does not exist: its archive answers
    assert answer["state"] == "previous_generation" and answer["generation"] == 1 and answer["tickets"] == [3]
    assert (await raises(env.store.lookup("r", "ZZZZZZ"))).code == "no_room"
    await env.room()
    fresh = env.visitor()
    assert (await fresh.join()).ticket == 1
    for v in old:
        view = await v.status()
        assert view.state == "expired" and view.reason == "previous_generation" and view.gen == 2
        assert (await v.check()).reason == "previous_generation"
    answer = await env.store.lookup("r", refs[2].lower())
    assert answer["state"] == "previous_generation" and answer["ref"] == refs[2]
    assert answer["message"].startswith(f"Ref {refs[2]} was ticket 3 of an earlier generation (1)")
    assert (await env.store.lookup("r", "1"))["generation"] == 2
    assert (await raises(env.store.lookup("r", "3"))).code == "no_ticket"


async def test_the_last_three_generations_are_kept(stores: Env) -> None:
    env = stores
    refs = {}
    for gen in range(1, 6):
        room = await env.room()
        assert room["generation"] == gen
        await env.visitor().join()
        refs[gen] = make_ref("r", gen, 1)
        await env.store.delete_room("r")
    await env.room()
    for gen in (3, 4, 5):
        assert (await env.store.lookup("r", refs[gen]))["generation"] == gen
    assert (await raises(env.store.lookup("r", refs[1]))).code == "no_ticket"


async def test_operations_on_an_unknown_room(stores: Env) -> None:
    env = stores
    client = ClientId(ident="1.2.3.4", fp=b"x")
    for coro in (
        env.store.join("nope", client, None, None),
        env.store.status("nope", client, None),
        env.store.check("nope", client, None, None, None, ("k", b"k" * 16)),
        env.store.eject("nope", "1"),
        env.store.purge("nope"),
        env.store.delete_room("nope"),
        env.store.get_room("nope"),
    ):
        err = await raises(coro)
        assert (err.status, err.code, err.extra) == (404, "no_room", {"roomId": "nope"})
    await env.store.note_blocked_return("nope")  # quietly nothing


async def test_counters(stores: Env) -> None:
    env = stores
    await env.room(**QUIET)
    v = env.visitor()
    await v.join()
    await v.check()
    await v.check()
    await env.store.note_blocked_return("r")
    stats = await env.stats()
    assert (stats["unscopedChecks"], stats["blockedReturnUrls"], stats["joinsTotal"], stats["joinsLastMinute"]) == (
        2,
        1,
        1,
        1,
    )
    env.clock.advance(61)
    assert (await env.stats())["joinsLastMinute"] == 0


async def test_event_seq_counts_up_without_gaps(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=600, passedTtlSec=10, **QUIET)
    for _ in range(5):
        await env.visitor().join()
    await env.run(20)
    events = env.events()
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert {"promote", "expire"} <= {e.type for e in events}


async def test_listeners_hear_the_rooms_that_changed(stores: Env) -> None:
    env = stores
    heard: list[set[str]] = []
    env.store.on_change(heard.append)
    await env.room()
    await env.visitor().join()
    await env.store.tick()
    assert heard[0] == {"r"} and heard[1] == {"r"} and heard[-1] == {"r"}


# ---------------------------------------------------------------------- the waits of the passes minted


async def _walk_until_passed(
    env: Env, visitors: list[Any], joined: dict[int, int], step: float = 0.1
) -> dict[int, int]:
    """Tick in ``step`` s steps until every visitor holds a pass: each one's wait (ms) by the test's clock,
    from its join to the tick that minted its pass."""
    waits: dict[int, int] = {}
    for _ in range(10_000):
        if len(waits) == len(visitors):
            return waits
        env.clock.advance(step)
        await env.store.tick()
        for v in visitors:
            if v.n not in waits and await env.state(v) == "passed":
                waits[v.n] = env.clock.wall_ms() - joined[v.n]
    raise AssertionError("not every visitor was promoted")


async def test_each_pass_minted_reports_its_own_wait_numbered_by_pass(stores: Env) -> None:
    """The store records each pass's real wait (minted − joined, ms) and hands a reader those past its
    cursor: the same numbers, to the millisecond, as the test's own clock measured."""
    env = stores
    room = await env.room(ratePerMinute=60, **QUIET)
    visitors, joined = [], {}
    for gap in (0.0, 0.4, 1.7, 0.25):
        env.clock.advance(gap)
        v = env.visitor()
        await v.join()
        visitors.append(v)
        joined[v.n] = env.clock.wall_ms()
    expected = await _walk_until_passed(env, visitors, joined)
    order = sorted(expected)  # the line is FIFO: the k-th pass is the k-th joiner's
    summaries, minted = await env.store.sample_rooms({})
    w = minted["r"]
    assert summaries[0]["passesTotal"] == 4 and (w.gen, w.last) == (room["generation"], 4)
    assert w.numbered() == [(k, expected[n]) for k, n in enumerate(order, start=1)]
    assert w.total_ms == sum(expected.values())
    assert len({ms % 2000 for ms in w.waits_ms}) > 1  # not stamped on any 2 s grid
    # a reader past pass 2 gets passes 3 and 4; one that has read them all, nothing; another generation, all
    _, minted = await env.store.sample_rooms({"r": (w.gen, 2)})
    assert minted["r"].numbered() == w.numbered()[2:] and minted["r"].total_ms == w.total_ms
    _, minted = await env.store.sample_rooms({"r": (w.gen, 4)})
    assert minted["r"].waits_ms == [] and minted["r"].last == 4
    _, minted = await env.store.sample_rooms({"r": (w.gen + 7, 4)})
    assert minted["r"].numbered() == w.numbered()
    # list_rooms and the room read say nothing of it; a room deleted and created again starts over
    assert "waitMsTotal" not in summaries[0]
    await env.store.delete_room("r")
    again = await env.room(ratePerMinute=60, **QUIET)
    _, minted = await env.store.sample_rooms({"r": (w.gen, 4)})
    assert (minted["r"].gen, minted["r"].last, minted["r"].total_ms, minted["r"].waits_ms) == (
        again["generation"],
        0,
        0,
        [],
    )


async def test_a_room_keeps_its_latest_waits_and_the_sum_of_every_one(stores: Env) -> None:
    """At most WAITS_KEPT waits are kept one by one (the newest); the running sum covers every pass."""
    env = stores
    await env.room(ratePerMinute=1_000_000, **QUIET)
    first, second = 40, WAITS_KEPT + 10 - 40
    t_first = env.clock.wall_ms()
    await fill(env, first)
    env.clock.advance(1.5)
    t_second = env.clock.wall_ms()
    await fill(env, second)
    env.clock.advance(0.75)
    await env.store.tick()
    while (await env.stats())["waiting"]:  # the tick promotes in budgets: the rest at the same instant
        await env.store.tick()
    minted_at = env.clock.wall_ms()
    _, minted = await env.store.sample_rooms({})
    w = minted["r"]
    total = first + second
    assert w.last == total and len(w.waits_ms) == WAITS_KEPT
    early, late = minted_at - t_first, minted_at - t_second
    assert w.total_ms == first * early + second * late
    assert w.numbered()[0] == (total - WAITS_KEPT + 1, early) and w.numbered()[-1] == (total, late)
    assert w.waits_ms.count(early) == first - (total - WAITS_KEPT)


async def test_the_recorder_counts_every_pass_with_its_exact_wait(stores: Env) -> None:
    """The series recorder over the store: each pass's wait as the store measured it, none twice, and a
    recorder that fell more than WAITS_KEPT passes behind still counts each wait and their exact sum."""
    env = stores
    await env.room(ratePerMinute=60, **QUIET)
    rec = SeriesRecorder()
    await rec.feed(env.store, env.clock.wall_ms())
    visitors, joined = [], {}
    for gap in (0.3, 0.9, 0.35):
        env.clock.advance(gap)
        v = env.visitor()
        await v.join()
        visitors.append(v)
        joined[v.n] = env.clock.wall_ms()
    expected = await _walk_until_passed(env, visitors, joined)
    env.clock.advance(2)
    assert await rec.feed(env.store, env.clock.wall_ms()) is not None
    assert rec.last_waits == {"r": [(k, expected[v.n] / 1000.0) for k, v in enumerate(visitors, start=1)]}
    env.clock.advance(2)
    await rec.feed(env.store, env.clock.wall_ms())
    assert rec.last_waits == {}  # read once
    # the recorder falls behind: more passes than the room keeps between two of its reads
    await env.store.upsert_room({"id": "r", "ratePerMinute": 1_000_000})
    await fill(env, WAITS_KEPT + 5)
    env.clock.advance(0.5)
    await env.store.tick()
    while (await env.stats())["waiting"]:
        await env.store.tick()
    env.clock.advance(1.5)
    await rec.feed(env.store, env.clock.wall_ms())
    each = 500  # every one of them joined at t0 and got its pass 0.5 s later
    assert len(rec.last_waits["r"]) == WAITS_KEPT and rec.last_lumps["r"].count == 5
    assert rec.last_lumps["r"].seconds == 5 * each / 1000.0
    row = (rec.rows("r", "1m", env.clock.wall_ms()) or [])[-1]
    assert row["measuredWaits"] == 3 + WAITS_KEPT + 5 and row["passes"] == 3 + WAITS_KEPT + 5
    exact = (sum(expected.values()) + (WAITS_KEPT + 5) * each) / 1000.0 / (3 + WAITS_KEPT + 5)
    assert row["waitAvgSec"] == round(exact, 1)


async def test_access_rule_counters_follow_the_rule(stores: Env) -> None:
    """Each store counts an access rule's matches by its key (id and content): a rule saved again unchanged
    keeps them, a changed or removed rule's are gone, a gone room counts nothing; the read shows them with
    the header's value withheld, and the policy carries the rules with it."""
    env = stores
    secret = "store-probe-secret"
    rules = [
        {"id": "probe", "action": "bypass", "match": {"header": {"name": "X-Probe", "value": secret}}},
        {"id": "office", "action": "bypass", "match": {"cidrs": ["10.0.0.0/8"]}},
    ]
    await env.room(accessRules=rules)
    policy = await env.store.room_policy("r")
    assert policy is not None and [r.id for r in policy.access_rules] == ["probe", "office"]
    probe, office = policy.access_rules
    assert probe.header_value == secret
    for _ in range(2):
        await env.store.note_access_match("r", probe.key)
    await env.store.note_access_match("r", office.key)
    read = (await env.stats())["accessRules"]
    assert [r["matchCount"] for r in read] == [2, 1] and all(isinstance(r["lastMatchAt"], int) for r in read)
    assert read[0]["match"]["header"] == {"name": "x-probe", "set": True} and secret not in repr(read)
    changed = [rules[0], {**rules[1], "match": {"cidrs": ["10.1.0.0/16"]}}]
    await env.store.upsert_room({"id": "r", "accessRules": changed})
    assert [r["matchCount"] for r in (await env.stats())["accessRules"]] == [2, 0]
    await env.store.upsert_room({"id": "r", "accessRules": changed[1:]})
    await env.store.upsert_room({"id": "r", "accessRules": changed})  # the probe back: it counts anew
    assert [r["matchCount"] for r in (await env.stats())["accessRules"]] == [0, 0]
    await env.store.note_access_match("nope", probe.key)  # no room: nothing counted, nothing raised
