"""ADMIN_AUTH_FAIL_PER_MIN on STORE=valkey: the fleet's wrong-credential budget, counted in Valkey.

The form of :class:`~queue_manager.access.authfail.base.AuthBudget` a fleet spends; this process's own
count (:class:`~queue_manager.access.authfail.memory.AuthFailures`) stays in ``memory.py``, which a memory
server imports without the Valkey client.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from queue_manager.access.authfail.base import MINUTE_MS, AuthBudget, WallClock
from queue_manager.store.base import StoreUnavailable
from queue_manager.store.valkey.errors import translate
from queue_manager.store.valkey.keys import auth_fail_key

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from queue_manager.fleet.hints import Hints
    from queue_manager.store.valkey.breaker import Breaker

log = logging.getLogger("queue_manager.access")


class SharedAuthFailures:
    """The fleet's budget, in Valkey: one counter per address per wall-clock minute; the lockouts, in
    every instance's memory.

    ``fail`` increments ``<prefix>authfail:<address>:<minute>`` (``minute`` = wall-clock milliseconds
    // 60000) and gives it a lifetime of two minutes, in one transaction. When the count it gets back
    has reached the limit, this instance records the address as locked out until the end of that
    minute and (the first time it learns of it) publishes an ``authlock`` hint, so that every other
    instance records the same lockout at once. ``locked`` reads only those records (and ``local``):
    it sends nothing to Valkey, so a request that presents a right credential — a connector's vouched
    door check, a console call — costs no Valkey round trip for this budget.

    The window is a fixed wall-clock minute rather than one minute from the first failure, so every
    instance counts into the same key; failures just before a minute turns and just after it fall
    in different windows. Each instance reads the minute on its own wall clock, so hosts kept in step
    (NTP) agree on it but for a moment at the turn. ``per_minute`` <= 0 turns the budget off: no
    Valkey command at all.

    Hints are lossy (and CTL_HINTS=false turns them off), so a lockout is also learnt from the count:
    every wrong credential is counted in Valkey whichever instance sees it, and an instance whose own
    increment comes back at or past the limit records the lockout then (and that failure is answered
    as a locked-out one). The worst case is an instance that missed the hint: until it sees a wrong
    credential from that address or a later hint, a right credential from the locked-out address is
    let through there for the rest of the minute. A wrong credential is always counted fleet-wide, so
    a guesser still gets the limit in total; and since a hint takes a moment to travel, the same holds
    for a right credential presented elsewhere in the instant after the lockout.

    While Valkey cannot be reached (or ``breaker`` holds it as unreachable) no call raises: a failure
    is counted by ``local``, this process's own budget, which ``locked`` also consults, so the team
    can still sign in while a guesser is still rationed per instance; lockouts learnt before stand
    until their minute ends. A warning is logged at most once a minute while it lasts.
    """

    KEY_TTL_SEC = 120
    WARN_EVERY_MS = MINUTE_MS
    HINT = "authlock"  # {"ip": address, "minute": wall-clock minute}: locked out until that minute ends

    def __init__(
        self,
        redis: Redis,
        prefix: str,
        per_minute: int,
        clock: WallClock,
        *,
        local: AuthBudget,
        breaker: Breaker | None = None,
        hints: Hints | None = None,
        max_keys: int = 10_000,
    ) -> None:
        self.redis = redis
        self.prefix = prefix
        self.limit = per_minute
        self.clock = clock
        self.local = local
        self.breaker = breaker
        self.hints = hints
        self.max_keys = max(1, max_keys)
        self.fallbacks = 0  # failures counted by the local budget because Valkey could not be reached
        self._warned_at: int | None = None
        self._until: OrderedDict[str, int] = OrderedDict()  # address -> locked out until (wall ms)
        if hints is not None:
            hints.on(self.HINT, self._hinted)

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

    def _retry(self, ip: str, now: int) -> int | None:
        until = self._until.get(ip)
        if until is None:
            return None
        if now >= until:
            del self._until[ip]
            return None
        return max(1, (until - now + 999) // 1000)

    def _record(self, ip: str, minute: int) -> None:
        until = (minute + 1) * MINUTE_MS
        if self._until.get(ip, 0) >= until:
            return
        self._until[ip] = until
        self._until.move_to_end(ip)
        if len(self._until) > self.max_keys:
            self._until.popitem(last=False)

    def _hinted(self, data: dict[str, Any]) -> None:
        ip, minute = data.get("ip"), data.get("minute")
        if self.limit <= 0 or not isinstance(ip, str) or not isinstance(minute, int) or isinstance(minute, bool):
            return
        if minute >= self.clock.wall_ms() // MINUTE_MS:  # a hint for a minute already over changes nothing
            self._record(ip, minute)

    async def locked(self, ip: str) -> int | None:
        if self.limit <= 0:
            return None
        retry = self._retry(ip, self.clock.wall_ms())
        return retry if retry is not None else await self.local.locked(ip)

    async def fail(self, ip: str) -> int | None:
        if self.limit <= 0:
            return None
        now = self.clock.wall_ms()
        minute = now // MINUTE_MS
        key = auth_fail_key(self.prefix, ip, minute)
        try:
            with translate(None, self.breaker):
                async with self.redis.pipeline(transaction=True) as pipe:
                    pipe.incr(key)
                    pipe.expire(key, self.KEY_TTL_SEC)
                    count, _ = await pipe.execute()
        except StoreUnavailable as exc:
            self._unreachable(exc)
            return await self.local.fail(ip)
        if int(count) < self.limit:
            return None
        known = self._retry(ip, now) is not None
        self._record(ip, minute)
        if not known and self.hints is not None:  # news here: tell the others (past the limit, a lost hint resent)
            await self.hints.publish(self.HINT, ip=ip, minute=minute)
        return self._retry(ip, now) if int(count) > self.limit else None
