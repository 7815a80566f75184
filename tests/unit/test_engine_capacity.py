"""maxConcurrent, the claim window, pass expiry, the door (slots, bounced holders oldest first),
sessions (sliding, sessionTtlSec, sessionMaxSec) and door keys."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queue_manager.clock import FakeClock
from queue_manager.engine import operator, report
from queue_manager.engine import visitor as visits
from queue_manager.engine.engine import Engine
from queue_manager.engine.room import Room

from .conftest import TARGET

QUIET = {"presenceSec": None, "queueMaxPerIp": None}


def promote_one(run, v, room: Room, max_seconds: int = 600) -> None:
    """Tick until visitor ``v`` holds a pass (or fail)."""
    for _ in range(max_seconds):
        if v.state == "passed":
            return
        run(1)
    raise AssertionError(f"ticket {v.n} was never promoted")


# ---------------------------------------------------------------------- maxConcurrent


def test_promotion_never_exceeds_max_concurrent(make_room, visitor, run):
    room = make_room(ratePerMinute=6000, maxConcurrent=5, **QUIET)
    people = [visitor(room) for _ in range(50)]
    for p in people:
        p.join()
    assert run(1) == 5
    for _ in range(119):
        run(1)
        assert room.occupancy() <= 5
    assert len(room.passes) == 5  # five slots, all held by unused passes inside their claim window
    run(1)  # the claim window (120 s) of the first five ends: five more are promoted
    assert room.occupancy() == 5
    assert len(room.passes) == 10
    assert sum(1 for n in room.passes if room.tickets[n].slot) == 5


def test_ten_valid_passes_five_slots_exactly_five_get_in(make_room, visitor, run):
    """The guide's example: maxConcurrent 5, ten valid passes; all ten arrive, exactly five get in."""
    room = make_room(ratePerMinute=6000, maxConcurrent=5, **QUIET)
    people = [visitor(room) for _ in range(10)]
    for p in people:
        p.join()
    run(121)
    assert all(p.state == "passed" for p in people)
    results = [p.check() for p in people]
    admitted = [p for p, r in zip(people, results, strict=True) if r.admit]
    turned = [r for r in results if not r.admit]
    assert len(admitted) == 5
    assert all(r.reason == "at_capacity" for r in turned)
    assert room.occupancy() == 5
    # the slot holders are the ones let in; the other five keep their passes
    assert {p.n for p in admitted} == {p.n for p in people[5:]}
    assert all(p.state == "passed" for p in people[:5])


def test_null_max_concurrent_is_no_ceiling(make_room, visitor, run):
    room = make_room(ratePerMinute=6000, maxConcurrent=None, **QUIET)
    people = [visitor(room) for _ in range(300)]
    for p in people:
        p.join()
    assert run(3) == 300
    assert all(p.check().admit for p in people)
    assert room.occupancy() == 300
    assert report.stats(room)["capacity"] is None


def test_session_holds_one_slot_however_often_the_check_is_replayed(make_room, visitor, run):
    room = make_room(ratePerMinute=6000, maxConcurrent=2, **QUIET)
    a, b, c = visitor(room), visitor(room), visitor(room)
    for p in (a, b, c):
        p.join()
    run(1)
    assert a.state == "passed" and b.state == "passed" and c.state == "waiting"
    assert room.occupancy() == 2
    assert a.check().admit
    assert room.occupancy() == 2
    for _ in range(50):
        assert a.check().admit  # replay with the door key
    for _ in range(5):
        assert a.check(door=None).admit  # the cookie holder without the key: a new key, same session
    assert room.occupancy() == 2
    assert room.sessions == {a.n}
    assert b.check().admit
    assert room.occupancy() == 2
    for _ in range(20):
        assert b.check().admit
    run(300)
    assert c.state == "waiting"  # the two sessions fill the room, whatever the replays


# ---------------------------------------------------------------------- claim window and pass expiry


def test_unused_pass_holds_its_slot_for_the_claim_window_only(make_room, visitor, run):
    room = make_room(ratePerMinute=60, maxConcurrent=1, passedTtlSec=600, **QUIET)
    a, b = visitor(room), visitor(room)
    a.join()
    b.join()
    promote_one(run, a, room)
    a.status()  # told: keeps the slot for the whole window
    pass_at = a.ticket.pass_at
    run(119)
    assert a.ticket.slot and room.occupancy() == 1
    assert b.state == "waiting"
    run(1)
    assert room.clock.mono_ms() == pass_at + 120_000
    assert not a.ticket.slot
    assert a.state == "passed"  # still valid
    assert b.state == "passed" and b.ticket.slot  # the slot went to the next in line
    assert room.occupancy() == 1


def test_pass_past_its_window_still_walks_in_when_a_slot_is_free(make_room, visitor, run):
    room = make_room(ratePerMinute=60, maxConcurrent=1, passedTtlSec=600, **QUIET)
    a = visitor(room)
    a.join()
    promote_one(run, a, room)
    run(300)
    assert a.state == "passed" and not a.ticket.slot
    assert room.occupancy() == 0
    result = a.check()
    assert result.admit and result.state == "admitted"
    assert room.occupancy() == 1


@pytest.mark.parametrize(("ttl", "window"), [(600, 120), (200, 120), (120, 120), (60, 60), (10, 10)])
def test_claim_window_is_min_of_120_and_passed_ttl(make_room, ttl, window):
    room = make_room(passedTtlSec=ttl)
    assert room.cfg.claim_window_sec == window


def test_shorter_passed_ttl_shortens_the_window(make_room, visitor, run):
    room = make_room(ratePerMinute=60, maxConcurrent=1, passedTtlSec=60, **QUIET)
    a, b = visitor(room), visitor(room)
    a.join()
    b.join()
    promote_one(run, a, room)
    a.status()
    run(59)
    assert a.ticket.slot and b.state == "waiting"
    run(1)
    assert a.state is None  # expired with its window
    assert room.finished[a.n].reason == "expired"
    assert b.state == "passed" and b.ticket.slot


def test_pass_unused_at_passed_ttl_expires_and_keeps_its_record(make_room, visitor, run, engine, clock):
    room = make_room(ratePerMinute=60, passedTtlSec=200, **QUIET)
    a = visitor(room)
    joined = clock.wall_ms()
    a.join()
    run(5)  # promoted at the first tick, 1 s after joining
    t = a.ticket
    assert t.state == "passed"
    passed_ms, waited_ms = t.passed_ms, t.waited_ms
    assert passed_ms == joined + 1000 and waited_ms == 1000
    run(195)  # 1 + 199 s: pass_at + 199
    assert a.state == "passed"
    run(1)
    assert a.state is None
    fin = room.finished[a.n]
    assert (fin.joined_ms, fin.passed_ms, fin.waited_ms, fin.reason) == (joined, passed_ms, waited_ms, "expired")
    described = engine.lookup("r", str(a.n))
    assert described["state"] == "expired"
    assert described["joined"] == joined and described["passed"] == passed_ms and described["waited"] == 1.0
    assert a.status().reason == "expired"
    assert a.check().reason == "expired"
    assert "expire" in [e.type for e in engine.drain_events()]


# ---------------------------------------------------------------------- at the door


def test_slot_holding_pass_walks_in_at_full_capacity(make_room, visitor, run):
    room = make_room(ratePerMinute=60, maxConcurrent=1, **QUIET)
    a = visitor(room)
    a.join()
    promote_one(run, a, room)
    assert room.occupancy() == 1  # its own slot fills the room
    result = a.check()
    assert result.admit and result.door_key is not None
    assert room.occupancy() == 1


def test_pass_without_slot_is_turned_away_and_keeps_its_pass(make_room, visitor, run, engine):
    room = make_room(ratePerMinute=60, maxConcurrent=1, **QUIET)
    a, b = visitor(room), visitor(room)
    a.join()
    b.join()
    promote_one(run, a, room)
    run(120)  # a's window ends, b is promoted into the slot
    assert b.state == "passed" and b.ticket.slot and not a.ticket.slot
    result = a.check()
    assert not result.admit and result.reason == "at_capacity"
    assert a.state == "passed"
    assert a.status().ticket is a.ticket
    assert b.check().admit
    assert a.check().reason == "at_capacity"
    assert room.occupancy() == 1
    assert "bounce" in [e.type for e in engine.drain_events()]
    operator.eject(room, b.n)  # b's session ends: a walks in
    assert a.check().admit


def _two_slotless_passes_and_a_session(make_room, visitor, run, engine):
    """cap 1: D in session; A and B (absent at their turn) hold passes without slots; C waits."""
    room = make_room(ratePerMinute=60, maxConcurrent=1, presenceSec=30, queueMaxPerIp=None)
    d = visitor(room)
    d.join()
    promote_one(run, d, room)
    assert d.check().admit
    engine.upsert({"id": "r", "state": "paused"})
    a, b, c = visitor(room), visitor(room), visitor(room)
    a.join()
    b.join()
    c.join()
    run(31, each=c.status)  # a and b never poll: absent; c polls
    engine.upsert({"id": "r", "state": "active"})
    run(1, each=c.status)
    assert a.state == "passed" and not a.ticket.slot
    assert b.state == "passed" and not b.ticket.slot
    assert c.state == "waiting"
    return room, a, b, c, d


def test_bounced_holders_are_admitted_oldest_ticket_first(make_room, visitor, run, engine):
    room, a, b, c, d = _two_slotless_passes_and_a_session(make_room, visitor, run, engine)
    assert b.check().reason == "at_capacity"
    assert a.check().reason == "at_capacity"
    operator.eject(room, d.n)  # a slot frees
    assert room.occupancy() == 0
    assert b.check().reason == "at_capacity"  # a is older and still polling
    run(1, each=c.status)
    assert c.state == "waiting"  # nor does the freed slot go to a new promotion
    assert a.check().admit
    assert room.occupancy() == 1


def test_a_bounced_holder_that_stops_polling_loses_its_claim(make_room, visitor, run, engine):
    room, a, b, c, d = _two_slotless_passes_and_a_session(make_room, visitor, run, engine)
    assert a.check().reason == "at_capacity"
    assert b.check().reason == "at_capacity"
    operator.eject(room, d.n)
    for _ in range(31):  # a goes quiet for presenceSec; b keeps polling
        run(1, each=c.status)
        b.check()
        if b.state == "admitted":
            break
    assert b.state == "admitted"
    assert a.state == "passed"


def test_a_bounced_holder_who_keeps_watching_keeps_its_claim(make_room, visitor, run, engine):
    room, a, b, c, d = _two_slotless_passes_and_a_session(make_room, visitor, run, engine)
    assert a.check().reason == "at_capacity"
    assert b.check().reason == "at_capacity"
    operator.eject(room, d.n)
    for _ in range(61):  # a only watches the waiting page, b keeps trying the door
        run(1, each=lambda: (a.status(), c.status()))
        assert b.check().reason == "at_capacity"
    assert c.state == "waiting"
    assert a.check().admit
    assert b.state == "passed"


def test_slotless_pass_takes_a_free_slot_when_no_older_holder_is_bounced(make_room, visitor, run, engine):
    room, a, b, _c, d = _two_slotless_passes_and_a_session(make_room, visitor, run, engine)
    operator.eject(room, d.n)
    assert b.check().admit  # a never came to the door: nobody older is waiting
    assert a.check().reason == "at_capacity"


# ---------------------------------------------------------------------- sessions


def _admitted(make_room, visitor, run, **fields):
    room = make_room(ratePerMinute=60, **QUIET, **fields)
    a = visitor(room)
    a.join()
    promote_one(run, a, room)
    assert a.check().admit
    return room, a


def test_session_slides_with_each_check_and_ends_after_idle_ttl(make_room, visitor, run, engine):
    room, a = _admitted(make_room, visitor, run, sessionTtlSec=60, maxConcurrent=3)
    for _ in range(10):
        run(59)
        result = a.check()
        assert result.admit and result.door_key is None  # slid, no new key
    assert room.occupancy() == 1
    run(59)
    assert a.state == "admitted"
    run(1)
    assert a.state is None
    assert room.occupancy() == 0
    assert room.finished[a.n].reason == "expired"
    result = a.check()
    assert not result.admit and result.reason == "expired"
    assert "session.end" in [e.type for e in engine.drain_events()]


def test_session_ends_session_max_sec_after_entry_however_often_it_slides(make_room, visitor, run):
    _room, a = _admitted(make_room, visitor, run, sessionTtlSec=60, sessionMaxSec=100)
    for _ in range(9):
        run(10)
        assert a.check().admit
    run(9)
    assert a.check().admit  # 99 s after entry
    run(1)
    assert a.state is None
    assert not a.check().admit


def test_session_is_not_cut_short_by_the_pass_ending(make_room, visitor, run):
    _room, a = _admitted(make_room, visitor, run, passedTtlSec=30, sessionTtlSec=60)
    for _ in range(10):
        run(50)
        assert a.check().admit
    assert a.state == "admitted"


def test_session_expiry_uses_the_monotonic_clock(make_room, visitor, run, clock):
    _room, a = _admitted(make_room, visitor, run, sessionTtlSec=60)
    clock.step_wall(86_400)
    run(30)
    assert a.check().admit


def test_lowering_session_ttl_applies_to_live_sessions(make_room, visitor, run, engine):
    room, a = _admitted(make_room, visitor, run, sessionTtlSec=1800, maxConcurrent=1)
    engine.upsert({"id": "r", "sessionTtlSec": 60})
    run(30)
    assert engine.lookup("r", str(a.n))["sessionExpiresInSec"] == 30  # the new TTL is what it reports ...
    run(31)
    assert a.state is None  # ... so 61 s idle, the session must be over
    assert room.occupancy() == 0
    assert engine.lookup("r", str(a.n))["state"] == "expired"


# ---------------------------------------------------------------------- door keys


def test_replay_with_the_right_door_key_slides(make_room, visitor, run):
    _room, a = _admitted(make_room, visitor, run, sessionTtlSec=60)
    key = a.door
    run(50)
    result = a.check()
    assert result.admit and result.door_key is None and a.door == key
    run(50)  # 100 s after entry: alive only because the replay slid it
    assert a.check().admit


def test_another_client_without_the_door_key_is_told_session_elsewhere(make_room, visitor, run):
    room, a = _admitted(make_room, visitor, run)
    other = visitor(room)
    other.token = a.token  # the token leaked (URL, access log)
    result = other.check()
    assert not result.admit and result.reason == "session_elsewhere"
    # same fingerprint but no cookie and no door key: still elsewhere
    twin = visitor(room, fp=a.client.fp, cookie=False)
    twin.token = a.token
    assert twin.check().reason == "session_elsewhere"
    assert a.check().admit
    assert room.occupancy() == 1


def test_cookie_holder_reclaims_with_a_new_door_key(make_room, visitor, run, engine):
    room = make_room(ratePerMinute=60, **QUIET)
    owner = visitor(room)
    owner.join()
    promote_one(run, owner, room)
    # a cookieless client with the owner's fingerprint (the fallback tier) claims the pass first
    thief = visitor(room, fp=owner.client.fp, cookie=False)
    thief.token = owner.token
    assert thief.check().admit
    assert owner.check().admit  # no door key, but the cookie: reclaim
    assert owner.door is not None and owner.door != thief.door
    assert thief.check().reason == "session_elsewhere"  # the old key no longer slides
    assert owner.check().admit
    assert room.occupancy() == 1
    admits = [e for e in engine.drain_events() if e.type == "admit"]
    assert admits[-1].data.get("reclaim") is True


def test_reclaim_from_the_waiting_page_keeps_the_original_promotion(make_room, visitor, run, engine):
    room = make_room(ratePerMinute=60, maxConcurrent=1, **QUIET)
    owner = visitor(room)
    owner.join()
    promote_one(run, owner, room)
    passed_ms, waited_ms = owner.ticket.passed_ms, owner.ticket.waited_ms
    thief = visitor(room, fp=owner.client.fp, cookie=False)
    thief.token = owner.token
    assert thief.check().admit
    run(30)
    found = owner.join()  # the holder's waiting page, with the qms cookie
    assert found.ticket is owner.ticket
    assert owner.state == "passed" and owner.ticket.slot
    assert room.occupancy() == 1
    assert (owner.ticket.passed_ms, owner.ticket.waited_ms) == (passed_ms, waited_ms)
    assert owner.check().admit
    result = thief.check()  # the thief's door key was voided by the reclaim
    assert not result.admit and result.reason == "session_elsewhere"
    assert room.occupancy() == 1
    assert "reclaim" in [e.type for e in engine.drain_events()]


# ---------------------------------------------------------------------- random walk: invariants


OPS = st.lists(
    st.tuples(
        st.sampled_from(["join", "join", "status", "check", "check", "tick", "advance", "eject", "leak"]),
        st.integers(0, 11),
        st.sampled_from([0.5, 1.0, 3.0, 10.0, 31.0, 70.0, 130.0]),
    ),
    max_size=150,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    cap=st.integers(1, 4),
    presence=st.sampled_from([None, 5, 30]),
    ttl=st.sampled_from([10, 45, 600]),
    session_ttl=st.sampled_from([10, 60]),
    session_max=st.sampled_from([None, 40]),
    ops=OPS,
)
def test_capacity_invariants_under_random_traffic(visitor, cap, presence, ttl, session_ttl, session_max, ops):
    clock = FakeClock()
    engine = Engine(clock)
    room, _, _ = engine.upsert(
        {
            "id": "r",
            "targetUrl": TARGET,
            "ratePerMinute": 120,
            "maxConcurrent": cap,
            "presenceSec": presence,
            "passedTtlSec": ttl,
            "sessionTtlSec": session_ttl,
            "sessionMaxSec": session_max,
            "queueMaxPerIp": None,
        }
    )
    people = [visitor(room) for _ in range(12)]
    for op, i, dt in ops:
        p = people[i]
        if op == "join":
            p.join()
        elif op == "status" and p.token is not None:
            p.status()
        elif op == "check" and p.token is not None:
            p.check()
        elif op == "leak" and p.token is not None:
            stranger = people[(i + 1) % 12]
            visits.check(stranger.room, stranger.client, p.token, None, None, new_door=("x", b"x" * 32))
        elif op == "tick":
            clock.advance(1.0)
            engine.tick()
        elif op == "advance":
            clock.advance(dt)
        elif op == "eject" and p.token is not None:
            operator.eject(room, p.n)
        room.advance()
        assert room.occupancy() <= cap
        assert room.slot_holders <= room.passes
        assert room.sessions.isdisjoint(room.passes)
        for n in room.passes:
            t = room.tickets[n]
            assert t.state == "passed"
            assert t.slot == (n in room.slot_holders)
        for n in room.sessions:
            assert room.tickets[n].state == "admitted"
        waiting = [t for t in room.tickets.values() if t.state == "waiting"]
        assert len(waiting) == len(room.line)
        # every waiting place is charged to its address, except places an operator ejected (guide: freed)
        charged = [room.tickets[n] for n in room.line if room.tickets[n].charged]
        assert sum(room.per_ident.values()) == len(charged)
        assert all(room.tickets[n].charged or room.tickets[n].reason == "ejected" for n in room.line)
        assert [t.n for t in sorted(waiting, key=lambda t: t.line_seq)] == list(room.line)
