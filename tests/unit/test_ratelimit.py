"""Per-address budgets: window, headers, LRU eviction that never reaches the client being limited."""

from __future__ import annotations

from queue_manager.clock import FakeClock
from queue_manager.services.ratelimit import Budget


def headers(h: list[tuple[bytes, bytes]]) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in h}


def test_limit_headers_and_retry_after() -> None:
    clock = FakeClock()
    b = Budget(3, 100, clock)
    for left in (2, 1, 0):
        ok, h = b.take("1.2.3.4")
        assert ok and headers(h)["x-ratelimit-remaining"] == str(left)
        assert headers(h)["x-ratelimit-limit"] == "3" and "retry-after" not in headers(h)
    clock.advance(20)
    ok, h = b.take("1.2.3.4")
    assert not ok
    assert headers(h)["retry-after"] == "40" and headers(h)["x-ratelimit-reset"] == "40"
    assert b.take("5.6.7.8")[0]  # another address has its own budget
    clock.advance(40)
    assert b.take("1.2.3.4")[0]  # a new window


def test_zero_is_off() -> None:
    b = Budget(0, 10, FakeClock())
    assert all(b.take("x") == (True, []) for _ in range(1000))


def test_lru_eviction_keeps_the_limited_client() -> None:
    clock = FakeClock()
    b = Budget(2, 3, clock)
    b.take("attacker")
    b.take("attacker")
    assert not b.take("attacker")[0]
    for i in range(10):  # churn through fresh keys; the limited client stays most recent when it retries
        b.take(f"churn-{i}")
        assert not b.take("attacker")[0]
    assert len(b) == 3
