"""A size bound (not a timing assertion): 100,000 waiting tickets in one room stay far below 200 MB of
Python heap, and the line still answers positions and the head correctly at that size."""

from __future__ import annotations

import gc
import tracemalloc

from queue_manager.clock import FakeClock
from queue_manager.engine.engine import Engine
from queue_manager.engine.model import ClientId

from .conftest import TARGET

TICKETS = 100_000
LIMIT_BYTES = 200 * 1024 * 1024


def test_100k_waiting_tickets_fit_well_under_200_mb():
    clock = FakeClock()
    gc.collect()
    gc.disable()  # the cyclic collector walking a growing heap under tracemalloc only costs time
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        engine = Engine(clock)
        room, _, _ = engine.upsert({"id": "big", "targetUrl": TARGET, "queueMaxPerIp": None})
        for i in range(TICKETS):
            client = ClientId(
                ident=f"10.{i >> 16}.{(i >> 8) & 255}.{i & 255}",
                fp=i.to_bytes(16, "big"),
                fp2=None,
                cookie=(i + 1).to_bytes(16, "big"),
            )
            room.join(client, None, None)
        engine.drain_events()  # the store drains events as it goes; keep only the live state
        gc.enable()
        gc.collect()
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        gc.enable()
    growth = after - before
    assert len(room.line) == TICKETS
    assert growth < LIMIT_BYTES, f"{growth / 2**20:.1f} MiB for {TICKETS} waiting tickets"
    # per ticket this is a few hundred bytes; say so loudly if it ever creeps towards the bound
    assert growth / TICKETS < 2048, f"{growth / TICKETS:.0f} bytes per waiting ticket"
    last = room.tickets[TICKETS]
    assert room.position(last) == TICKETS
    assert room.position(room.tickets[TICKETS // 2]) == TICKETS // 2
    assert room.line.head() == (room.tickets[1].seq, 1)
