"""Making room at MAX_CONNECTIONS (inline/heads.py): who is closed, who never is, and how often it looks."""

from __future__ import annotations

from typing import Any

from queue_manager.inline.heads import GRACE_SEC, RETRY_SEC, HeadLimits, Waiting
from queue_manager.metrics import Counters


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Conn:
    def __init__(self, name: str, since: float | None, waiting: Waiting) -> None:
        self.name = name
        self.waiting_since = since
        self.waiting = waiting
        self.closed: str | None = None

    def waiting_for_head(self) -> float | None:
        return self.waiting_since

    def close_waiting(self, reason: str) -> None:
        self.closed = reason
        self.waiting.connections.discard(self)
        self.waiting.remove(self)

    def __repr__(self) -> str:
        return self.name


def _server(ceiling: int) -> tuple[Waiting, Clock]:
    connections: set[Any] = set()
    return Waiting(HeadLimits(16384, 100, 10.0, ceiling), Counters(), connections), Clock()


def _open(waiting: Waiting, clock: Clock, name: str, since: float | None) -> Conn:
    conn = Conn(name, since, waiting)
    waiting.connections.add(conn)
    waiting.add(conn, clock)
    return conn


def test_past_the_ceiling_connections_waiting_long_enough_are_closed_first_come_first() -> None:
    waiting, clock = _server(3)
    busy = _open(waiting, clock, "busy", None)  # a request being answered: never closed for room
    old1 = _open(waiting, clock, "old1", clock.now - 5)
    old2 = _open(waiting, clock, "old2", clock.now - 4)
    young = _open(waiting, clock, "young", clock.now - GRACE_SEC / 2)  # connected a moment ago
    assert old1.closed == "ceiling" and old2.closed is None  # back at the ceiling after one
    newcomer = _open(waiting, clock, "new", clock.now)
    assert old2.closed == "ceiling"
    assert busy.closed is None and young.closed is None and newcomer.closed is None
    assert len(waiting.connections) == 3


def test_nothing_to_close_is_looked_for_again_only_after_a_pause() -> None:
    waiting, clock = _server(1)
    _open(waiting, clock, "busy", None)
    young = _open(waiting, clock, "young", clock.now)
    assert young.closed is None and len(waiting.connections) == 2  # over, and nobody may be closed yet
    clock.now += GRACE_SEC
    waiting.retry_at = clock.now + RETRY_SEC  # as if a look had just found nothing
    waiting.make_room()
    assert young.closed is None
    clock.now += RETRY_SEC
    waiting.make_room()
    assert young.closed == "ceiling"


def test_no_ceiling_closes_nothing() -> None:
    waiting, clock = _server(0)
    conns = [_open(waiting, clock, f"c{i}", clock.now - 60) for i in range(5)]
    waiting.make_room()
    assert all(c.closed is None for c in conns)
