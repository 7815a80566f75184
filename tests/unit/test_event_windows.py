"""A room's scheduled events (``engine/room_events.py``): the field's checks, what is due when, and the one
change the leader makes at each boundary, including an operator's change made while an event is in force."""

from __future__ import annotations

from typing import Any

import pytest

from queue_manager.engine.errors import EngineError
from queue_manager.engine.model import RoomConfig, apply_fields, event_fields
from queue_manager.engine.room_events import EVENTS_MAX, due, next_boundary, step
from queue_manager.engine.snapshot import config_from_public

T = 1_900_000_000_000  # ms
MIN = 60_000


def room(**fields: Any) -> RoomConfig:
    cfg, _ = apply_fields(None, {"id": "r", "targetUrl": "https://shop.example/", "ratePerMinute": 60, **fields})
    return cfg


def event(eid: str = "e1", start: int = T, end: int = T + 60 * MIN, **more: Any) -> dict[str, Any]:
    return {"id": eid, "startsAt": start, "endsAt": end, **more}


def follow(cfg: RoomConfig, now: int) -> RoomConfig:
    """One boundary as the leader applies it: the step's fields written as a system change."""
    change = step(cfg.events, cfg.event_in_force, event_fields(cfg), now)
    if change is None:
        return cfg
    body: dict[str, Any] = {"id": cfg.id}
    for key, value in change.body.items():
        body["brand" if key == "message" else key] = {"message": value or None} if key == "message" else value
    body["eventInForce"] = None if change.in_force is None else change.in_force.to_public()
    new, _ = apply_fields(cfg, body)
    return new


def test_the_field_is_checked_like_the_room_fields_it_overrides() -> None:
    cfg = room(events=[event(ratePerMinute=600, maxConcurrent=50, message={"en": "Sale on"})])
    public = cfg.to_public()["events"][0]
    assert public["ratePerMinute"] == 600 and public["message"] == {"en": "Sale on"}
    assert public["startsAt"].endswith("Z") and public["shuffle"] is False
    for bad, code in (
        ([event(ratePerMinute=-1)], "invalid_event"),
        ([event(state="paused")], "invalid_event"),  # not an override
        ([event(end=T)], "invalid_event"),
        ([event(preQueueAt=T + 1)], "invalid_event"),
        ([event(shuffle=True)], "invalid_event"),  # a shuffle draws a pre-queue: it needs one
        ([event(), event()], "invalid_event"),  # one id twice
        ([event("a"), event("b", start=T + 30 * MIN, end=T + 90 * MIN)], "event_overlap"),
        ([event("a"), event("b", start=T + 90 * MIN, end=T + 99 * MIN, preQueueAt=T + 59 * MIN)], "event_overlap"),
        ([event(str(i), T + i * 100 * MIN, T + i * 100 * MIN + MIN) for i in range(EVENTS_MAX + 1)], "invalid_event"),
        ([event(startsAt="soon")], "invalid_event"),
        ([event(message={"xx": "?"})], "invalid_event"),
    ):
        with pytest.raises(EngineError) as err:
            room(events=bad)
        assert err.value.code == code and err.value.status == 400, bad


def test_what_is_due_and_the_next_boundary() -> None:
    cfg = room(
        events=[event("a", preQueueAt=T - 10 * MIN, shuffle=True), event("b", T + 2 * 60 * MIN, T + 3 * 60 * MIN)]
    )
    assert due(cfg.events, T - 11 * MIN) is None
    assert next_boundary(cfg.events, T - 11 * MIN) == T - 10 * MIN
    hit = due(cfg.events, T - MIN)
    assert hit is not None and (hit[0].id, hit[1]) == ("a", "prequeue")
    hit = due(cfg.events, T)
    assert hit is not None and (hit[0].id, hit[1]) == ("a", "live")
    assert due(cfg.events, T + 60 * MIN) is None  # the end is exclusive
    assert next_boundary(cfg.events, T + 60 * MIN) == T + 120 * MIN
    assert next_boundary(cfg.events, T + 4 * 60 * MIN) is None


def test_an_event_overrides_for_its_span_and_gives_everything_back() -> None:
    cfg = room(maxConcurrent=10, events=[event(ratePerMinute=600, maxConcurrent=None, message={"en": "Drop!"})])
    assert follow(cfg, T - 1) is cfg  # nothing due, nothing in force
    live = follow(cfg, T)
    assert (live.rate_per_minute, live.max_concurrent) == (600, None)
    assert live.brand is not None and dict(live.brand.message) == {"en": "Drop!"}
    assert live.event_in_force is not None and live.event_in_force.phase == "live"
    assert dict(live.event_in_force.restore) == {"ratePerMinute": 60, "maxConcurrent": 10, "message": {}}
    assert step(live.events, live.event_in_force, event_fields(live), T + MIN) is None  # applied once
    after = follow(live, T + 60 * MIN)
    assert (after.rate_per_minute, after.max_concurrent, after.brand, after.event_in_force) == (60, 10, None, None)


def test_an_operator_change_made_during_the_event_stands_after_it() -> None:
    cfg = follow(room(events=[event(ratePerMinute=600, maxConcurrent=40)]), T)
    edited, _ = apply_fields(cfg, {"id": "r", "ratePerMinute": 900})  # the operator's word, mid-event
    after = follow(edited, T + 60 * MIN)
    assert after.rate_per_minute == 900  # not put back to 60
    assert after.max_concurrent is None  # what the event set and nobody touched goes back


def test_a_shuffled_pre_queue_is_the_rooms_drop_drawn_at_the_start() -> None:
    cfg = room(events=[event(preQueueAt=T - 30 * MIN, shuffle=True, ratePerMinute=300)])
    pre = follow(cfg, T - 30 * MIN)
    assert pre.opens_at_ms == T and pre.rate_per_minute == 60  # the pre-queue gathers until the start
    assert pre.event_in_force is not None and pre.event_in_force.phase == "prequeue"
    live = follow(pre, T)
    assert live.opens_at_ms is None and live.rate_per_minute == 300  # drawn at the start (the room's advance)
    assert live.event_in_force is not None and dict(live.event_in_force.restore) == {"ratePerMinute": 60}
    assert follow(live, T + 60 * MIN).rate_per_minute == 60


def test_a_pre_queue_without_a_shuffle_holds_the_line_in_arrival_order() -> None:
    cfg = room(events=[event(preQueueAt=T - 30 * MIN, sessionTtlSec=120)])
    pre = follow(cfg, T - 20 * MIN)
    assert pre.state == "paused" and pre.opens_at_ms is None
    live = follow(pre, T)
    assert live.state == "active" and live.session_ttl_sec == 120
    assert follow(live, T + 60 * MIN).state == "active"


def test_an_event_edited_or_deleted_while_in_force() -> None:
    cfg = follow(room(events=[event(ratePerMinute=600)]), T)
    edited, _ = apply_fields(cfg, {"id": "r", "events": [event(ratePerMinute=700, maxWaiting=5)]})
    again = follow(edited, T + MIN)
    assert (again.rate_per_minute, again.max_waiting) == (700, 5)
    assert again.event_in_force is not None and again.event_in_force.since_ms == T  # the same span goes on
    assert dict(again.event_in_force.restore) == {"ratePerMinute": 60, "maxWaiting": None}
    gone, _ = apply_fields(again, {"id": "r", "events": []})
    back = follow(gone, T + 2 * MIN)
    assert (back.rate_per_minute, back.max_waiting, back.event_in_force) == (60, None, None)


def test_back_to_back_events_hand_over_without_losing_the_base() -> None:
    cfg = room(events=[event("a", ratePerMinute=100), event("b", T + 60 * MIN, T + 120 * MIN, ratePerMinute=200)])
    a = follow(cfg, T)
    b = follow(a, T + 60 * MIN)  # one change: a ends, b starts
    assert b.rate_per_minute == 200 and b.event_in_force is not None and b.event_in_force.id == "b"
    assert dict(b.event_in_force.restore) == {"ratePerMinute": 60}
    assert follow(b, T + 120 * MIN).rate_per_minute == 60


def test_an_event_can_close_the_room_and_open_it_as_a_lottery() -> None:
    cfg = room(
        events=[
            event("closed", queueing="reject", rejectStatus=200, message={"en": "Sold out until noon"}),
            event("draw", T + 60 * MIN, T + 120 * MIN, queueing="random"),
        ]
    )
    closed = follow(cfg, T)
    assert (closed.queueing, closed.reject_status) == ("reject", 200)
    lottery = follow(closed, T + 60 * MIN)
    assert lottery.queueing == "random" and lottery.reject_status == cfg.reject_status  # given back at the hand-over
    assert follow(lottery, T + 120 * MIN).queueing == "fifo"
    with pytest.raises(EngineError):
        room(events=[event(queueing="lottery")])


def test_the_field_survives_the_journal_form() -> None:
    cfg = follow(room(events=[event(ratePerMinute=600)]), T)
    again = config_from_public(cfg.to_event(None))
    assert again.events == cfg.events and again.event_in_force == cfg.event_in_force
    with pytest.raises(EngineError):  # by hand through the admin API it is ignored, never written
        apply_fields(cfg, {"id": "r", "eventInForce": {"id": "x"}})
