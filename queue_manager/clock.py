"""Clocks, injected everywhere time matters.

Two readings, never mixed:

* ``mono()`` — seconds on a monotonic clock. Pacing (outflow credit, claim windows, presence,
  session idling) uses it, so an NTP step can neither burst nor stall promotions.
* ``wall_ms()`` — milliseconds since the Unix epoch, for recorded timestamps and token ``iat``.
  It never moves backwards: a step back is absorbed (the last value is repeated until the
  wall clock passes it again), which keeps logs and prune order consistent.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def mono(self) -> float: ...

    def mono_ms(self) -> int: ...

    def wall_ms(self) -> int: ...


class SystemClock:
    """The process clock. ``steps`` counts wall-clock steps larger than ``step_threshold_sec``."""

    def __init__(self, step_threshold_sec: float = 5.0) -> None:
        self._last_wall = 0
        self._threshold_ms = int(step_threshold_sec * 1000)
        self._ref_wall = time.time() * 1000.0
        self._ref_mono = time.monotonic()
        self.steps: list[tuple[int, int]] = []  # (wall_ms when noticed, step in ms, signed)

    def mono(self) -> float:
        return time.monotonic()

    def mono_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def wall_ms(self) -> int:
        raw = int(time.time() * 1000)
        if raw < self._last_wall:
            return self._last_wall
        self._last_wall = raw
        return raw

    def check_step(self) -> int | None:
        """Compare wall against monotonic progress; returns the step in ms when it exceeds the threshold."""
        now_wall = time.time() * 1000.0
        now_mono = time.monotonic()
        expected = self._ref_wall + (now_mono - self._ref_mono) * 1000.0
        drift = int(now_wall - expected)
        self._ref_wall, self._ref_mono = now_wall, now_mono
        if abs(drift) > self._threshold_ms:
            self.steps.append((int(now_wall), drift))
            return drift
        return None


class FakeClock:
    """A clock for tests: starts at a fixed instant and moves only when told."""

    def __init__(self, wall_ms: int = 1_767_225_600_000, mono: float = 1000.0) -> None:
        self._wall = wall_ms
        self._mono_ms = round(mono * 1000)  # kept in whole milliseconds, so arithmetic is exact

    def mono(self) -> float:
        return self._mono_ms / 1000

    def mono_ms(self) -> int:
        return self._mono_ms

    def wall_ms(self) -> int:
        return self._wall

    def advance(self, seconds: float) -> None:
        self._mono_ms += round(seconds * 1000)
        self._wall += round(seconds * 1000)

    def step_wall(self, seconds: float) -> None:
        """Move only the wall clock (an NTP step); monotonic time is untouched."""
        self._wall += round(seconds * 1000)
