"""A full line: maxWaiting (people in line) and maxWaitSec (the estimated wait of a new place) refuse
new joins with 503 queue_full; nobody already in line is touched, and each refusal is counted."""

from __future__ import annotations

import pytest

from queue_manager.engine import report, snapshot
from queue_manager.engine.errors import EngineError
from queue_manager.engine.view import visitor_view

QUIET = {"presenceSec": None, "queueMaxPerIp": None}


def _refused(v) -> EngineError:
    with pytest.raises(EngineError) as info:
        v.join()
    return info.value


@pytest.mark.parametrize("field", ["maxWaiting", "maxWaitSec"])
@pytest.mark.parametrize("value", [0, -1, "5", 1.5, True])
def test_bad_values_are_refused(make_room, engine, field, value):
    make_room()
    with pytest.raises(EngineError) as info:
        engine.upsert({"id": "r", field: value})
    assert (info.value.status, info.value.code) == (400, "invalid_field")


def test_null_by_default_and_returned(make_room, engine):
    room = make_room()
    public = room.cfg.to_public()
    assert public["maxWaiting"] is None and public["maxWaitSec"] is None
    room, _, fields = engine.upsert({"id": "r", "maxWaiting": 5, "maxWaitSec": 600})
    assert fields == ["maxWaiting", "maxWaitSec"]
    assert (room.cfg.max_waiting, room.cfg.max_wait_sec) == (5, 600)
    assert report.stats(room)["refusedFull"] == 0


def test_max_waiting_refuses_a_new_join_only(make_room, visitor, engine):
    room = make_room(maxWaiting=3, ratePerMinute=0, **QUIET)
    inline = [visitor(room) for _ in range(3)]
    for v in inline:
        v.join()
    engine.drain_events()
    late = visitor(room)
    err = _refused(late)
    assert (err.status, err.code, err.headers) == (503, "queue_full", {"Retry-After": "60"})
    assert late.token is None
    assert engine.drain_events() == []  # a refusal changes no place
    for v in inline:  # re-presenting a held place is never refused
        assert not v.join().new
    assert len(room.line) == 3
    assert room.refused_full == 1 and report.stats(room)["refusedFull"] == 1


def test_lowering_the_ceiling_removes_nobody(make_room, visitor, engine):
    room = make_room(ratePerMinute=0, **QUIET)
    inline = [visitor(room) for _ in range(5)]
    for v in inline:
        v.join()
    engine.upsert({"id": "r", "maxWaiting": 2})
    assert len(room.line) == 5
    assert [visitor_view(room, v.status()).position for v in inline] == [1, 2, 3, 4, 5]
    _refused(visitor(room))
    engine.upsert({"id": "r", "maxWaiting": None})
    assert visitor(room).join().new


def test_max_wait_sec_uses_the_waiting_page_estimate(make_room, visitor):
    # 60 a minute: the k-th place waits about k seconds (engine.view.eta_sec)
    room = make_room(maxWaitSec=3, ratePerMinute=60, **QUIET)
    first = [visitor(room) for _ in range(3)]
    for v in first:
        v.join()
    assert visitor_view(room, first[-1].status()).eta_sec == 3
    err = _refused(visitor(room))
    assert err.code == "queue_full"
    assert room.refused_full == 1


def test_max_wait_sec_without_an_estimate_refuses_nobody(make_room, visitor, engine):
    room = make_room(maxWaitSec=1, ratePerMinute=0, **QUIET)  # the line does not move: no estimate
    for _ in range(3):
        assert visitor(room).join().new
    engine.upsert({"id": "r", "ratePerMinute": 60, "state": "paused"})
    assert visitor(room).join().new


def test_pre_queue_joins_are_not_refused(make_room, visitor, clock):
    room = make_room(opensAt=clock.wall_ms() + 3_600_000, maxWaiting=1, **QUIET)
    for _ in range(3):
        assert visitor(room).join().pre is not None
    assert room.refused_full == 0


def test_the_address_ceiling_speaks_first(make_room, visitor):
    room = make_room(maxWaiting=1, queueMaxPerIp=1, presenceSec=None, ratePerMinute=0)
    visitor(room, ident="203.0.113.9").join()
    assert _refused(visitor(room, ident="203.0.113.9")).code == "queue_identity_limit"
    assert _refused(visitor(room, ident="203.0.113.10")).code == "queue_full"


def test_the_count_survives_a_checkpoint(make_room, visitor, clock):
    room = make_room(maxWaiting=1, ratePerMinute=0, **QUIET)
    visitor(room).join()
    _refused(visitor(room))
    _refused(visitor(room))
    back = snapshot.load(snapshot.dump(room), clock, [])
    assert back.refused_full == 2
    assert (back.cfg.max_waiting, back.cfg.max_wait_sec) == (1, None)
