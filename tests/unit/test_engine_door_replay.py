"""The door-key fast path (visitor.door_replay) answers exactly what the full check would."""

from __future__ import annotations

from queue_manager.engine import operator
from queue_manager.engine import visitor as visits
from queue_manager.engine.visitor import Presented

QUIET = {"presenceSec": None}


def _admitted(make_room, visitor, run, **fields):
    room = make_room(ratePerMinute=60, **QUIET, **fields)
    v = visitor(room)
    v.join()
    run(1)
    assert v.check().admit and v.door is not None
    return room, v


def test_replay_with_the_door_key_slides_the_session(make_room, visitor, run, clock):
    room, v = _admitted(make_room, visitor, run, sessionTtlSec=60)
    for _ in range(5):  # 5 × 50 s: far past sessionTtlSec, kept alive only by sliding
        clock.advance(50)
        result = visits.door_replay(room, v.token, v.door, "https://shop.example/x")
        assert result is not None and result.admit and result.state == "admitted"
    assert v.state == "admitted"
    assert room.occupancy() == 1  # one slot however often the key is replayed


def test_anything_else_falls_through_without_counting(make_room, visitor, run):
    room, v = _admitted(make_room, visitor, run)
    before = room.unscoped_checks
    assert visits.door_replay(room, v.token, b"wrong-key-hash!!", None) is None
    assert visits.door_replay(room, Presented(gen=room.gen + 1, n=v.n), v.door, None) is None
    other = visitor(room)
    other.join()
    assert visits.door_replay(room, other.token, v.door, None) is None  # a waiting ticket never replays
    assert room.unscoped_checks == before  # nothing was counted: the full check will count once
    operator.eject(room, v.n)
    assert visits.door_replay(room, v.token, v.door, None) is None  # an ejected session's key is dead


def test_replay_still_obeys_bypass_and_url_rules(make_room, visitor, run, engine):
    room, v = _admitted(make_room, visitor, run, rules=[{"pattern": "/checkout*"}])
    skipped = visits.door_replay(room, v.token, v.door, "https://shop.example/about")
    assert skipped is not None and skipped.state == "unprotected"
    engine.upsert({"id": room.cfg.id, "state": "bypass"})
    bypass = visits.door_replay(room, v.token, v.door, "https://shop.example/checkout/1")
    assert bypass is not None and bypass.state == "bypass"


def test_replay_after_the_session_ended_falls_through(make_room, visitor, run, clock):
    room, v = _admitted(make_room, visitor, run, sessionTtlSec=30)
    clock.advance(31)
    assert visits.door_replay(room, v.token, v.door, None) is None
    assert v.state is None  # finished: the full check will say expired
