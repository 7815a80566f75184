"""A long line still answers positions and the head correctly (a functional check, not a measurement).

What 100,000 waiting tickets cost in memory is measured by ``make bench`` (the memory phase:
bench/engine_heap.py for the engine's heap, a whole server's VmRSS beside it), against the 200 MB
target, and reported in docs/benchmarks.md.
"""

from __future__ import annotations

from queue_manager.clock import FakeClock
from queue_manager.engine.engine import Engine
from queue_manager.engine.model import ClientId

from .conftest import TARGET

TICKETS = 5_000


def test_a_long_line_answers_positions_and_the_head() -> None:
    engine = Engine(FakeClock())
    room, _, _ = engine.upsert({"id": "big", "targetUrl": TARGET, "queueMaxPerIp": None})
    for i in range(TICKETS):
        client = ClientId(
            ident=f"10.{i >> 16}.{(i >> 8) & 255}.{i & 255}",
            fp=i.to_bytes(16, "big"),
            fp2=None,
            cookie=(i + 1).to_bytes(16, "big"),
        )
        room.join(client, None, None)
    engine.drain_events()
    assert len(room.line) == TICKETS
    for n in (1, 2, TICKETS // 3, TICKETS // 2, TICKETS - 1, TICKETS):
        assert room.position(room.tickets[n]) == n
    assert room.line.head() == (room.tickets[1].seq, 1)
