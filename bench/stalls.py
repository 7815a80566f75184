"""Event-loop stalls that grow with the line, measured in-process (deterministic, a few seconds).

    python bench/stalls.py [--tickets 100000]

* ``Line.push``: the push at each place where the line outgrows its Fenwick tree (2^k + 1, up to
  262,145), which rebuilds the tree; the server is stopped for that long, every route and stream.
  ``otherPushMaxMs`` is the slowest of all other pushes (scheduler noise on a shared machine).
* gen-2 garbage collection with ``--tickets`` waiting tickets in one room (the store's join path):
  every full collection stops the server for that long.
* a checkpoint's fold of ``--fold-events`` journal events (a room's tail: joins, then their promotions),
  as the leader makes it: ``foldMs`` is its CPU, and the event loop's longest wait for a 1 ms ticker
  while the checkpointer folds is ``loopLagMs`` (the fold runs in a worker thread, so the loop keeps
  getting the interpreter every switch interval instead of stopping for the whole fold).

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import time
from typing import Any

import orjson


def line_stalls(places: int = 262_144) -> dict[str, Any]:
    """The push that makes the line outgrow its Fenwick tree (place 2^k + 1) vs the worst other push."""
    from queue_manager.engine.line import Line

    line = Line()
    grows: list[dict[str, Any]] = []
    other_max = 0.0
    gc.disable()  # GC pauses are measured on their own below
    try:
        for i in range(1, places + 1):
            t0 = time.perf_counter()
            line.push(i)
            ms = (time.perf_counter() - t0) * 1000.0
            if i > 1024 and (i - 1) & (i - 2) == 0:  # i - 1 is a power of two: the tree doubled here
                grows.append({"place": i, "ms": round(ms, 1)})
            else:
                other_max = max(other_max, ms)
    finally:
        gc.enable()
    return {"growPushes": grows, "otherPushMaxMs": round(other_max, 2)}


async def gc_pause(tickets: int) -> dict[str, Any]:
    os.environ.setdefault("SECRET", "bench-secret-0123456789abcdef0123456789abcdef")
    os.environ.setdefault("ADMIN_KEY", "bench-admin-key-0123456789abcdef0123456789")
    from queue_manager.clock import SystemClock
    from queue_manager.engine.model import ClientId
    from queue_manager.store.memory import MemoryStore

    store = MemoryStore(SystemClock())
    await store.upsert_room(
        {
            "id": "mem",
            "targetUrl": "https://shop.example",
            "ratePerMinute": 60,
            "queueMaxPerIp": None,
            "presenceSec": None,
            "state": "paused",
        }
    )
    client = ClientId(ident="127.0.0.1", fp=b"0123456789ab")
    t0 = time.perf_counter()
    for _ in range(tickets):
        await store.join("mem", client, None, None)
    join_us = (time.perf_counter() - t0) * 1e6 / tickets
    gc.collect()
    times = []
    for _ in range(3):
        t1 = time.perf_counter()
        gc.collect(2)
        times.append((time.perf_counter() - t1) * 1000.0)
    return {
        "tickets": tickets,
        "trackedObjects": len(gc.get_objects()),
        "gen2Ms": round(min(times), 1),
        "joinUsInProcess": round(join_us, 1),
        "gcThresholds": list(gc.get_threshold()),
    }


async def fold_stall(count: int) -> dict[str, Any]:
    """A room's journal tail of ``count`` events folded as the checkpointer folds it, beside a ticker."""
    os.environ.setdefault("SECRET", "bench-secret-0123456789abcdef0123456789abcdef")
    from queue_manager.clock import FakeClock
    from queue_manager.engine.model import ClientId
    from queue_manager.engine.replay import fold
    from queue_manager.journal.checkpoints import fold_off_loop
    from queue_manager.store.memory import MemoryStore

    clock = FakeClock()
    store = MemoryStore(clock)
    kept: list[Any] = []
    drain = store.engine.drain_events

    def keeping() -> list[Any]:  # the store drains its engine's events after every operation
        out = drain()
        kept.extend(out)
        return out

    store.engine.drain_events = keeping  # type: ignore[method-assign]
    await store.upsert_room({"id": "r", "targetUrl": "https://shop.example", "ratePerMinute": 60_000})
    joins = count // 2
    for i in range(joins):
        ident = f"198.18.{(i >> 8) & 255}.{i & 255}"
        await store.join("r", ClientId(ident=ident, fp=i.to_bytes(12, "big"), cookie=None), None, None)
    for _ in range(10 * count):  # ticks until the joins and their promotions make ``count`` events
        if len(kept) >= count:
            break
        clock.advance(1)
        await store.tick()
    events = kept[:count]
    t0 = time.perf_counter()
    fold(events)
    fold_ms = (time.perf_counter() - t0) * 1000.0
    lag = 0.0
    stop = False

    async def ticker() -> None:
        nonlocal lag
        loop = asyncio.get_running_loop()
        while not stop:
            t = loop.time()
            await asyncio.sleep(0.001)
            lag = max(lag, (loop.time() - t - 0.001) * 1000.0)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    t1 = time.perf_counter()
    await fold_off_loop(events, None)
    threaded_ms = (time.perf_counter() - t1) * 1000.0
    stop = True
    await task
    return {
        "events": len(events),
        "foldMs": round(fold_ms, 1),
        "foldInThreadMs": round(threaded_ms, 1),
        "loopLagMs": round(lag, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tickets", type=int, default=100_000)
    ap.add_argument("--fold-events", type=int, default=100_000)
    args = ap.parse_args()
    out = {
        "line": line_stalls(),
        "gc": asyncio.run(gc_pause(args.tickets)),
        "fold": asyncio.run(fold_stall(args.fold_events)),
    }
    print(orjson.dumps(out).decode())


if __name__ == "__main__":
    main()
