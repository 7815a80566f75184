"""``qm simulate``: the engine's own rules on a simulated clock, repeatable for a seed."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from queue_manager.config.settings import DEFAULT_ADMIN_KEY
from queue_manager.rehearse.command import _admin_key, default_server, main
from queue_manager.rehearse.ramp import parse_ramp
from queue_manager.rehearse.report import render_simulation, simulation_report
from queue_manager.rehearse.simulate import Scenario, simulate

ROOM = {"id": "sim", "targetUrl": "https://shop.example"}


def _run(room: dict[str, Any], arrival: str, visitors: int, **kw: Any) -> dict[str, Any]:
    return simulate(Scenario({**ROOM, **room}, parse_ramp(arrival), visitors, **kw)).to_json()


def test_the_same_seed_gives_the_same_prediction_and_another_seed_another() -> None:
    scenario = ({"ratePerMinute": 600, "presenceSec": 10}, "linear:0-50/s:10s", 400)
    first = _run(*scenario, no_show=0.3, stream=0.4, poll_every=2, seed=7)
    again = _run(*scenario, no_show=0.3, stream=0.4, poll_every=2, seed=7)
    assert json.dumps(first) == json.dumps(again)
    other = _run(*scenario, no_show=0.3, stream=0.4, poll_every=2, seed=8)
    assert (other["noShows"], other["samples"]) != (first["noShows"], first["samples"])


def test_the_line_drains_at_the_rooms_rate_and_the_eta_holds() -> None:
    r = _run({"ratePerMinute": 1200}, "burst", 200, poll_every=1)
    assert r["admitted"] == 200 and r["finished"]
    assert r["outflowPerMin"] == pytest.approx(1200, rel=0.05)
    assert r["endedSec"] == pytest.approx(10, abs=1)  # 200 at 20 a second
    assert r["peakDepth"] == 200 - 20  # the first tick lets 20 out
    # nobody is promoted between ticks, and a poll a second sees a pass within a second
    assert abs(r["etaError"]["medianSec"]) <= 1.0


def test_capacity_holds_sessions_to_max_concurrent() -> None:
    r = _run({"ratePerMinute": 6000, "maxConcurrent": 10, "sessionTtlSec": 20}, "burst", 40, poll_every=1)
    assert r["admitted"] == 40
    assert max(s["sessions"] for s in r["samples"]) == 10
    # ten sessions at a time, each idling out 20 s after its one door check: four rounds
    assert r["endedSec"] >= 3 * 20


def test_absent_no_shows_are_skipped_without_costing_the_rate() -> None:
    room = {"ratePerMinute": 60, "presenceSec": 5}
    present = _run(room, "burst", 20, no_show=0.5, poll_every=1, seed=3)
    assert present["noShows"] >= 5
    # one promotion a second, paid for by the present visitors only once the no-shows count as absent
    assert present["endedSec"] < 20 - present["noShows"] + 6
    never_absent = _run({**room, "presenceSec": None}, "burst", 20, no_show=0.5, poll_every=1, seed=3)
    assert never_absent["endedSec"] >= 20


def test_the_command_writes_the_chart_and_prints_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chart = tmp_path / "drop.html"
    argv = ["simulate", "--rate", "600", "--visitors", "100", "--arrival", "const:20/s", "--json"]
    assert main([*argv, "--chart", str(chart)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["admitted"] == 100
    assert report["scenario"]["room"]["ratePerMinute"] == 600
    page = chart.read_text()
    assert page.count("<svg") == 2 and "<script" not in page
    assert main(argv[:-1]) == 0
    text = capsys.readouterr().out
    assert "wait p50" in text and "admitted           100 of 100" in text


def test_a_scheduled_drop_draws_the_pre_queue_when_the_doors_open() -> None:
    room = {"ratePerMinute": 600}
    r = _run(room, "const:10/s", 100, poll_every=1, opens_after=30, seed=2)
    assert r["admitted"] == 100 and r["finished"]
    assert r["firstAdmissionSec"] >= 30  # nobody passes before the doors open
    before = [s for s in r["samples"] if s["t"] < 30]
    assert before[-1]["depth"] == 100 and before[-1]["passes"] == 0  # all 100 wait in the pre-queue
    # in arrival order every wait would be 30 s (each passes 30 s after it came, ten a second); the
    # draw shuffles them, so some wait much longer than the median
    assert r["wait"]["max"] - r["wait"]["p50"] >= 3
    assert _run(room, "const:10/s", 100, poll_every=1, opens_after=30, seed=2) == r


def test_the_text_names_a_room_read_without_a_cap_plainly() -> None:
    """A room read with --room carries maxConcurrent null (and may carry sessionMaxSec, presenceSec null)."""
    room = {"ratePerMinute": 600, "maxConcurrent": None, "sessionMaxSec": None, "presenceSec": None}
    sim = simulate(Scenario({**ROOM, **room}, parse_ramp("const:20/s"), 20))
    text = render_simulation(simulation_report(sim))
    assert "maxConcurrent=no cap, sessionMaxSec=none, presenceSec=off" in text and "None" not in text


def test_the_server_on_this_machine_is_read_as_the_server_reads_host_and_port(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert default_server({}) == "http://127.0.0.1:8080"
    assert default_server({"HOST": " 0.0.0.0 ", "PORT": "9001"}) == "http://127.0.0.1:9001"
    assert default_server({"HOST": "::1", "PORT": "9002"}) == "http://[::1]:9002"
    # a PORT the server would not use (it warns and listens on the default) is read the same way here
    assert default_server({"PORT": "eighty"}) == "http://127.0.0.1:8080"
    # and the admin key comes from ADMIN_KEY through the same reading, else the server's built-in default
    monkeypatch.setenv("ADMIN_KEY", "a-key-from-the-environment")
    assert _admin_key(argparse.Namespace(admin_key=None)) == "a-key-from-the-environment"
    assert _admin_key(argparse.Namespace(admin_key="given")) == "given"
    monkeypatch.setenv("ADMIN_KEY", "")
    assert _admin_key(argparse.Namespace(admin_key=None)) == DEFAULT_ADMIN_KEY


def test_the_guides_small_drop_predicts_what_it_always_has() -> None:
    """The OPERATIONS guide's 3,000-visitor simulation, figure for figure as the guide prints it."""
    room = {"ratePerMinute": 3000, "maxConcurrent": 6000, "sessionTtlSec": 120}
    r = _run(room, "linear:0-200/s:15s", 3000, no_show=0.1, stream=0.3)
    summary = {k: r[k] for k in ("admitted", "noShows", "peakDepth", "peakDepthAtSec", "endedSec", "outflowPerMin")}
    assert summary == {
        "admitted": 2680,
        "noShows": 320,
        "peakDepth": 1943,
        "peakDepthAtSec": 23,
        "endedSec": 63.0,
        "outflowPerMin": 2993.0,
    }
    assert r["wait"] == {"p50": 20.0, "p90": 35.0, "max": 40.0, "count": 2680}
    assert r["etaError"] == {
        "count": 2680,
        "medianSec": 1.0,
        "medianAbsSec": 1.0,
        "p90AbsSec": 4.0,
        "medianRatio": 1.04,
    }


@pytest.mark.parametrize(
    ("room", "arrival", "visitors", "crowd"),
    [
        (  # a long line, streams and polls, capacity setting the pace
            {"ratePerMinute": 1200, "maxConcurrent": 300, "sessionTtlSec": 30},
            "linear:0-200/s:10s",
            1500,
            {"no_show": 0.1, "stream": 0.3},
        ),
        (  # presence just longer than a poll, visitors who stay and browse
            {"ratePerMinute": 600, "presenceSec": 6, "maxConcurrent": 100, "sessionTtlSec": 20},
            "burst",
            1000,
            {"no_show": 0.2, "stream": 0.4, "stay": 15},
        ),
        (  # a scheduled drop: the pre-queue drawn into the line at opening
            {"ratePerMinute": 900, "presenceSec": None},
            "const:100/s",
            1000,
            {"no_show": 0.3, "stream": 0.2, "opens_after": 8, "seed": 5},
        ),
    ],
)
def test_skipping_the_looks_of_visitors_far_back_changes_nothing(
    monkeypatch: pytest.MonkeyPatch, room: dict[str, Any], arrival: str, visitors: int, crowd: dict[str, Any]
) -> None:
    """Every look made (no pacing) and far-back looks skipped give the same report, sample for sample."""
    paced = _run(room, arrival, visitors, **crowd)
    monkeypatch.setattr("queue_manager.rehearse.simulate._pacing", lambda sc, room: None)
    every_look = _run(room, arrival, visitors, **crowd)
    assert json.dumps(paced) == json.dumps(every_look)
    assert paced["admitted"] > 0
