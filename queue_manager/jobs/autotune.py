"""Autotune (placeholder: filled in next)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from queue_manager.store.base import Store

Audit = Callable[..., Awaitable[None]]


@dataclass(slots=True)
class Signals:
    """What the queue measured of each room's site since the last frame."""

    targets: dict[str, dict[str, Any]] = field(default_factory=dict)  # snippet rooms: the target probe's results
    origins: dict[str, dict[str, Any]] = field(default_factory=dict)  # inline rooms: the origin probe's results
    origin_errors: dict[tuple[str, str], int] = field(default_factory=dict)  # inline: (room, phase) -> errors so far


async def run(
    store: Store, audit: Audit, doc: dict[str, Any], rooms: Sequence[Mapping[str, Any]], now: int, signals: Signals
) -> bool:
    return False
