"""The clock every instance of a fleet shares (STORE=valkey).

Pacing (outflow credit, claim windows, presence, sessions) runs on monotonic milliseconds that the
Lua scripts compare across instances, so each process's monotonic clock is anchored once, at
connect, to Valkey's ``TIME``::

    mono_ms = valkey_ms_at_anchor + (time.monotonic_ns() - anchor_ns) // 1_000_000

Every instance then reads (to within the network delay of its anchor and the drift of its own
oscillator) the same timeline, and no NTP step on any instance's host moves it. ``wall_ms`` is this
process's wall clock, never moving backwards, as ``SystemClock`` keeps it; it is only recorded
(event ``ts``, ``joined``), never used for pacing.
"""

from __future__ import annotations

import time
from typing import Any

from queue_manager.store.base import StoreUnavailable


class SharedClock:
    def __init__(self) -> None:
        self._base_ms: int | None = None
        self._anchor_ns = 0
        self._last_wall = 0

    @property
    def anchored(self) -> bool:
        return self._base_ms is not None

    async def anchor(self, client: Any) -> None:
        """Read Valkey's TIME once; the midpoint of the round trip is the anchor instant."""
        before = time.monotonic_ns()
        seconds, micros = await client.time()
        after = time.monotonic_ns()
        self.set_anchor(int(seconds) * 1000 + int(micros) // 1000, (before + after) // 2)

    def set_anchor(self, valkey_ms: int, anchor_ns: int) -> None:
        self._base_ms = valkey_ms
        self._anchor_ns = anchor_ns

    def mono_ms(self) -> int:
        if self._base_ms is None:
            raise StoreUnavailable("the shared clock is not anchored to Valkey yet")
        return self._base_ms + (time.monotonic_ns() - self._anchor_ns) // 1_000_000

    def mono(self) -> float:
        return self.mono_ms() / 1000

    def wall_ms(self) -> int:
        raw = time.time_ns() // 1_000_000
        if raw < self._last_wall:
            return self._last_wall
        self._last_wall = raw
        return raw
