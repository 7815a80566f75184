"""ADMIN_AUTH_FAIL_PER_MIN in one process (access/authfail.AuthFailures): a one-minute window from an
address's first failure, counted per address, bounded by RATE_LIMIT_MAX_KEYS."""

from __future__ import annotations

from queue_manager.access.authfail import AuthFailures
from queue_manager.clock import FakeClock


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
    await budget.fail("203.0.113.9")
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
