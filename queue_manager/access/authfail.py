"""ADMIN_AUTH_FAIL_PER_MIN: how many wrong credentials an address may present a minute.

One interface (:class:`AuthBudget`: ``locked`` then ``fail``), two forms:

* :class:`AuthFailures` — this process's own count (STORE=memory): an LRU map address ->
  [window start, failures], the window one minute from the address's first failure;
* :class:`SharedAuthFailures` — the fleet's count in Valkey (STORE=valkey): every instance spends
  the same budget, so a guesser cannot multiply its tries by the number of instances behind a load
  balancer. While Valkey cannot be reached it counts in this process instead (see the class).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Protocol

from redis.asyncio import Redis

from queue_manager.clock import Clock
from queue_manager.store.base import StoreUnavailable
from queue_manager.store.valkey.breaker import Breaker
from queue_manager.store.valkey.errors import translate
from queue_manager.store.valkey.keys import auth_fail_key

log = logging.getLogger("queue_manager.access")

MINUTE_MS = 60_000


class AuthBudget(Protocol):
    """The wrong-credential budget the sign-in paths spend."""

    async def locked(self, ip: str) -> int | None:
        """Seconds until the address may try again, or None when it is not locked out."""
        ...

    async def fail(self, ip: str) -> None:
        """The address presented a wrong credential."""
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

    async def fail(self, ip: str) -> None:
        if self.limit <= 0:
            return
        b = self._bucket(ip)
        if b is None:
            b = [self.clock.mono_ms(), 0]
            self._map[ip] = b
            if len(self._map) > self.max_keys:
                self._map.popitem(last=False)
        self._map.move_to_end(ip)
        b[1] += 1


class SharedAuthFailures:
    """The fleet's budget, in Valkey: one counter per address per wall-clock minute.

    ``fail`` increments ``<prefix>authfail:<address>:<minute>`` (``minute`` = wall-clock milliseconds
    // 60000) and gives it a lifetime of two minutes, in one transaction; ``locked`` reads the current
    minute's counter and, once it has reached the limit, answers the seconds left in that minute.
    The window is a fixed wall-clock minute rather than one minute from the first failure, so every
    instance counts into the same key; failures just before a minute turns and just after it fall
    in different windows. Each instance reads the minute on its own wall clock, so hosts kept in step
    (NTP) agree on it but for a moment at the turn. ``per_minute`` <= 0 turns the budget off: no
    Valkey command at all.

    While Valkey cannot be reached (or ``breaker`` holds it as unreachable) no call raises and nobody
    is locked out on the fleet's account: that call is answered by ``local``, this process's own
    budget, so the team can still sign in while a guesser is still rationed per instance. A warning
    is logged at most once a minute while it lasts.
    """

    KEY_TTL_SEC = 120
    WARN_EVERY_MS = MINUTE_MS

    def __init__(
        self,
        redis: Redis,
        prefix: str,
        per_minute: int,
        clock: WallClock,
        *,
        local: AuthBudget,
        breaker: Breaker | None = None,
    ) -> None:
        self.redis = redis
        self.prefix = prefix
        self.limit = per_minute
        self.clock = clock
        self.local = local
        self.breaker = breaker
        self.fallbacks = 0  # calls answered by the local budget because Valkey could not be reached
        self._warned_at: int | None = None

    def _unreachable(self, exc: StoreUnavailable) -> None:
        self.fallbacks += 1
        now = self.clock.wall_ms()
        if self._warned_at is None or now - self._warned_at >= self.WARN_EVERY_MS:
            self._warned_at = now
            log.warning(
                "ADMIN_AUTH_FAIL_PER_MIN: Valkey unreachable (%s); wrong credentials are counted per instance "
                "until it is back",
                exc,
            )

    async def locked(self, ip: str) -> int | None:
        if self.limit <= 0:
            return None
        now = self.clock.wall_ms()
        minute = now // MINUTE_MS
        try:
            with translate(None, self.breaker):
                raw = await self.redis.get(auth_fail_key(self.prefix, ip, minute))
        except StoreUnavailable as exc:
            self._unreachable(exc)
            return await self.local.locked(ip)
        if raw is None or int(raw) < self.limit:
            return None
        return max(1, ((minute + 1) * MINUTE_MS - now + 999) // 1000)

    async def fail(self, ip: str) -> None:
        if self.limit <= 0:
            return
        key = auth_fail_key(self.prefix, ip, self.clock.wall_ms() // MINUTE_MS)
        try:
            with translate(None, self.breaker):
                async with self.redis.pipeline(transaction=True) as pipe:
                    pipe.incr(key)
                    pipe.expire(key, self.KEY_TTL_SEC)
                    await pipe.execute()
        except StoreUnavailable as exc:
            self._unreachable(exc)
            await self.local.fail(ip)
