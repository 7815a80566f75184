"""A long line still answers positions and the head correctly (a functional check, not a measurement).

What 100,000 waiting tickets cost in memory is measured by ``make bench`` (the memory phase:
bench/engine_heap.py for the engine's heap, a whole server's VmRSS beside it), against the 200 MB
target, and reported in docs/benchmarks.md.
"""

from __future__ import annotations

from collections.abc import Callable

from queue_manager.engine.engine import Engine
from queue_manager.engine.room import Room

from .conftest import Visitor

TICKETS = 5_000


def test_a_long_line_answers_positions_and_the_head(
    engine: Engine, make_room: Callable[..., Room], visitor: Callable[..., Visitor]
) -> None:
    room = make_room("big", queueMaxPerIp=None)
    for _ in range(TICKETS):
        visitor(room).join()
    engine.drain_events()
    assert len(room.line) == TICKETS
    for n in (1, 2, TICKETS // 3, TICKETS // 2, TICKETS - 1, TICKETS):
        assert room.position(room.tickets[n]) == n
    assert room.line.head() == (room.tickets[1].line_seq, 1)
