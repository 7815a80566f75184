"""The fast answer while Valkey is unreachable (the guide's "When the backend is down").

After a failure that means Valkey is unreachable (connection refused or lost, a command timed
out), every call answers ``ValkeyUnreachable`` at once for ``HOLD_SEC`` instead of each waiting for
its own command timeout. Then one call at a time goes through as a probe (the others still get
the fast answer): when Valkey answers it the store is back; when it fails the hold starts again.
Any answer from Valkey, an error reply included, counts as reachable.

The hold does not wait for its end to find Valkey back: the store's one-second tick probes through
it (``claim_probe``), and an answer Valkey gives anywhere else in the process (the pub/sub
subscription, the leader lease: ``heard``) ends it at once. Service comes back within about a
second of Valkey, not up to ``HOLD_SEC`` after it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from queue_manager.store.base import StoreUnavailable

HOLD_SEC = 5.0


class ValkeyUnreachable(StoreUnavailable):
    """Valkey did not answer (or is being held as down): 503 storage_unavailable with Retry-After."""


class Breaker:
    def __init__(self, hold_sec: float = HOLD_SEC, clock: Callable[[], float] = time.monotonic) -> None:
        self.hold_sec = hold_sec
        self.clock = clock
        self.down_since: float | None = None  # the first failure of the current outage
        self.hold_until = 0.0
        self.probing = False
        self.fast_answers = 0  # calls answered at once while held (for health and tests)
        self.trips = 0

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def enter(self) -> bool:
        """Before a call: raises ValkeyUnreachable for a fast answer; True when this call is the probe."""
        if self.down_since is None:
            return False
        if self.probing or self.clock() < self.hold_until:
            self.fast_answers += 1
            left = max(1, round(self.hold_until - self.clock())) if not self.probing else 1
            raise ValkeyUnreachable("valkey unreachable: answering at once until it is back", retry_after=left)
        self.probing = True
        return True

    def claim_probe(self) -> bool:
        """While held: make the next call the probe now, before the hold ends (the tick's, once a
        second). False when Valkey is not held as down, or a probe is already on its way."""
        if self.down_since is None or self.probing:
            return False
        self.probing = True
        return True

    def heard(self) -> None:
        """Valkey answered a command made outside the store's calls (the pub/sub subscription, the
        leader lease): it is reachable, so the fast answers end now. A probe on its way still reports."""
        self.down_since = None
        self.hold_until = 0.0

    def failed(self, probe: bool) -> None:
        if self.down_since is None:
            self.down_since = self.clock()
            self.trips += 1
        self.hold_until = self.clock() + self.hold_sec
        if probe:
            self.probing = False

    def answered(self, probe: bool) -> None:
        self.down_since = None
        self.hold_until = 0.0
        if probe:
            self.probing = False

    def abandoned(self, probe: bool) -> None:
        """The call was cancelled before Valkey said anything: no verdict."""
        if probe:
            self.probing = False
