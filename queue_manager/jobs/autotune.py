"""Autotune: the leader moves a queueing room's outflow rate with the health of the site behind it.

A room is tuned while ``AUTOTUNE=1`` (the fleet's switch: this job runs only then), its ``autotune.enabled``
is true, it is ``active`` (never paused, bypass or scheduled: those are the operator's, or the schedule's)
and somebody is waiting. Every ``autotune.stepSec`` the leader takes one step, additive increase and
multiplicative decrease:

* **down** to ``max(minRate, floor(rate × 0.7))`` when the site is unhealthy: its latest probe failed
  (the target probe of a snippet room, ``targets.py``; the origin probe of an inline room,
  ``inline/origin_health.py``), or answered slower than ``targetLatencyMs``, or (inline) the origin
  errors visitors met since the last step exceed ``maxErrorRate`` of the sessions on the site;
* **up** by ``max(1, round(0.05 × maxRate))``, at most to ``maxRate``, when the latest probe is healthy
  and the room is below 90 % of its ``maxConcurrent`` (or has none): more outflow would otherwise only
  wait at the door;
* **hold** otherwise: no usable measurement yet (or a refused probe: that is configuration), a
  measurement too old, a room at its concurrency ceiling, a rate already at the bound, a rate of 0
  (an operator's stop, never lifted by the machine).

One probe is one measurement: a decrease acts on it once, and the next decrease waits for a newer
probe (or for new origin errors), so one slow answer cannot be counted three times over. A rate
outside ``minRate``–``maxRate`` is brought inside at the first step.

Each change is a compare-and-set on the room being ``active`` (``Store.upsert_room(expect_state=…)``), so
a room an operator paused a moment before is left alone, and is written to the audit trail under the
system actor (``room.autotune`` with ``from``, ``to`` and ``reason``; the room's chart marks it). What
the job remembers per room (when it last stepped, the probe its last decrease acted on, the origin error
count at the last step) is ``doc["autotune"][room]`` of the ``autopilot`` document the fleet shares.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from queue_manager.engine.errors import EngineError
from queue_manager.store.base import Store, StoreUnavailable

log = logging.getLogger("queue_manager.autotune")

Audit = Callable[..., Awaitable[None]]

DECREASE_FACTOR = 0.7
INCREASE_SHARE = 0.05  # of maxRate, per step
OCCUPANCY_CEILING = 0.9  # of maxConcurrent: at or above it, more outflow would only wait at the door
STALE_FLOOR_MS = 120_000  # a measurement older than this (or 4 probe periods, if longer) is not acted on
SAME_PROBE_MS = 500  # two readings of one probe (the inline probe's age is rounded) are this close


@dataclass(slots=True)
class Signals:
    """What the queue measured of each room's site since the last frame."""

    targets: dict[str, dict[str, Any]] = field(default_factory=dict)  # snippet rooms: the target probe's results
    origins: dict[str, dict[str, Any]] = field(default_factory=dict)  # inline rooms: the origin probe's results
    origin_errors: dict[tuple[str, str], int] = field(default_factory=dict)  # inline: (room, phase) -> errors so far
    instance: str = ""  # whose origin error counts these are (a new leader counts from its own)
    target_every_ms: int = 30_000  # TARGET_PROBE_EVERY_MS


@dataclass(frozen=True, slots=True)
class Measurement:
    """The latest probe of a room's site."""

    source: Literal["target", "origin"]
    at: int  # wall ms it was taken
    ok: bool
    latency_ms: int | None
    failure: str  # what failed, when not ok; names no internal address (the chart shows it to monitor links)
    stale_after_ms: int


@dataclass(frozen=True, slots=True)
class Step:
    """Everything one step decides on, for one room."""

    rate: int
    cfg: Mapping[str, Any]  # the room's autotune settings (validated: engine/model.py)
    measurement: Measurement | None
    now: int
    acted_on: int | None = None  # ``at`` of the measurement the last decrease acted on
    errors: int = 0  # inline: origin errors since the previous step
    sessions: int = 0  # sessions on the site: the error rate's denominator
    occupancy: int = 0
    capacity: int | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    kind: Literal["clamp", "decrease", "increase", "hold"]
    rate: int
    reason: str


def decide(s: Step) -> Decision:
    """One step for one room that is tuned (enabled, active, queueing): pure."""
    lo, hi = int(s.cfg["minRate"]), int(s.cfg["maxRate"])
    rate = s.rate
    if rate <= 0:
        return Decision("hold", rate, "a rate of 0 stops the line on purpose: left to the operator")
    if not lo <= rate <= hi:
        return Decision("clamp", min(max(rate, lo), hi), f"rate {rate}/min outside the autotune range {lo}–{hi}/min")
    m = s.measurement
    usable = m is not None and s.now - m.at <= m.stale_after_ms
    fresh = m is not None and (s.acted_on is None or m.at - s.acted_on > SAME_PROBE_MS)
    trouble = _errors_trouble(s)
    if trouble is None and usable and m is not None:
        trouble = _probe_trouble(s, m)
        if trouble is not None and not fresh:
            return Decision("hold", rate, f"{trouble}; already acted on, waiting for the next probe")
    if trouble is not None:
        new = max(lo, math.floor(rate * DECREASE_FACTOR))
        if new >= rate:
            return Decision("hold", rate, f"{trouble}; already at minRate {lo}/min")
        return Decision("decrease", new, trouble)
    if m is None:
        return Decision("hold", rate, "no measurement of the site yet")
    if not usable:
        return Decision("hold", rate, f"the last measurement of the {m.source} is {(s.now - m.at) // 1000} s old")
    target = int(s.cfg["targetLatencyMs"])
    healthy = f"{m.source} healthy: {m.latency_ms} ms within {target} ms"
    if s.capacity is not None:
        healthy += f", occupancy {s.occupancy}/{s.capacity}"
        if s.occupancy >= OCCUPANCY_CEILING * s.capacity:
            return Decision("hold", rate, f"{healthy}: at the concurrency ceiling, more outflow would wait at the door")
    new = min(hi, rate + max(1, round(INCREASE_SHARE * hi)))
    if new <= rate:
        return Decision("hold", rate, f"{healthy}; already at maxRate {hi}/min")
    return Decision("increase", new, healthy)


def _errors_trouble(s: Step) -> str | None:
    if s.errors <= 0:
        return None
    limit = float(s.cfg["maxErrorRate"])
    if s.errors / max(1, s.sessions) <= limit:
        return None
    step = int(s.cfg["stepSec"])
    return (
        f"{s.errors} origin error{'' if s.errors == 1 else 's'} in {step} s against {s.sessions} "
        f"session{'' if s.sessions == 1 else 's'} on the site, above {limit * 100:g} %"
    )


def _probe_trouble(s: Step, m: Measurement) -> str | None:
    if not m.ok:
        return m.failure
    target = int(s.cfg["targetLatencyMs"])
    if m.latency_ms is not None and m.latency_ms > target:
        return f"{m.source} latency {m.latency_ms} ms above {target} ms"
    return None


# ---------------------------------------------------------------------- what a room's signals say


def measurement(room: Mapping[str, Any], signals: Signals, now: int) -> Measurement | None:
    """The latest probe of the room's site; None when there is none, it was refused (configuration), or the
    target is not probed (a reserved example name)."""
    room_id = str(room["id"])
    if room.get("proxyOrigin"):
        o = signals.origins.get(room_id)
        if not o or o.get("phase") == "refused":
            return None
        at = now - int(float(o.get("checkedAgoSec") or 0) * 1000)
        status, phase = o.get("status"), o.get("phase")
        failure = f"origin answered {status}" if status is not None else f"origin probe failing ({phase})"
        return Measurement("origin", at, bool(o.get("ok")), _int(o.get("latencyMs")), failure, STALE_FLOOR_MS)
    t = signals.targets.get(room_id)
    if not t or t.get("refused") or t.get("notProbed") or t.get("url") != room.get("targetUrl"):
        return None
    stale = max(STALE_FLOOR_MS, 4 * signals.target_every_ms)
    failure = f"target failing: {t.get('summary') or 'no answer'}"
    at = int(t.get("checkedAt") or 0)
    return Measurement("target", at, t.get("ok") is True, _int(t.get("latencyMs")), failure, stale)


def origin_errors(signals: Signals, room_id: str) -> int:
    return sum(n for (rid, _phase), n in signals.origin_errors.items() if rid == room_id)


def tuned(room: Mapping[str, Any]) -> bool:
    """Enabled, active (configured and in effect) and queueing."""
    cfg = room.get("autotune") or {}
    return (
        bool(cfg.get("enabled"))
        and room.get("state") == "active"
        and room.get("effectiveState", "active") == "active"
        and int(room.get("waiting") or 0) > 0
    )


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


# ---------------------------------------------------------------------- the frame


async def run(
    store: Store, audit: Audit, doc: dict[str, Any], rooms: Sequence[Mapping[str, Any]], now: int, signals: Signals
) -> bool:
    """One alert frame over every room; returns whether ``doc`` changed."""
    states: dict[str, dict[str, Any]] = doc.setdefault("autotune", {})
    before = repr(states)
    live = set()
    for room in rooms:
        room_id = str(room["id"])
        cfg = room.get("autotune") or {}
        if not cfg.get("enabled"):
            continue
        live.add(room_id)
        mine = states.setdefault(room_id, {})
        await _room(store, audit, room, cfg, mine, now, signals)
    for gone in set(states) - live:
        del states[gone]
    return repr(states) != before


async def _room(
    store: Store,
    audit: Audit,
    room: Mapping[str, Any],
    cfg: Mapping[str, Any],
    mine: dict[str, Any],
    now: int,
    signals: Signals,
) -> None:
    room_id = str(room["id"])
    errors_now = origin_errors(signals, room_id)
    counted = mine.get("errorsOf") == signals.instance and errors_now >= int(mine.get("errors") or 0)
    errors = errors_now - int(mine.get("errors") or 0) if counted and "errors" in mine else 0
    if not tuned(room):  # errors met while nobody waited are not the next step's
        mine.update(errors=errors_now, errorsOf=signals.instance)
        mine.pop("at", None)
        return
    if "at" in mine and now - int(mine["at"]) < int(cfg["stepSec"]) * 1000:
        return
    mine.update(at=now, errors=errors_now, errorsOf=signals.instance)
    rate = int(room.get("ratePerMinute") or 0)
    m = measurement(room, signals, now)
    capacity = room.get("capacity")
    step = Step(
        rate=rate,
        cfg=cfg,
        measurement=m,
        now=now,
        acted_on=_int(mine.get("actedOn")),
        errors=errors,
        sessions=int(room.get("activeSessions") or 0),
        occupancy=int(room.get("occupancy") or 0),
        capacity=None if capacity is None else int(capacity),
    )
    decision = decide(step)
    if decision.rate == rate or not await _set_rate(store, room_id, decision.rate):
        return
    if decision.kind == "decrease" and m is not None:
        mine["actedOn"] = m.at
    mine["last"] = {"at": now, "from": rate, "to": decision.rate, "reason": decision.reason}
    await audit(
        None,
        "room.autotune",
        target=room_id,
        room_id=room_id,
        **{"from": rate, "to": decision.rate, "reason": decision.reason},
    )
    log.info("autotune: %s rate %d -> %d/min (%s)", room_id, rate, decision.rate, decision.reason)


async def _set_rate(store: Store, room_id: str, rate: int) -> bool:
    try:
        await store.upsert_room({"id": room_id, "ratePerMinute": rate}, expect_state="active")
    except EngineError as err:
        if err.code not in ("state_changed", "no_room"):
            log.warning("autotune: %s: %s", room_id, err.message)
        return False
    except StoreUnavailable as err:
        log.warning("autotune: %s: store unavailable: %s", room_id, err)
        return False
    return True
