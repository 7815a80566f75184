"""ADMIN_AUTH_FAIL_PER_MIN shared by the fleet (access/authfail.SharedAuthFailures) against a real
Valkey (Redis 7): one count per address per wall-clock minute whichever instance saw the failure,
and the per-instance budget while Valkey cannot be reached."""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from queue_manager.access.authfail import AuthFailures, SharedAuthFailures
from queue_manager.clock import FakeClock
from queue_manager.store.valkey.breaker import Breaker
from queue_manager.store.valkey.keys import auth_fail_key
from tests.fleet.test_leader import _cleanup, client, prefix  # noqa: F401 (fixtures)

START = 1_767_225_600_000  # a whole minute: FakeClock's wall clock starts here
MINUTE = START // 60_000


def _instance(redis: Redis, key_prefix: str, clock: FakeClock, limit: int = 3) -> SharedAuthFailures:
    return SharedAuthFailures(redis, key_prefix, limit, clock, local=AuthFailures(limit, 100, clock))


@pytest.fixture
async def unreachable() -> AsyncIterator[Redis]:
    """A client on a port nothing listens on (bound, then closed: connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    c = Redis.from_url(f"redis://127.0.0.1:{port}/12", socket_connect_timeout=1, socket_timeout=1)
    yield c
    await c.aclose()


async def test_two_instances_spend_one_budget_per_address(client: Redis, prefix: str) -> None:  # noqa: F811
    clock = FakeClock(wall_ms=START + 15_000)
    a, b = _instance(client, prefix, clock), _instance(client, prefix, clock)
    try:
        for budget in (a, b, a):
            assert await budget.locked("198.51.100.7") is None
            await budget.fail("198.51.100.7")
        # three in total, not three each: both instances now refuse, until the minute ends
        assert await a.locked("198.51.100.7") == 45
        assert await b.locked("198.51.100.7") == 45
        assert await b.locked("198.51.100.8") is None  # per address
        key = auth_fail_key(prefix, "198.51.100.7", MINUTE)
        assert await client.get(key) == b"3"
        assert 0 < await client.ttl(key) <= SharedAuthFailures.KEY_TTL_SEC
        clock.advance(44.2)
        assert await a.locked("198.51.100.7") == 1  # rounded up to whole seconds
        clock.advance(0.8)  # the next wall-clock minute: a fresh count
        assert await a.locked("198.51.100.7") is None
        await b.fail("198.51.100.7")
        assert await a.locked("198.51.100.7") is None
        assert await client.get(auth_fail_key(prefix, "198.51.100.7", MINUTE + 1)) == b"1"
        assert a.fallbacks == b.fallbacks == 0
    finally:
        await _cleanup(client, prefix)


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
        assert await budget.locked("198.51.100.7") is None  # no raise, and nobody locked out on Valkey's account
        await budget.fail("198.51.100.7")
        assert await budget.locked("198.51.100.7") is None
        await budget.fail("198.51.100.7")
        # this process's own count still rations the address
        assert await budget.locked("198.51.100.7") == 60
        assert await budget.locked("198.51.100.8") is None
    assert budget.fallbacks == 6
    warned = [r for r in caplog.records if "ADMIN_AUTH_FAIL_PER_MIN" in r.getMessage()]
    assert len(warned) == 1, [r.getMessage() for r in caplog.records]  # at most once a minute
    caplog.clear()
    clock.advance(60)
    with caplog.at_level(logging.WARNING, logger="queue_manager.access"):
        assert await budget.locked("198.51.100.7") is None  # the local window ended too
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
    assert breaker.fast_answers == 2  # answered at once, without a connection attempt
