"""ADMIN_AUTH_FAIL_PER_MIN in one process (access/authfail.AuthFailures): a one-minute window from an
address's first failure, counted per address, bounded by RATE_LIMIT_MAX_KEYS; and the fleet's
lockouts as every instance records them from ``authlock`` hints (SharedAuthFailures), without Valkey."""

from __future__ import annotations

from typing import Any, NoReturn, cast

from redis.asyncio import Redis

from queue_manager.access.authfail.memory import AuthFailures
from queue_manager.access.authfail.valkey import SharedAuthFailures
from queue_manager.clock import FakeClock
from queue_manager.fleet.hints import Hints

START = 1_767_225_600_000  # a whole minute: FakeClock's wall clock starts here
MINUTE = START // 60_000


async def test_the_limit_locks_the_address_until_a_minute_after_its_first_failure() -> None:
    clock = FakeClock()
    budget = AuthFailures(3, 100, clock)
    await budget.fail("198.51.100.1")
    clock.advance(20)
    await budget.fail("198.51.100.1")
    assert await budget.locked("198.51.100.1") is None  # two of three
    clock.advance(25)
    await budget.fail("198.51.100.1")
    assert await budget.locked("198.51.100.1") == 15  # the window began at the first failure, 45 s ago
    assert await budget.locked("198.51.100.2") is None  # another address spends nothing of it
    clock.advance(14.5)
    assert await budget.locked("198.51.100.1") == 1  # rounded up: never "try again in 0 s"
    clock.advance(0.5)
    assert await budget.locked("198.51.100.1") is None  # a fresh window
    await budget.fail("198.51.100.1")
    assert await budget.locked("198.51.100.1") is None


async def test_a_failure_while_locked_out_does_not_extend_the_lockout() -> None:
    clock = FakeClock()
    budget = AuthFailures(2, 100, clock)
    await budget.fail("203.0.113.9")
    await budget.fail("203.0.113.9")
    assert await budget.locked("203.0.113.9") == 60
    clock.advance(30)
    assert await budget.fail("203.0.113.9") == 30  # already locked out: the caller answers 429
    assert await budget.locked("203.0.113.9") == 30


async def test_zero_turns_it_off() -> None:
    budget = AuthFailures(0, 100, FakeClock())
    for _ in range(50):
        await budget.fail("198.51.100.1")
    assert await budget.locked("198.51.100.1") is None


async def test_the_map_keeps_the_most_recent_addresses() -> None:
    budget = AuthFailures(1, 2, FakeClock())
    for ip in ("192.0.2.1", "192.0.2.2", "192.0.2.3"):
        await budget.fail(ip)
    assert await budget.locked("192.0.2.1") is None  # the oldest address was dropped
    assert await budget.locked("192.0.2.2") == 60
    assert await budget.locked("192.0.2.3") == 60


class NoValkey:
    """A client that fails the test if anything is asked of it."""

    def __getattr__(self, name: str) -> NoReturn:
        raise AssertionError(f"Valkey was used: {name}")


def _fleet(clock: FakeClock, limit: int = 3, max_keys: int = 100) -> tuple[SharedAuthFailures, Hints]:
    redis = cast(Redis, NoValkey())
    hints = Hints(redis, "qm:", "here")
    local = AuthFailures(limit, 100, clock)
    return SharedAuthFailures(redis, "qm:", limit, clock, local=local, hints=hints, max_keys=max_keys), hints


def _hint(hints: Hints, **data: Any) -> None:
    hints._dispatch("authlock", {"k": "authlock", "from": "elsewhere", **data})


async def test_an_authlock_hint_locks_the_address_here_until_its_minute_ends() -> None:
    clock = FakeClock(wall_ms=START + 15_000)
    budget, hints = _fleet(clock)
    assert await budget.locked("198.51.100.7") is None
    _hint(hints, ip="198.51.100.7", minute=MINUTE)
    assert await budget.locked("198.51.100.7") == 45  # answered here: no Valkey command
    assert await budget.locked("198.51.100.8") is None
    clock.advance(45)
    assert await budget.locked("198.51.100.7") is None


async def test_stale_or_malformed_hints_lock_nobody() -> None:
    clock = FakeClock(wall_ms=START + 15_000)
    budget, hints = _fleet(clock)
    _hint(hints, ip="198.51.100.1", minute=MINUTE - 1)  # a minute already over
    _hint(hints, ip=7, minute=MINUTE)
    _hint(hints, ip="198.51.100.2", minute=str(MINUTE))
    _hint(hints, ip="198.51.100.3", minute=True)
    _hint(hints, ip="198.51.100.4")
    for ip in ("198.51.100.1", "198.51.100.2", "198.51.100.3", "198.51.100.4"):
        assert await budget.locked(ip) is None
    off, off_hints = _fleet(clock, limit=0)
    _hint(off_hints, ip="198.51.100.5", minute=MINUTE)
    assert await off.locked("198.51.100.5") is None  # zero turns the budget off


async def test_the_lockouts_kept_are_the_most_recent_addresses() -> None:
    clock = FakeClock(wall_ms=START)
    budget, hints = _fleet(clock, max_keys=2)
    for ip in ("192.0.2.1", "192.0.2.2", "192.0.2.3"):
        _hint(hints, ip=ip, minute=MINUTE)
    assert await budget.locked("192.0.2.1") is None
    assert await budget.locked("192.0.2.2") == 60
    assert await budget.locked("192.0.2.3") == 60
