"""Events: every state change is an Event of a known type, drained by engine.drain_events()."""

from __future__ import annotations

import pytest

from queue_manager.engine import operator
from queue_manager.engine.events import EVENT_LOG_VERSION, EVENT_TYPES, Event

QUIET = {"presenceSec": None, "queueMaxPerIp": None}


def types(engine):
    return [e.type for e in engine.drain_events()]


def test_a_full_life_emits_only_known_types_and_every_kind_of_change(make_room, visitor, run, engine, clock):
    room = make_room(ratePerMinute=60, maxConcurrent=1, passedTtlSec=200, sessionTtlSec=20, **QUIET)
    engine.upsert({"id": "r", "ratePerMinute": 120})  # room.update
    a, b, c = (visitor(room) for _ in range(3))
    for v in (a, b, c):
        v.join()  # join
    run(1)  # promote a
    assert a.check().admit  # admit
    assert a.check(door=None).admit  # admit (reclaim at the door)
    a.join()  # reclaim (waiting page)
    assert a.check().admit
    run(21)  # session.end for a; b promoted into the slot
    assert a.state is None and b.state == "passed"
    run(120)  # b's claim window lapses (slot.release); c takes the slot
    assert c.state == "passed" and c.ticket.slot
    assert b.check().reason == "at_capacity"  # bounce
    run(80)  # b's pass expires: expire
    assert b.state is None
    operator.eject(room, c.n)  # eject
    engine.schedule("r", {"opensAt": clock.wall_ms() + 5_000})  # room.schedule
    visitor(room).join()  # prequeue.join
    run(6)  # prequeue.draw
    operator.purge(room)  # purge
    events = engine.drain_events()
    engine.delete("r")  # room.delete (drained first: see test_events_of_a_deleted_room_are_not_lost)
    events += engine.drain_events()
    seen = {ev.type for ev in events}
    assert seen <= EVENT_TYPES
    assert seen == {
        "room.create",
        "room.update",
        "room.schedule",
        "room.delete",
        "join",
        "prequeue.join",
        "prequeue.draw",
        "promote",
        "admit",
        "reclaim",
        "bounce",
        "eject",
        "purge",
        "expire",
        "session.end",
        "slot.release",
    }
    for ev in events:
        assert isinstance(ev, Event)
        assert ev.room == "r" and ev.gen == 1 and ev.lv == EVENT_LOG_VERSION and isinstance(ev.ts, int)
        assert ev.as_dict() == {
            "type": ev.type,
            "room": "r",
            "gen": 1,
            "seq": ev.seq,
            "ts": ev.ts,
            "lv": ev.lv,
            "data": ev.data,
        }


def test_drain_empties_the_queue(make_room, visitor, engine):
    room = make_room()
    visitor(room).join()
    assert types(engine) == ["room.create", "join"]
    assert engine.drain_events() == []


def test_room_definition_events(engine, make_room):
    make_room()
    engine.upsert({"id": "r", "state": "paused"})
    engine.schedule("r", {"preQueueMaxPerIp": 3})
    engine.delete("r")
    events = engine.drain_events()
    assert [e.type for e in events] == ["room.create", "room.update", "room.schedule", "room.delete"]
    assert events[1].data["fields"] == ["state"] and events[1].data["config"]["state"] == "paused"
    assert events[2].data["fields"] == ["preQueueMaxPerIp"]
    make_room()
    again = engine.drain_events()
    assert [(e.type, e.gen) for e in again] == [("room.create", 2)]


def test_join_and_promote_events(make_room, visitor, run, engine):
    room = make_room(ratePerMinute=60, **QUIET)
    v = visitor(room, ident="203.0.113.7")
    v.join()
    joins = [e for e in engine.drain_events() if e.type == "join"]
    assert len(joins) == 1
    assert joins[0].data["n"] == v.n and joins[0].data["ident"] == "203.0.113.7"
    assert joins[0].data["joined"] == v.ticket.joined_ms
    v.join()  # re-presenting is not a change
    assert types(engine) == []
    run(1)
    # credit: the outflow credit right after the promotion (one slot accrued in 1 s at 60/min, one spent)
    assert [(e.type, e.data) for e in engine.drain_events()] == [("promote", {"n": v.n, "slot": True, "credit": 0})]


def test_status_and_a_refused_join_emit_nothing(make_room, visitor, engine):
    room = make_room(queueMaxPerIp=1)
    v = visitor(room, ident="203.0.113.7")
    v.join()
    engine.drain_events()
    v.status()
    with pytest.raises(Exception):  # noqa: B017 - the 429 itself is tested elsewhere
        visitor(room, ident="203.0.113.7").join()
    assert engine.drain_events() == []


def test_door_events(make_room, visitor, run, engine):
    room = make_room(ratePerMinute=60, maxConcurrent=1, sessionTtlSec=30, **QUIET)
    a = visitor(room)
    a.join()
    run(1)
    engine.drain_events()
    assert a.check().admit
    admits = engine.drain_events()
    assert [e.type for e in admits] == ["admit"]
    assert admits[0].data == {"n": a.n, "door": a.door.hex()}
    for _ in range(3):
        assert a.check().admit  # a slide is not a new admission
    assert engine.drain_events() == []
    assert a.check(door=None).admit  # the cookie holder without the key
    (reclaim_at_door,) = engine.drain_events()
    assert reclaim_at_door.type == "admit" and reclaim_at_door.data == {"n": a.n, "door": a.door.hex(), "reclaim": True}
    a.join()  # the holder's waiting page while the session is live
    assert [(e.type, e.data) for e in engine.drain_events()] == [("reclaim", {"n": a.n})]
    assert a.check().admit
    engine.drain_events()
    run(30)  # quiet for sessionTtlSec
    assert [(e.type, e.data) for e in engine.drain_events()] == [("session.end", {"n": a.n})]
    assert room.occupancy() == 0


def test_bounce_event(make_room, visitor, run, engine):
    room = make_room(ratePerMinute=60, maxConcurrent=1, **QUIET)
    a, b = visitor(room), visitor(room)
    a.join()
    b.join()
    run(1)
    run(120)  # a's window lapses, b takes the slot
    engine.drain_events()
    assert a.check().reason == "at_capacity"
    assert [(e.type, e.data) for e in engine.drain_events()] == [("bounce", {"n": a.n})]


def test_expire_event(make_room, visitor, run, engine):
    room = make_room(ratePerMinute=60, passedTtlSec=10, **QUIET)
    v = visitor(room)
    v.join()
    run(1)
    engine.drain_events()
    run(10)
    assert [(e.type, e.data) for e in engine.drain_events()] == [("expire", {"n": v.n})]


def test_eject_and_purge_events(make_room, visitor, engine):
    room = make_room()
    people = [visitor(room) for _ in range(3)]
    for p in people:
        p.join()
    engine.drain_events()
    operator.eject(room, people[0].n)
    operator.purge(room)
    assert [(e.type, e.data) for e in engine.drain_events()] == [
        ("eject", {"n": people[0].n}),
        ("purge", {"count": 3}),
    ]


def test_prequeue_events(make_room, visitor, engine, clock):
    room = make_room(opensAt=clock.wall_ms() + 1000)
    v = visitor(room, ident="203.0.113.7")
    v.join()
    pre = [e for e in engine.drain_events() if e.type == "prequeue.join"]
    assert len(pre) == 1 and pre[0].data["h"] == v.token.handle and pre[0].data["ident"] == "203.0.113.7"
    clock.advance(1)
    engine.tick()
    draws = [e for e in engine.drain_events() if e.type == "prequeue.draw"]
    assert draws[0].data == {"count": 1, "first": v.n}  # the order: qm-draw-v1 of the seed and the pre-queue


def test_event_timestamps_are_the_wall_clock(make_room, visitor, engine, clock):
    room = make_room()
    engine.drain_events()
    clock.advance(12.5)
    visitor(room).join()
    (ev,) = engine.drain_events()
    assert ev.ts == clock.wall_ms()


def test_events_of_a_deleted_room_are_not_lost(make_room, visitor, engine):
    room = make_room()
    engine.drain_events()
    visitor(room).join()
    engine.delete("r")
    assert types(engine) == ["join", "room.delete"]


def test_drained_events_are_in_the_order_they_happened(make_room, visitor, engine, clock):
    room = make_room()
    visitor(room).join()
    clock.advance(1)
    engine.upsert({"id": "r", "state": "paused"})
    clock.advance(1)
    visitor(room).join()
    assert types(engine) == ["room.create", "join", "room.update", "join"]


def test_event_seq_counts_up_per_room_generation(make_room, visitor, run):
    room = make_room(ratePerMinute=60)
    for _ in range(3):
        visitor(room).join()
    run(2)
    events = room.events
    seqs = [e.seq for e in events if e.room == room.cfg.id]
    assert seqs == list(range(1, len(seqs) + 1))  # 1, 2, 3, … with no gap: the replay order
