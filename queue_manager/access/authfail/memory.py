"""ADMIN_AUTH_FAIL_PER_MIN on STORE=memory: this process's own count of wrong credentials per address.

The interface is ``base.AuthBudget``; the fleet's count in Valkey is ``valkey.SharedAuthFailures``, which
also falls back on this one while Valkey cannot be reached.
"""

from __future__ import annotations

from collections import OrderedDict

from queue_manager.access.authfail.base import MINUTE_MS
from queue_manager.clock import Clock


class AuthFailures:
    """This process's budget: wrong credentials per address per minute, in an LRU map.

    An address's window is one minute from its first failure; past ``per_minute`` failures in it the
    address is locked out until the window ends. ``per_minute`` <= 0 turns the budget off.
    """

    def __init__(self, per_minute: int, max_keys: int, clock: Clock) -> None:
        self.limit = per_minute
        self.max_keys = max(1, max_keys)
        self.clock = clock
        self._map: OrderedDict[str, list[int]] = OrderedDict()  # ip -> [window start ms, failures]

    def _bucket(self, ip: str) -> list[int] | None:
        b = self._map.get(ip)
        if b is not None and self.clock.mono_ms() - b[0] >= MINUTE_MS:
            del self._map[ip]
            return None
        return b

    async def locked(self, ip: str) -> int | None:
        if self.limit <= 0:
            return None
        b = self._bucket(ip)
        if b is None or b[1] < self.limit:
            return None
        return max(1, (b[0] + MINUTE_MS - self.clock.mono_ms() + 999) // 1000)

    async def fail(self, ip: str) -> int | None:
        if self.limit <= 0:
            return None
        b = self._bucket(ip)
        if b is None:
            b = [self.clock.mono_ms(), 0]
            self._map[ip] = b
            if len(self._map) > self.max_keys:
                self._map.popitem(last=False)
        self._map.move_to_end(ip)
        b[1] += 1
        return await self.locked(ip) if b[1] > self.limit else None
