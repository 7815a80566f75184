"""Room changes as an event: a room's settings were created, changed or deleted, here or on another instance.

Whoever keeps something derived from the rooms' settings subscribes (the inline proxy's host index). A
save on this instance announces its room with :meth:`RoomChanges.announce`, which awaits every subscriber,
so the answer to the save leaves after the derived state holds the change; a change another instance
made (its ``rooms`` hint, STORE=valkey) is announced with :meth:`RoomChanges.announce_soon`, from the
hint's callback, without waiting. A subscriber that fails is logged and the others still run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from queue_manager.fleet.hints import Hints

log = logging.getLogger("queue_manager.services")

#: told which rooms changed; may await (a store read)
Subscriber = Callable[[frozenset[str]], Awaitable[None]]


class RoomChanges:
    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []
        self._pending: set[asyncio.Task[None]] = set()

    def subscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.append(subscriber)

    async def announce(self, rooms: frozenset[str]) -> None:
        """Rooms changed on this instance: every subscriber has seen it when this returns."""
        for subscriber in self._subscribers:
            try:
                await subscriber(rooms)
            except Exception:  # one subscriber's failure is not the save's
                log.exception("a room change was not taken in: %s", ", ".join(sorted(rooms)))

    def announce_soon(self, rooms: frozenset[str]) -> None:
        """Rooms another instance changed: announced in a task of its own (called from a hint's callback)."""
        if not rooms or not self._subscribers:
            return
        task = asyncio.get_running_loop().create_task(self.announce(rooms))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    def follow(self, hints: Hints) -> None:
        """Announce the rooms named by every ``rooms`` hint another instance sends (created, changed, deleted)."""
        hints.on("rooms", self._on_hint)

    def _on_hint(self, hint: dict[str, Any]) -> None:
        named = (hint.get(k) for k in ("created", "deleted", "changed"))
        self.announce_soon(frozenset(str(r) for rooms in named if isinstance(rooms, list) for r in rooms))
