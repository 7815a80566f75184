"""Where this process stands in its run: ready to serve, stopping, the clock's steps, and how to stop it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: how long a wall clock step stays on the health report
CLOCK_INCIDENT_MS = 3_600_000


class RunState:
    """Ready once every part has started; stopping from the first instant of a stop (never ready again)."""

    __slots__ = ("_stop", "clock_incidents", "ready", "shutting_down")

    def __init__(self) -> None:
        self.ready = False
        self.shutting_down = False
        self.clock_incidents: list[dict[str, Any]] = []  # the wall clock's steps within the last hour
        self._stop: Callable[[], None] | None = None

    def started(self) -> None:
        self.ready = True

    def stopping(self) -> None:
        self.shutting_down = True
        self.ready = False

    def clock_stepped(self, at_ms: int, step_ms: int) -> None:
        self.clock_incidents.append({"at": at_ms, "stepMs": step_ms})

    def recent_clock_incidents(self, now_ms: int) -> list[dict[str, Any]]:
        """The steps within the last hour (older ones are forgotten here)."""
        self.clock_incidents[:] = [i for i in self.clock_incidents if now_ms - i["at"] < CLOCK_INCIDENT_MS]
        return self.clock_incidents

    def stop_through(self, stop: Callable[[], None]) -> None:
        """How to end the process through the same path SIGTERM takes (set by the CLI around the server)."""
        self._stop = stop

    def request_stop(self) -> bool:
        """End the process as SIGTERM does; False when nothing around the server can (an in-process server)."""
        if self._stop is None:
            return False
        self._stop()
        return True
