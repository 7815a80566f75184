"""All rooms of one store: create/update/delete with generations, schedules, the tick, look-ups."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from queue_manager.clock import Clock
from queue_manager.engine import drop, outflow, report
from queue_manager.engine.errors import EngineError, bad_field, no_room
from queue_manager.engine.events import Event
from queue_manager.engine.model import (
    RoomConfig,
    apply_fields,
    check_room_id,
    check_schedule_body,
    normalise_body,
    parse_opens_at,
)
from queue_manager.engine.randomness import SYSTEM_RANDOM, RandomSource
from queue_manager.engine.room import Room
from queue_manager.engine.ticket import make_ref

GENERATIONS_KEPT = 3
ARCHIVE_TICKETS = 50_000


@dataclass(slots=True)
class Archive:
    """What is kept of a deleted generation: enough to say ``previous_generation`` to a caller."""

    gen: int
    refs: dict[str, list[int]] = field(default_factory=dict)
    tickets: int = 0
    deleted_ms: int = 0


def check_expected_state(room_id: str, state: str, expect_state: str | None) -> None:
    """The compare of a compare-and-set state change: refuse (409 state_changed) unless the room's
    configured state (active, paused or bypass) is still ``expect_state``. Automation that flips a
    room's state (threshold activation, autotune) sends the state it read, so a room an operator
    changed a moment before is never flipped back."""
    if expect_state is not None and state != expect_state:
        raise EngineError(409, "state_changed", f"{room_id} is {state} now, not {expect_state}", state=state)


def check_expected_fields(room_id: str, cfg: RoomConfig, expect: Mapping[str, Any] | None) -> None:
    """The compare of a compare-and-set on room fields: refuse (409 config_changed) unless each field named
    in ``expect`` still reads as given (its public form, as a room read shows it). The room's events
    compare ``eventInForce`` (a boundary applied once) and the events routes compare ``events`` (two
    edits of the list never lose one another)."""
    if not expect:
        return
    public = cfg.to_public(logo_data=False)
    changed = sorted(k for k, v in expect.items() if public.get(k) != v)
    if changed:
        raise EngineError(409, "config_changed", f"{room_id} changed meanwhile: {', '.join(changed)}", fields=changed)


class Engine:
    """All rooms of one store. ``rng`` is the random source every room it builds draws from
    (pre-queue handles, the drop's draw): the system's secure source unless given."""

    def __init__(self, clock: Clock, *, rng: RandomSource = SYSTEM_RANDOM) -> None:
        self.clock = clock
        self.rng = rng
        self.rooms: dict[str, Room] = {}
        self.generations: dict[str, int] = {}
        self.archives: dict[str, deque[Archive]] = {}
        self.events: list[Event] = []
        self.held = False  # admission maintenance: every room holds its line (see Room.held)

    def set_held(self, held: bool) -> None:
        """Admission maintenance on or off for every room, those made later included."""
        self.held = held
        for room in self.rooms.values():
            room.held = held

    def drain_events(self) -> list[Event]:
        """Every event since the last drain, in the order they happened (rooms share this list)."""
        out = list(self.events)
        self.events.clear()
        return out

    def room(self, room_id: str) -> Room:
        room = self.rooms.get(room_id)
        if room is None:
            raise no_room(room_id)
        return room

    # ------------------------------------------------------------------ room definitions

    def upsert(
        self,
        body: dict[str, Any],
        *,
        expect_state: str | None = None,
        expect: Mapping[str, Any] | None = None,
        system: bool = False,
    ) -> tuple[Room, bool, list[str]]:
        """Create the room named by ``body["id"]`` or change exactly the fields sent.

        ``expect_state``: change the room only while its configured state is that one (see
        ``check_expected_state``); ``expect``: only while those fields read as given
        (``check_expected_fields``); neither ever creates one. ``system``: automation's change, which may
        write the fields only it writes (``model.SYSTEM_FIELDS``).
        """
        body = normalise_body(body, system=system)
        if "id" not in body:
            raise bad_field("id", "id is required.", "invalid_room_id")
        room_id = body["id"]
        existing = self.rooms.get(room_id) if isinstance(room_id, str) else None
        if existing is None:
            check_room_id(room_id)
            if expect_state is not None or expect:
                raise no_room(room_id)
            cfg, changed = apply_fields(None, body)
            gen = self.generations.get(room_id, 0) + 1
            self.generations[room_id] = gen
            room = Room(cfg, gen, self.clock, self.events, rng=self.rng)
            room.held = self.held
            self.rooms[room_id] = room
            room.emit("room.create", fields=changed, config=cfg.to_event(None), **self._commit(room, None))
            return room, True, changed
        check_expected_state(room_id, existing.cfg.state, expect_state)
        check_expected_fields(room_id, existing.cfg, expect)
        cfg, changed = apply_fields(existing.cfg, body)
        old = existing.cfg
        existing.advance()
        existing.apply_config(cfg)  # unchanged rules keep their match counters; pacing restarts on a change
        clocks = (old.session_ttl_sec, old.session_max_sec, old.passed_ttl_sec, old.presence_sec)
        if clocks != (cfg.session_ttl_sec, cfg.session_max_sec, cfg.passed_ttl_sec, cfg.presence_sec):
            existing.reschedule()
        existing.emit(
            "room.update", fields=changed, config=cfg.to_event(old), **self._commit(existing, old.opens_at_ms)
        )
        return existing, False, changed

    def delete(self, room_id: str) -> Room:
        room = self.room(room_id)
        archive = Archive(room.gen, deleted_ms=self.clock.wall_ms(), tickets=room.next_n - 1)
        for n in range(1, min(room.next_n, ARCHIVE_TICKETS + 1)):
            archive.refs.setdefault(make_ref(room_id, room.gen, n), []).append(n)
        kept = self.archives.setdefault(room_id, deque(maxlen=GENERATIONS_KEPT))
        kept.append(archive)
        room.emit("room.delete")
        del self.rooms[room_id]
        return room

    def schedule(self, room_id: str, body: Any) -> Room:
        room = self.room(room_id)
        body = check_schedule_body(body)
        room.advance()
        fields: dict[str, Any] = {}
        if "opensAt" in body:
            fields["opensAt"] = parse_opens_at(body["opensAt"])
        if "preQueueMaxPerIp" in body:
            fields["preQueueMaxPerIp"] = body["preQueueMaxPerIp"]
        cfg, changed = apply_fields(room.cfg, {"id": room_id, **fields})
        cancelled = "opensAt" in body and body["opensAt"] is None and room.cfg.opens_at_ms is not None
        before, previous = room.cfg.opens_at_ms, room.cfg
        room.apply_config(cfg, pacing=False)
        if cancelled and room.prequeue:
            # cancelling opens the doors now: the pre-queue is drawn, never thrown away
            drop.draw(room)
        room.emit("room.schedule", fields=changed, config=cfg.to_event(previous), **self._commit(room, before))
        return room

    def _commit(self, room: Room, opens_before: int | None) -> dict[str, str]:
        """A drop scheduled, or moved to another instant: a new secret seed, committed now, carried by
        the room change's event (``seed``). Anything else keeps the published commitment."""
        opens = room.cfg.opens_at_ms
        if opens is None or opens == opens_before:
            return {}
        seed = self.rng.draw_seed()
        room.commit_draw(seed)
        return {"seed": seed.hex()}

    # ------------------------------------------------------------------ time

    def tick(self) -> int:
        promoted = 0
        for room in list(self.rooms.values()):
            room.held = self.held  # a room restored from a snapshot learns it here at the latest
            promoted += outflow.tick(room)
        return promoted

    # ------------------------------------------------------------------ look-ups

    def lookup(self, room_id: str, query: str) -> dict[str, Any]:
        room = self.rooms.get(room_id)
        if room is not None:
            try:
                return report.lookup(room, query)
            except EngineError as err:
                if err.code != "no_ticket" or (query.strip().isascii() and query.strip().isdigit()):
                    raise
        q = query.strip().upper()
        for archive in reversed(self.archives.get(room_id, ())):
            numbers = archive.refs.get(q)
            if numbers:
                return {
                    "state": "previous_generation",
                    "generation": archive.gen,
                    "tickets": numbers,
                    "ref": q,
                    "message": f"Ref {q} was ticket {', '.join(map(str, numbers))} of an earlier generation "
                    f"({archive.gen}) of this room, which was deleted and created again. The caller has to "
                    "join again.",
                }
        if room is None:
            raise no_room(room_id)
        raise EngineError(404, "no_ticket", f"No ticket {query!r} in this room.", query=query)
