"""Many deadlines on one timer: ``PROXY_TIMEOUT_MS`` for every relay waiting on a response head.

A timer per request costs more than the rest of a small proxied request's bookkeeping; here a relay
is put in a dict when its request is fully sent and taken out when the head arrives, and one timer,
running only while the dict is not empty, sweeps it ten times per timeout (at most every 250 ms).
"""

from __future__ import annotations

import asyncio
from typing import Protocol


class Expiring(Protocol):
    def timed_out(self) -> None: ...


class Deadlines:
    """Relays waiting on a response head, each with the loop time it may wait until."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.every = min(0.25, max(0.005, timeout / 10))
        self.waiting: dict[Expiring, float] = {}
        self.timer: asyncio.TimerHandle | None = None

    def add(self, relay: Expiring) -> None:
        loop = asyncio.get_running_loop()
        self.waiting[relay] = loop.time() + self.timeout
        if self.timer is None:
            self.timer = loop.call_later(self.every, self._sweep)

    def discard(self, relay: Expiring) -> None:
        self.waiting.pop(relay, None)

    def _sweep(self) -> None:
        self.timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        late = [relay for relay, at in self.waiting.items() if at <= now]
        for relay in late:
            del self.waiting[relay]
            relay.timed_out()
        if self.waiting:
            self.timer = loop.call_later(self.every, self._sweep)
