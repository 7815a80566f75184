"""Scheduled drops: the pre-queue, preQueueMaxPerIp, the round-robin draw at opensAt (recorded as an
event), waiting time counted from the pre-queue join, and the schedule endpoint's semantics."""

from __future__ import annotations

import collections

import pytest

from queue_manager.engine import operator, report
from queue_manager.engine import visitor as visits
from queue_manager.engine.errors import EngineError
from queue_manager.engine.model import ClientId
from queue_manager.engine.view import visitor_view

OPEN_IN = 3600.0


@pytest.fixture
def opens_ms(clock):
    return clock.wall_ms() + int(OPEN_IN * 1000)


@pytest.fixture
def drop(make_room, opens_ms):
    """A room whose doors open in an hour; presence off and 0/min, so the line stays as drawn."""
    return make_room(opensAt=opens_ms, presenceSec=None, ratePerMinute=0)


def test_before_opens_at_joins_are_pre_queue_entries(drop, visitor, run, opens_ms, clock):
    people = [visitor(drop) for _ in range(3)]
    for p in people:
        found = p.join()
        assert found.pre is not None and found.ticket is None and found.new
    view = visitor_view(drop, people[0].join())
    assert view.state == "scheduled"
    assert view.position is None and view.ahead is None and view.ticket is None
    assert view.handle == people[0].token.handle
    assert view.pre_count == 3
    assert view.opens_at_ms == opens_ms
    assert view.room_state == "scheduled"
    assert len(drop.line) == 0 and len(drop.prequeue) == 3
    assert drop.cfg.state == "active"  # configured state; "scheduled" is only the effective one
    assert run(600) == 0
    assert people[0].check().reason == "waiting"


def test_rejoining_with_your_handle_returns_the_same_entry(drop, visitor):
    v = visitor(drop)
    v.join()
    handle = v.token.handle
    for _ in range(5):
        assert v.join().pre.handle == handle
    assert len(drop.prequeue) == 1


def test_somebody_elses_handle_is_not_theirs(drop, visitor):
    owner, thief = visitor(drop), visitor(drop)
    owner.join()
    thief.token = owner.token
    assert thief.status().reason == "not_owner"
    found = thief.join()
    assert found.pre is not None and found.pre.handle != owner.token.handle
    assert found.reason == "not_owner"


def test_pre_queue_max_per_ip(make_room, visitor, opens_ms):
    room = make_room(opensAt=opens_ms, preQueueMaxPerIp=3)
    mine = [visitor(room, ident="203.0.113.9") for _ in range(3)]
    for v in mine:
        v.join()
    with pytest.raises(EngineError) as info:
        visitor(room, ident="203.0.113.9").join()
    assert (info.value.status, info.value.code) == (429, "queue_identity_limit")
    assert info.value.headers == {"Retry-After": "30"}
    assert len(room.prequeue) == 3
    for v in mine:
        assert v.join().pre is not None  # re-presenting is never charged
    assert visitor(room, ident="203.0.113.10").join().pre is not None


def test_pre_queue_default_cap_is_16(drop, visitor):
    assert drop.cfg.prequeue_max_per_ip == 16
    for _ in range(16):
        visitor(drop, ident="203.0.113.9").join()
    with pytest.raises(EngineError):
        visitor(drop, ident="203.0.113.9").join()


@pytest.mark.parametrize("trigger", ["tick", "status", "join", "check", "stats", "lookup"])
def test_the_draw_happens_at_opens_at_on_any_call(drop, visitor, engine, clock, trigger):
    people = [visitor(drop) for _ in range(5)]
    for p in people:
        p.join()
    clock.advance(OPEN_IN - 1)
    engine.tick()
    people[0].status()
    assert len(drop.prequeue) == 5 and len(drop.line) == 0  # one second early: nothing
    clock.advance(1)
    if trigger == "tick":
        engine.tick()
    elif trigger == "status":
        people[1].status()
    elif trigger == "join":
        visitor(drop).join()
    elif trigger == "check":
        people[2].check()
    elif trigger == "stats":
        report.stats(drop)
    else:
        with pytest.raises(EngineError):
            engine.lookup("r", "999")
    assert len(drop.prequeue) == 0
    assert len(drop.line) >= 5
    assert sorted(p.position for p in people) == [1, 2, 3, 4, 5]
    for p in people:
        found = p.status()
        assert found.ticket is not None and found.ticket.state == "waiting"
        view = visitor_view(drop, found)
        assert view.state == "waiting" and view.position is not None


def test_the_draw_is_recorded_as_an_event_with_its_order(drop, visitor, engine, clock):
    people = [visitor(drop, ident=f"198.51.100.{i % 3}") for i in range(9)]
    for p in people:
        p.join()
    engine.drain_events()
    clock.advance(OPEN_IN)
    engine.tick()
    draws = [e for e in engine.drain_events() if e.type == "prequeue.draw"]
    assert len(draws) == 1
    assert draws[0].data == {"count": len(people), "first": 1}
    order, tickets = drop.draw_record.drawn.order, list(range(1, len(people) + 1))
    assert sorted(order) == sorted(p.token.handle for p in people)
    assert list(drop.line) == tickets
    assert [drop.drawn[h] for h in order] == tickets
    clock.advance(10)
    engine.tick()
    assert [e.type for e in engine.drain_events()].count("prequeue.draw") == 0  # never recomputed


def test_the_draw_is_round_robin_across_identities(make_room, clock, engine):
    """A holds 5 entries, B and C one each: B and C are both drawn before A's second entry."""
    first_of_a = collections.Counter()
    for run_no in range(300):
        room_id = f"d{run_no}"
        opens = clock.wall_ms() + 1000
        room = make_room(room_id, opensAt=opens, presenceSec=None, ratePerMinute=0)
        clients = {
            "A": ClientId(ident="198.51.100.1", fp=b"a"),
            "B": ClientId(ident="198.51.100.2", fp=b"b"),
            "C": ClientId(ident="198.51.100.3", fp=b"c"),
        }
        owner_of = {}
        for who, k in (("A", 5), ("B", 1), ("C", 1)):
            for _ in range(k):
                owner_of[visits.join(room, clients[who], None, None).pre.handle] = who
        clock.advance(1)
        room.advance()
        drawn_by = {n: owner_of[h] for h, n in room.drawn.items()}
        line = [drawn_by[n] for n in room.line]
        assert sorted(line[:3]) == ["A", "B", "C"], line
        assert line[3:] == ["A"] * 4
        first_of_a[line.index("A")] += 1
        engine.delete(room_id)
    # the first round itself is shuffled: A's first entry lands in every one of the three places
    assert set(first_of_a) == {0, 1, 2}


def test_round_robin_with_many_identities(make_room, clock):
    room = make_room(opensAt=clock.wall_ms() + 1000, presenceSec=None, ratePerMinute=0, preQueueMaxPerIp=None)
    counts = {f"198.51.100.{i}": i + 1 for i in range(8)}  # ident i holds i+1 entries
    owner_of = {}
    for ident, k in counts.items():
        for j in range(k):
            found = visits.join(room, ClientId(ident=ident, fp=f"{ident}/{j}".encode()), None, None)
            owner_of[found.pre.handle] = ident
    clock.advance(1)
    room.advance()
    by_n = {n: owner_of[h] for h, n in room.drawn.items()}
    line = [by_n[n] for n in room.line]
    seen: collections.Counter[str] = collections.Counter()
    depth_of = []
    for ident in line:
        seen[ident] += 1
        depth_of.append(seen[ident])
    assert depth_of == sorted(depth_of)  # every k-th entry is behind every (k-1)-th entry


def test_waiting_time_counts_from_the_pre_queue_join(drop, visitor, engine, clock, run, opens_ms):
    v = visitor(drop)
    joined = clock.wall_ms()
    v.join()
    clock.advance(OPEN_IN)
    engine.tick()
    t = v.ticket
    assert t.joined_ms == joined
    assert visitor_view(drop, v.status()).joined_ms == joined
    engine.upsert({"id": "r", "ratePerMinute": 60})
    run(2, each=v.status)
    assert v.state == "passed"
    assert t.waited_ms >= opens_ms - joined
    described = engine.lookup("r", str(v.n))
    assert described["waited"] >= OPEN_IN


def test_drawn_tickets_are_charged_to_queue_max_per_ip(make_room, visitor, clock):
    room = make_room(opensAt=clock.wall_ms() + 1000, queueMaxPerIp=4, preQueueMaxPerIp=6)
    for _ in range(6):
        visitor(room, ident="203.0.113.9").join()
    clock.advance(1)
    room.advance()
    assert len(room.line) == 6
    assert room.per_ident["203.0.113.9"] == 6
    assert room.pq_per_ident == {}
    with pytest.raises(EngineError):
        visitor(room, ident="203.0.113.9").join()


def test_the_draw_does_not_count_as_joins(drop, visitor, clock, engine):
    for _ in range(10):
        visitor(drop).join()
    clock.advance(OPEN_IN)
    engine.tick()
    stats = report.stats(drop)
    assert stats["joinsTotal"] == 10
    assert stats["joinsLastMinute"] == 0


# ---------------------------------------------------------------------- the schedule endpoint


def test_schedule_sets_only_the_fields_sent(make_room, engine, clock):
    room = make_room()
    opens = clock.wall_ms() + 60_000
    engine.schedule("r", {"opensAt": opens, "preQueueMaxPerIp": 8})
    assert (room.cfg.opens_at_ms, room.cfg.prequeue_max_per_ip) == (opens, 8)
    engine.schedule("r", {"preQueueMaxPerIp": 4})
    assert (room.cfg.opens_at_ms, room.cfg.prequeue_max_per_ip) == (opens, 4)
    assert room.effective_state() == "scheduled"
    later = opens + 60_000
    engine.schedule("r", {"opensAt": later})
    assert (room.cfg.opens_at_ms, room.cfg.prequeue_max_per_ip) == (later, 4)


def test_schedule_accepts_iso_8601(make_room, engine):
    room = make_room()
    engine.schedule("r", {"opensAt": "2026-09-01T09:00:00Z"})
    assert room.cfg.opens_at_ms == 1_788_253_200_000
    engine.schedule("r", {"opensAt": "2026-09-01T11:00:00+02:00"})
    assert room.cfg.opens_at_ms == 1_788_253_200_000


def test_opens_at_null_cancels_and_draws_the_existing_pre_queue(drop, visitor, engine):
    people = [visitor(drop) for _ in range(4)]
    for p in people:
        p.join()
    engine.drain_events()
    engine.schedule("r", {"opensAt": None})
    assert drop.cfg.opens_at_ms is None
    assert drop.effective_state() == "active"
    assert len(drop.prequeue) == 0 and len(drop.line) == 4
    assert all(p.status().ticket is not None for p in people)
    types = [e.type for e in engine.drain_events()]
    assert "prequeue.draw" in types and "room.schedule" in types


def test_opens_at_null_on_an_unscheduled_room_is_accepted(make_room, engine):
    room = make_room()
    engine.schedule("r", {"opensAt": None})
    assert room.cfg.opens_at_ms is None


def test_empty_schedule_body_is_nothing_to_change(drop, engine, opens_ms):
    with pytest.raises(EngineError) as info:
        engine.schedule("r", {})
    assert (info.value.status, info.value.code) == (400, "nothing_to_change")
    assert drop.cfg.opens_at_ms == opens_ms


def test_unknown_schedule_field(drop, engine, opens_ms):
    with pytest.raises(EngineError) as info:
        engine.schedule("r", {"opensAt": None, "opens_at": 5})
    assert (info.value.status, info.value.code) == (400, "unknown_field")
    assert drop.cfg.opens_at_ms == opens_ms  # nothing applied


@pytest.mark.parametrize("body", [[], "opensAt", None, 5])
def test_schedule_body_must_be_an_object(drop, engine, body):
    with pytest.raises(EngineError) as info:
        engine.schedule("r", body)
    assert (info.value.status, info.value.code) == (400, "bad_request")


@pytest.mark.parametrize("value", ["tomorrow", True, -5, 1.5e20, "2026-13-01T00:00:00Z", {}])
def test_schedule_invalid_opens_at(drop, engine, value, opens_ms):
    with pytest.raises(EngineError) as info:
        engine.schedule("r", {"opensAt": value})
    assert (info.value.status, info.value.code) == (400, "invalid_opens_at")
    assert drop.cfg.opens_at_ms == opens_ms


def test_schedule_invalid_cap(drop, engine):
    with pytest.raises(EngineError) as info:
        engine.schedule("r", {"preQueueMaxPerIp": 0})
    assert info.value.status == 400
    assert drop.cfg.prequeue_max_per_ip == 16


def test_schedule_unknown_room(engine):
    with pytest.raises(EngineError) as info:
        engine.schedule("nope", {"opensAt": None})
    assert (info.value.status, info.value.code) == (404, "no_room")


def test_opens_at_null_through_the_room_upsert_draws_the_pre_queue(drop, visitor, engine, run):
    people = [visitor(drop) for _ in range(3)]
    for p in people:
        p.join()
    engine.upsert({"id": "r", "opensAt": None})
    run(1)
    assert len(drop.prequeue) == 0
    assert all(p.status().ticket is not None for p in people)


def test_purged_pre_queue_handle_resolves_purged(drop, visitor):
    v = visitor(drop)
    v.join()
    assert operator.purge(drop) == 1
    assert v.status().reason == "purged"


def test_no_burst_when_the_doors_open(make_room, fill, run, clock):
    room = make_room(
        opensAt=clock.wall_ms() + 600_000, presenceSec=None, ratePerMinute=60, preQueueMaxPerIp=None, queueMaxPerIp=None
    )
    fill(room, 300)
    assert run(599) == 0  # ticking every second while scheduled accrues nothing
    assert len(room.prequeue) == 300
    assert run(1) <= 2
    assert len(room.line) >= 298
    assert abs(run(60) - 60) <= 1
