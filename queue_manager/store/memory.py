"""The embedded store (STORE=memory): the engine's state in this process, nothing kept on restart.

There is no journal, so every change is acknowledged at once and 503 storage_unavailable cannot
happen. Several memory instances share nothing but SECRET: each is its own queue.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from queue_manager.clock import Clock
from queue_manager.engine import operator, report, visitor
from queue_manager.engine.draw import DrawState
from queue_manager.engine.engine import Engine
from queue_manager.engine.errors import EngineError
from queue_manager.engine.model import ClientId, RoomConfig
from queue_manager.engine.policy import RoomPolicy, policy_of
from queue_manager.engine.randomness import SYSTEM_RANDOM, RandomSource
from queue_manager.engine.room import Room
from queue_manager.engine.targeting import match as match_rule
from queue_manager.engine.view import MintedWaits, VisitorView, visitor_view
from queue_manager.engine.visitor import CheckResult, NewDoor, Presented
from queue_manager.store.base import ChangeListener


def room_summary(room: Room) -> dict[str, Any]:
    """The room's settings and its stats (rendered by ``engine.view.render_stats``)."""
    return {**room.cfg.to_public(logo_data=False, secrets=False), **report.stats(room)}


class MemoryStore:
    kind = "memory"
    immediate = True  # nothing here awaits: every coroutine finishes on its first step

    def __init__(self, clock: Clock, *, rng: RandomSource = SYSTEM_RANDOM) -> None:
        """``rng``: where pre-queue handles and draws come from (the system's secure source by default)."""
        self.engine = Engine(clock, rng=rng)
        self._listeners: list[ChangeListener] = []
        self._policies: dict[str, tuple[RoomConfig, RoomPolicy]] = {}
        self.events_total = 0

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def on_change(self, listener: ChangeListener) -> None:
        self._listeners.append(listener)

    def _changed(self) -> None:
        events = self.engine.drain_events()
        if not events:
            return
        self.events_total += len(events)
        rooms = {e.room for e in events}
        for listener in self._listeners:
            listener(rooms)

    # rooms ------------------------------------------------------------------

    async def list_rooms(self) -> list[dict[str, Any]]:
        return [room_summary(r) for r in self.engine.rooms.values()]

    async def sample_rooms(
        self, after: Mapping[str, tuple[int, int]]
    ) -> tuple[list[dict[str, Any]], dict[str, MintedWaits]]:
        rooms = list(self.engine.rooms.values())
        return [room_summary(r) for r in rooms], {r.cfg.id: report.minted_waits(r, after.get(r.cfg.id)) for r in rooms}

    async def get_room(self, room_id: str) -> dict[str, Any]:
        return room_summary(self.engine.room(room_id))

    async def room_exists(self, room_id: str) -> bool:
        return room_id in self.engine.rooms

    async def room_policy(self, room_id: str) -> RoomPolicy | None:
        room = self.engine.rooms.get(room_id)
        if room is None:
            return None
        cached = self._policies.get(room_id)
        if cached is None or cached[0] is not room.cfg:  # a new config object means a new version
            cached = (room.cfg, policy_of(room.cfg))
            self._policies[room_id] = cached
        return cached[1]

    async def upsert_room(
        self,
        body: dict[str, Any],
        *,
        expect_state: str | None = None,
        expect: Mapping[str, Any] | None = None,
        system: bool = False,
    ) -> tuple[dict[str, Any], bool, list[str]]:
        try:
            room, created, changed = self.engine.upsert(body, expect_state=expect_state, expect=expect, system=system)
        finally:
            self._changed()
        return room_summary(room), created, changed

    async def delete_room(self, room_id: str) -> None:
        self.engine.delete(room_id)
        self._changed()

    async def schedule(self, room_id: str, body: Any) -> dict[str, Any]:
        try:
            room = self.engine.schedule(room_id, body)
        finally:
            self._changed()
        return room_summary(room)

    async def draw_state(self, room_id: str) -> DrawState:
        room = self.engine.room(room_id)
        room.advance()  # a draw that is due happens before it is shown
        self._changed()
        record = room.draw_record
        return DrawState(
            None if record is None else replace(record, previous=list(record.previous)),
            room.effective_state() == "scheduled",
            len(room.prequeue),
        )

    # visitors ---------------------------------------------------------------

    async def join(
        self,
        room_id: str,
        client: ClientId,
        presented: Presented | None,
        return_url: str | None,
        *,
        lane: str | None = None,
    ) -> VisitorView:
        room = self.engine.room(room_id)
        try:
            found = visitor.join(room, client, presented, return_url, lane)
        finally:
            self._changed()
        return visitor_view(room, found)

    async def status(self, room_id: str, client: ClientId, presented: Presented | None) -> VisitorView:
        return self.status_now(room_id, client, presented)

    def status_now(self, room_id: str, client: ClientId, presented: Presented | None) -> VisitorView:
        """``status`` without a coroutine (this store answers in the process): a live stream's frame."""
        room = self.engine.room(room_id)
        found = visitor.status(room, client, presented)
        self._changed()
        return visitor_view(room, found)

    async def status_many(self, room_id: str, asks: Sequence[tuple[ClientId, Presented | None]]) -> list[VisitorView]:
        if not asks:
            return []
        room = self.engine.room(room_id)
        status = visitor.status
        try:
            return [visitor_view(room, status(room, client, presented)) for client, presented in asks]
        finally:
            self._changed()

    async def check(
        self,
        room_id: str,
        client: ClientId,
        presented: Presented | None,
        door_hash: bytes | None,
        url: str | None,
        new_door: NewDoor,
    ) -> CheckResult:
        room = self.engine.room(room_id)
        result = visitor.check(room, client, presented, door_hash, url, new_door)
        if self.engine.events:
            self._changed()
        return result

    async def door_replay(
        self, room_id: str, presented: Presented, door_hash: bytes, url: str | None
    ) -> CheckResult | None:
        room = self.engine.room(room_id)
        result = visitor.door_replay(room, presented, door_hash, url)
        if result is not None and self.engine.events:
            self._changed()
        return result

    async def revoke_session(
        self, room_id: str, gen: int | None, n: int | None, door_hash: bytes
    ) -> tuple[int, int] | None:
        room = self.engine.room(room_id)
        revoked = visitor.revoke(room, gen, n, door_hash)
        if self.engine.events:
            self._changed()
        return None if revoked is None else (room.gen, revoked)

    async def note_blocked_return(self, room_id: str) -> None:
        room = self.engine.rooms.get(room_id)
        if room is not None:
            room.blocked_returns += 1

    async def note_access_match(self, room_id: str, rule_key: str) -> None:
        room = self.engine.rooms.get(room_id)
        if room is not None:
            matches, _ = room.access_hits.get(rule_key, (0, None))
            room.access_hits[rule_key] = (matches + 1, room.clock.wall_ms())

    async def places_held(self, room_id: str, ident: str) -> int:
        room = self.engine.rooms.get(room_id)
        return 0 if room is None else room.per_ident.get(ident, 0)

    # operators --------------------------------------------------------------

    async def eject(self, room_id: str, query: str) -> dict[str, Any]:
        room = self.engine.room(room_id)
        found = report.lookup(room, query)
        if "candidates" in found:
            raise EngineError(
                409,
                "ambiguous_ref",
                "That Ref matches several tickets; eject by ticket number.",
                candidates=found["candidates"],
            )
        n = int(found["ticket"])
        operator.eject(room, n)
        self._changed()
        return report.describe(room, n) if n in room.tickets else {"ticket": n, "state": "forgotten"}

    async def purge(self, room_id: str) -> int:
        room = self.engine.room(room_id)
        count = operator.purge(room)
        self._changed()
        return count

    async def flush(self, room_id: str) -> int:
        room = self.engine.room(room_id)
        count = operator.flush(room)
        self._changed()
        return count

    async def lookup(self, room_id: str, query: str) -> dict[str, Any]:
        return self.engine.lookup(room_id, query)

    async def match_rule(self, room_id: str, url: str) -> dict[str, Any]:
        room = self.engine.room(room_id)
        if not room.cfg.rules:
            return {
                "url": url,
                "rule": None,
                "protected": True,
                "why": "the room has no rules: every page is protected",
            }
        rule = match_rule(room.cfg.rules, url)
        if rule is None:
            return {"url": url, "rule": None, "protected": False, "why": "no rule matches: the page is not protected"}
        return {"url": url, "rule": rule.stats(), "protected": rule.action == "queue"}

    # time -------------------------------------------------------------------

    @property
    def held(self) -> bool:
        return self.engine.held

    def set_held(self, held: bool) -> None:
        """Admission maintenance: no promotion and no new admission in any room while on."""
        self.engine.set_held(held)

    async def tick(self) -> set[str]:
        self.engine.tick()
        events = self.engine.drain_events()
        rooms = {e.room for e in events}
        self.events_total += len(events)
        # every room's frame moves on a tick (waiting clocks, ETAs), so every room is announced
        rooms |= set(self.engine.rooms)
        for listener in self._listeners:
            listener(rooms)
        return rooms
