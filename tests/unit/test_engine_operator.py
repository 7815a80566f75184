"""Operator actions and the visitor drill-down: eject, purge, delete + re-create (generations),
finished tickets (kept, at most FINISHED_KEEP), waiting vs waited, Ref look-up and collisions."""

from __future__ import annotations

import pytest

import queue_manager.engine.room as room_module
from queue_manager.engine import operator
from queue_manager.engine import visitor as visits
from queue_manager.engine.engine import GENERATIONS_KEPT
from queue_manager.engine.errors import EngineError
from queue_manager.engine.ticket import make_ref
from queue_manager.engine.visitor import Presented

QUIET = {"presenceSec": None, "queueMaxPerIp": None}

# Room "c48750", generation 1: tickets 35 and 153 share the Ref 8RGAF0 (found by brute force).
COLLIDING_ROOM, COLLIDING_PAIR, COLLIDING_REF = "c48750", (35, 153), "8RGAF0"


def _promote_all(run, people):
    for _ in range(600):
        if all(p.state == "passed" for p in people):
            return
        run(1)
    raise AssertionError("not promoted")


# ---------------------------------------------------------------------- eject


def test_eject_a_waiting_ticket_sends_it_to_the_back(make_room, visitor, engine):
    room = make_room()
    people = [visitor(room) for _ in range(5)]
    for p in people:
        p.join()
    assert operator.eject(room, people[1].n) is True
    assert people[1].position == 5 and people[1].state == "waiting"
    assert [p.position for p in people] == [1, 5, 2, 3, 4]
    found = people[1].status()
    assert found.ticket is people[1].ticket and found.ticket.reason == "ejected"
    assert engine.lookup("r", str(people[1].n))["reason"] == "ejected"
    assert any(e.type == "eject" and e.data == {"n": people[1].n} for e in engine.drain_events())


def test_eject_revokes_a_pass_and_frees_its_slot(make_room, visitor, run):
    room = make_room(ratePerMinute=60, maxConcurrent=1, **QUIET)
    a, b = visitor(room), visitor(room)
    a.join()
    b.join()
    _promote_all(run, [a])
    assert room.occupancy() == 1
    operator.eject(room, a.n)
    assert a.state == "waiting" and a.position == 2
    assert room.occupancy() == 0 and a.n not in room.passes
    result = a.check()
    assert not result.admit and result.reason == "ejected"  # the door names the cause
    run(1)
    assert b.state == "passed"


def test_eject_drops_a_live_session(make_room, visitor, run):
    room = make_room(ratePerMinute=60, maxConcurrent=1, **QUIET)
    a = visitor(room)
    a.join()
    _promote_all(run, [a])
    assert a.check().admit
    operator.eject(room, a.n)
    assert room.occupancy() == 0 and not room.sessions
    result = a.check()  # the old door key opens nothing
    assert not result.admit
    assert a.state == "waiting" and a.ticket.reason == "ejected" and a.position == 1


def test_eject_of_a_finished_ticket_forgets_it(make_room, visitor, run, engine):
    room = make_room(ratePerMinute=60, passedTtlSec=10, **QUIET)
    a = visitor(room)
    a.join()
    run(20)
    assert a.n in room.finished
    assert engine.lookup("r", str(a.n))["state"] == "expired"
    assert operator.eject(room, a.n) is True
    assert a.n not in room.finished
    with pytest.raises(EngineError) as info:
        engine.lookup("r", str(a.n))
    assert (info.value.status, info.value.code) == (404, "no_ticket")
    assert any(e.type == "eject" and e.data.get("forgotten") for e in engine.drain_events())


def test_eject_of_an_unknown_ticket(make_room):
    room = make_room()
    assert operator.eject(room, 42) is False


# ---------------------------------------------------------------------- purge


def test_purge_empties_the_line_and_keeps_passes_and_sessions(make_room, visitor, run, engine):
    room = make_room(ratePerMinute=60, maxConcurrent=5, **QUIET)
    people = [visitor(room) for _ in range(6)]
    for p in people:
        p.join()
    run(2)
    inside, holder = people[0], people[1]
    assert inside.check().admit and holder.state == "passed"
    waiting = people[2:]
    assert operator.purge(room) == 4
    assert len(room.line) == 0
    assert room.per_ident == {}
    assert inside.check().admit  # the session survives
    assert holder.check().admit  # so does the pass
    for p in waiting:
        found = p.status()
        assert found.ticket is None and found.reason == "purged"
        assert engine.lookup("r", str(p.n))["reason"] == "purged"
    again = waiting[0].join()
    assert again.new and again.reason == "purged" and again.ticket.n == 7
    assert "r" in engine.rooms
    assert any(e.type == "purge" and e.data == {"count": 4} for e in engine.drain_events())


def test_purge_frees_the_per_address_places(make_room, visitor):
    room = make_room(queueMaxPerIp=2)
    for _ in range(2):
        visitor(room, ident="203.0.113.9").join()
    operator.purge(room)
    assert visitor(room, ident="203.0.113.9").join().ticket is not None


# ---------------------------------------------------------------------- delete and re-create


def test_delete_then_create_is_a_new_generation(make_room, visitor, engine):
    room = make_room()
    old = [visitor(room) for _ in range(3)]
    for v in old:
        v.join()
    old_refs = [make_ref("r", 1, v.n) for v in old]
    engine.delete("r")
    with pytest.raises(EngineError) as info:
        engine.room("r")
    assert info.value.code == "no_room"
    room2 = make_room()
    assert room2.gen == 2 and room2 is not room
    fresh = visitor(room2)
    assert fresh.join().ticket.n == 1  # numbers restart
    for v in old:
        v.room = room2
        found = v.status()
        assert found.ticket is None and found.reason == "previous_generation"
        assert (
            visits.check(room2, v.client, v.token, None, None, new_door=("k", b"k" * 32)).reason
            == "previous_generation"
        )
    answer = engine.lookup("r", old_refs[2])
    assert answer["state"] == "previous_generation"
    assert answer["generation"] == 1 and answer["tickets"] == [3]
    assert engine.lookup("r", old_refs[2].lower())["state"] == "previous_generation"
    # a ticket *number* names the current generation
    assert engine.lookup("r", "1")["ticket"] == 1 and engine.lookup("r", "1")["generation"] == 2
    with pytest.raises(EngineError):
        engine.lookup("r", "3")


def test_previous_generation_lookup_while_the_room_is_deleted(make_room, visitor, engine):
    room = make_room()
    v = visitor(room)
    v.join()
    ref = make_ref("r", 1, v.n)
    engine.delete("r")
    assert engine.lookup("r", ref)["state"] == "previous_generation"
    with pytest.raises(EngineError) as info:
        engine.lookup("r", "ZZZZZZ")
    assert info.value.code == "no_room"


def test_the_last_three_generations_are_checked(make_room, visitor, engine):
    refs = {}
    for gen in range(1, GENERATIONS_KEPT + 3):
        room = make_room()
        assert room.gen == gen
        visitor(room).join()
        refs[gen] = make_ref("r", gen, 1)
        engine.delete("r")
    make_room()
    newest = GENERATIONS_KEPT + 2
    for gen in range(newest - GENERATIONS_KEPT + 1, newest + 1):
        assert engine.lookup("r", refs[gen])["generation"] == gen
    with pytest.raises(EngineError) as info:
        engine.lookup("r", refs[1])
    assert info.value.code == "no_ticket"


def test_delete_of_an_unknown_room(engine):
    with pytest.raises(EngineError) as info:
        engine.delete("nope")
    assert (info.value.status, info.value.code) == (404, "no_room")


def test_a_refused_create_does_not_use_up_a_generation(make_room, engine):
    make_room()
    engine.delete("r")
    with pytest.raises(EngineError):
        engine.upsert({"id": "r", "targetUrl": "https://shop.example", "state": "nope"})
    assert make_room().gen == 2


# ---------------------------------------------------------------------- finished tickets and the drill-down


def test_waiting_climbs_while_waiting_and_waited_is_frozen(make_room, visitor, run, engine, clock):
    room = make_room(ratePerMinute=60, state="paused", **QUIET)
    v = visitor(room)
    joined = clock.wall_ms()
    v.join()
    first = engine.lookup("r", str(v.n))
    assert first["state"] == "waiting" and first["waiting"] == 0 and "waited" not in first
    assert first["joined"] == joined and first["passed"] is None and first["position"] == 1
    clock.advance(42)
    assert engine.lookup("r", str(v.n))["waiting"] == 42
    engine.upsert({"id": "r", "state": "active"})
    run(1)
    promoted = engine.lookup("r", str(v.n))
    assert promoted["state"] == "passed" and "waiting" not in promoted
    assert promoted["waited"] == 43 and promoted["passed"] == joined + 43_000
    clock.advance(300)
    assert engine.lookup("r", str(v.n))["waited"] == 43
    run(400)  # the pass expires (600 s)
    done = engine.lookup("r", str(v.n))
    assert done["state"] == "expired" and done["waited"] == 43
    assert done["joined"] == joined and done["passed"] == joined + 43_000
    clock.advance(3600)
    assert engine.lookup("r", str(v.n))["waited"] == 43


def test_waited_survives_a_session_and_its_end(make_room, visitor, run, engine):
    room = make_room(ratePerMinute=60, sessionTtlSec=60, **QUIET)
    v = visitor(room)
    v.join()
    run(1)
    assert v.check().admit
    admitted = engine.lookup("r", str(v.n))
    assert admitted["state"] == "admitted" and admitted["onSite"] is True and admitted["waited"] == 1
    assert admitted["sessionExpiresInSec"] == 60
    run(61)
    done = engine.lookup("r", str(v.n))
    assert done["state"] == "expired" and done["waited"] == 1 and done["onSite"] is False


def test_finished_tickets_are_capped_oldest_dropped(make_room, visitor, run, engine, monkeypatch):
    monkeypatch.setattr(room_module, "FINISHED_KEEP", 5)
    room = make_room(ratePerMinute=6000, passedTtlSec=10, **QUIET)
    people = [visitor(room) for _ in range(8)]
    for p in people:
        p.join()
    run(15)
    assert all(p.state is None for p in people)
    assert list(room.finished) == [p.n for p in people[3:]]
    for p in people[:3]:
        with pytest.raises(EngineError):
            engine.lookup("r", str(p.n))
        assert p.status().reason == "expired"
    for p in people[3:]:
        assert engine.lookup("r", str(p.n))["state"] == "expired"


def test_default_finished_keep_is_50000():
    assert room_module.FINISHED_KEEP == 50_000


def test_lookup_by_ref(make_room, visitor, engine):
    room = make_room()
    people = [visitor(room) for _ in range(3)]
    for p in people:
        p.join()
    ref = make_ref("r", 1, people[1].n)
    for query in (ref, ref.lower(), f"  {ref} "):
        answer = engine.lookup("r", query)
        assert answer["ticket"] == people[1].n and answer["ref"] == ref and answer["position"] == 2
    with pytest.raises(EngineError) as info:
        engine.lookup("r", "000000" if ref != "000000" else "111111")
    assert (info.value.status, info.value.code) == (404, "no_ticket")


def test_ref_is_six_crockford_characters_naming_generation_and_ticket():
    ref = make_ref("r", 1, 1)
    assert len(ref) == 6 and set(ref) <= set("0123456789ABCDEFGHJKMNPQRSTVWXYZ")
    assert make_ref("r", 2, 1) != ref and make_ref("r", 1, 2) != ref and make_ref("s", 1, 1) != ref


def test_a_ref_collision_lists_the_candidates(make_room, fill, engine):
    lo, hi = COLLIDING_PAIR
    assert make_ref(COLLIDING_ROOM, 1, lo) == make_ref(COLLIDING_ROOM, 1, hi) == COLLIDING_REF
    room = make_room(COLLIDING_ROOM, **QUIET)
    fill(room, hi)
    answer = engine.lookup(COLLIDING_ROOM, COLLIDING_REF)
    assert answer["ref"] == COLLIDING_REF
    assert [c["ticket"] for c in answer["candidates"]] == [lo, hi]
    assert all(c["state"] == "waiting" for c in answer["candidates"])


def test_a_ref_collision_with_a_forgotten_ticket_still_finds_the_live_one(make_room, fill, engine, run):
    lo, hi = COLLIDING_PAIR
    room = make_room(COLLIDING_ROOM, ratePerMinute=1_000_000, passedTtlSec=10, **QUIET)
    fill(room, hi)
    run(20)  # everyone promoted, every pass expired
    assert lo in room.finished and hi in room.finished
    assert len(engine.lookup(COLLIDING_ROOM, COLLIDING_REF)["candidates"]) == 2
    operator.eject(room, lo)  # an eject forgets a finished ticket at once
    answer = engine.lookup(COLLIDING_ROOM, COLLIDING_REF)
    assert answer["ticket"] == hi and answer["state"] == "expired"


def test_a_ref_collision_with_a_ticket_dropped_past_the_cap(make_room, fill, engine, run, monkeypatch):
    monkeypatch.setattr(room_module, "FINISHED_KEEP", 200)
    lo, hi = COLLIDING_PAIR
    room = make_room(COLLIDING_ROOM, ratePerMinute=1_000_000, passedTtlSec=10, **QUIET)
    fill(room, 300)
    run(20)
    assert lo not in room.finished and hi in room.finished
    assert engine.lookup(COLLIDING_ROOM, COLLIDING_REF)["ticket"] == hi


def test_ref_index_is_bounded_like_the_finished_tickets(make_room, fill, run, monkeypatch):
    monkeypatch.setattr(room_module, "FINISHED_KEEP", 100)
    room = make_room(ratePerMinute=1_000_000, passedTtlSec=10, **QUIET)
    for _ in range(20):
        fill(room, 200)
        run(11)
    assert len(room.tickets) == 0 and len(room.finished) == 100
    assert sum(len(v) for v in room.refs.values()) <= len(room.tickets) + len(room.finished)


def test_presented_token_of_a_finished_ticket_resolves_with_its_reason(make_room, visitor, run):
    room = make_room(ratePerMinute=60, passedTtlSec=10, **QUIET)
    v = visitor(room)
    v.join()
    run(20)
    found = v.status()
    assert found.ticket is None and found.finished is not None and found.reason == "expired"
    assert visits.resolve(room, Presented(gen=1, n=999), v.client).reason == "expired"
