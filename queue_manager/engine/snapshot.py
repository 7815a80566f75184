"""Checkpoints: one room generation's whole state as JSON (format v1 of ``docs/events.md``).

``dump(room)`` writes the document; ``load(data, clock, events)`` builds a live ``Room`` from it on
another clock. Monotonic instants travel with the reference pair (``refWall``, ``refMono``) read at
dump time; the loader rebases each one (``mono_here = mono_there - refMono + mono_now_here``) and
marks every holder *seen* now, as a restart does.

Fields that mean nothing in a ticket's state are written as their "unset" value (``passAt`` 0 for a
waiting ticket, ``door`` null unless admitted, the session clocks 0 unless admitted …), so the same
state always gives the same document and ``dump(load(d)) == d`` at the same instant. An unset
monotonic field (0) is never rebased.

What the format does not carry (so a load starts it afresh): the per-minute windows behind
``joinsLastMinute`` / ``passedLastMinute``, URL-rule match statistics, and when each holder was
last seen (the load's instant, by design).

Example::

    data = dump(room)                       # JSON-ready dict
    again = load(data, clock, engine.events)
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, get_args

from queue_manager.clock import Clock
from queue_manager.engine.deadlines import session_deadline, slot_deadline
from queue_manager.engine.draw import DrawRecord
from queue_manager.engine.events import Event
from queue_manager.engine.model import ROOM_FIELDS, SYSTEM_FIELDS, RoomConfig, apply_fields, normalise_body
from queue_manager.engine.randomness import SYSTEM_RANDOM, RandomSource
from queue_manager.engine.room import Room
from queue_manager.engine.states import TicketState
from queue_manager.engine.ticket import Finished, PreEntry, Ticket, make_ref

SNAPSHOT_VERSION = 1

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
_STATES: tuple[TicketState, ...] = get_args(TicketState)


class SnapshotError(ValueError):
    """The document is not a checkpoint this build can load (wrong version, missing or bad field)."""


# ---------------------------------------------------------------------------------------- config


def iso_to_ms(value: str) -> int:
    """An ISO 8601 instant to epoch milliseconds, exactly (integer arithmetic, no float rounding)."""
    dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return (dt - _EPOCH) // _MS


def config_from_public(config: Mapping[str, Any]) -> RoomConfig:
    """Rebuild a ``RoomConfig`` from ``RoomConfig.to_public()`` (as journaled in ``room.*`` events)."""
    body = {k: v for k, v in config.items() if k in ROOM_FIELDS or k in SYSTEM_FIELDS}
    opens = body.get("opensAt")
    if isinstance(opens, str):
        body["opensAt"] = iso_to_ms(opens)
    cfg, _ = apply_fields(None, normalise_body(body, system=True))
    return cfg


# ------------------------------------------------------------------------------------------ dump


def _hex(value: bytes | None) -> str | None:
    return None if value is None else value.hex()


def _unhex(value: Any) -> bytes | None:
    return None if value is None else bytes.fromhex(str(value))


def _ticket_record(t: Ticket, bounced: set[int]) -> dict[str, Any]:
    passed = t.state == "passed"
    admitted = t.state == "admitted"
    return {
        "n": t.n,
        "ident": t.ident,
        "fp": t.fp.hex(),
        "fp2": _hex(t.fp2),
        "ck": _hex(t.cookie),
        "joined": t.joined_ms,
        "ret": t.return_url,
        "state": t.state,
        "reason": t.reason,
        "charged": t.charged,
        "passed": t.passed_ms,
        "waited": t.waited_ms,
        "passAt": t.pass_at if passed else 0,
        "slot": t.slot if passed else False,
        "told": t.told if passed else False,
        "bouncedAt": t.bounced_at if passed and t.n in bounced else None,  # kept after its grace (events v2)
        "door": _hex(t.door) if admitted else None,
        "sessStart": t.session_start if admitted else 0,
        "sessLast": t.session_last if admitted else 0,
        "sessTouched": t.session_touched if admitted else 0,
        **({} if t.lane is None else {"lane": t.lane}),
    }


def dump(room: Room) -> dict[str, Any]:
    """The room generation's whole state as a checkpoint document (JSON-ready). Never mutates the room."""
    clock = room.clock
    return {
        "v": SNAPSHOT_VERSION,
        "room": room.cfg.id,
        "gen": room.gen,
        "seq": room.event_seq,
        "createdAt": room.created_ms,
        "refWall": clock.wall_ms(),
        "refMono": clock.mono_ms(),
        "config": room.cfg.to_public(),
        "next": room.next_n,
        "credit": room.credit,
        "lastTick": room.last_tick,
        "line": list(room.line),
        "tickets": [_ticket_record(room.tickets[n], room.bounced) for n in sorted(room.tickets)],
        "finished": [
            [n, f.joined_ms, f.passed_ms, f.waited_ms, f.reason, f.ended_ms] for n, f in room.finished.items()
        ],
        "prequeue": [
            {
                "h": e.handle,
                "ident": e.ident,
                "fp": e.fp.hex(),
                "fp2": _hex(e.fp2),
                "ck": _hex(e.cookie),
                "joined": e.joined_ms,
                "ret": e.return_url,
                **({} if e.lane is None else {"lane": e.lane}),
            }
            for e in room.prequeue.values()
        ],
        "drawn": dict(room.drawn),
        "draw": None if room.draw_record is None else room.draw_record.to_doc(),
        "purgedHandles": list(room.purged_handles),
        **({"laneCredit": dict(room.lane_credit)} if room.lane_credit else {}),
        "counters": {
            "joinsTotal": room.joins_total,
            "passesTotal": room.passes_total,
            "waitMsTotal": room.wait_ms_total,
            "unscopedChecks": room.unscoped_checks,
            "blockedReturnUrls": room.blocked_returns,
            "refusedFull": room.refused_full,
            "sessionsRevoked": room.sessions_revoked,
            "ejected": room.ejected_total,
        },
    }


# ------------------------------------------------------------------------------------------ load


def _int(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SnapshotError(f"checkpoint field {key!r} must be an integer, not {value!r}")
    return value


def _opt_int(data: Mapping[str, Any], key: str) -> int | None:
    return None if data.get(key) is None else _int(data, key)


def load(data: Mapping[str, Any], clock: Clock, events: list[Event], *, rng: RandomSource = SYSTEM_RANDOM) -> Room:
    """Build a live room from a checkpoint, on ``clock``, drawing from ``rng``; every holder is seen now."""
    if data.get("v") != SNAPSHOT_VERSION:
        raise SnapshotError(f"checkpoint version {data.get('v')!r} is not {SNAPSHOT_VERSION}")
    try:
        return _load(data, clock, events, rng)
    except SnapshotError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise SnapshotError(f"malformed checkpoint: {err!r}") from err


def _load(data: Mapping[str, Any], clock: Clock, events: list[Event], rng: RandomSource) -> Room:
    cfg = config_from_public(data["config"])
    if cfg.id != data["room"]:
        raise SnapshotError(f"checkpoint of room {data['room']!r} carries the config of {cfg.id!r}")
    now = clock.mono_ms()
    shift = now - _int(data, "refMono")

    def mono(value: int | None) -> int | None:
        return None if value is None else value + shift

    def mono_set(value: int) -> int:
        return value + shift if value else 0

    room = Room(cfg, _int(data, "gen"), clock, events, rng=rng)
    room.event_seq = _int(data, "seq")
    room.created_ms = int(data.get("createdAt") or 0)  # 0: a checkpoint written before it was kept
    room.next_n = _int(data, "next")
    room.credit = _int(data, "credit")
    room.last_tick = _int(data, "lastTick") + shift

    for rec in data["tickets"]:
        state = rec["state"]
        if state not in _STATES:
            raise SnapshotError(f"ticket {rec.get('n')!r} has an unknown state {state!r}")
        fp = _unhex(rec["fp"])
        assert fp is not None
        t = Ticket(
            n=_int(rec, "n"),
            ident=str(rec["ident"]),
            fp=fp,
            fp2=_unhex(rec.get("fp2")),
            cookie=_unhex(rec.get("ck")),
            joined_ms=_int(rec, "joined"),
            seen=now,
            return_url=rec.get("ret"),
            charged=bool(rec.get("charged", False)),
            state=state,
            reason=rec.get("reason"),
            passed_ms=_opt_int(rec, "passed"),
            waited_ms=_opt_int(rec, "waited"),
            lane=None if rec.get("lane") is None else str(rec["lane"]),
        )
        if state == "passed":
            t.pass_at = mono_set(_int(rec, "passAt"))
            t.slot = bool(rec.get("slot", False))
            t.told = bool(rec.get("told", False))
            t.bounced_at = mono(_opt_int(rec, "bouncedAt"))
        elif state == "admitted":
            t.door = _unhex(rec.get("door"))
            t.session_start = mono_set(_int(rec, "sessStart"))
            t.session_last = mono_set(_int(rec, "sessLast"))
            t.session_touched = mono_set(_int(rec, "sessTouched"))
        if t.n in room.tickets or not 0 < t.n < room.next_n:
            raise SnapshotError(f"ticket {t.n} is repeated or outside 1..next-1")
        room.tickets[t.n] = t

    for n in data["line"]:
        waiting = room.tickets.get(n)
        if waiting is None or waiting.state != "waiting" or waiting.line_seq:
            raise SnapshotError(f"line entry {n!r} is not a waiting ticket (or is listed twice)")
        waiting.line_seq = room.line.push(n)
        room._lane_push(waiting)  # its lane's line, in the line's order (a lane gone: the default lane)
    if len(room.line) != sum(1 for t in room.tickets.values() if t.state == "waiting"):
        raise SnapshotError("a waiting ticket is missing from the line")

    for t in room.tickets.values():
        if t.charged:
            room.per_ident[t.ident] = room.per_ident.get(t.ident, 0) + 1
        if t.state == "passed":
            room.passes.add(t.n)
            heapq.heappush(room._pass_heap, (t.pass_at + cfg.passed_ttl_sec * 1000, t.n))
            if t.slot:
                room.slot_holders.add(t.n)
                heapq.heappush(room._slot_heap, (slot_deadline(room.cfg, t), t.n))
            elif t.bounced_at is not None:
                room.bounced.add(t.n)
        elif t.state == "admitted":
            room.sessions.add(t.n)
            heapq.heappush(room._session_heap, (session_deadline(room.cfg, t), t.n))

    finished: OrderedDict[int, Finished] = OrderedDict()
    for n, joined, passed, waited, reason, ended in data["finished"]:
        finished[int(n)] = Finished(int(joined), passed, waited, str(reason), int(ended))
    room.finished = finished

    for rec in data["prequeue"]:
        fp = _unhex(rec["fp"])
        assert fp is not None
        entry = PreEntry(
            str(rec["h"]),
            str(rec["ident"]),
            fp,
            _unhex(rec.get("fp2")),
            _unhex(rec.get("ck")),
            _int(rec, "joined"),
            now,
            rec.get("ret"),
            None if rec.get("lane") is None else str(rec["lane"]),
        )
        room.prequeue[entry.handle] = entry
        room.pq_per_ident[entry.ident] = room.pq_per_ident.get(entry.ident, 0) + 1
    room.drawn = {str(h): int(n) for h, n in data["drawn"].items()}
    draw = data.get("draw")  # (absent from a checkpoint written before draws were committed)
    room.draw_record = None if draw is None else DrawRecord.from_doc(draw)
    room.purged_handles = OrderedDict((str(h), None) for h in data["purgedHandles"])
    room.lane_credit = {str(k): int(v) for k, v in (data.get("laneCredit") or {}).items()}

    for n in sorted(set(room.tickets) | set(room.finished)):
        room.refs.setdefault(make_ref(cfg.id, room.gen, n), []).append(n)

    counters = data["counters"]
    room.joins_total = _int(counters, "joinsTotal")
    room.passes_total = _int(counters, "passesTotal")
    room.wait_ms_total = int(counters.get("waitMsTotal") or 0)  # 0: a checkpoint written before it was kept
    room.unscoped_checks = _int(counters, "unscopedChecks")
    room.blocked_returns = _int(counters, "blockedReturnUrls")
    room.refused_full = int(counters.get("refusedFull") or 0)  # 0: a checkpoint written before it was kept
    room.sessions_revoked = int(counters.get("sessionsRevoked") or 0)  # 0: likewise
    room.ejected_total = _int(counters, "ejected")
    return room
