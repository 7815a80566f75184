"""ADMIN_AUTH_FAIL_PER_MIN: how many wrong credentials an address may present a minute.

One interface (:class:`AuthBudget`: ``locked`` then ``fail``), two forms:

* :class:`~queue_manager.access.authfail.memory.AuthFailures` — this process's own count (STORE=memory):
  an LRU map address -> [window start, failures], the window one minute from the address's first failure;
* :class:`~queue_manager.access.authfail.valkey.SharedAuthFailures` — the fleet's count in Valkey
  (STORE=valkey, in its own module so a memory server never loads the Valkey client): every instance spends
  the same budget, so a guesser cannot multiply its tries by the number of instances behind a load
  balancer. ``locked`` answers from this process alone (no Valkey command: it runs on every request
  that presents a credential, vouched door checks included); only a wrong credential reaches Valkey.
  While Valkey cannot be reached it counts in this process instead (see the class).
"""

from __future__ import annotations

from typing import Protocol

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
    """The clock the fleet's budget reads its minute from."""

    def wall_ms(self) -> int: ...
