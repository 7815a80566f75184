"""A room's scheduled events: windows that override some of the room's settings for their span.

An event has a start and an end (server clock), an optional pre-queue start, whether the pre-queue is
shuffled at the start, and the room fields it overrides, by their room names (``OVERRIDABLE``). A room
holds at most ``EVENTS_MAX`` of them and they never overlap.

The room follows its events through one field only automation writes, ``eventInForce``: the event and
phase applied, the values the event set (``applied``) and the values they replaced (``restore``). The
leader compares what is due now (``due``) with what is in force and, at a boundary, makes one change of
the room (``step``) as a compare-and-set on ``eventInForce``, so a boundary is applied exactly once
however many instances look at it.

Phases of an event:

* ``prequeue`` (``preQueueAt`` ≤ now < ``startsAt``): with ``shuffle``, the room's drop is scheduled for
  ``startsAt`` (``opensAt``): visitors gather in the pre-queue and are drawn at the start by the drop's
  verifiable draw; without it the room is paused: visitors join the line in arrival order and nobody is
  let in before the start;
* ``live`` (``startsAt`` ≤ now < ``endsAt``): the overrides are the room's settings;
* after ``endsAt`` (or when the event is deleted) each field the event set goes back to the value it
  replaced, unless it was changed meanwhile (the latest word of an operator stands).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from queue_manager.engine.errors import bad_field

EVENTS_MAX = 5
EVENT_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
NAME_MAX = 120
#: the room fields an event may override, by their room names (``message``: the brand's page message)
OVERRIDABLE = (
    "ratePerMinute",
    "maxConcurrent",
    "sessionTtlSec",
    "sessionMaxSec",
    "maxWaiting",
    "maxWaitSec",
    "queueing",
    "rejectStatus",
    "message",
)
EVENT_KEYS = frozenset({"id", "name", "startsAt", "endsAt", "preQueueAt", "shuffle", *OVERRIDABLE})

Phase = Literal["prequeue", "live"]
#: one room field's value checked as the room's own validation would (raises the field's 400), normalised
CheckField = Callable[[str, Any], Any]
#: an instant as opensAt takes it (ISO 8601 or epoch ms) to epoch ms
ParseTime = Callable[[Any, str], int | None]


@dataclass(frozen=True, slots=True)
class RoomEvent:
    id: str
    starts_at_ms: int
    ends_at_ms: int
    prequeue_at_ms: int | None = None
    shuffle: bool = False
    name: str | None = None
    overrides: tuple[tuple[str, Any], ...] = ()

    def to_public(self, iso: Callable[[int | None], str | None]) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "startsAt": iso(self.starts_at_ms),
            "endsAt": iso(self.ends_at_ms),
            "preQueueAt": iso(self.prequeue_at_ms),
            "shuffle": self.shuffle,
            **dict(self.overrides),
        }

    @property
    def first_ms(self) -> int:
        """When the event first changes the room: its pre-queue's start, else its start."""
        return self.prequeue_at_ms if self.prequeue_at_ms is not None else self.starts_at_ms

    def phase_at(self, now_ms: int) -> Phase | None:
        if self.starts_at_ms <= now_ms < self.ends_at_ms:
            return "live"
        if self.prequeue_at_ms is not None and self.prequeue_at_ms <= now_ms < self.starts_at_ms:
            return "prequeue"
        return None


@dataclass(frozen=True, slots=True)
class EventInForce:
    """What the room follows now: the event and phase, since when, what it set and what that replaced."""

    id: str
    phase: Phase
    since_ms: int
    applied: tuple[tuple[str, Any], ...] = ()
    restore: tuple[tuple[str, Any], ...] = ()

    def to_public(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "phase": self.phase,
            "since": self.since_ms,
            "applied": dict(self.applied),
            "restore": dict(self.restore),
        }


def parse_in_force(value: Any) -> EventInForce | None:
    """``eventInForce`` as automation wrote it (and as the journal and the store keep it)."""
    if value is None:
        return None
    if (
        not isinstance(value, Mapping)
        or not isinstance(value.get("id"), str)
        or value.get("phase") not in ("prequeue", "live")
        or not isinstance(value.get("since"), int)
        or not isinstance(value.get("applied"), Mapping)
        or not isinstance(value.get("restore"), Mapping)
    ):
        raise bad_field("eventInForce", "eventInForce is written by the room's events, not by hand.")
    return EventInForce(
        value["id"],
        value["phase"],
        value["since"],
        tuple(sorted(value["applied"].items())),
        tuple(sorted(value["restore"].items())),
    )


def parse_events(value: Any, check_field: CheckField, parse_time: ParseTime) -> tuple[RoomEvent, ...]:
    """The room field ``events``: a list of at most ``EVENTS_MAX`` events that do not overlap."""
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > EVENTS_MAX:
        raise bad_field("events", f"events must be a list of at most {EVENTS_MAX} events.", "invalid_event")
    events = [parse_event(item, check_field, parse_time) for item in value]
    ids = [e.id for e in events]
    if len(set(ids)) != len(ids):
        raise bad_field("events", "Two events have the same id.", "invalid_event")
    events.sort(key=lambda e: e.first_ms)
    for before, after in itertools.pairwise(events):
        if after.first_ms < before.ends_at_ms:
            raise bad_field(
                "events",
                f"Events {before.id!r} and {after.id!r} overlap: an event (with its pre-queue) starts only "
                "after the one before it ends.",
                "event_overlap",
            )
    return tuple(events)


def parse_event(item: Any, check_field: CheckField, parse_time: ParseTime) -> RoomEvent:
    if not isinstance(item, Mapping):
        raise bad_field("events", "Each event is an object.", "invalid_event")
    unknown = sorted(k for k in item if k not in EVENT_KEYS)
    if unknown:
        raise bad_field(
            "events",
            f"Unknown event field(s): {', '.join(unknown)}. An event overrides only {', '.join(OVERRIDABLE)}.",
            "invalid_event",
        )
    event_id = item.get("id")
    if not isinstance(event_id, str) or not EVENT_ID_RE.match(event_id):
        raise bad_field("events", "An event's id is 1-64 letters, digits, '-' or '_'.", "invalid_event")
    name = item.get("name")
    if name is not None and (not isinstance(name, str) or len(name) > NAME_MAX):
        raise bad_field("events", f"An event's name is at most {NAME_MAX} characters.", "invalid_event")
    starts = parse_time(item.get("startsAt"), "startsAt")
    ends = parse_time(item.get("endsAt"), "endsAt")
    if starts is None or ends is None:
        raise bad_field("events", f"Event {event_id!r} needs startsAt and endsAt.", "invalid_event")
    if ends <= starts:
        raise bad_field("events", f"Event {event_id!r} ends at or before it starts.", "invalid_event")
    prequeue = parse_time(item.get("preQueueAt"), "preQueueAt")
    if prequeue is not None and prequeue >= starts:
        raise bad_field("events", f"Event {event_id!r}: preQueueAt must come before startsAt.", "invalid_event")
    shuffle = item.get("shuffle", False)
    if not isinstance(shuffle, bool):
        raise bad_field("events", "shuffle is true or false.", "invalid_event")
    if shuffle and prequeue is None:
        raise bad_field(
            "events", f"Event {event_id!r}: shuffle draws the pre-queue, so it needs preQueueAt.", "invalid_event"
        )
    overrides: list[tuple[str, Any]] = []
    for key in OVERRIDABLE:
        if key in item:
            overrides.append((key, check_field(key, item[key])))
    return RoomEvent(event_id, starts, ends, prequeue, shuffle, name, tuple(overrides))


def due(events: tuple[RoomEvent, ...], now_ms: int) -> tuple[RoomEvent, Phase] | None:
    """The event and phase the room should follow at ``now_ms``, if any."""
    for event in events:
        phase = event.phase_at(now_ms)
        if phase is not None:
            return event, phase
    return None


def next_boundary(events: tuple[RoomEvent, ...], now_ms: int) -> int | None:
    """The next instant after ``now_ms`` at which what is due changes."""
    times = [t for e in events for t in (e.prequeue_at_ms, e.starts_at_ms, e.ends_at_ms) if t is not None]
    later = [t for t in times if t > now_ms]
    return min(later) if later else None


@dataclass(frozen=True, slots=True)
class Step:
    """One change of the room at a boundary (or after an edit of the event in force): the room fields to
    write (by their API names), the new ``eventInForce`` and what the audit row says."""

    body: dict[str, Any]
    in_force: EventInForce | None
    ended: str | None  # the event whose span this step ends
    began: tuple[str, Phase] | None  # the event and phase it begins (None: the same phase, edited)


def changes_for(event: RoomEvent, phase: Phase) -> dict[str, Any]:
    """The room fields an event's phase sets."""
    if phase == "prequeue":
        return {"opensAt": event.starts_at_ms} if event.shuffle else {"state": "paused"}
    return dict(event.overrides)


def step(
    events: tuple[RoomEvent, ...],
    in_force: EventInForce | None,
    current: Mapping[str, Any],
    now_ms: int,
) -> Step | None:
    """What to change now, or None when the room already follows what is due.

    ``current`` holds the room's current values of the fields events set (``opensAt`` in epoch ms,
    ``message`` as the brand's message by language)."""
    want = due(events, now_ms)
    desired = changes_for(*want) if want is not None else {}
    prior_applied = dict(in_force.applied) if in_force is not None else {}
    prior_restore = dict(in_force.restore) if in_force is not None else {}
    if in_force is None and want is None:
        return None
    same_event = in_force is not None and want is not None and in_force.id == want[0].id
    if (
        same_event
        and want is not None
        and in_force is not None
        and want[1] == in_force.phase
        and desired == prior_applied
    ):
        return None
    values = dict(current)
    body: dict[str, Any] = {}
    restore: dict[str, Any] = {}
    applied: dict[str, Any] = {}
    for field, original in prior_restore.items():
        if values.get(field) != prior_applied.get(field):
            continue  # changed since the event set it: that change stands
        if same_event and field in desired:
            restore[field] = original  # still the event's to set: what it replaced is kept
        else:
            body[field] = values[field] = original
    for field, value in desired.items():
        restore.setdefault(field, values.get(field))
        applied[field] = value
        if values.get(field) != value:
            body[field] = value
    ended = in_force.id if in_force is not None and not same_event else None
    began = None
    if want is not None and (in_force is None or (in_force.id, in_force.phase) != (want[0].id, want[1])):
        began = (want[0].id, want[1])
    since = in_force.since_ms if in_force is not None and began is None else now_ms
    new = None if want is None else EventInForce(want[0].id, want[1], since, _pairs(applied), _pairs(restore))
    return Step(body, new, ended, began)


def _pairs(d: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(d.items()))
