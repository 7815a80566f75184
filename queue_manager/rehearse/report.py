"""The end-of-run reports of ``qm rehearse`` and ``qm simulate``: one JSON document each, and its text."""

from __future__ import annotations

from collections import Counter
from typing import Any

from queue_manager.rehearse.drive import Outcome as Rehearsal
from queue_manager.rehearse.simulate import Outcome as Simulation
from queue_manager.rehearse.stats import eta_error, seconds, spread


def _per_minute(times: list[float]) -> float | None:
    """Events a minute from the first to the last of ``times`` (seconds)."""
    if len(times) < 2 or max(times) <= min(times):
        return None
    return round((len(times) - 1) * 60 / (max(times) - min(times)), 1)


def _asked_peak(run: Rehearsal) -> float:
    """The busiest second of arrivals the curve asked for (what ``perSecPeak`` is measured against)."""
    plan = run.plan
    if plan.ramp.burst:
        return float(plan.visitors)
    times = plan.ramp.arrival_times(plan.visitors)
    return float(max(Counter(int(t) for t in times).values()))


def _outflow(passes: int | None, seen: list[float]) -> float | None:
    """The room's passes a minute while it let visitors out: the server's pass count (no-shows promoted
    included) over the span from the first pass a visitor saw to the last."""
    if passes is None or len(seen) < 2 or max(seen) <= min(seen):
        return None
    return round(passes * 60 / (max(seen) - min(seen)), 1)


def _or_dash(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


#: How a room setting that is None reads: no concurrency cap, no session ceiling, presence off.
_UNSET = {"maxConcurrent": "no cap", "sessionMaxSec": "none", "presenceSec": "off"}


def _cap(value: object) -> str:
    """maxConcurrent as a person reads it: the number, or "no cap" (None: the room admits by rate alone)."""
    return _UNSET["maxConcurrent"] if value is None else str(value)


def _setting(name: str, value: object) -> str:
    return _UNSET.get(name, "none") if value is None else str(value)


def _ms(sec: float | None) -> str:
    return "-" if sec is None else f"{sec * 1000:.0f} ms"


def rehearsal_report(run: Rehearsal) -> dict[str, Any]:
    plan, tally = run.plan, run.tally
    per_second = Counter(int(t) for t in tally.joined)
    joins_mean = None
    if len(tally.joined) > 1 and max(tally.joined) > min(tally.joined):
        joins_mean = round(len(tally.joined) / max(1.0, max(tally.joined) - min(tally.joined)), 1)
    health = tally.health
    warnings = sorted({w for h in health for w in h.get("warnings", [])})
    incidents = sorted({i for h in health for i in h.get("incidents", [])})

    def delta(name: str) -> int | None:
        a, b = run.after.get(name), run.before.get(name)
        return a - b if isinstance(a, int) and isinstance(b, int) else None

    return {
        "server": plan.server,
        "room": plan.room,
        "visitors": plan.visitors,
        "arrival": plan.ramp.spec,
        "noShow": plan.no_show,
        "stream": plan.stream,
        "pollEverySec": plan.poll_every,
        "finished": run.finished,
        "elapsedSec": round(run.elapsed, 1),
        "arrived": tally.arrived,
        "joins": {
            "ok": len(tally.joined),
            "failed": tally.join_failed,
            "perSecPeak": max(per_second.values(), default=0),
            "perSecMean": joins_mean,
            "perSecAsked": _asked_peak(run),
            "latency": spread(tally.join_latency, 3),
        },
        "errors": dict(sorted(tally.errors.items())),
        "noShows": tally.no_shows,
        "passesSeen": len(tally.passes),
        "admitted": len(tally.admitted),
        "bounced": tally.bounced,
        "expired": tally.expired,
        "stillWaiting": max(0, tally.waiting),
        "firstAdmissionSec": None if not tally.admitted else round(min(tally.admitted), 1),
        "wait": spread(tally.waits),
        "etaError": eta_error(tally.eta_pairs),
        "outflowPerMin": _outflow(delta("passesTotal"), tally.passes),
        "passesSeenPerMin": _per_minute(tally.passes),
        "ratePerMinute": run.before.get("ratePerMinute"),
        "maxConcurrent": run.before.get("maxConcurrent"),
        "serverCounters": {"joinsTotal": delta("joinsTotal"), "passesTotal": delta("passesTotal")},
        "target": dict(sorted(tally.target.items())),
        "health": {
            "samples": len(health),
            "alwaysReady": all(h.get("ready") is True for h in health) if health else None,
            "statuses": dict(Counter(str(h.get("status")) for h in health)),
            "warnings": warnings,
            "incidents": incidents,
        },
        "requests": tally.requests,
    }


def render_rehearsal(r: dict[str, Any]) -> str:
    joins, wait, eta = r["joins"], r["wait"], r["etaError"]
    lines = [
        f"Rehearsal of {r['visitors']} visitors on room {r['room']} at {r['server']} ({r['arrival']}, "
        f"no-show {r['noShow']:.0%}, streams {r['stream']:.0%})"
        + ("" if r["finished"] else " - stopped at --duration"),
        f"  ran                {seconds(r['elapsedSec'])}, {r['requests']} requests",
        f"  joins              {joins['ok']} ok, {joins['failed']} failed; peak {joins['perSecPeak']}/s "
        f"(asked {joins['perSecAsked']:g}/s), mean {_or_dash(joins['perSecMean'])}/s; "
        f"answered in p50 {_ms(joins['latency']['p50'])}, p90 {_ms(joins['latency']['p90'])}",
        f"  server counted     joinsTotal +{r['serverCounters']['joinsTotal']}, "
        f"passesTotal +{r['serverCounters']['passesTotal']}",
        f"  passes seen        {r['passesSeen']} (no-shows {r['noShows']}, expired {r['expired']}, "
        f"still waiting {r['stillWaiting']})",
        f"  admitted           {r['admitted']} (turned away at capacity {r['bounced']} times); first after "
        f"{seconds(r['firstAdmissionSec'])}",
        f"  wait join→pass     p50 {seconds(wait['p50'])}  p90 {seconds(wait['p90'])}  max {seconds(wait['max'])}",
        f"  ETA shown at join  off by a median {seconds(eta['medianSec'])} "
        f"(|error| p50 {seconds(eta['medianAbsSec'])}, p90 {seconds(eta['p90AbsSec'])}; "
        f"waited {eta['medianRatio'] if eta['medianRatio'] is not None else '-'}× the ETA)",
        f"  outflow            {r['outflowPerMin'] if r['outflowPerMin'] is not None else '-'}/min "
        f"(room rate {r['ratePerMinute']}/min, maxConcurrent {_cap(r['maxConcurrent'])}; passes seen by visitors "
        f"{r['passesSeenPerMin'] if r['passesSeenPerMin'] is not None else '-'}/min)",
    ]
    errors = r["errors"]
    lines.append(
        "  errors             "
        + (", ".join(f"{code} ×{count}" for code, count in errors.items()) if errors else "none")
    )
    if r["target"]:
        lines.append("  protected site     " + ", ".join(f"{k} ×{v}" for k, v in r["target"].items()))
    h = r["health"]
    statuses = ", ".join(f"{k} ×{v}" for k, v in h["statuses"].items()) or "-"
    lines.append(f"  health             {h['samples']} samples: {statuses}; ready throughout: {h['alwaysReady']}")
    for w in h["warnings"]:
        lines.append(f"    warning: {w}")
    for i in h["incidents"]:
        lines.append(f"    incident: {i}")
    return "\n".join(lines)


def simulation_report(sim: Simulation) -> dict[str, Any]:
    return sim.to_json()


def table_rows(samples: list[dict[str, Any]], rows: int = 20) -> list[dict[str, Any]]:
    """About ``rows`` evenly spaced samples (a round number of seconds apart), and the last."""
    if not samples:
        return []
    span = samples[-1]["t"]
    every = 1
    for step in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600):
        every = step
        if span / step <= rows:
            break
    picked = [s for s in samples if s["t"] % every == 0]
    if picked[-1] is not samples[-1]:
        picked.append(samples[-1])
    return picked


def render_simulation(r: dict[str, Any]) -> str:
    sc, wait, eta = r["scenario"], r["wait"], r["etaError"]
    room = ", ".join(f"{k}={_setting(k, v)}" for k, v in sc["room"].items() if k not in ("id", "targetUrl"))
    lines = [
        f"Simulation of {sc['visitors']} visitors ({sc['arrival']}, no-show {sc['noShow']:.0%}, "
        f"streams {sc['stream']:.0%}, polls every {sc['pollEverySec']:g} s, seed {sc['seed']}) on {room}",
        "",
        f"{'time':>10} {'arrived':>8} {'depth':>8} {'passes':>8} {'admitted':>8} {'sessions':>8} "
        f"{'wait p50':>10} {'wait p90':>10}",
    ]
    for s in table_rows(r["samples"]):
        lines.append(
            f"{seconds(s['t']):>10} {s['arrived']:>8} {s['depth']:>8} {s['passes']:>8} {s['admitted']:>8} "
            f"{s['sessions']:>8} {seconds(s['waitP50']):>10} {seconds(s['waitP90']):>10}"
        )
    lines += [
        "",
        f"  admitted           {r['admitted']} of {r['visitors']} (no-shows {r['noShows']}, expired {r['expired']}); "
        f"first after {seconds(r['firstAdmissionSec'])}"
        + ("" if r["finished"] else f"; still running after {seconds(r['endedSec'])}"),
        f"  line               peak {r['peakDepth']} at {seconds(r['peakDepthAtSec'])}, empty after "
        f"{seconds(r['endedSec'])}",
        f"  wait join→pass     p50 {seconds(wait['p50'])}  p90 {seconds(wait['p90'])}  max {seconds(wait['max'])}",
        f"  ETA shown at join  off by a median {seconds(eta['medianSec'])} "
        f"(|error| p90 {seconds(eta['p90AbsSec'])}; waited "
        f"{eta['medianRatio'] if eta['medianRatio'] is not None else '-'}× the ETA)",
        f"  outflow            {r['outflowPerMin'] if r['outflowPerMin'] is not None else '-'}/min "
        f"(room rate {r['ratePerMinute']}/min)",
    ]
    return "\n".join(lines)
