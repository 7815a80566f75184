"""Joins of one room that arrive together: on Valkey those waiting behind the room's join call in flight go
in one call (store/valkey/batches.py, lua/join_many.lua). Both stores answer them alike: every visitor
joins, in the order they asked, each with their own answer or refusal; a batch whose journal commit fails
is taken back whole.
"""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio import Redis

from queue_manager.clock import FakeClock
from queue_manager.engine.errors import EngineError
from queue_manager.engine.view import VisitorView
from queue_manager.store.base import JournalCommitFailed, StoreUnavailable

from .conftest import Env, RecordingJournal, make_valkey

QUIET: dict[str, Any] = {"presenceSec": None, "queueMaxPerIp": None}


async def _together(env: Env, count: int, room_id: str = "r", **kw: Any) -> list[VisitorView | BaseException]:
    people = [env.visitor(room_id, **kw) for _ in range(count)]
    return list(await asyncio.gather(*(p.join() for p in people), return_exceptions=True))


async def test_joins_asked_together_line_up_in_the_order_asked(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=0, **QUIET)
    env.events()
    views = await _together(env, 64)
    assert all(isinstance(v, VisitorView) for v in views), views
    got = [v for v in views if isinstance(v, VisitorView)]
    assert [v.ticket for v in got] == list(range(1, 65))
    assert [v.position for v in got] == list(range(1, 65))
    assert [e.data["n"] for e in env.events() if e.type == "join"] == list(range(1, 65))
    if env.kind != "memory":
        batches = env.store._joins
        assert batches.asks == 64 and batches.calls < 64  # they went together, not one call each
    late = await _together(env, 3)
    assert [v.position for v in late if isinstance(v, VisitorView)] == [65, 66, 67]


async def test_each_ask_of_a_batch_gets_its_own_refusal(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=0, presenceSec=None, queueMaxPerIp=1, maxWaiting=10)
    shared = "203.0.113.50"
    people = [env.visitor(ident=shared), env.visitor(ident=shared)] + [env.visitor() for _ in range(12)]
    answers = await asyncio.gather(*(p.join() for p in people), return_exceptions=True)
    assert isinstance(answers[0], VisitorView) and answers[0].position == 1
    assert isinstance(answers[1], EngineError) and answers[1].code == "queue_identity_limit"
    joined = [a for a in answers[2:] if isinstance(a, VisitorView)]
    full = [a for a in answers[2:] if isinstance(a, EngineError)]
    assert [v.position for v in joined] == list(range(2, 11))  # the line holds 10
    assert len(full) == 3 and {e.code for e in full} == {"queue_full"}
    assert (await env.stats())["waiting"] == 10


async def test_a_drops_sign_ups_asked_together_each_get_an_entry(stores: Env) -> None:
    env = stores
    opens = env.clock.wall_ms() + 3_600_000
    await env.room(ratePerMinute=60, opensAt=opens, **QUIET)
    views = await _together(env, 40)
    handles = [v.handle for v in views if isinstance(v, VisitorView)]
    assert len(handles) == 40 and len(set(handles)) == 40 and all(handles)
    assert (await env.stats())["preQueue"] == 40


async def test_a_batch_whose_commit_fails_is_taken_back_whole(valkey: tuple[Redis, str]) -> None:
    redis, prefix = valkey
    clock, journal = FakeClock(), RecordingJournal()
    store = await make_valkey(redis, prefix, clock, journal)
    try:
        env = Env("valkey", store, clock, journal, prefix, redis)
        await env.room(ratePerMinute=0, **QUIET)
        await env.visitor().join()
        env.events()
        # asked in one turn of the loop, the 20 go in one call; its commit fails
        journal.fail_next = 1
        calls = store._joins.calls
        answers = await _together(env, 20)
        assert all(isinstance(a, (JournalCommitFailed, StoreUnavailable)) for a in answers), answers
        assert store._joins.calls - calls == 1
        taken_back = sorted(e.data["n"] for e in env.events() if e.type == "join.revoke")
        assert taken_back == list(range(2, 22))  # every place the batch minted, taken back
        assert (await env.stats())["waiting"] == 1
        again = await env.visitor().join()
        assert again.position == 2
    finally:
        await store.close()
