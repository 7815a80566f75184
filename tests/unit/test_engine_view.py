"""The visitor snapshot (view.py): what a join or status tells the visitor in each state."""

from __future__ import annotations

from queue_manager.engine import operator
from queue_manager.engine import visitor as visits
from queue_manager.engine.ticket import make_ref
from queue_manager.engine.view import visitor_view

QUIET = {"presenceSec": None, "queueMaxPerIp": None}


def test_waiting_view(make_room, visitor, clock):
    room = make_room(ratePerMinute=30, **QUIET)
    people = [visitor(room) for _ in range(4)]
    for p in people:
        p.join("https://shop.example/cart")
    view = visitor_view(room, people[2].status())
    assert view.state == "waiting" and view.room_state == "active"
    assert view.ticket == 3 and view.position == 3 and view.ahead == 2
    assert view.ref == make_ref("r", 1, 3)
    assert view.eta_sec == 6  # ceil(3 × 60 / 30)
    assert view.joined_ms == clock.wall_ms() and view.return_url == "https://shop.example/cart"
    assert view.gen == 1 and view.target_url == "https://shop.example" and view.rate_per_minute == 30
    assert view.pass_expires_ms is None and view.reason is None


def test_no_eta_when_paused_or_at_zero(make_room, visitor, engine):
    room = make_room(ratePerMinute=0, **QUIET)
    v = visitor(room)
    v.join()
    assert visitor_view(room, v.status()).eta_sec is None
    engine.upsert({"id": "r", "ratePerMinute": 60, "state": "paused"})
    view = visitor_view(room, v.status())
    assert view.eta_sec is None and view.room_state == "paused" and view.position == 1


def test_passed_view_names_when_the_pass_expires(make_room, visitor, run, clock):
    room = make_room(ratePerMinute=60, passedTtlSec=300, **QUIET)
    v = visitor(room)
    v.join()
    run(1)
    pass_wall = clock.wall_ms()
    run(100)
    view = visitor_view(room, v.status())
    assert view.state == "passed" and view.position is None and view.ahead is None
    assert view.pass_expires_ms == pass_wall + 300_000


def test_admitted_view(make_room, visitor, run):
    room = make_room(ratePerMinute=60, **QUIET)
    v = visitor(room)
    v.join()
    run(1)
    assert v.check().admit
    view = visitor_view(room, v.status())
    assert view.state == "admitted" and view.ticket == v.n


def test_expired_view_keeps_the_join_time(make_room, visitor, run, clock):
    room = make_room(ratePerMinute=60, passedTtlSec=10, **QUIET)
    v = visitor(room)
    joined = clock.wall_ms()
    v.join()
    run(20)
    view = visitor_view(room, v.status())
    assert view.state == "expired" and view.reason == "expired" and view.joined_ms == joined
    assert view.ticket is None and view.position is None


def test_ejected_view_says_why(make_room, visitor):
    room = make_room()
    a, b = visitor(room), visitor(room)
    a.join()
    b.join()
    operator.eject(room, a.n)
    view = visitor_view(room, a.status())
    assert view.state == "waiting" and view.reason == "ejected" and view.position == 2


def test_bypass_view(make_room, visitor):
    room = make_room(state="bypass")
    v = visitor(room)
    view = visitor_view(room, v.join())
    assert view.state == "bypass" and view.ticket is None


def test_previous_generation_view(make_room, visitor, engine):
    room = make_room()
    v = visitor(room)
    v.join()
    engine.delete("r")
    room2 = make_room()
    view = visitor_view(room2, visits.status(room2, v.client, v.token))
    assert view.state == "expired" and view.reason == "previous_generation" and view.gen == 2
