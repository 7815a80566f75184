"""The site ends a visitor's session (``revoke_session``), the same on both stores: the slot is free at
once, the ticket finished ``revoked``, counted in ``sessionsRevoked``, journaled as ``session.revoke``;
an unknown key, a session already ended or another generation change nothing."""

from __future__ import annotations

import pytest

from queue_manager.engine.errors import EngineError
from queue_manager.engine.replay import replay
from queue_manager.engine.snapshot import dump

from .conftest import Env

QUIET = {"presenceSec": None, "queueMaxPerIp": None}


async def _inside(env: Env, count: int, **fields: object) -> list:  # type: ignore[type-arg]
    await env.room(ratePerMinute=60, maxConcurrent=1, **QUIET, **fields)
    people = [env.visitor() for _ in range(count)]
    for p in people:
        await p.join()
    await env.run(2)
    assert (await people[0].check()).admit
    return people


async def test_a_revoked_session_frees_its_slot_for_the_next_visitor(stores: Env) -> None:
    env = stores
    a, b = await _inside(env, 2)
    await env.run(3)
    assert await env.state(b) == "waiting"  # the one slot is a's
    env.events()
    assert a.door is not None
    assert await env.store.revoke_session("r", a.token.gen if a.token else None, a.n, a.door) == (1, a.n)
    assert [(e.type, e.data) for e in env.events()] == [("session.revoke", {"n": a.n})]
    stats = await env.stats()
    assert (stats["activeSessions"], stats["occupancy"], stats["sessionsRevoked"]) == (0, 0, 1)
    refused = await a.check()
    assert not refused.admit and refused.reason == "revoked"
    assert (await env.describe(a))["reason"] == "revoked"
    await env.run(2)  # the next tick promotes b into the freed slot
    assert await env.state(b) == "passed"
    assert (await b.check()).admit


async def test_a_revoke_by_door_key_alone_finds_the_session(stores: Env) -> None:
    env = stores
    (a,) = await _inside(env, 1)
    assert a.door is not None
    assert await env.store.revoke_session("r", None, None, a.door) == (1, a.n)
    assert (await env.stats())["sessionsRevoked"] == 1


async def test_unknown_ended_or_other_generation_is_a_no_op(stores: Env) -> None:
    env = stores
    (a,) = await _inside(env, 1)
    assert a.door is not None and a.token is not None
    env.events()
    assert await env.store.revoke_session("r", None, None, b"\x07" * 16) is None  # nobody holds that key
    assert await env.store.revoke_session("r", None, a.n, b"\x07" * 16) is None  # not this session's key
    assert await env.store.revoke_session("r", a.token.gen + 1, None, a.door) is None  # another generation
    assert await env.store.revoke_session("r", None, a.n + 5, a.door) is None  # no such ticket
    assert env.types() == []
    assert (await env.stats())["sessionsRevoked"] == 0
    assert (await a.check()).admit  # still inside
    assert await env.store.revoke_session("r", None, a.n, a.door) == (1, a.n)
    assert await env.store.revoke_session("r", None, a.n, a.door) is None  # already ended
    assert (await env.stats())["sessionsRevoked"] == 1


async def test_a_pass_not_yet_used_is_no_session(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=60, maxConcurrent=2, **QUIET)
    a = env.visitor()
    await a.join()
    await env.run(2)
    assert await env.state(a) == "passed"
    assert await env.store.revoke_session("r", None, a.n, b"\x01" * 16) is None
    assert await env.state(a) == "passed"


async def test_revoke_in_no_room_is_no_room(stores: Env) -> None:
    with pytest.raises(EngineError) as info:
        await stores.store.revoke_session("nope", None, None, b"\x01" * 16)
    assert (info.value.status, info.value.code) == (404, "no_room")


async def test_the_journal_rebuilds_the_revoke_and_the_count_is_checkpointed(stores: Env) -> None:
    env = stores
    a, _ = await _inside(env, 2)
    assert a.door is not None
    await env.store.revoke_session("r", None, a.n, a.door)
    rebuilt = replay(env.events(), env.clock)
    assert rebuilt.sessions_revoked == 1 and rebuilt.finished[a.n].reason == "revoked"
    assert not rebuilt.sessions
    if env.kind == "memory":
        exported = dump(env.store.engine.rooms["r"])
    else:
        exported = await env.store.export_room("r")
    assert exported["counters"]["sessionsRevoked"] == 1
