"""Fixtures for the engine's unit tests: a FakeClock, an Engine on it, rooms, visitors, a ticker.

Everything here is pure and in-process: no I/O, no real time. ``FakeClock.advance`` moves both
clocks; ``FakeClock.step_wall`` moves only the wall clock (an NTP step).
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable
from typing import Any

import pytest

from queue_manager.clock import FakeClock
from queue_manager.engine import visitor as visits
from queue_manager.engine.engine import Engine
from queue_manager.engine.model import ClientId
from queue_manager.engine.room import Room
from queue_manager.engine.ticket import Ticket
from queue_manager.engine.visitor import CheckResult, Lookup, Presented

TARGET = "https://shop.example"
_door_keys = itertools.count(1)


class Visitor:
    """One browser: who it is, the token it holds and the hash of its door key (what the server stores)."""

    def __init__(self, room: Room, client: ClientId) -> None:
        self.room = room
        self.client = client
        self.token: Presented | None = None
        self.door: bytes | None = None

    # ---------------------------------------------------------------- wire-like calls

    def join(self, return_url: str | None = None) -> Lookup:
        found = visits.join(self.room, self.client, self.token, return_url)
        if found.ticket is not None:
            self.token = Presented(gen=self.room.gen, n=found.ticket.n)
        elif found.pre is not None:
            self.token = Presented(gen=self.room.gen, handle=found.pre.handle)
        return found

    def status(self) -> Lookup:
        return visits.status(self.room, self.client, self.token)

    def check(self, url: str | None = None, *, door: Any = ...) -> CheckResult:
        """A door check; ``door`` overrides the door-key hash sent (default: the one this browser holds)."""
        raw = f"door-key-{next(_door_keys)}"
        digest = hashlib.sha256(raw.encode()).digest()
        sent = self.door if door is ... else door
        result = visits.check(self.room, self.client, self.token, sent, url, new_door=(raw, digest))
        if result.door_key is not None:
            assert result.door_key == raw
            self.door = digest
        return result

    # ---------------------------------------------------------------- reading

    @property
    def n(self) -> int:
        assert self.token is not None
        if self.token.n is not None:
            return self.token.n
        assert self.token.handle is not None
        return self.room.drawn[self.token.handle]

    @property
    def ticket(self) -> Ticket | None:
        return self.room.tickets.get(self.n)

    @property
    def state(self) -> str | None:
        t = self.ticket
        return None if t is None else t.state

    @property
    def position(self) -> int | None:
        t = self.ticket
        return None if t is None else self.room.position(t)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def engine(clock: FakeClock) -> Engine:
    return Engine(clock)


@pytest.fixture
def make_room(engine: Engine) -> Callable[..., Room]:
    """``make_room(id="r", ratePerMinute=60, ...)``: create a room through ``engine.upsert``."""

    def make(room_id: str = "r", **fields: Any) -> Room:
        room, created, _ = engine.upsert({"id": room_id, "targetUrl": TARGET, **fields})
        assert created
        return room

    return make


@pytest.fixture
def visitor() -> Callable[..., Visitor]:
    """``visitor(room, ident=None, cookie=True, fp=None, fp2=None)``: a new browser, each one distinct."""
    counter = itertools.count(1)

    def make(
        room: Room,
        *,
        ident: str | None = None,
        cookie: bool | bytes | None = True,
        fp: bytes | None = None,
        fp2: bytes | None = None,
    ) -> Visitor:
        i = next(counter)
        if cookie is True:
            cookie_hash: bytes | None = f"cookie-{i}".encode()
        elif cookie is False or cookie is None:
            cookie_hash = None
        else:
            cookie_hash = cookie
        client = ClientId(
            ident=ident or f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}",
            fp=fp or f"fp-{i}".encode(),
            fp2=fp2,
            cookie=cookie_hash,
        )
        return Visitor(room, client)

    return make


@pytest.fixture
def fill() -> Callable[[Room, int], None]:
    """``fill(room, k)``: k anonymous joins from one client (for rooms with queueMaxPerIp null)."""
    client = ClientId(ident="192.0.2.1", fp=b"filler", fp2=None, cookie=None)

    def do(room: Room, k: int) -> None:
        for _ in range(k):
            visits.join(room, client, None, None)

    return do


@pytest.fixture
def run(engine: Engine, clock: FakeClock) -> Callable[..., int]:
    """``run(seconds, step=1.0, each=None)``: advance in steps, call ``each()``, tick; returns promotions."""

    def do(seconds: float, step: float = 1.0, each: Callable[[], object] | None = None) -> int:
        promoted = 0
        elapsed = 0.0
        while elapsed < seconds - 1e-9:
            dt = min(step, seconds - elapsed)
            clock.advance(dt)
            elapsed += dt
            if each is not None:
                each()
            promoted += engine.tick()
        return promoted

    return do
