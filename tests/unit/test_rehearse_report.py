"""A rehearsal's report: the figures it derives from what the visitors saw, and its text."""

from __future__ import annotations

from collections import Counter

from queue_manager.rehearse.drive import Outcome, Plan, Tally
from queue_manager.rehearse.ramp import parse_ramp
from queue_manager.rehearse.report import rehearsal_report, render_rehearsal


def _outcome() -> Outcome:
    plan = Plan(server="http://127.0.0.1:8080", room="shop", ramp=parse_ramp("const:2/s"), visitors=6, no_show=0.2)
    tally = Tally(start=0.0)
    tally.arrived = 6
    tally.joined = [0.0, 0.5, 1.0, 1.5, 2.0]  # five joins answered, two in the busiest second
    tally.join_latency = [0.01, 0.02, 0.03, 0.04, 0.5]
    tally.join_failed = 1
    tally.no_shows = 1
    tally.passes = [3.0, 4.0, 6.0, 7.0]
    tally.waits = [3.0, 3.5, 5.0, 5.5]
    tally.eta_pairs = [(3.0, 2.0), (3.5, 4.0), (5.0, 4.0), (5.5, 6.0)]
    tally.admitted = [3.1, 4.1, 6.1, 7.1]
    tally.errors = Counter({"join 429 rate_limited": 1})
    tally.health = [
        {"status": "ok", "ready": True, "warnings": ["SECRET is the built-in default"], "incidents": []},
        {"status": "degraded", "ready": True, "warnings": [], "incidents": ["target not answering"]},
    ]
    before = {"joinsTotal": 10, "passesTotal": 4, "ratePerMinute": 60, "maxConcurrent": None}
    after = {"joinsTotal": 15, "passesTotal": 9}
    return Outcome(plan, tally, before, after, elapsed=8.0, finished=True)


def test_the_figures() -> None:
    r = rehearsal_report(_outcome())
    assert r["joins"]["ok"] == 5 and r["joins"]["failed"] == 1
    assert r["joins"]["perSecPeak"] == 2 and r["joins"]["perSecAsked"] == 2.0
    assert r["joins"]["perSecMean"] == 2.5  # five over the two seconds they spanned
    assert r["joins"]["latency"]["p50"] == 0.03
    assert r["serverCounters"] == {"joinsTotal": 5, "passesTotal": 5}
    assert r["passesSeen"] == 4 and r["admitted"] == 4 and r["stillWaiting"] == 0
    assert r["firstAdmissionSec"] == 3.1
    assert r["wait"] == {"p50": 3.5, "p90": 5.5, "max": 5.5, "count": 4}
    assert r["etaError"]["medianSec"] == -0.5 and r["etaError"]["p90AbsSec"] == 1.0
    assert r["outflowPerMin"] == 75.0  # the server's 5 passes over the 4 s from the first seen to the last
    assert r["health"]["samples"] == 2 and r["health"]["alwaysReady"] is True
    assert r["health"]["statuses"] == {"ok": 1, "degraded": 1}
    assert r["errors"] == {"join 429 rate_limited": 1}


def test_the_text() -> None:
    text = render_rehearsal(rehearsal_report(_outcome()))
    assert "joins              5 ok, 1 failed; peak 2/s (asked 2/s)" in text
    assert "server counted     joinsTotal +5, passesTotal +5" in text
    assert "errors             join 429 rate_limited ×1" in text
    assert "warning: SECRET is the built-in default" in text
    assert "incident: target not answering" in text
    assert "maxConcurrent no cap;" in text and "None" not in text  # a room without a cap says so


def test_a_cap_is_printed_as_the_number() -> None:
    outcome = _outcome()
    outcome.before["maxConcurrent"] = 40
    assert "(room rate 60/min, maxConcurrent 40;" in render_rehearsal(rehearsal_report(outcome))
