"""ADMIN_AUTH_FAIL_PER_MIN: how many wrong credentials an address may present a minute.

One interface (:class:`AuthBudget`: ``locked`` then ``fail``), two forms:

* :class:`AuthFailures` — this process's own count (STORE=memory): an LRU map address ->
  [window start, failures], the window one minute from the address's first failure;
* :class:`~queue_manager.access.authfail.valkey.SharedAuthFailures` — the fleet's count in Valkey
  (STORE=valkey, in its own module so a memory server never loads the Valkey client): every instance spends
  the same budget, so a guesser cannot multiply its tries by the number of instances behind a load
  balancer. ``locked`` answers from this process alone (no Valkey command: it runs on every request
  that presents a credential, vouched door checks included); only a wrong credential reaches Valkey.
  While Valkey cannot be reached it counts in this process instead (see the class).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Protocol

from queue_manager.clock import Clock

log = logging.getLogger("queue_manager.access")

MINUTE_MS = 60_000


class AuthBudget(Protocol):
    """The wrong-credential budget the sign-in paths spend."""

    async def locked(self, ip: str) -> int | None:
        """Seconds until the address may try again, or None when it is not locked out."""
        ...

    async def fail(self, ip: str) -> int | None:
        """The address presented a wrong credential.

        Seconds until it may try again when it was already locked out before this failure (an
        instance that had not yet learnt of the lockout checked the credential: the caller answers as
        it would have before checking), else None — the failure that reaches the limit included.
        """
        ...


class WallClock(Protocol):
    def wall_ms(self) -> int: ...


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
