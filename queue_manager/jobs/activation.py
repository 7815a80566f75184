"""Threshold activation: a room in bypass puts its own queue up when arrivals spike, and takes it down
again after a quiet spell.

On each alert frame the leader looks at every room with ``autoActivate.enabled``:

* **bypass → active** once the room's arrivals per minute (``joinsLastMinute``, fleet-wide: the same
  figure the room card shows) have held at or above ``joinsPerMin`` for ``sustainSec``;
* **active → bypass** once arrivals have stayed below ``joinsPerMin`` for ``releaseAfterSec`` and
  nobody is in the line, only for a queue this job put up itself (an operator's queue is the
  operator's), and never when ``releaseAfterSec`` is 0;
* a paused room is never touched, and pausing a room the job put up hands it to the operator.

Each flip is a compare-and-set on the room's state (``Store.upsert_room(expect_state=…)``), so a
room an operator changed a moment before is never flipped back, and is written to the audit trail
under the system actor (``room.threshold``) with the number that caused it; the room's timeline
shows it from there. What the job remembers per room (since when arrivals held, whether it owns the
queue, when it last acted) is the ``autopilot`` document the fleet shares.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from queue_manager.engine.errors import EngineError
from queue_manager.store.base import Store, StoreUnavailable

log = logging.getLogger("queue_manager.activation")

SELF_BADGE_MS = 15 * 60_000  # the room card reads AUTO · SELF this long after the job acted

Audit = Callable[..., Awaitable[None]]


async def run(store: Store, audit: Audit, doc: dict[str, Any], rooms: Sequence[Mapping[str, Any]], now: int) -> bool:
    """One frame over every room; returns whether ``doc`` changed."""
    states: dict[str, dict[str, Any]] = doc.setdefault("activation", {})
    before = repr(states)
    live = set()
    for room in rooms:
        room_id = str(room["id"])
        live.add(room_id)
        cfg = room.get("autoActivate") or {}
        mine = states.get(room_id) or {"above": None, "quiet": None, "owned": False, "acted": None}
        if not cfg.get("enabled"):
            if mine.get("acted") is not None:  # keep the badge's memory of the last act
                mine.update(above=None, quiet=None, owned=False)
                states[room_id] = mine
            else:
                states.pop(room_id, None)
            continue
        states[room_id] = mine  # in place before the flip: the badge shows with the flip, never after it
        await _room(store, audit, room, cfg, mine, now)
    for gone in set(states) - live:
        del states[gone]
    return repr(states) != before


async def _room(
    store: Store, audit: Audit, room: Mapping[str, Any], cfg: Mapping[str, Any], mine: dict[str, Any], now: int
) -> None:
    room_id = str(room["id"])
    joins = int(room.get("joinsLastMinute") or 0)
    threshold = int(cfg.get("joinsPerMin") or 0)
    state = room.get("state")
    if state == "paused":
        mine.update(above=None, quiet=None, owned=False)
        return
    if state == "bypass":
        mine.update(quiet=None, owned=False)
        if joins < threshold or threshold <= 0:
            mine["above"] = None
            return
        if mine["above"] is None:
            mine["above"] = now
        if now - mine["above"] < int(cfg.get("sustainSec") or 0) * 1000:
            return
        if await _flip(store, room_id, "bypass", "active", mine, now, "activate", joins):
            mine.update(above=None, owned=True)
            await audit(
                None,
                "room.threshold",
                target=room_id,
                room_id=room_id,
                change="bypass → active",
                joinsPerMin=joins,
                threshold=threshold,
                sustainSec=int(cfg.get("sustainSec") or 0),
            )
            log.info("threshold activation: %s bypass -> active at %d joins/min", room_id, joins)
        return
    mine["above"] = None
    if state != "active" or not mine.get("owned"):
        mine["quiet"] = None
        return
    release = int(cfg.get("releaseAfterSec") or 0)
    if release <= 0 or joins >= threshold:
        mine["quiet"] = None
        return
    if mine["quiet"] is None:
        mine["quiet"] = now
    in_line = int(room.get("waiting") or 0) + int(room.get("preQueue") or 0)
    if now - mine["quiet"] < release * 1000 or in_line > 0:
        return
    if await _flip(store, room_id, "active", "bypass", mine, now, "release", joins):
        mine.update(quiet=None, owned=False)
        await audit(
            None,
            "room.threshold",
            target=room_id,
            room_id=room_id,
            change="active → bypass",
            joinsPerMin=joins,
            threshold=threshold,
            releaseAfterSec=release,
        )
        log.info("threshold activation: %s active -> bypass at %d joins/min", room_id, joins)


async def _flip(
    store: Store, room_id: str, expect: str, to: str, mine: dict[str, Any], now: int, action: str, joins: int
) -> bool:
    """The compare-and-set of the room's state. The badge's act is noted first, so a room read while the
    flip lands already carries it, and is taken back when the flip does not happen."""
    last = {k: mine.get(k) for k in ("acted", "action", "joinsPerMin")}
    mine.update(acted=now, action=action, joinsPerMin=joins)
    try:
        await store.upsert_room({"id": room_id, "state": to}, expect_state=expect)
    except EngineError as err:
        mine.update(last)
        if err.code not in ("state_changed", "no_room"):
            log.warning("threshold activation: %s: %s", room_id, err.message)
        return False
    except StoreUnavailable as err:
        mine.update(last)
        log.warning("threshold activation: %s: store unavailable: %s", room_id, err)
        return False
    return True


def badges(doc: Mapping[str, Any], now: int) -> dict[str, dict[str, Any]]:
    """Rooms the job acted on in the last 15 minutes: what it did, when, and at what number."""
    out: dict[str, dict[str, Any]] = {}
    for room_id, mine in (doc.get("activation") or {}).items():
        acted = mine.get("acted")
        if acted is not None and now - acted < SELF_BADGE_MS:
            out[room_id] = {"at": acted, "action": mine.get("action"), "joinsPerMin": mine.get("joinsPerMin")}
    return out
