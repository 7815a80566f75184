"""BENCH_ONLY=rebuild: a room of ``BENCH_REBUILD_TICKETS`` (1,000,000) waiting tickets loaded into Valkey
from a checkpoint, as a rebuild from the journal loads it (``ValkeyStore.import_room``).

In process: the room is built in the Python engine (each ticket joined, as a replay makes it), dumped
as a checkpoint, replayed from it as a rebuild does (``rebuilt``; ``dump(replay(...))`` beside it, the
room loaded a second time as a rebuild did before), and imported through a ``ValkeyStore`` on
``BENCH_VALKEY_URL`` (its own prefix, deleted after). Measured: the checkpoint's size, the CPU of the
two replays, the import's wall seconds, Valkey's CPU over it, the calls it made, and the longest Valkey
command meanwhile (SLOWLOG, reset first): the time Valkey answered nobody else.

    BENCH_VALKEY_PID    the Redis/Valkey process, when more than one runs here
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from typing import Any

import orjson
from fleet import VALKEY_URL, _guard
from million import _valkey_pid

from bench import TARGET, log, proc_cpu_seconds
from queue_manager.clock import FakeClock
from queue_manager.engine.engine import Engine
from queue_manager.engine.model import ClientId
from queue_manager.engine.replay import rebuilt, replay
from queue_manager.engine.snapshot import dump
from queue_manager.store.valkey import ValkeyStore
from queue_manager.store.valkey.client import open_client

TICKETS = int(os.environ.get("BENCH_REBUILD_TICKETS", "1000000"))
ROOM = "rebuild"


def _checkpoint() -> dict[str, Any]:
    clock = FakeClock()
    engine = Engine(clock)
    engine.upsert({"id": ROOM, "targetUrl": TARGET, "ratePerMinute": 0, "queueMaxPerIp": None, "presenceSec": None})
    room = engine.room(ROOM)
    for i in range(TICKETS):
        client = ClientId(ident=f"10.{i >> 16}.{(i >> 8) & 255}.{i & 255}", fp=b"fp%d" % i, cookie=b"ck%d" % i)
        room.join_line(client, clock.wall_ms(), None, None, None)
    doc: dict[str, Any] = orjson.loads(orjson.dumps(dump(room)))
    return doc


async def _import(doc: dict[str, Any], pid: int | None) -> dict[str, Any]:
    redis = open_client(VALKEY_URL)
    prefix = f"qmbench:{uuid.uuid4().hex[:8]}:"
    store = ValkeyStore(redis, prefix=prefix)
    await store.start()
    calls = 0
    once = store._runner.once

    async def counted(name: str, room_id: str, args: Any = (), now: Any = None) -> Any:
        nonlocal calls
        calls += name.startswith("import")
        return await once(name, room_id, args, now)

    store._runner.once = counted  # type: ignore[method-assign]
    try:
        await redis.slowlog_reset()
        cpu0, t0 = proc_cpu_seconds(pid), time.monotonic()
        await store.import_room(doc)
        seconds, cpu = time.monotonic() - t0, proc_cpu_seconds(pid) - cpu0
        slow = await redis.slowlog_get(128)
        longest = max((int(e["duration"]) for e in slow), default=0)
        waiting = (await store.get_room(ROOM))["waiting"]
        return {
            "seconds": round(seconds, 2),
            "valkeyCpuSeconds": round(cpu, 2) if pid else None,
            "importCalls": calls,
            "longestValkeyCommandMs": round(longest / 1000, 1),
            "waiting": waiting,
        }
    finally:
        await store.close()
        keys = [k async for k in redis.scan_iter(match=f"{prefix}*", count=1000)]
        if keys:
            await redis.unlink(*keys)
        await redis.aclose()


def _from_checkpoint(doc: dict[str, Any]) -> dict[str, float]:
    """What a rebuild does with the checkpoint before importing it, timed: ``rebuilt`` (the room replayed
    from it, as a document) against ``dump(replay(...))`` (the room loaded a second time onto the live
    clock first, as a rebuild did)."""
    t0 = time.process_time()
    rebuilt([], FakeClock(), doc)
    t1 = time.process_time()
    dump(replay([], FakeClock(), doc, room_events=[]))
    t2 = time.process_time()
    return {"rebuiltCpuSeconds": round(t1 - t0, 2), "replayAndDumpCpuSeconds": round(t2 - t1, 2)}


def phase_rebuild(results: dict[str, Any]) -> None:
    _guard()
    pid = int(os.environ["BENCH_VALKEY_PID"]) if os.environ.get("BENCH_VALKEY_PID") else _valkey_pid()
    log(f"rebuild: a checkpoint of {TICKETS} waiting tickets")
    doc = _checkpoint()
    size = len(orjson.dumps(doc))
    replayed = _from_checkpoint(doc)
    row = asyncio.run(_import(doc, pid))
    row.update(tickets=TICKETS, checkpointBytes=size, **replayed)
    log(f"rebuild: {row}")
    results["rebuild"] = row
