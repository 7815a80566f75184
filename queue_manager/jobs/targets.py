"""Target health for snippet rooms: the leader probes each room's targetUrl (placeholder: filled in next)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from queue_manager.clock import Clock
from queue_manager.config import Settings
from queue_manager.jobs.shared import Shared


class TargetProbe:
    def __init__(self, settings: Settings, shared: Shared, clock: Clock) -> None:
        self.settings = settings
        self.shared = shared
        self.clock = clock
        self.seen: dict[str, dict[str, Any]] = {}

    async def round(self, rooms: Sequence[Mapping[str, Any]], now: int) -> None:
        return None

    def view(self, *, full: bool) -> dict[str, dict[str, Any]]:
        return {}

    async def close(self) -> None:
        return None
