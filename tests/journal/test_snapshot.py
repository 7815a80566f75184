"""Checkpoint format v1: ``load(dump(room))`` is the same room, on another clock, with everyone seen now."""

from __future__ import annotations

import copy

import orjson
import pytest
from hypothesis import HealthCheck, given, settings

from queue_manager.clock import FakeClock
from queue_manager.engine.snapshot import SnapshotError, config_from_public, dump, iso_to_ms, load
from tests.journal.engine_run import (
    Run,
    clock_copy,
    deterministic,
    fresh_heaps,
    future,
    observe,
    ops,
    room_fields,
    see_everyone,
)

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def run_script(script: list[tuple[object, ...]], fields: dict[str, object] | None = None) -> Run:
    run = Run(**(fields or {}))
    with deterministic():
        for op in script:
            run.apply(op)
    run.room.advance()
    run.drain()
    return run


@SETTINGS
@given(room_fields(), ops())
def test_load_of_dump_answers_every_question_like_the_room(fields, script):
    run = run_script(script, fields)
    live = run.room
    data = orjson.loads(orjson.dumps(dump(live)))  # it is plain JSON
    here = clock_copy(run.clock)
    loaded = load(data, here, [])
    assert dump(loaded) == data  # loading and exporting again gives the same document
    see_everyone(live)  # a load marks every holder seen
    fresh_heaps(live)
    # the per-minute windows are not in format v1 (see the report): everything else answers alike
    assert observe(loaded, run.browsers, windows=False) == observe(live, run.browsers, windows=False)
    twin = copy.deepcopy(live)
    assert future(loaded, here, run.browsers) == future(twin, twin.clock, run.browsers)  # type: ignore[arg-type]


@SETTINGS
@given(room_fields(), ops(max_size=40))
def test_load_rebases_onto_a_clock_with_another_origin(fields, script):
    run = run_script(script, fields)
    data = dump(run.room)
    there = FakeClock(wall_ms=run.clock.wall_ms(), mono=77.0)  # same wall time, another monotonic origin
    loaded = load(data, there, [])
    moved = dump(loaded)
    shift = there.mono_ms() - run.clock.mono_ms()
    assert moved["refMono"] == data["refMono"] + shift
    assert moved["lastTick"] == data["lastTick"] + shift
    for mine, theirs in zip(moved["tickets"], data["tickets"], strict=True):
        for key in ("passAt", "sessStart", "sessLast", "sessTouched"):
            assert mine[key] == (theirs[key] + shift if theirs[key] else 0)
        assert mine["bouncedAt"] == (None if theirs["bouncedAt"] is None else theirs["bouncedAt"] + shift)
    see_everyone(run.room)
    assert observe(loaded, run.browsers, windows=False) == observe(run.room, run.browsers, windows=False)


def test_the_documented_example_shape():
    run = run_script(
        [("join", 0, None), ("join", 1, "https://shop.example/a"), ("wait", 1000), ("check", 0, 0, 0), ("wait", 1000)]
    )
    data = dump(run.room)
    assert set(data) == {
        "v", "room", "gen", "seq", "createdAt", "refWall", "refMono", "config", "next", "credit", "lastTick",
        "line", "tickets", "finished", "prequeue", "drawn", "draw", "purgedHandles", "counters",
    }  # fmt: skip
    assert data["createdAt"] == run.room.created_ms > 0
    assert load(data, FakeClock(), []).created_ms == data["createdAt"]  # a restored room keeps when it began
    assert load({k: v for k, v in data.items() if k != "createdAt"}, FakeClock(), []).created_ms == 0
    assert data["v"] == 1 and data["room"] == "r" and data["gen"] == 1
    assert set(data["tickets"][0]) == {
        "n", "ident", "fp", "fp2", "ck", "joined", "ret", "state", "reason", "charged", "passed", "waited",
        "passAt", "slot", "told", "bouncedAt", "door", "sessStart", "sessLast", "sessTouched",
    }  # fmt: skip
    assert set(data["counters"]) == {
        "joinsTotal", "passesTotal", "waitMsTotal", "unscopedChecks", "blockedReturnUrls", "refusedFull", "ejected",
        "sessionsRevoked",
    }  # fmt: skip
    # the running sum of the passes' waits survives a restore, so a reader's count of them carries on
    assert data["counters"]["waitMsTotal"] == run.room.wait_ms_total == sum(run.room.waits) > 0
    assert load(data, FakeClock(), []).wait_ms_total == data["counters"]["waitMsTotal"]
    older = {**data, "counters": {k: v for k, v in data["counters"].items() if k != "waitMsTotal"}}
    assert load(older, FakeClock(), []).wait_ms_total == 0  # a checkpoint written before it was kept
    before_full = {**data, "counters": {k: v for k, v in data["counters"].items() if k != "refusedFull"}}
    assert load(before_full, FakeClock(), []).refused_full == 0  # written before a full line was counted
    before_revoke = {**data, "counters": {k: v for k, v in data["counters"].items() if k != "sessionsRevoked"}}
    assert load(before_revoke, FakeClock(), []).sessions_revoked == 0  # written before a revoke was counted
    assert [t["state"] for t in data["tickets"]] == ["admitted", "passed"]
    assert data["seq"] == run.room.event_seq == run.events[-1].seq


def test_a_wrong_version_or_a_broken_document_is_refused():
    data = dump(run_script([("join", 0, None)]).room)
    with pytest.raises(SnapshotError):
        load({**data, "v": 2}, FakeClock(), [])
    with pytest.raises(SnapshotError):
        load({**data, "line": [1, 1]}, FakeClock(), [])
    broken = copy.deepcopy(data)
    broken["tickets"][0]["state"] = "flying"
    with pytest.raises(SnapshotError):
        load(broken, FakeClock(), [])


def test_opens_at_survives_to_the_millisecond():
    # model.parse_opens_at goes through a float and can lose a millisecond; the loader must not
    for ms in (2_166_055_567_819, 1_767_225_600_001, 1_767_225_600_999):
        run = Run()
        run.engine.schedule("r", {"opensAt": ms})
        assert run.room.cfg.opens_at_ms == ms
        assert config_from_public(run.room.cfg.to_public()).opens_at_ms == ms
        assert iso_to_ms(run.room.cfg.to_public()["opensAt"]) == ms
