"""Many deadlines on one timer: ``PROXY_TIMEOUT_MS`` for every relay waiting on a response head.

A timer per request costs more than the rest of a small proxied request's bookkeeping, and so does
reading the clock. Here a relay is put in a dict, with the sweep count at that moment, when its request
is fully sent, and taken out when the head arrives; one timer, running only while the dict is not
empty, sweeps it ten times per timeout (at most every 250 ms) and times out whatever has been waiting
for a whole timeout's worth of sweeps. A relay therefore waits at least the timeout and at most two
sweeps (a fifth of it, or 500 ms) longer.
"""

from __future__ import annotations

import asyncio
import math
from typing import Protocol


class Expiring(Protocol):
    def timed_out(self) -> None: ...


class Deadlines:
    """Relays waiting on a response head, each with the sweep it was added in."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.every = min(0.25, max(0.005, timeout / 10))
        self.sweeps_per_timeout = max(1, math.ceil(timeout / self.every - 1e-9))
        self.sweep = 0  # sweeps so far: the clock this counts in
        self.waiting: dict[Expiring, int] = {}
        self.timer: asyncio.TimerHandle | None = None

    def add(self, relay: Expiring) -> None:
        self.waiting[relay] = self.sweep
        if self.timer is None:
            self.timer = asyncio.get_running_loop().call_later(self.every, self._sweep)

    def discard(self, relay: Expiring) -> None:
        self.waiting.pop(relay, None)

    def _sweep(self) -> None:
        self.timer = None
        self.sweep += 1
        # added in sweep s, a relay has waited at least (now - s - 1) whole periods; late once that is a timeout
        cutoff = self.sweep - 1 - self.sweeps_per_timeout
        late = [relay for relay, added in self.waiting.items() if added <= cutoff]
        for relay in late:
            del self.waiting[relay]
            relay.timed_out()
        if self.waiting:
            self.timer = asyncio.get_running_loop().call_later(self.every, self._sweep)
