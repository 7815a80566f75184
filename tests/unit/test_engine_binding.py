"""How a ticket is bound to a visitor (cookie first, then fingerprints) and the per-address ceiling
on places in the live line (queueMaxPerIp)."""

from __future__ import annotations

import pytest

from queue_manager.engine import operator, outflow
from queue_manager.engine import visitor as visits
from queue_manager.engine.errors import EngineError
from queue_manager.engine.model import DEFAULT_QUEUE_MAX_PER_IP, ClientId
from queue_manager.engine.view import visitor_view

QUIET = {"presenceSec": None}

# ---------------------------------------------------------------------- binding


def test_cookie_decides_when_both_sides_have_one(make_room, visitor):
    room = make_room()
    owner = visitor(room)
    owner.join()
    same_fp_other_cookie = visitor(room, fp=owner.client.fp, cookie=b"another-browser")
    same_fp_other_cookie.token = owner.token
    assert same_fp_other_cookie.status().reason == "not_owner"
    assert same_fp_other_cookie.status().ticket is None
    other_fp_same_cookie = visitor(room, cookie=owner.client.cookie)
    other_fp_same_cookie.token = owner.token
    assert other_fp_same_cookie.status().ticket is owner.ticket  # moved network, kept the cookie


def test_fingerprint_fallback_without_cookies(make_room, visitor):
    room = make_room()
    owner = visitor(room, cookie=False)
    owner.join()
    same_fp = visitor(room, fp=owner.client.fp, cookie=False)
    same_fp.token = owner.token
    assert same_fp.status().ticket is owner.ticket
    other_fp = visitor(room, cookie=False)
    other_fp.token = owner.token
    assert other_fp.status().reason == "not_owner"


def test_fingerprint_fallback_when_only_one_side_has_a_cookie(make_room, visitor):
    room = make_room()
    owner = visitor(room, cookie=False)
    owner.join()
    later_with_cookie = visitor(room, fp=owner.client.fp, cookie=True)
    later_with_cookie.token = owner.token
    assert later_with_cookie.status().ticket is owner.ticket
    stranger_with_cookie = visitor(room, cookie=True)
    stranger_with_cookie.token = owner.token
    assert stranger_with_cookie.status().reason == "not_owner"


def test_second_tier_fingerprint_matches_when_both_have_it(make_room, visitor):
    room = make_room()
    owner = visitor(room, cookie=False, fp2=b"tier2")
    owner.join()
    other_edge = visitor(room, cookie=False, fp2=b"tier2")  # another CDN edge node: new strict fp
    other_edge.token = owner.token
    assert other_edge.status().ticket is owner.ticket
    no_tier2 = visitor(room, cookie=False)
    no_tier2.token = owner.token
    assert no_tier2.status().reason == "not_owner"


def test_somebody_elses_token_gets_a_fresh_ticket_at_the_back(make_room, visitor, engine):
    room = make_room()
    owner = visitor(room)
    owner.join()
    others = [visitor(room) for _ in range(3)]
    for o in others:
        o.join()
    thief = visitor(room)
    thief.token = owner.token
    found = thief.join()
    assert found.new and found.reason == "not_owner"
    assert found.ticket is not None and found.ticket.n != owner.n
    assert thief.position == 5
    assert owner.position == 1 and owner.status().ticket is owner.ticket
    view = visitor_view(room, found)
    assert view.state == "waiting" and view.reason == "not_owner" and view.position == 5
    assert thief.join().ticket is found.ticket  # and from then on, that is the thief's own place


def test_somebody_elses_pass_is_never_theirs(make_room, visitor, run):
    room = make_room(ratePerMinute=60, maxConcurrent=3, **QUIET)
    owner = visitor(room)
    owner.join()
    run(1)
    assert owner.state == "passed"
    thief = visitor(room)
    thief.token = owner.token
    result = thief.check()
    assert not result.admit and result.reason == "not_owner"
    assert owner.state == "passed" and room.occupancy() == 1
    found = thief.join()
    assert found.ticket is not None and found.ticket.state == "waiting"
    assert owner.check().admit


def test_rejoining_with_your_own_token_returns_the_same_place(make_room, visitor):
    room = make_room()
    people = [visitor(room) for _ in range(5)]
    for p in people:
        p.join()
    me = people[2]
    before = me.n
    for _ in range(10):
        found = me.join()
        assert found.ticket is not None and found.ticket.n == before and not found.new
    assert me.position == 3
    assert len(room.line) == 5


def test_previous_generation_token_on_join_gets_a_fresh_ticket(make_room, visitor, engine):
    room = make_room()
    v = visitor(room)
    v.join()
    engine.delete("r")
    room2 = make_room()
    v.room = room2
    found = v.join()
    assert found.reason == "previous_generation" and found.ticket is not None and found.ticket.n == 1
    assert room2.gen == 2


# ---------------------------------------------------------------------- queueMaxPerIp


def _from(visitor, room, ident, k):
    out = [visitor(room, ident=ident) for _ in range(k)]
    for v in out:
        v.join()
    return out


def test_default_ceiling_is_16_and_the_17th_join_is_refused(make_room, visitor, engine):
    room = make_room()
    assert room.cfg.queue_max_per_ip == DEFAULT_QUEUE_MAX_PER_IP == 16
    _from(visitor, room, "203.0.113.9", 16)
    engine.drain_events()
    late = visitor(room, ident="203.0.113.9")
    with pytest.raises(EngineError) as info:
        late.join()
    err = info.value
    assert (err.status, err.code) == (429, "queue_identity_limit")
    assert err.headers == {"Retry-After": "30"}
    assert late.token is None  # nothing handed back
    assert len(room.line) == 16 and room.next_n == 17  # nothing minted
    assert engine.drain_events() == []


def test_other_idents_are_unaffected(make_room, visitor):
    room = make_room()
    _from(visitor, room, "203.0.113.9", 16)
    _from(visitor, room, "203.0.113.10", 16)
    assert len(room.line) == 32


def test_rejoining_a_held_ticket_is_never_charged(make_room, visitor):
    room = make_room()
    mine = _from(visitor, room, "203.0.113.9", 16)
    for v in mine:
        assert v.join().ticket is v.ticket


def test_promotion_frees_a_place(make_room, visitor, run):
    room = make_room(ratePerMinute=60, **QUIET)
    _from(visitor, room, "203.0.113.9", 16)
    with pytest.raises(EngineError):
        visitor(room, ident="203.0.113.9").join()
    assert run(1) == 1
    assert visitor(room, ident="203.0.113.9").join().ticket is not None
    with pytest.raises(EngineError):
        visitor(room, ident="203.0.113.9").join()


def test_null_is_no_ceiling(make_room, visitor):
    room = make_room(queueMaxPerIp=None)
    _from(visitor, room, "203.0.113.9", 200)
    assert len(room.line) == 200


def test_a_configured_ceiling(make_room, visitor):
    room = make_room(queueMaxPerIp=3)
    _from(visitor, room, "203.0.113.9", 3)
    with pytest.raises(EngineError):
        visitor(room, ident="203.0.113.9").join()


def test_a_refused_stranger_token_is_charged_like_any_new_place(make_room, visitor):
    room = make_room(queueMaxPerIp=2)
    owner = visitor(room, ident="198.51.100.1")
    owner.join()
    _from(visitor, room, "203.0.113.9", 2)
    thief = visitor(room, ident="203.0.113.9")
    thief.token = owner.token
    with pytest.raises(EngineError):
        thief.join()


def test_eject_frees_the_place_it_held(make_room, visitor):
    """Guide: a place is freed the moment a ticket reaches the front "or is ejected"."""
    room = make_room()
    mine = _from(visitor, room, "203.0.113.9", 16)
    with pytest.raises(EngineError):
        visitor(room, ident="203.0.113.9").join()
    operator.eject(room, mine[0].n)
    assert mine[0].state == "waiting" and mine[0].position == 16  # back of the line
    assert room.per_ident["203.0.113.9"] == 15
    visitor(room, ident="203.0.113.9").join()  # the freed place can be taken
    assert room.per_ident["203.0.113.9"] == 16
    outflow.tick(room)


def test_eject_of_a_passed_ticket_does_not_charge_its_address(make_room, visitor, run):
    """A promoted ticket freed its place; ejecting it re-queues it without charging the address."""
    room = make_room(ratePerMinute=60, **QUIET)
    first = visitor(room, ident="203.0.113.9")
    first.join()
    run(1)
    assert first.state == "passed"
    _from(visitor, room, "203.0.113.9", 16)
    assert room.per_ident["203.0.113.9"] == 16
    operator.eject(room, first.n)
    assert first.state == "waiting"
    assert room.per_ident["203.0.113.9"] == 16
    run(2)  # reaching the front again does not take an uncharged place off the count
    assert room.per_ident.get("203.0.113.9", 0) + sum(1 for n in room.line if not room.tickets[n].charged) <= 17


def test_ceiling_is_per_ident_not_per_fingerprint_or_cookie(make_room):
    room = make_room(queueMaxPerIp=2)
    for i in range(2):
        visits.join(room, ClientId(ident="203.0.113.9", fp=f"fp{i}".encode(), cookie=f"c{i}".encode()), None, None)
    with pytest.raises(EngineError):
        visits.join(room, ClientId(ident="203.0.113.9", fp=b"fresh", cookie=b"fresh"), None, None)
