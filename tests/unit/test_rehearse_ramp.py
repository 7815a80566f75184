"""Arrival curves (``qm rehearse``/``qm simulate --arrival``): what each spec brings when, and bad specs refused."""

from __future__ import annotations

import pytest

from queue_manager.rehearse.command import main
from queue_manager.rehearse.ramp import RampError, parse_ramp


def test_burst_brings_everyone_at_once() -> None:
    assert parse_ramp("burst").arrival_times(4) == [0.0, 0.0, 0.0, 0.0]
    ramp = parse_ramp("burst:5000")
    assert ramp.visitors(None) == 5000
    assert ramp.visitors(5000) == 5000


def test_a_constant_rate_spaces_visitors_evenly() -> None:
    assert parse_ramp("const:10/s").arrival_times(4) == pytest.approx([0.0, 0.1, 0.2, 0.3])
    assert parse_ramp("const:600/m").arrival_times(3) == pytest.approx([0.0, 0.1, 0.2])


def test_a_linear_ramp_brings_its_area() -> None:
    ramp = parse_ramp("linear:0-500/s:60s")  # 15,000 arrivals in the minute, the rate rising
    times = ramp.arrival_times(15_001)
    assert times[0] == 0.0
    assert times[-1] == pytest.approx(60.0, abs=1e-6)
    assert times[3750] == pytest.approx(30.0, abs=1e-6)  # a quarter of the area by half time
    assert times == sorted(times)
    # past the ramp its last rate holds: 500 more a second
    assert ramp.arrival_times(15_501)[-1] == pytest.approx(61.0, abs=1e-6)
    assert ramp.rate_at(30.0) == pytest.approx(250.0)


def test_steps_follow_each_other_and_the_last_rate_holds() -> None:
    ramp = parse_ramp("step:200/s:30s,800/s:30s")
    times = ramp.arrival_times(6_000 + 24_000 + 800 + 1)
    assert times[6_000] == pytest.approx(30.0)
    assert times[30_000] == pytest.approx(60.0)
    assert times[-1] == pytest.approx(61.0)
    # a first step of 0 waits: nobody arrives before it is over
    assert parse_ramp("step:0/s:10s,100/s:10s").arrival_times(2) == pytest.approx([10.0, 10.01])


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("", "not an arrival curve"),
        ("ramp:5/s", "not an arrival curve"),
        ("const:fast", "not a rate"),
        ("const:0/s", "more than 0"),
        ("linear:0-500/s", "FROM-TO/s:DURATION"),
        ("linear:0-500/s:soon", "not a duration"),
        ("linear:10-20/h:5s", "FROM-TO/s:DURATION"),
        ("step:200/s", "needs RATE:DURATION"),
        ("step:0/s:5s", "every step is 0"),
        ("step:5/s:0s", "more than 0"),
        ("burst:0", "at least 1"),
        ("burst:many", "whole number"),
    ],
)
def test_a_bad_spec_says_what_is_wrong(spec: str, words: str) -> None:
    with pytest.raises(RampError, match=words):
        parse_ramp(spec)


def test_a_curve_that_stops_before_everyone_came_is_refused() -> None:
    ramp = parse_ramp("linear:100-0/s:2s")  # 100 arrivals, then none
    assert len(ramp.arrival_times(101)) == 101
    with pytest.raises(RampError, match="ends at 0 arrivals"):
        ramp.arrival_times(500)


def test_the_visitor_count_must_be_known_and_agree() -> None:
    with pytest.raises(RampError, match="needs --visitors"):
        parse_ramp("const:5/s").visitors(None)
    with pytest.raises(RampError, match="names 5000 visitors"):
        parse_ramp("burst:5000").visitors(10)


@pytest.mark.parametrize(
    "argv",
    [
        ["simulate", "--arrival", "linear:fast", "--visitors", "10"],
        ["simulate", "--arrival", "const:5/s"],
        ["simulate", "--arrival", "burst", "--visitors", "10", "--no-show", "1.5"],
        ["simulate", "--arrival", "burst", "--visitors", "10", "--rate", "-3"],
        ["rehearse", "--room", "r", "--arrival", "step:0/s:5s", "--visitors", "10"],
        ["rehearse", "--arrival", "burst", "--visitors", "10"],
    ],
)
def test_the_commands_exit_2_with_the_reason(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.strip(), "the reason is printed"
    assert "Traceback" not in err
