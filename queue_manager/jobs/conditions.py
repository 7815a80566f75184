"""The alert conditions: which events hold right now, from one frame's numbers.

Pure: the frame (``Frame``) is gathered by ``alert_frame.py``; this module decides, for each room and
for the fleet, which conditions are true at this instant. Holding a condition for ``ALERT_HOLD_SEC``,
re-paging and resolving are ``alerting.py``'s. The events, their conditions and messages are the
table in docs/OPERATIONS.md ("Alerting").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["critical", "warning", "info"]

# Surge: joins/min at 4x the rate let through or more (and at least 20/min); it clears under 2x, so a
# surge hovering around the line does not page on every frame.
SURGE_FACTOR = 4
SURGE_CLEAR_FACTOR = 2
SURGE_MIN_JOINS = 20


@dataclass(frozen=True, slots=True)
class Condition:
    event: str
    room_id: str | None
    severity: Severity
    message: str

    @property
    def key(self) -> str:
        return f"{self.event}|{self.room_id or ''}"


@dataclass(slots=True)
class StorageReport:
    """One instance's storage as it reported it in its last alert frame."""

    instance: str
    at: int  # wall ms of the report
    ok: bool  # its journal reads healthy
    paging: bool  # two of its alert frames within 3 x ALERT_EVERY_MS saw new failures
    quarantined: int = 0  # spool files it moved to failed/ (PostgreSQL refused them, or they do not parse)
    spooling: bool = False  # its journal writes to the disk spool (maintenance, or SPOOL_ON_FAILURE)


@dataclass(slots=True)
class Frame:
    """What one alert frame looks at."""

    now: int  # wall ms
    rooms: Sequence[Mapping[str, Any]]  # the store's room list: settings and stats
    open_keys: set[str] = field(default_factory=set)  # conditions open before this frame
    storage: Sequence[StorageReport] = ()
    storage_window_ms: int = 15_000  # 3 x ALERT_EVERY_MS
    sites_failing: Mapping[str, str] = field(default_factory=dict)  # room id -> what fails
    # room id -> its journal's open gap as the leader reports it (fleet/gapwatch.py Gap.as_json)
    journal_gaps: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


def room_name(room: Mapping[str, Any]) -> str:
    name = room.get("name")
    return str(name) if name else str(room["id"])


def evaluate(frame: Frame) -> list[Condition]:
    out: list[Condition] = []
    for room in frame.rooms:
        out.extend(_room_conditions(room, frame))
    storage = _storage_condition(frame)
    if storage is not None:
        out.append(storage)
    names = {str(room["id"]): room_name(room) for room in frame.rooms}
    for room_id, gap in sorted(frame.journal_gaps.items()):
        out.append(_journal_gap(room_id, names.get(room_id, room_id), gap))
    return out


def _journal_gap(room_id: str, name: str, gap: Mapping[str, Any]) -> Condition:
    missing = int(gap.get("missing") or 0)
    lost = int(gap.get("unrecoverableCount") or 0)
    what = f"{name}: the events journal misses {missing:,} event{'s' if missing != 1 else ''} of this room"
    if lost:
        what += f", {lost:,} of them held nowhere else (a rebuild would fence the room; see /api/admin/health)"
    else:
        what += " that PostgreSQL has not taken yet (they are kept in Valkey)"
    return Condition("journal_gap", room_id, "critical", what)


def _room_conditions(room: Mapping[str, Any], frame: Frame) -> Iterable[Condition]:
    room_id = str(room["id"])
    name = room_name(room)
    state = room.get("effectiveState")
    waiting = int(room.get("waiting") or 0)
    rate = int(room.get("ratePerMinute") or 0)
    joins = int(room.get("joinsLastMinute") or 0)
    if state == "active" and rate > 0 and waiting > 0 and not room.get("passedLastMinute"):
        yield Condition(
            "outflow_stalled",
            room_id,
            "critical",
            f"{name}: {waiting:,} waiting and nobody let through in the last minute",
        )
    if waiting > 0 and state == "paused":
        yield Condition("queue_frozen", room_id, "warning", f"{name}: {waiting:,} waiting and the room is paused")
    elif waiting > 0 and state == "active" and rate == 0:
        yield Condition("queue_frozen", room_id, "warning", f"{name}: {waiting:,} waiting at an outflow rate of 0")
    if state != "bypass":
        floor = max(1, rate)
        open_ = f"surge|{room_id}" in frame.open_keys
        if (joins >= SURGE_MIN_JOINS and joins >= SURGE_FACTOR * floor) or (
            open_ and joins >= SURGE_CLEAR_FACTOR * floor
        ):
            yield Condition(
                "surge", room_id, "warning", f"{name}: surge, {joins:,} joins/min against {rate:,}/min let through"
            )
    failing = frame.sites_failing.get(room_id)
    if failing is not None:
        yield Condition("target_failing", room_id, "critical", f"{name}: the site is not answering ({failing})")


def _storage_condition(frame: Frame) -> Condition | None:
    fresh = [r for r in frame.storage if frame.now - r.at < frame.storage_window_ms]
    paging = sorted(r.instance for r in fresh if r.paging)
    quarantined = sorted(r.instance for r in fresh if r.quarantined)
    was_open = "storage_failing|" in frame.open_keys
    # resolves only once every instance reports healthy and nothing quarantined
    unhealthy = sorted(r.instance for r in fresh if not r.ok)
    names = paging or (unhealthy if was_open else [])
    if not names and not quarantined:
        return None
    # the error's text can name a host or a path: it stays in /api/admin/health, never in the page
    parts = []
    if names:
        spooled = all(r.spooling for r in fresh if r.instance in names)
        outcome = "joins are spooled to disk" if spooled else "joins answer 503"
        parts.append(f"storage failing on {', '.join(names)}: events journal commits to PostgreSQL fail, {outcome}")
    if quarantined:
        files = sum(r.quarantined for r in fresh)
        parts.append(
            f"{files} spool file{'s' if files != 1 else ''} quarantined in failed/ on {', '.join(quarantined)}: "
            "PostgreSQL refused their events (GET /api/v1/status/buffers)"
        )
    return Condition("storage_failing", None, "critical", "; ".join(parts))


def valkey_unreachable(instance: str, down_ms: int) -> Condition:
    return Condition(
        "valkey_unreachable",
        None,
        "critical",
        f"{instance}: Valkey unreachable for {down_ms // 1000} s; this instance answers onBackendDown",
    )
