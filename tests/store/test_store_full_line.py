"""A full line on both stores: maxWaiting and maxWaitSec refuse new joins with 503 queue_full, touch
nobody in line, count each refusal (refusedFull), and keep the settings and the count through the
journal and a checkpoint."""

from __future__ import annotations

from typing import Any

import pytest

from queue_manager.engine.errors import EngineError
from queue_manager.engine.replay import replay
from queue_manager.engine.snapshot import dump

from .conftest import Env

QUIET = {"presenceSec": None, "queueMaxPerIp": None}


async def raises(coro: Any) -> EngineError:
    with pytest.raises(EngineError) as info:
        await coro
    return info.value


async def test_max_waiting_refuses_new_joins_only(stores: Env) -> None:
    env = stores
    room = await env.room(maxWaiting=2, ratePerMinute=0, **QUIET)
    assert (room["maxWaiting"], room["maxWaitSec"], room["refusedFull"]) == (2, None, 0)
    inline = [env.visitor() for _ in range(2)]
    for v in inline:
        await v.join()
    env.events()
    err = await raises(env.visitor().join())
    assert (err.status, err.code, err.headers) == (503, "queue_full", {"Retry-After": "60"})
    assert err.message == "The line is full right now. Try again later."
    assert env.events() == []
    for v in inline:
        assert not (await v.join()).new
    await raises(env.visitor().join())
    stats = await env.stats()
    assert (stats["waiting"], stats["refusedFull"], stats["joinsTotal"]) == (2, 2, 2)
    await env.store.upsert_room({"id": "r", "maxWaiting": 1})  # lowered below the line: nobody leaves
    assert (await env.stats())["waiting"] == 2
    assert [(await v.status()).position for v in inline] == [1, 2]


async def test_max_wait_sec_uses_the_waiting_page_estimate(stores: Env) -> None:
    env = stores
    await env.room(maxWaitSec=3, ratePerMinute=60, **QUIET)
    views = [await env.visitor().join() for _ in range(3)]
    assert [v.eta_sec for v in views] == [1, 2, 3]
    err = await raises(env.visitor().join())
    assert (err.status, err.code) == (503, "queue_full")
    await env.store.upsert_room({"id": "r", "state": "paused"})  # no estimate while paused: not full
    assert (await env.visitor().join()).new
    assert (await env.stats())["refusedFull"] == 1


async def test_pre_queue_joins_are_not_refused(stores: Env) -> None:
    env = stores
    await env.room(opensAt=env.clock.wall_ms() + 3_600_000, maxWaiting=1, **QUIET)
    for _ in range(3):
        assert (await env.visitor().join()).handle is not None
    assert (await env.stats())["refusedFull"] == 0


async def test_settings_journaled_and_count_checkpointed(stores: Env) -> None:
    env = stores
    await env.room(maxWaiting=1, ratePerMinute=0, **QUIET)
    await env.store.upsert_room({"id": "r", "maxWaitSec": 900})
    await env.visitor().join()
    await raises(env.visitor().join())
    rebuilt = replay(env.events(), env.clock)
    assert (rebuilt.cfg.max_waiting, rebuilt.cfg.max_wait_sec) == (1, 900)
    if env.kind == "memory":
        exported = dump(env.store.engine.rooms["r"])
    else:
        exported = await env.store.export_room("r")
    assert exported["counters"]["refusedFull"] == 1
    assert (exported["config"]["maxWaiting"], exported["config"]["maxWaitSec"]) == (1, 900)
