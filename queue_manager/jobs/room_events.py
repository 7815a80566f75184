"""The rooms' scheduled events followed on the server clock: the leader applies each boundary once.

Every instance keeps the rooms' events and ``eventInForce`` as last read (all rooms at start and every
``RESCAN_SEC``; a room again whenever it is announced changed, here or by another instance). Each second
the leader computes, per room with events, what is due (``engine/room_events.step``) and, at a boundary,
writes the room's change as a compare-and-set on ``eventInForce``: the boundary is applied once, whoever
leads, and a leader that loses the lease mid-change leaves nothing half done (the next one sees what
was written and goes on from there). Each boundary is an audit row under the system actor
(``room.event``), which the room's chart shows as a mark; the change itself is journaled and reaches
every instance as any room change does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from queue_manager.background import Job, stop_if_cancelled
from queue_manager.engine.errors import EngineError
from queue_manager.engine.model import event_fields
from queue_manager.engine.room_events import EventInForce, RoomEvent, Step, step
from queue_manager.engine.snapshot import config_from_public
from queue_manager.store.base import StoreUnavailable

if TYPE_CHECKING:
    from queue_manager.context import Context
    from queue_manager.fleet.parts import FleetParts
    from queue_manager.jobs.shared_state import Leadership

log = logging.getLogger("queue_manager.events")

TICK_SEC = 1.0
RESCAN_SEC = 30.0

Audit = Callable[..., Awaitable[None]]


@dataclass(slots=True)
class Followed:
    """One room's events as last read, with what is in force and the values events compare."""

    events: tuple[RoomEvent, ...]
    in_force: EventInForce | None
    current: dict[str, Any]
    public_in_force: dict[str, Any] | None


def followed(room: Mapping[str, Any]) -> Followed | None:
    """A room read (``get_room``/``list_rooms``) as the job follows it; None when it has no events."""
    if not room.get("events") and room.get("eventInForce") is None:
        return None
    cfg = config_from_public(room)
    return Followed(cfg.events, cfg.event_in_force, event_fields(cfg), room.get("eventInForce"))


def room_body(room_id: str, change: Step) -> dict[str, Any]:
    """The step's fields as a room change (``message`` is the brand's)."""
    body: dict[str, Any] = {"id": room_id}
    for key, value in change.body.items():
        if key == "message":
            body["brand"] = {"message": value or None}
        else:
            body[key] = value
    body["eventInForce"] = None if change.in_force is None else change.in_force.to_public()
    return body


class EventKeeper:
    def __init__(self, ctx: Context, leadership: Leadership, fleet: FleetParts | None = None) -> None:
        self.ctx = ctx
        self.leadership = leadership
        self.fleet = fleet
        self.rooms: dict[str, Followed] = {}
        self.stale: set[str] = set()
        self._scanned_at: float | None = None
        self.job = Job("qm-room-events", self._run)
        ctx.room_changes.subscribe(self._on_change)

    def start(self) -> None:
        self.job.start()

    async def stop(self) -> None:
        await self.job.stop()

    @property
    def leader(self) -> bool:
        return self.leadership.leader and (self.fleet is None or self.fleet.connection.up)

    async def _on_change(self, rooms: frozenset[str]) -> None:
        self.stale |= rooms

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            next_at += TICK_SEC
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            if not self.leader:
                self._scanned_at = None  # a new leader reads every room first
                continue
            try:
                await self.round()
            except StoreUnavailable as exc:
                log.warning("room events: store unavailable: %s", exc)
            except Exception:
                log.exception("room events: a round failed")
            stop_if_cancelled()  # a driver mid-call may take the stop's cancel for its own: the loop ends anyway
            if loop.time() - next_at > 5.0:
                next_at = loop.time()

    async def round(self) -> None:
        """Read what changed (every room now and then), then apply what is due in each room with events."""
        now_s = asyncio.get_running_loop().time()
        if self._scanned_at is None or now_s - self._scanned_at >= RESCAN_SEC:
            self.stale.clear()
            rooms = await self.ctx.store.list_rooms()
            self.rooms = {}
            for room in rooms:
                self._take(str(room["id"]), room)
            self._scanned_at = now_s
        else:
            stale, self.stale = self.stale, set()
            for room_id in stale:
                await self._read(room_id)
        now = self.ctx.clock.wall_ms()
        for room_id in list(self.rooms):
            await self._follow(room_id, now)

    def _take(self, room_id: str, room: Mapping[str, Any]) -> None:
        try:
            seen = followed(room)
        except EngineError as err:  # a stored room is valid; this is only a safety net
            log.warning("room events: %s: %s", room_id, err.message)
            seen = None
        if seen is None:
            self.rooms.pop(room_id, None)
        else:
            self.rooms[room_id] = seen

    async def _read(self, room_id: str) -> None:
        try:
            room = await self.ctx.store.get_room(room_id)
        except EngineError as err:
            if err.code == "no_room":
                self.rooms.pop(room_id, None)
                return
            raise
        self._take(room_id, room)

    async def _follow(self, room_id: str, now: int) -> None:
        seen = self.rooms.get(room_id)
        if seen is None:
            return
        change = step(seen.events, seen.in_force, seen.current, now)
        if change is None:
            return
        body = room_body(room_id, change)
        try:
            await self.ctx.store.upsert_room(body, expect={"eventInForce": seen.public_in_force}, system=True)
        except EngineError as err:
            if err.code not in ("config_changed", "no_room"):
                log.warning("room events: %s: %s", room_id, err.message)
            await self._read(room_id)  # changed meanwhile (another leader applied it): read it and go on
            return
        await self._audit(room_id, change)
        await self.ctx.room_changes.announce(frozenset((room_id,)))
        await self._read(room_id)

    async def _audit(self, room_id: str, change: Step) -> None:
        """One audit row per boundary the step crossed: an end, a beginning, or an edit of the event in force."""
        crossed: list[tuple[str, str]] = []
        if change.ended is not None:
            crossed.append((change.ended, "end"))
        if change.began is not None:
            crossed.append((change.began[0], "prequeue" if change.began[1] == "prequeue" else "start"))
        elif change.ended is None and change.in_force is not None:
            crossed.append((change.in_force.id, "edited"))
        fields = sorted(change.body)
        for event_id, what in crossed:
            await self.ctx.access.audit(
                None, "room.event", target=room_id, room_id=room_id, event=event_id, change=what, fields=fields
            )
            log.info("room events: %s: event %s: %s", room_id, event_id, what)
