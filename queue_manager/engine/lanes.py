"""Priority lanes: a room's line split into named lanes released by priority or by share.

A room's ``lanes`` is empty (one implicit line, as a room always had) or a list of lanes, all with a
``priority`` or all with a ``share`` (docs/OPERATIONS.md, "Priority lanes"). The first lane listed is the
default lane: arrivals that no grant places elsewhere join it. Within a lane the order is the line's
(first come, first served); across lanes, each release picks the lane with ``pick_lane``:

* priority: the eligible lane with the highest priority (equal priorities: the one listed first), so a
  lower lane is released only when nobody in a higher lane is waiting and present;
* share: a smooth weighted round-robin with a deficit counter per lane. Each pick adds each eligible
  lane's share to its counter, takes the lane with the largest counter (ties: listed first) and takes
  the eligible shares' total off it; a lane that is not eligible has its counter cleared, so what an
  empty lane leaves goes to the others (work-conserving) and it builds no debt while empty.

The counters live on the room (``Room.lane_credit``, the Valkey state's ``lc``) and travel with every
promotion's event (``lc``), so a rebuild from the journal picks the lanes a live room would have. The
Lua twin is ``store/valkey/lua/prelude.lua`` (``pick_lane``). Not to be confused with the Valkey
store's connection lane (``store/valkey/lane.py``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from queue_manager.engine.errors import EngineError, bad_field

LANE_ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}$")
MAX_LANES = 8
PRIORITY_RANGE = (1, 100)
SHARE_RANGE = (1, 100)


@dataclass(frozen=True, slots=True)
class Lane:
    """One lane: its id and either its ``priority`` (higher released first) or its ``share`` (percent)."""

    id: str
    priority: int | None = None
    share: int | None = None

    def to_public(self) -> dict[str, Any]:
        if self.share is not None:
            return {"id": self.id, "share": self.share}
        return {"id": self.id, "priority": self.priority}


def _bad(message: str) -> EngineError:
    return bad_field("lanes", message, "invalid_lanes")


def parse_lanes(value: Any) -> tuple[Lane, ...]:
    """The ``lanes`` field checked: null or [] for one implicit lane, else 1..8 lanes of one kind."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _bad('lanes must be a list of {"id", "priority"} or {"id", "share"} objects, or null.')
    if len(value) > MAX_LANES:
        raise _bad(f"A room has at most {MAX_LANES} lanes; this list has {len(value)}.")
    lanes: list[Lane] = []
    kinds: set[str] = set()
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise _bad(f"lanes[{i}] must be an object with id and priority, or id and share.")
        extra = sorted(set(item) - {"id", "priority", "share"})
        if extra:
            raise _bad(f"lanes[{i}] has unknown field(s): {', '.join(extra)}.")
        lane_id = item.get("id")
        if not isinstance(lane_id, str) or not LANE_ID_RE.match(lane_id):
            raise _bad(
                f"lanes[{i}].id must be 1-32 characters: lowercase letters, digits and '-', "
                "starting with a letter or digit."
            )
        if any(lane.id == lane_id for lane in lanes):
            raise _bad(f"Lane id {lane_id!r} is listed twice.")
        has_p, has_s = "priority" in item, "share" in item
        if has_p == has_s:
            raise _bad(f"Lane {lane_id!r} needs exactly one of priority or share.")
        kind = "priority" if has_p else "share"
        kinds.add(kind)
        lo, hi = PRIORITY_RANGE if has_p else SHARE_RANGE
        number = item[kind]
        if isinstance(number, bool) or not isinstance(number, int) or not lo <= number <= hi:
            raise _bad(f"Lane {lane_id!r}: {kind} must be a whole number from {lo} to {hi}.")
        lanes.append(Lane(lane_id, priority=number) if has_p else Lane(lane_id, share=number))
    if len(kinds) > 1:
        raise _bad("Lanes are all by priority or all by share, not mixed within one room.")
    if "share" in kinds:
        total = sum(lane.share or 0 for lane in lanes)
        if total != 100:
            raise _bad(f"Lane shares must add up to 100; these add up to {total}.")
    return tuple(lanes)


def unknown_lane(lane_id: str) -> EngineError:
    return EngineError(400, "unknown_lane", f"The room has no lane {lane_id!r}.", lane=lane_id)


def default_lane(lanes: Sequence[Lane]) -> str | None:
    """The lane an arrival without a grant joins (None: the room has no lanes)."""
    return lanes[0].id if lanes else None


def lane_for(lanes: Sequence[Lane], asked: str | None) -> str | None:
    """The lane a join goes to: ``asked`` when the room has it, the default lane when None; an id the
    room does not have (or any id when the room has no lanes) is ``400 unknown_lane``."""
    if asked is None:
        return default_lane(lanes)
    if not any(lane.id == asked for lane in lanes):
        raise unknown_lane(asked)
    return asked


def by_share(lanes: Sequence[Lane]) -> bool:
    return bool(lanes) and lanes[0].share is not None


def pick_lane(lanes: Sequence[Lane], eligible: Iterable[str], counters: dict[str, int]) -> str | None:
    """The lane the next release comes from, among ``eligible`` (lanes with somebody waiting and present
    at the head); None when none is. Share rooms update ``counters`` (the deficit counters)."""
    ready = set(eligible)
    if not ready:
        return None
    if not by_share(lanes):
        best: Lane | None = None
        for lane in lanes:
            if lane.id in ready and (best is None or (lane.priority or 0) > (best.priority or 0)):
                best = lane
        return None if best is None else best.id
    total = 0
    for lane in lanes:
        if lane.id in ready:
            counters[lane.id] = counters.get(lane.id, 0) + (lane.share or 0)
            total += lane.share or 0
        else:
            counters.pop(lane.id, None)
    chosen: str | None = None
    for lane in lanes:
        if lane.id in ready and (chosen is None or counters[lane.id] > counters[chosen]):
            chosen = lane.id
    assert chosen is not None
    counters[chosen] -= total
    for lane_id in [k for k, v in counters.items() if v == 0]:
        del counters[lane_id]  # a zero counter is the same as none: both stores keep only the others
    return chosen


def ahead_lanes(lanes: Sequence[Lane], lane_id: str) -> list[str]:
    """Under priority, the lanes released before ``lane_id`` (higher priority, or equal and listed
    earlier): everyone waiting in them is ahead of its visitors in effect. None under share."""
    if by_share(lanes):
        return []
    index = next((i for i, lane in enumerate(lanes) if lane.id == lane_id), None)
    if index is None:
        return []
    mine = lanes[index].priority or 0
    return [
        lane.id
        for i, lane in enumerate(lanes)
        if i != index and ((lane.priority or 0) > mine or ((lane.priority or 0) == mine and i < index))
    ]


def lane_eta_sec(
    lanes: Sequence[Lane], lane_id: str | None, places: int | None, running: bool, rate_per_minute: int
) -> int | None:
    """Seconds until ``places`` more releases from lane ``lane_id`` (for a priority lane, ``places``
    already counts everyone waiting in the lanes released before it). A share lane's rate is the room's
    rate × share: a lower bound on its outflow, since the other lanes may leave it theirs. None when
    nobody waits or the line does not move (``running`` False, or a rate of 0)."""
    if not places or not running or rate_per_minute <= 0:
        return None
    share = 100
    for lane in lanes:
        if lane.id == lane_id and lane.share is not None:
            share = lane.share
    return max(1, -(-places * 6000 // (rate_per_minute * share)))


def encode_counters(counters: Mapping[str, int]) -> str:
    """The deficit counters in the form the Valkey state keeps (``id=value`` joined by ``,``; sorted)."""
    return ",".join(f"{k}={v}" for k, v in sorted(counters.items()) if v)


def decode_counters(text: str | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in (text or "").split(","):
        if "=" in part:
            k, v = part.split("=", 1)
            out[k] = int(v)
    return out


def encode_lanes(lanes: Sequence[Lane]) -> str:
    """The lanes as the Lua rules read them (the Valkey state's ``c_lanes``): ``p`` or ``s``, then
    ``|id:number`` per lane in order; '' for none."""
    if not lanes:
        return ""
    kind = "s" if by_share(lanes) else "p"
    return kind + "".join(f"|{lane.id}:{lane.share if lane.share is not None else lane.priority}" for lane in lanes)
