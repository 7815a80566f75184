"""Queueing methods on both stores: reject (closed: join and door refused room_closed, live sessions
walk on), passthrough (every arrival passed at once and counted), random (each release drawn
uniformly from those waiting and present, with a range instead of a position), and live switches."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from queue_manager.engine.errors import EngineError
from queue_manager.engine.randomness import SeededRandom
from queue_manager.engine.replay import replay

from .conftest import Env

QUIET = {"presenceSec": None, "queueMaxPerIp": None}


def seed(env: Env, value: int) -> None:
    """A repeatable random source for the draws (set before the room is made)."""
    if env.kind == "memory":
        env.store.engine.rng = SeededRandom(value)
    else:
        env.store.rng = SeededRandom(value)


async def raises(coro: Any) -> EngineError:
    with pytest.raises(EngineError) as info:
        await coro
    return info.value


async def test_defaults_and_validation(stores: Env) -> None:
    env = stores
    room = await env.room()
    assert (room["queueing"], room["rejectStatus"]) == ("fifo", 503)
    for body, code in (({"queueing": "lottery"}, "invalid_queueing"), ({"rejectStatus": 404}, "invalid_reject_status")):
        err = await raises(env.store.upsert_room({"id": "r", **body}))
        assert (err.status, err.code) == (400, code)
    for bad in (True, 200.0, "503", None):
        err = await raises(env.store.upsert_room({"id": "r", "rejectStatus": bad}))
        assert err.code == "invalid_reject_status"
    for bad in (None, 1, "FIFO"):
        err = await raises(env.store.upsert_room({"id": "r", "queueing": bad}))
        assert err.code == "invalid_queueing"
    room, _, _ = await env.store.upsert_room({"id": "r", "queueing": "reject", "rejectStatus": 200})
    assert (room["queueing"], room["rejectStatus"]) == ("reject", 200)


async def test_reject_refuses_joins_and_the_door(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=60, **QUIET)
    inside, passed, waiting = env.visitor(), env.visitor(), env.visitor()
    await inside.join()
    await env.run(1)
    assert (await inside.check()).admit
    await passed.join()
    await env.run(1)
    assert (await passed.status()).state == "passed"
    await env.store.upsert_room({"id": "r", "ratePerMinute": 0})
    await waiting.join()
    await env.store.upsert_room({"id": "r", "queueing": "reject"})
    env.events()
    err = await raises(env.visitor().join())
    assert (err.status, err.code) == (403, "room_closed")
    assert env.events() == []
    # those waiting keep their place (a switch back lets them on) but the door says room_closed
    view = await waiting.status()
    assert (view.state, view.queueing, view.position) == ("waiting", "reject", 1)
    for v in (waiting, passed, env.visitor()):
        result = await v.check("https://shop.example/p")
        assert (result.admit, result.reason) == (False, "room_closed")
    assert (await inside.check("https://shop.example/p")).admit  # a live session walks on
    await env.store.upsert_room({"id": "r", "ratePerMinute": 600})
    await env.run(3)
    assert (await waiting.status()).state == "waiting"  # reject releases nobody
    await env.store.upsert_room({"id": "r", "queueing": "fifo"})
    await env.run(1)
    assert (await waiting.status()).state == "passed"


async def test_passthrough_admits_every_arrival_and_counts_it(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=0, maxConcurrent=1, queueing="passthrough", **QUIET)
    visitors = [env.visitor() for _ in range(3)]
    for v in visitors:
        view = await v.join()
        assert (view.state, view.new) == ("passed", True)
    for v in visitors:  # no limit: maxConcurrent is not applied
        assert (await v.check("https://shop.example/")).admit
    stats = await env.stats()
    assert (stats["joinsTotal"], stats["passesTotal"], stats["waiting"], stats["activeSessions"]) == (3, 3, 0, 3)
    assert (stats["joinsLastMinute"], stats["passedLastMinute"]) == (3, 3)
    events = env.events()
    types = [e.type for e in events]
    assert types.count("join") == 3 and types.count("promote") == 3
    rebuilt = replay(events, env.clock)  # the journal rebuilds the same room
    assert (rebuilt.cfg.queueing, rebuilt.passes_total, len(rebuilt.sessions)) == ("passthrough", 3, 3)


async def test_fifo_to_passthrough_lets_everyone_waiting_through(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=0, **QUIET)
    visitors = [env.visitor() for _ in range(4)]
    for v in visitors:
        await v.join()
    await env.store.upsert_room({"id": "r", "queueing": "passthrough"})
    await env.run(1)
    assert [(await v.status()).state for v in visitors] == ["passed"] * 4
    assert (await env.stats())["passesTotal"] == 4


async def test_random_shows_a_range_not_a_position(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=2, queueing="random", **QUIET)
    views = [await env.visitor().join() for _ in range(8)]
    last = views[-1]
    assert (last.position, last.eta_sec, last.queueing, last.waiting) == (None, None, "random", 8)
    # turns uniform on 1…8 at 2 a minute: p25 = turn 2 → 60 s, p75 = turn 6 → 180 s; 2 of 8 in a minute
    assert (last.eta_low_sec, last.eta_high_sec, last.odds_pct) == (60, 180, 25)
    fifo = await env.room("f", ratePerMinute=2, **QUIET)
    assert fifo["queueing"] == "fifo"
    v = await env.visitor("f").join()
    assert (v.position, v.eta_low_sec, v.waiting) == (1, None, None)


async def test_random_draws_only_those_waiting_and_present(stores: Env) -> None:
    env = stores
    seed(env, 11)
    await env.room(ratePerMinute=60, queueing="random", presenceSec=30, queueMaxPerIp=None)
    present = [env.visitor() for _ in range(4)]
    gone = [env.visitor() for _ in range(4)]
    for v in gone + present:
        await v.join()
    await env.store.upsert_room({"id": "r", "ratePerMinute": 0})
    env.clock.advance(31)
    for v in present:
        await v.status()
    await env.store.upsert_room({"id": "r", "ratePerMinute": 60})
    await env.run(4)
    assert [(await v.status()).state for v in present] == ["passed"] * 4
    assert [(await env.state(v)) for v in gone] == ["waiting"] * 4  # absent: left in line, never drawn


async def test_random_release_is_uniform(stores: Env) -> None:
    """Each of 6 places is first out about equally often over 240 seeded draws (chi-square, 5 degrees of
    freedom, below 20.5: p < 0.001 for a fair draw to fail; the seeds make the run repeatable)."""
    env = stores
    seed(env, 2024)
    first: Counter[int] = Counter()
    rounds = 240
    for r in range(rounds):
        room_id = f"u{r}"
        await env.room(room_id, ratePerMinute=0, queueing="random", **QUIET)
        line = [env.visitor(room_id) for _ in range(6)]
        for v in line:
            await v.join()
        await env.store.upsert_room({"id": room_id, "ratePerMinute": 60})
        env.clock.advance(1)
        await env.store.tick()
        await env.store.upsert_room({"id": room_id, "ratePerMinute": 0})
        out = [i for i, v in enumerate(line) if (await v.status()).state == "passed"]
        assert len(out) == 1
        first[out[0]] += 1
    expected = rounds / 6
    chi2 = sum((first[i] - expected) ** 2 / expected for i in range(6))
    assert chi2 < 20.5, first
    assert min(first.values()) > 0


async def test_random_draw_matches_the_reference_on_both_stores(stores: Env) -> None:
    """The order a random line is released in follows engine/release.py exactly (the Lua twin included):
    the salts of a seeded source, one per tick, each release drawn with draw_index."""
    from queue_manager.engine.release import draw_index

    env = stores
    await env.room(ratePerMinute=0, queueing="random", **QUIET)
    line = [env.visitor() for _ in range(7)]
    for v in line:
        await v.join()
    if env.kind == "memory":
        env.store.engine.rooms["r"].rng = SeededRandom(5)
    else:
        env.store.rng = SeededRandom(5)
    await env.store.upsert_room({"id": "r", "ratePerMinute": 60})
    order: list[int] = []
    for _ in range(7):
        env.clock.advance(1)
        await env.store.tick()
        states = [(await v.status()).state for v in line]
        order.extend(i for i, state in enumerate(states) if i not in order and state == "passed")
    reference = SeededRandom(5)
    left, expected = list(range(7)), []
    while left:
        salt = reference.token_hex(8)
        index = next(x for x in (draw_index(salt, len(expected), a, len(left)) for a in range(32)) if x is not None)
        expected.append(left.pop(index))
    assert order == expected


async def test_the_method_survives_a_checkpoint(stores: Env) -> None:
    from queue_manager.engine.snapshot import dump

    env = stores
    await env.room(ratePerMinute=0, queueing="reject", rejectStatus=200, **QUIET)
    if env.kind == "memory":
        exported = dump(env.store.engine.rooms["r"])
    else:
        exported = await env.store.export_room("r")
    assert (exported["config"]["queueing"], exported["config"]["rejectStatus"]) == ("reject", 200)
