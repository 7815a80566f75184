"""Per-address budgets: a fixed one-minute window per address in an LRU map capped at RATE_LIMIT_MAX_KEYS.

A client being limited is by definition the most recently used key, so eviction never reaches it.
Every throttled route answers X-RateLimit-Limit, -Remaining and -Reset (seconds); a 429 adds Retry-After.
"""

from __future__ import annotations

import math
from collections import OrderedDict

from queue_manager.clock import Clock
from queue_manager.http.wire import HttpError


class Budget:
    def __init__(self, per_minute: int, max_keys: int, clock: Clock) -> None:
        self.limit = per_minute
        self.max_keys = max(1, max_keys)
        self.clock = clock
        self._buckets: OrderedDict[str, list[float]] = OrderedDict()  # key -> [window_start, used]

    @property
    def enabled(self) -> bool:
        return self.limit > 0

    def left(self, key: str) -> tuple[bool, list[tuple[bytes, bytes]]]:
        """Whether ``key`` has any of its budget left, spending none; returns (allowed, headers). A route that
        charges only what fails (a wrong entry code) asks this first and ``take``s after a failure."""
        if self.limit <= 0:
            return True, []
        bucket = self._buckets.get(key)
        now = self.clock.mono()
        if bucket is None or now - bucket[0] >= 60.0 or bucket[1] < self.limit:
            return True, []
        reset = str(max(1, math.ceil(60.0 - (now - bucket[0])))).encode()
        limit = str(self.limit).encode()
        return False, [
            (b"x-ratelimit-limit", limit),
            (b"x-ratelimit-remaining", b"0"),
            (b"x-ratelimit-reset", reset),
            (b"retry-after", reset),
        ]

    def take(self, key: str) -> tuple[bool, list[tuple[bytes, bytes]]]:
        """Spend one; returns (allowed, headers)."""
        if self.limit <= 0:
            return True, []
        now = self.clock.mono()
        bucket = self._buckets.get(key)
        if bucket is None or now - bucket[0] >= 60.0:
            bucket = [now, 0.0]
            self._buckets[key] = bucket
            if len(self._buckets) > self.max_keys:
                self._buckets.popitem(last=False)
        self._buckets.move_to_end(key)
        reset = max(1, math.ceil(60.0 - (now - bucket[0])))  # not (start + 60) - now: float rounding gave 61
        allowed = bucket[1] < self.limit
        if allowed:
            bucket[1] += 1
        remaining = max(0, self.limit - int(bucket[1]))
        headers = [
            (b"x-ratelimit-limit", str(self.limit).encode()),
            (b"x-ratelimit-remaining", str(remaining).encode()),
            (b"x-ratelimit-reset", str(reset).encode()),
        ]
        if not allowed:
            headers.append((b"retry-after", str(reset).encode()))
        return allowed, headers

    def __len__(self) -> int:
        return len(self._buckets)


def refused(headers: list[tuple[bytes, bytes]]) -> HttpError:
    """The 429 a spent budget answers, with the budget's X-RateLimit-* headers and Retry-After."""
    return HttpError(
        429,
        "rate_limited",
        "Too many requests from your address; slow down.",
        headers=[(k.decode(), v.decode()) for k, v in headers],
    )
