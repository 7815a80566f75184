"""BENCH_ONLY=polls: what a waiting visitor's ``/api/status`` poll costs on Valkey, answered from the
instance's replica of the line (``store/valkey/live.py``) against a store read for every poll.

In process: one ``ValkeyStore`` on ``BENCH_VALKEY_URL`` (its own prefix, deleted after), one room at
``BENCH_POLLS_RATE`` a minute with ``BENCH_POLLS_PEOPLE`` waiting. Each second the room ticks and every
visitor polls once, ``BENCH_POLLS_AT_ONCE`` polls on their way at a time, for ``BENCH_DURATION`` seconds;
the first round is the store reads that leave each ticket's memo here (counted in both). The two ways
alternate, ``BENCH_ROUNDS`` times each, on the same Valkey. Measured per poll: Valkey's CPU (the scripts,
the ticks, the presence marks, the reads of the room's head) and this process's CPU (the store's client
side), and how many polls were answered here.

    BENCH_VALKEY_PID    the Redis/Valkey process, when more than one runs here
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
import uuid
from typing import Any

from fleet import VALKEY_URL, _guard
from million import _valkey_pid

from bench import DURATION, ROUNDS, TARGET, log, proc_cpu_seconds
from queue_manager.engine.model import ClientId
from queue_manager.engine.visitor import Presented
from queue_manager.store.valkey import ValkeyStore
from queue_manager.store.valkey.client import open_client

PEOPLE = int(os.environ.get("BENCH_POLLS_PEOPLE", "2000"))
RATE = int(os.environ.get("BENCH_POLLS_RATE", "60"))
AT_ONCE = int(os.environ.get("BENCH_POLLS_AT_ONCE", "32"))
ROOM = "polls"


async def _drop(redis: Any, prefix: str) -> None:
    keys = [k async for k in redis.scan_iter(match=f"{prefix}*", count=1000)]
    if keys:
        await redis.delete(*keys)


async def _one(local: bool, seconds: int, valkey_pid: int | None) -> dict[str, Any]:
    redis = open_client(VALKEY_URL)
    prefix = f"qmbench:{uuid.uuid4().hex[:8]}:"
    store = ValkeyStore(redis, prefix=prefix, local_polls=local)
    await store.start()
    try:
        await store.upsert_room(
            {"id": ROOM, "targetUrl": TARGET, "ratePerMinute": RATE, "presenceSec": None, "queueMaxPerIp": None}
        )
        people: list[tuple[ClientId, Presented | None]] = []
        for i in range(PEOPLE):
            client = ClientId(ident=f"10.1.{i >> 8}.{i & 255}", fp=f"fp{i}".encode(), cookie=f"c{i}".encode())
            view = await store.join(ROOM, client, None, None)
            people.append((client, Presented(gen=view.gen, n=view.ticket)))
        gate = asyncio.Semaphore(AT_ONCE)

        async def poll(client: ClientId, presented: Presented | None) -> None:
            async with gate:
                await store.status(ROOM, client, presented)

        valkey0, own0 = proc_cpu_seconds(valkey_pid), time.process_time()
        polls = 0
        for _ in range(seconds):
            start = time.monotonic()
            await store.tick()
            await asyncio.gather(*(poll(c, p) for c, p in people))
            polls += len(people)
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - start)))
        valkey_s, own_s = proc_cpu_seconds(valkey_pid) - valkey0, time.process_time() - own0
        return {
            "local": local,
            "polls": polls,
            "answeredHere": store.lines.polls_local,
            "headReads": store.lines.heads,
            "valkeyUsPerPoll": round(valkey_s / polls * 1e6, 1) if valkey_pid else None,
            "storeUsPerPoll": round(own_s / polls * 1e6, 1),
        }
    finally:
        await store.close()
        await _drop(redis, prefix)
        await redis.aclose()


def phase_polls(results: dict[str, Any]) -> None:
    _guard()
    pid = int(os.environ["BENCH_VALKEY_PID"]) if os.environ.get("BENCH_VALKEY_PID") else _valkey_pid()
    if pid is None:
        log("polls: more than one Redis/Valkey runs here; set BENCH_VALKEY_PID to measure its CPU")
    seconds = max(2, DURATION)
    runs: list[dict[str, Any]] = []
    for _ in range(ROUNDS):
        for local in (True, False):
            row = asyncio.run(_one(local, seconds, pid))
            log(f"polls: {row}")
            runs.append(row)

    def median(local: bool, key: str) -> float | None:
        values = [r[key] for r in runs if r["local"] is local and r[key] is not None]
        return statistics.median(values) if values else None

    summary: dict[str, Any] = {"people": PEOPLE, "ratePerMinute": RATE, "atOnce": AT_ONCE, "seconds": seconds}
    for key in ("valkeyUsPerPoll", "storeUsPerPoll"):
        here, store = median(True, key), median(False, key)
        summary[key] = {"replica": here, "store": store, "ratio": round(here / store, 3) if here and store else None}
    summary["runs"] = runs
    results["polls"] = summary
    log(f"polls: {summary['valkeyUsPerPoll']} (Valkey, µs a poll); {summary['storeUsPerPoll']} (the store's own)")
