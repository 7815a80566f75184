"""Outflow: promotion credit at ratePerMinute on the monotonic clock, the one-slot bank, pause/0/min,
resume without a burst, and wall-clock steps that neither burst nor stall the line."""

from __future__ import annotations

import random

import pytest

from queue_manager.engine import report

# Presence and the per-address ceiling are switched off so that only the rate decides who moves.
QUIET = {"presenceSec": None, "queueMaxPerIp": None}


def test_6000_per_minute_over_sixty_one_second_ticks(make_room, fill, run):
    room = make_room(ratePerMinute=6000, **QUIET)
    fill(room, 6200)
    per_tick = [run(1) for _ in range(60)]
    assert abs(sum(per_tick) - 6000) <= 1
    assert max(per_tick) <= 101
    assert len(room.passes) == sum(per_tick)
    assert len(room.line) == 6200 - sum(per_tick)


def test_7_per_minute_over_ten_minutes(make_room, fill, run):
    room = make_room(ratePerMinute=7, **QUIET)
    fill(room, 200)
    minutes = [run(60) for _ in range(10)]
    assert abs(sum(minutes) - 70) <= 1
    assert all(6 <= m <= 8 for m in minutes), minutes


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_irregular_tick_intervals_give_the_same_total(make_room, fill, engine, clock, seed):
    room = make_room(ratePerMinute=6000, **QUIET)
    fill(room, 6200)
    rng = random.Random(seed)
    elapsed, promoted = 0.0, 0
    while elapsed < 60.0:
        dt = min(rng.choice([0.05, 0.3, 0.7, 1.0, 1.9, 3.0, 4.5]), 60.0 - elapsed)
        clock.advance(dt)
        elapsed += dt
        promoted += engine.tick()
    assert abs(promoted - 6000) <= 1


def test_irregular_ticks_at_a_slow_rate(make_room, fill, engine, clock):
    room = make_room(ratePerMinute=7, **QUIET)
    fill(room, 200)
    rng = random.Random(42)
    elapsed, promoted = 0.0, 0
    while elapsed < 600.0:
        dt = min(rng.uniform(0.01, 9.0), 600.0 - elapsed)
        clock.advance(dt)
        elapsed += dt
        promoted += engine.tick()
    assert abs(promoted - 70) <= 1


def test_one_slot_bank_after_a_long_idle_with_ticks(make_room, fill, run):
    room = make_room(ratePerMinute=60, **QUIET)
    assert run(3600) == 0  # an hour of ticks over an empty line
    fill(room, 100)
    first = run(1)
    assert first <= 2  # one earned in that second + at most one banked
    total = first + run(9)
    assert 10 <= total <= 11


def test_one_slot_bank_at_a_high_rate(make_room, fill, run):
    room = make_room(ratePerMinute=6000, **QUIET)
    assert run(600) == 0
    fill(room, 1000)
    assert run(1) <= 101


def test_one_slot_bank_after_a_long_idle_without_ticks(make_room, fill, run, clock):
    room = make_room(ratePerMinute=60, **QUIET)
    clock.advance(3600)  # nobody ticked while the line was empty (a stalled ticker, a store outage)
    fill(room, 100)
    assert run(1) <= 2


def test_paused_promotes_nobody_and_resuming_does_not_burst(make_room, fill, run, engine):
    room = make_room(ratePerMinute=6000, state="paused", **QUIET)
    fill(room, 1000)
    assert run(600) == 0
    assert len(room.passes) == 0
    engine.upsert({"id": "r", "state": "active"})
    assert run(1) <= 101


def test_paused_without_ticks_then_resumed_does_not_burst(make_room, fill, run, engine, clock):
    room = make_room(ratePerMinute=60, **QUIET)
    fill(room, 100)
    assert run(1) == 1
    engine.upsert({"id": "r", "state": "paused"})
    clock.advance(600)  # no tick at all while paused
    engine.upsert({"id": "r", "state": "active"})
    assert run(1) <= 2
    assert len(room.passes) <= 3


def test_active_at_zero_per_minute_promotes_nobody(make_room, fill, run, engine):
    room = make_room(ratePerMinute=0, **QUIET)
    fill(room, 500)
    assert run(600) == 0
    assert report.stats(room)["waiting"] == 500
    engine.upsert({"id": "r", "ratePerMinute": 6000})
    assert run(1) <= 101


def test_active_at_zero_promotes_no_absent_head_either(make_room, fill, run):
    room = make_room(ratePerMinute=0, presenceSec=30, queueMaxPerIp=None)
    fill(room, 5)
    assert run(120) == 0  # everyone is long absent, yet nobody moves at 0/min


def test_paused_promotes_no_absent_head_either(make_room, fill, run):
    room = make_room(ratePerMinute=600, state="paused", presenceSec=30, queueMaxPerIp=None)
    fill(room, 5)
    assert run(120) == 0


def test_rate_change_takes_effect_without_a_burst(make_room, fill, run, engine):
    room = make_room(ratePerMinute=60, **QUIET)
    fill(room, 2000)
    assert run(10) == 10
    engine.upsert({"id": "r", "rate": 600})
    assert abs(run(10) - 100) <= 1
    assert room.cfg.rate_per_minute == 600


@pytest.mark.parametrize("step", [3600.0, -3600.0])
def test_wall_clock_step_neither_bursts_nor_stalls(make_room, fill, run, clock, step):
    room = make_room(ratePerMinute=60, **QUIET)
    fill(room, 200)
    assert run(30) == 30
    clock.step_wall(step)
    assert run(1) == 1
    assert run(29) == 29
    # passes and their clocks run on the monotonic clock too: nobody expired because of the step
    assert len(room.passes) == 60
    assert all(room.tickets[n].state == "passed" for n in room.passes)


def test_wall_clock_step_back_and_forth_repeatedly(make_room, fill, run, clock):
    room = make_room(ratePerMinute=600, **QUIET)
    fill(room, 1000)
    total = 0
    for i in range(10):
        clock.step_wall(7200 if i % 2 else -7200)
        total += run(6)
    assert abs(total - 600) <= 1
    assert len(room.line) == 1000 - total


def test_bypass_room_has_no_line_and_admits_everyone(make_room, visitor, run):
    room = make_room(state="bypass", maxConcurrent=1)
    a, b = visitor(room), visitor(room)
    assert a.join().ticket is None
    assert b.join().ticket is None
    assert len(room.line) == 0
    assert run(60) == 0
    assert a.check().admit and b.check().admit
    assert a.check().state == "bypass"


def test_admission_maintenance_holds_the_outflow_and_keeps_places(make_room, fill, run, engine):
    room = make_room(ratePerMinute=6000, **QUIET)
    fill(room, 50)
    engine.set_held(True)
    assert room.effective_state() == "paused"
    assert run(5) == 0 and len(room.line) == 50 and not room.passes
    engine.set_held(False)
    assert room.effective_state() == "active"
    assert run(1) > 0
