"""Replay: the journal alone rebuilds the room (from room.create, or from a checkpoint in the middle).

The property that proves the events sufficient: for random runs of the engine, replaying every event
it journaled answers every question like the live room and lives the same later life — after the
documented exceptions (``engine_run.align``: seen/told, the < 60 s session slide lag, door-check
counters). ``test_the_engine_journals_what_replay_needs`` guards the things replay needs that the engine
once did not journal (``NEEDS``: join.reason, promote.credit, slot.release, return.update, the bounced
claim kept after its grace).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queue_manager.clock import FakeClock
from queue_manager.engine import report
from queue_manager.engine.errors import EngineError
from queue_manager.engine.events import EVENT_LOG_VERSION, Event
from queue_manager.engine.replay import HANDLERS, ReplayDeleted, ReplayFenced, fold, rebuilt, replay
from queue_manager.engine.room import TOUCH_EVERY_MS
from queue_manager.engine.snapshot import dump, load
from tests.journal.engine_run import (
    NEEDS,
    Run,
    align,
    clock_copy,
    deterministic,
    diff,
    engine_missing,
    future,
    observe,
    ops,
    room_fields,
)

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def scripted(fields: dict[str, Any], script: list[Any], cut: int | None = None) -> tuple[Run, dict[str, Any] | None]:
    """Run the script; with ``cut``, also take a checkpoint before operation ``cut``."""
    run = Run(**fields)
    base = None
    with deterministic():
        for i, op in enumerate(script):
            if i == cut:
                base = orjson.loads(orjson.dumps(dump(run.room)))
            run.apply(op)
    run.room.advance()
    run.drain()
    return run, base


def assert_same_room(rebuilt: Any, run: Run, here: FakeClock, *, pacing_exact: bool, windows: bool = True) -> None:
    """``windows``: compare the per-minute counters too (not in checkpoint format v1, so not after one)."""
    live = run.room
    if pacing_exact:
        assert (rebuilt.credit, rebuilt.last_tick) == (live.credit, live.last_tick)
    align(rebuilt, live, pacing=not pacing_exact)
    mine, theirs = observe(rebuilt, run.browsers, windows=windows), observe(live, run.browsers, windows=windows)
    assert mine == theirs, diff(mine, theirs)
    assert dump(rebuilt) == dump(live), diff(dump(rebuilt), dump(live))
    twin = copy.deepcopy(live)
    mine, theirs = future(rebuilt, here, run.browsers), future(twin, twin.clock, run.browsers)
    assert mine == theirs, diff(mine, theirs)


@SETTINGS
@given(room_fields(), ops(), st.integers(0, 80))
def test_replay_of_everything_journaled_is_the_live_room(fields, script, cut):
    run, base = scripted(fields, script, cut)
    events = [Event(**{k: v for k, v in orjson.loads(orjson.dumps(e.as_dict())).items()}) for e in run.events]
    here = clock_copy(run.clock)
    assert_same_room(replay(events, here, room_events=[]), run, here, pacing_exact=False)
    if base is not None:  # a checkpoint in the middle, then the events after it
        here = clock_copy(run.clock)
        rebuilt = replay(events, here, base=base, room_events=[])
        assert_same_room(rebuilt, run, here, pacing_exact=False, windows=False)


@SETTINGS
@given(room_fields(), ops(between_ticks=False, schedules=False), st.integers(0, 80))
def test_replay_restores_the_outflow_credit_exactly_when_every_change_lands_on_a_tick(fields, script, cut):
    # Credit is not journaled per tick. With promote.credit, replay is exact when operations happen at
    # tick instants and no drop opens by itself (see replay.py): the later promotions are the same.
    run, base = scripted(fields, script, cut)
    here = clock_copy(run.clock)
    assert_same_room(replay(run.events, here, room_events=[]), run, here, pacing_exact=True)
    if base is not None:
        here = clock_copy(run.clock)
        rebuilt = replay(run.events, here, base=base, room_events=[])
        assert_same_room(rebuilt, run, here, pacing_exact=True, windows=False)


@SETTINGS
@given(room_fields(), ops(max_size=60), st.integers(0, 60))
def test_a_rebuild_loads_the_same_room_as_a_replay_without_loading_it_twice(fields, script, cut):
    """``rebuilt`` (what a store's rebuild imports) is the checkpoint of ``replay``'s room: loaded onto the
    same clock, both are the same room."""
    run, base = scripted(fields, script, cut)
    for start in (None, base):
        here = clock_copy(run.clock)
        doc = rebuilt(run.events, here, start)
        live = replay(run.events, clock_copy(run.clock), start, room_events=[])
        mine, theirs = dump(load(doc, clock_copy(run.clock), [])), dump(load(dump(live), clock_copy(run.clock), []))
        assert mine == theirs, diff(mine, theirs)


@SETTINGS
@given(room_fields(), ops(max_size=50), st.integers(0, 50))
def test_fold_is_a_checkpoint_of_the_journal(fields, script, cut):
    run, base = scripted(fields, script, cut)
    whole = fold(run.events)
    assert whole["seq"] == run.events[-1].seq
    assert whole["refWall"] == run.events[-1].ts
    if base is not None:  # a checkpoint plus the rest folds to the same document as the whole journal
        part = fold(run.events, base)
        for mine, theirs in zip(part["tickets"], whole["tickets"], strict=True):
            assert 0 <= mine["sessLast"] - theirs["sessLast"] < TOUCH_EVERY_MS  # slides: once a minute
        for doc in (part, whole):
            for t in doc["tickets"]:
                t.pop("told")  # kept by a checkpoint of the live room, not journaled
                t.pop("sessLast")
            doc.pop("counters")  # door-check counters: the same
            for key in ("refWall", "refMono", "credit", "lastTick"):
                doc.pop(key)  # as of the later of the checkpoint and the last event: not the same instant
        assert part == whole, diff(part, whole)


def test_the_engine_journals_what_replay_needs():
    assert engine_missing() == [], [NEEDS[k] for k in engine_missing()]


# ------------------------------------------------------------------------------------ fencing


def journal(*extra: tuple[str, dict[str, Any], int]) -> list[Event]:
    run = Run()
    with deterministic():
        run.apply(("join", 0, None))
    events = list(run.events)
    for type_, data, lv in extra:
        events.append(Event(type_, "r", 1, run.clock.wall_ms(), data, seq=events[-1].seq + 1, lv=lv))
    return events


def test_an_unknown_type_fences_the_room():
    with pytest.raises(ReplayFenced) as err:
        replay(journal(("room.teleport", {}, 1)), FakeClock())
    assert err.value.room == "r" and "unknown event type" in err.value.reason and err.value.seq == 3


def test_a_newer_lv_fences_the_room():
    with pytest.raises(ReplayFenced) as err:
        replay(journal(("join", {"n": 2}, EVENT_LOG_VERSION + 1)), FakeClock())
    assert "lv" in err.value.reason


def test_a_gap_fences_and_a_duplicate_is_applied_once():
    events = journal(("purge", {"count": 1}, 1))
    with pytest.raises(ReplayFenced) as err:
        replay([events[0], events[2]], FakeClock())
    assert "gap" in err.value.reason
    room = replay([*events, *events], FakeClock())
    assert room.event_seq == 3 and not room.line and room.finished[1].reason == "purged"


def test_a_flush_replays_to_the_same_room_and_a_count_that_does_not_fit_fences():
    # two admitted (one walked in, one holding a pass), two waiting; the flush ends the first two only
    script = [
        ("join", 0, None),
        ("join", 1, None),
        ("wait", 2000),
        ("check", 0, 0, 0),
        ("join", 2, None),
        ("join", 3, None),
        ("flush",),
    ]
    run, _ = scripted({"ratePerMinute": 60, "maxConcurrent": 2, "presenceSec": None}, script)
    flushes = [e for e in run.events if e.type == "flush"]
    assert [e.data for e in flushes] == [{"count": 2}]
    assert {n: f.reason for n, f in run.room.finished.items()} == {1: "flushed", 2: "flushed"}
    assert list(run.room.line) == [3, 4] and not run.room.passes and not run.room.sessions
    here = clock_copy(run.clock)
    assert_same_room(replay(run.events, here, room_events=[]), run, here, pacing_exact=False)
    wrong = [*run.events[:-1], dataclasses.replace(run.events[-1], data={"count": 3})]
    with pytest.raises(ReplayFenced) as err:
        replay(wrong, FakeClock())
    assert "flush of 2" in err.value.reason


def test_a_revoked_session_replays_to_the_same_room():
    # one walks in and the site ends the session; the next one is promoted into the freed slot
    script = [
        ("join", 0, None),
        ("join", 1, None),
        ("wait", 2000),
        ("check", 0, 0, 0),
        ("revoke", 0),
        ("revoke", 0),  # already ended: nothing
        ("wait", 2000),
    ]
    run, _ = scripted({"ratePerMinute": 60, "maxConcurrent": 1, "presenceSec": None}, script)
    assert [e.data for e in run.events if e.type == "session.revoke"] == [{"n": 1}]
    assert run.room.finished[1].reason == "revoked" and run.room.sessions_revoked == 1
    assert run.room.tickets[2].state == "passed"
    here = clock_copy(run.clock)
    rebuilt = replay(run.events, here, room_events=[])
    assert rebuilt.sessions_revoked == 1
    assert_same_room(rebuilt, run, here, pacing_exact=False)


def test_an_event_that_does_not_fit_the_state_fences():
    with pytest.raises(ReplayFenced):
        replay(journal(("promote", {"n": 9, "slot": True}, 1)), FakeClock())
    with pytest.raises(ReplayFenced):
        replay(journal(("join", {"n": 1, "ident": "x", "fp": "00", "joined": 1}, 1)), FakeClock())  # n reused
    with pytest.raises(ReplayFenced):  # the first event of a generation must create it
        replay(journal()[1:], FakeClock())


def test_a_deleted_generation_is_not_rebuilt():
    with pytest.raises(ReplayDeleted):
        replay(journal(("room.delete", {}, 1)), FakeClock())


def test_every_type_the_engine_writes_can_be_replayed():
    from queue_manager.engine.events import EVENT_TYPES

    assert set(EVENT_TYPES) <= set(HANDLERS)


# ------------------------------------------------------------------------------------ compensations


def _run(script: list[tuple[Any, ...]], **fields: Any) -> Run:
    run = Run(**fields)
    with deterministic():
        for op in script:
            run.apply(op)
    return run


def _then(run: Run, type_: str, **data: Any) -> list[Event]:
    return [*run.events, Event(type_, "r", 1, run.clock.wall_ms(), data, seq=run.events[-1].seq + 1)]


def test_join_revoke_takes_the_ticket_back_as_if_never_minted():
    run = _run([("join", 0, None), ("join", 3, None), ("join", 1, None)])  # browsers 0 and 3 share an address
    room = replay(_then(run, "join.revoke", n=2), clock_copy(run.clock))
    assert list(room.line) == [1, 3] and 2 not in room.tickets and 2 not in room.finished
    assert room.per_ident == {"10.0.0.0": 1, "10.0.0.1": 1}
    assert room.next_n == 4 and room.joins_total == 2  # the number stays used
    assert report.lookup(room, "3")["position"] == 2
    with pytest.raises(EngineError):
        report.lookup(room, "2")


def test_prequeue_revoke_takes_the_entry_back():
    run = _run([("schedule", 20), ("join", 0, None), ("join", 3, None)])
    [first, second] = list(run.room.prequeue)
    room = replay(_then(run, "prequeue.revoke", h=first), clock_copy(run.clock))
    assert list(room.prequeue) == [second] and room.pq_per_ident == {"10.0.0.0": 1} and room.joins_total == 1


def test_admit_revoke_gives_the_pass_back_with_its_slot_and_claim_window():
    run = _run([("join", 0, None), ("wait", 1000), ("wait", 5000), ("check", 0, 0, 0)], maxConcurrent=1)
    t = run.room.tickets[1]
    assert t.state == "admitted"
    promoted_at = next(e.ts for e in run.events if e.type == "promote")
    room = replay(_then(run, "admit.revoke", n=1, door=t.door.hex()), clock_copy(run.clock))
    again = room.tickets[1]
    assert again.state == "passed" and again.slot and again.door is None and not room.sessions
    assert again.pass_at == promoted_at - run.clock.wall_ms() + run.clock.mono_ms()  # the pass it had
    assert room.occupancy() == 1
    # a session that took a newer door key since is not touched by the revoke of the older one
    stale = replay(_then(run, "admit.revoke", n=1, door="00" * 32), clock_copy(run.clock))
    assert stale.tickets[1].state == "admitted"


def test_session_touch_slides_the_session_in_the_rebuild():
    run = _run(
        [("join", 0, None), ("wait", 1000), ("check", 0, 0, 0), ("wait", 70000), ("check", 0, 0, 0)],
        sessionTtlSec=90,
    )
    assert [e.type for e in run.events].count("session.touch") == 1
    room = replay(run.events, clock_copy(run.clock))
    assert room.tickets[1].session_last == run.room.tickets[1].session_last


def test_a_revoke_of_something_that_never_reached_the_journal_changes_nothing_but_the_number():
    run = _run([("join", 0, None)])
    events = _then(run, "join.revoke", n=2)  # ticket 2's join commit failed and was never written
    events.append(Event("prequeue.revoke", "r", 1, run.clock.wall_ms(), {"h": "feed"}, seq=events[-1].seq + 1))
    door = "11" * 32
    events.append(Event("admit.revoke", "r", 1, run.clock.wall_ms(), {"n": 1, "door": door}, seq=events[-1].seq + 1))
    n3 = {**events[1].data, "n": 4}  # and a later join got number 4 (3 was taken by another failed one)
    events.append(Event("join", "r", 1, run.clock.wall_ms(), n3, seq=events[-1].seq + 1))
    room = replay(events, clock_copy(run.clock))
    assert list(room.line) == [1, 4] and room.next_n == 5 and room.tickets[1].state == "waiting"
    with pytest.raises(ReplayFenced) as err:  # a number handed out twice is a contradiction
        replay([*events, Event("join", "r", 1, 9, n3, seq=events[-1].seq + 1)], clock_copy(run.clock))
    assert err.value.kind == "inconsistent"


def test_fences_say_what_kind_they_are():
    events = journal(("purge", {"count": 1}, 1))
    with pytest.raises(ReplayFenced) as err:
        replay([events[0], events[2]], FakeClock())
    assert err.value.kind == "gap"
    with pytest.raises(ReplayFenced) as err:
        replay(journal(("room.teleport", {}, 1)), FakeClock())
    assert err.value.kind == "unknown_type"
    with pytest.raises(ReplayFenced) as err:
        replay(journal(("purge", {"count": 1}, EVENT_LOG_VERSION + 1)), FakeClock())
    assert err.value.kind == "newer_lv"
    with pytest.raises(ReplayFenced) as err:
        replay(events, FakeClock(), base={**fold(events), "v": 2})
    assert err.value.kind == "checkpoint"


def test_revokes_reach_a_finished_ticket_a_drawn_entry_and_a_door_reclaim():
    # as lua/revoke.lua: the ticket leaves wherever it is, finished record included
    run = _run([("join", 0, None), ("purge",)])
    room = replay(_then(run, "join.revoke", n=1), clock_copy(run.clock))
    assert 1 not in room.finished and room.joins_total == 0
    with pytest.raises(EngineError):
        report.lookup(room, "1")
    # a pre-queue entry drawn meanwhile: the ticket it became goes
    run = _run([("schedule", 1), ("join", 0, None), ("join", 1, None), ("wait", 2000)])
    handle, n = next(iter(run.room.drawn.items()))
    room = replay(_then(run, "prequeue.revoke", h=handle), clock_copy(run.clock))
    assert n not in room.tickets and handle not in room.drawn and len(room.tickets) == 1 and room.joins_total == 1
    # a door reclaim (the cookie holder's new door key) taken back: the old key is the session's again
    run = _run([("join", 0, None), ("wait", 1000), ("check", 0, 0, 0), ("wait", 5000), ("check", 0, 0, 1)])
    t = run.room.tickets[1]
    reclaim = [e for e in run.events if e.type == "admit"][-1]
    assert reclaim.data.get("reclaim")
    first_door = next(e for e in run.events if e.type == "admit").data["door"]
    room = replay(_then(run, "admit.revoke", n=1, door=t.door.hex()), clock_copy(run.clock))
    assert room.tickets[1].state == "admitted" and room.tickets[1].door.hex() == first_door


def test_admit_revoke_restores_a_bounced_pass_without_a_slot():
    # ticket 2 promoted without a slot (absent), bounced at a full door, then admitted once a slot freed
    run = _run(
        [("join", 0, None), ("join", 1, None), ("wait", 1000), ("check", 0, 0, 0), ("wait", 6000), ("check", 1, 0, 0)],
        maxConcurrent=1,
        presenceSec=5,
    )
    assert run.room.tickets[2].state == "passed" and 2 in run.room.bounced
    events = list(run.events)
    with deterministic():
        run.apply(("eject", 1))  # the slot frees
        run.apply(("check", 1, 0, 0))
    assert run.room.tickets[2].state == "admitted"
    door = run.room.tickets[2].door.hex()
    room = replay(_then(run, "admit.revoke", n=2, door=door), clock_copy(run.clock))
    again = room.tickets[2]
    assert again.state == "passed" and not again.slot and 2 in room.bounced and room.occupancy() == 0
    assert len(events) < len(run.events)


# ------------------------------------------------------------------------------ instants as journaled


def test_a_promote_whose_ts_steps_back_passes_the_ticket_at_its_own_ts():
    # Two instances whose clocks are 3 ms apart: the promote journaled after an event of the faster one
    # carries an earlier ts. The rebuilt ticket passed at that ts, not at the newest ts seen before it.
    run = _run([("join", 0, None), ("join", 1, None), ("advance", 1000)], ratePerMinute=0)
    events = list(run.events)
    at = run.clock.wall_ms()

    def add(type_: str, ts: int, **data: Any) -> None:
        events.append(Event(type_, "r", 1, ts, data, seq=events[-1].seq + 1))

    add("promote", at, n=1, slot=True, credit=0)  # the faster instance
    add("promote", at - 3, n=2, slot=True, credit=0)  # the slower one, 3 ms behind
    add("expire", at - 2, n=1)  # the slower one again
    room = replay(events, clock_copy(run.clock), room_events=[])
    second = room.tickets[2]
    assert second.passed_ms == at - 3 and second.waited_ms == at - 3 - second.joined_ms
    first = room.finished[1]
    assert (first.passed_ms, first.ended_ms) == (at, at - 2)
    assert dump(room)["tickets"][0]["passed"] == at - 3


@SETTINGS
@given(room_fields(), ops(max_size=60), st.lists(st.integers(0, 3), min_size=1, max_size=16))
def test_rebuilt_passed_instants_are_the_journaled_ones_whatever_the_instances_clocks(fields, script, skews):
    # A room's events come from several instances, whose clocks differ by a few milliseconds: from one
    # seq to the next the ts can step back. Each rebuilt ticket passed exactly at its promote's ts.
    run, _ = scripted(fields, script)
    events = [dataclasses.replace(e, ts=e.ts - skews[i % len(skews)]) for i, e in enumerate(run.events)]
    promoted: dict[int, int] = {}
    for e in events:
        if e.type == "promote":
            promoted.setdefault(int(e.data["n"]), e.ts)  # a pass given back and given again keeps the first
    room = replay(events, clock_copy(run.clock), room_events=[])
    rebuilt = {n: (t.passed_ms, t.waited_ms, t.joined_ms) for n, t in room.tickets.items()}
    rebuilt |= {n: (f.passed_ms, f.waited_ms, f.joined_ms) for n, f in room.finished.items()}
    for n, (passed, waited, joined) in sorted(rebuilt.items()):
        assert passed == promoted.get(n), (n, passed, promoted.get(n))
        assert waited == (None if passed is None else max(0, passed - joined)), n


def test_a_draw_replays_from_its_count_and_a_journal_of_lv_3_from_its_order():
    """A draw's event names its count and first number (lv 4): the rebuild draws the same order from the
    seed and the pre-queue. An lv 3 event, with the order and the numbers, still replays; a count or first
    number the rebuilt room does not have fences it."""
    run = _run([("schedule", 1), ("join", 0, None), ("join", 1, None), ("join", 2, None), ("wait", 2000)])
    (draw,) = [e for e in run.events if e.type == "prequeue.draw"]
    assert draw.data == {"count": 3, "first": 1} and draw.lv == EVENT_LOG_VERSION
    room = replay(run.events, clock_copy(run.clock))
    assert room.drawn == run.room.drawn and list(room.line) == list(run.room.line)
    order = sorted(run.room.drawn, key=run.room.drawn.__getitem__)
    older = [
        dataclasses.replace(e, data={"order": order, "tickets": [1, 2, 3]}, lv=3) if e is draw else e
        for e in run.events
    ]
    assert replay(older, clock_copy(run.clock)).drawn == run.room.drawn
    for wrong in ({"count": 2, "first": 1}, {"count": 3, "first": 2}):
        events = [dataclasses.replace(e, data=wrong) if e is draw else e for e in run.events]
        with pytest.raises(ReplayFenced):
            replay(events, clock_copy(run.clock))
