"""ADMIN_AUTH_FAIL_PER_MIN shared by the fleet (access/shared_authfail.SharedAuthFailures) against a real
Valkey (Redis 7): one count per address per wall-clock minute whichever instance saw the failure, the
lockout spread by an ``authlock`` hint or learnt from the count when the hint is lost, ``locked``
answered without a Valkey command, and the per-instance budget while Valkey cannot be reached."""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Connection, ConnectionPool, Redis

from queue_manager.access.authfail.memory import AuthFailures
from queue_manager.access.authfail.valkey import SharedAuthFailures
from queue_manager.clock import FakeClock
from queue_manager.fleet.hints import Hints
from queue_manager.store.valkey.breaker import Breaker
from queue_manager.store.valkey.keys import auth_fail_key
from tests.fleet.conftest import URL
from tests.fleet.test_hints import _until
from tests.fleet.test_leader import _cleanup

START = 1_767_225_600_000  # a whole minute: FakeClock's wall clock starts here
MINUTE = START // 60_000
IP = "198.51.100.7"


def _instance(
    redis: Redis, key_prefix: str, clock: FakeClock, limit: int = 3, hints: Hints | None = None
) -> SharedAuthFailures:
    return SharedAuthFailures(redis, key_prefix, limit, clock, local=AuthFailures(limit, 100, clock), hints=hints)


@pytest.fixture
async def hints(client: Redis, prefix: str) -> AsyncIterator[tuple[Hints, Hints]]:
    """Two instances' hint channels on the same Valkey, both subscribed."""
    a, b = Hints(client, prefix, "a"), Hints(client, prefix, "b")
    a.start()
    b.start()
    try:
        await _until(lambda: a.subscribed and b.subscribed, "both subscribed")
        yield a, b
    finally:
        await a.stop()
        await b.stop()


class Sent:
    """What a client put on the wire: every send (one per round trip) and every command in it (a
    pipeline packs each of its commands, then sends them at once)."""

    def __init__(self) -> None:
        self.sends = 0
        self.commands: list[str] = []

    def connection_class(self) -> type[Connection]:
        sent = self

        class Counting(Connection):
            def pack_command(self, *args: Any) -> list[bytes]:
                sent.commands.append(str(args[0]).upper())
                return super().pack_command(*args)

            async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
                sent.sends += 1
                await super().send_packed_command(command, check_health)

        return Counting


@pytest.fixture
async def unreachable() -> AsyncIterator[Redis]:
    """A client on a port nothing listens on (bound, then closed: connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    c = Redis.from_url(f"redis://127.0.0.1:{port}/12", socket_connect_timeout=1, socket_timeout=1)
    yield c
    await c.aclose()


async def test_two_instances_spend_one_budget_per_address_and_the_hint_locks_both(
    client: Redis,
    prefix: str,
    hints: tuple[Hints, Hints],
) -> None:
    clock = FakeClock(wall_ms=START + 15_000)
    a, b = _instance(client, prefix, clock, hints=hints[0]), _instance(client, prefix, clock, hints=hints[1])
    try:
        for budget in (a, b):
            assert await budget.locked(IP) is None
            assert await budget.fail(IP) is None
        assert await a.fail(IP) is None  # the third: it reaches the limit, and is answered as a wrong key
        # three in total, not three each: A refuses the address until the minute ends, and tells B
        assert await a.locked(IP) == 45
        await _until(lambda: hints[1].received, "B got A's hint")
        assert await b.locked(IP) == 45
        assert await b.locked("198.51.100.8") is None  # per address
        assert hints[0].published == 1  # one hint per lockout
        key = auth_fail_key(prefix, IP, MINUTE)
        assert await client.get(key) == b"3"
        assert 0 < await client.ttl(key) <= SharedAuthFailures.KEY_TTL_SEC
        clock.advance(44.2)
        assert await a.locked(IP) == 1  # rounded up to whole seconds
        clock.advance(0.8)  # the next wall-clock minute: a fresh count
        assert await a.locked(IP) is None
        assert await b.locked(IP) is None
        assert await b.fail(IP) is None
        assert await a.locked(IP) is None
        assert await client.get(auth_fail_key(prefix, IP, MINUTE + 1)) == b"1"
        assert a.fallbacks == b.fallbacks == 0
    finally:
        await _cleanup(client, prefix)


async def test_with_the_hint_lost_the_other_instance_locks_on_its_first_wrong_try(
    client: Redis,
    prefix: str,
) -> None:
    clock = FakeClock(wall_ms=START + 15_000)
    a, b = _instance(client, prefix, clock), _instance(client, prefix, clock)  # no hints between them
    try:
        for budget in (a, b, a):
            assert await budget.fail(IP) is None
        assert await a.locked(IP) == 45
        # the worst case: B has not heard, so a right credential from the address would get through there ...
        assert await b.locked(IP) is None
        # ... until B sees one wrong try: counted in Valkey (the fourth), answered as a locked-out address
        assert await b.fail(IP) == 45
        assert await b.locked(IP) == 45
        assert await client.get(auth_fail_key(prefix, IP, MINUTE)) == b"4"
    finally:
        await _cleanup(client, prefix)


async def test_a_lockout_learnt_from_the_count_is_hinted_on(
    client: Redis,
    prefix: str,
    hints: tuple[Hints, Hints],
) -> None:
    """A (no hint sent: its link was down) locks the address out; B learns it from the count and tells C."""
    clock = FakeClock(wall_ms=START)
    a = _instance(client, prefix, clock)
    b, c = _instance(client, prefix, clock, hints=hints[0]), _instance(client, prefix, clock, hints=hints[1])
    try:
        for _ in range(3):
            await a.fail(IP)
        assert await b.locked(IP) is None and await c.locked(IP) is None
        assert await b.fail(IP) == 60
        await _until(lambda: hints[1].received, "C got B's hint")
        assert await c.locked(IP) == 60
    finally:
        await _cleanup(client, prefix)


async def test_locked_sends_nothing_to_valkey_and_a_wrong_key_one_transaction(prefix: str) -> None:
    sent = Sent()
    pool = ConnectionPool.from_url(URL, connection_class=sent.connection_class(), socket_connect_timeout=2)
    redis = Redis(connection_pool=pool)
    clock = FakeClock(wall_ms=START)
    budget = _instance(redis, prefix, clock)
    try:
        await redis.ping()  # connected: the handshake is behind us
        sent.sends, sent.commands = 0, []
        for _ in range(50):
            assert await budget.locked(IP) is None
        assert (sent.sends, sent.commands) == (0, [])
        assert await budget.fail(IP) is None
        assert sent.sends == 1 and sent.commands == ["MULTI", "INCRBY", "EXPIRE", "EXEC"], sent.commands
        await budget.fail(IP)
        await budget.fail(IP)
        sent.sends, sent.commands = 0, []
        for _ in range(50):  # locked out: still answered here
            assert await budget.locked(IP) == 60
        assert (sent.sends, sent.commands) == (0, [])
    finally:
        await _cleanup(redis, prefix)
        await redis.aclose()
        await pool.aclose()


async def test_zero_sends_nothing_to_valkey(unreachable: Redis) -> None:
    budget = _instance(unreachable, "qmtest:off:", FakeClock(), limit=0)
    for _ in range(5):
        await budget.fail("198.51.100.7")
        assert await budget.locked("198.51.100.7") is None
    assert budget.fallbacks == 0  # never even tried to reach it


async def test_unreachable_valkey_falls_back_to_this_process_and_warns_once(
    unreachable: Redis, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a logging.config.dictConfig elsewhere in the run (import-linter's) disables loggers that already exist
    monkeypatch.setattr(logging.getLogger("queue_manager.access"), "disabled", False)
    clock = FakeClock(wall_ms=START + 15_000)
    budget = _instance(unreachable, "qmtest:down:", clock, limit=2)
    with caplog.at_level(logging.WARNING, logger="queue_manager.access"):
        assert await budget.locked("198.51.100.7") is None  # nobody locked out on Valkey's account
        assert await budget.fail("198.51.100.7") is None  # no raise
        assert await budget.locked("198.51.100.7") is None
        await budget.fail("198.51.100.7")
        # this process's own count still rations the address
        assert await budget.locked("198.51.100.7") == 60
        assert await budget.locked("198.51.100.8") is None
        assert await budget.fail("198.51.100.7") == 60  # past the limit: answered as a locked-out address
    assert budget.fallbacks == 3  # the failures; locked never asks Valkey
    warned = [r for r in caplog.records if "ADMIN_AUTH_FAIL_PER_MIN" in r.getMessage()]
    assert len(warned) == 1, [r.getMessage() for r in caplog.records]  # at most once a minute
    caplog.clear()
    clock.advance(60)
    with caplog.at_level(logging.WARNING, logger="queue_manager.access"):
        assert await budget.locked("198.51.100.7") is None  # the local window ended too
        assert await budget.fail("198.51.100.7") is None  # a minute on: warned again
    assert len([r for r in caplog.records if "ADMIN_AUTH_FAIL_PER_MIN" in r.getMessage()]) == 1


async def test_while_the_breaker_holds_valkey_as_down_no_call_waits_for_it(unreachable: Redis) -> None:
    breaker = Breaker(hold_sec=3600)
    clock = FakeClock(wall_ms=START)
    budget = SharedAuthFailures(
        unreachable, "qmtest:held:", 2, clock, local=AuthFailures(2, 100, clock), breaker=breaker
    )
    await budget.fail("198.51.100.7")  # the first failure trips the breaker
    assert breaker.down
    await budget.fail("198.51.100.7")
    assert await budget.locked("198.51.100.7") == 60  # counted here
    assert await budget.fail("198.51.100.7") == 60
    assert breaker.fast_answers == 2  # answered at once, without a connection attempt
