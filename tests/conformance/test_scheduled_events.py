"""A room's scheduled events over HTTP, on every store: the routes (create, read, change, delete, their
refusals), a window followed on the server clock (the overrides in force for its span, everything given
back after it, one audit row and one chart mark per boundary), a shuffled pre-queue drawn at the start,
and, on the Valkey store, two instances that apply each boundary once between them."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from harness import Server, create_room, join, peer_env, start_server, status, unique_id, wait_until

ServerFactory = Callable[..., Server]


def iso(seconds_from_now: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() + seconds_from_now)) + "Z"


def ms(seconds_from_now: float) -> int:
    return int((time.time() + seconds_from_now) * 1000)


def room_read(admin: httpx.Client, rid: str) -> dict[str, Any]:
    r = admin.get(f"/api/admin/rooms/{rid}")
    assert r.status_code == 200, r.text
    return dict(r.json()["room"])


def event_rows(admin: httpx.Client, rid: str) -> list[dict[str, Any]]:
    rows = admin.get(f"/api/admin/audit?roomId={rid}").json()["audit"]
    return [r for r in rows if r["action"] == "room.event"]


def test_the_routes_create_read_change_and_delete(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin)["id"]
    base = f"/api/admin/rooms/{rid}/events"
    assert admin.get(base).json()["events"] == []
    r = admin.post(base, json={"startsAt": iso(3600), "endsAt": iso(7200), "ratePerMinute": 900, "name": "Drop"})
    assert r.status_code == 201, r.text
    made = r.json()["event"]
    assert made["id"].startswith("ev-") and made["status"] == "upcoming" and made["ratePerMinute"] == 900
    listed = admin.get(base).json()
    assert [e["id"] for e in listed["events"]] == [made["id"]] and listed["max"] == 5
    assert listed["eventInForce"] is None and listed["drop"] is None
    one = admin.get(f"{base}/{made['id']}")
    assert one.status_code == 200 and one.json()["event"]["name"] == "Drop"
    put = admin.put(f"{base}/{made['id']}", json={"startsAt": iso(3600), "endsAt": iso(5400), "maxWaiting": 100})
    assert put.status_code == 200, put.text
    assert put.json()["event"]["maxWaiting"] == 100 and "ratePerMinute" not in put.json()["event"]
    # the room carries them, and a read sent back to the room route keeps them
    read = room_read(admin, rid)
    assert [e["id"] for e in read["events"]] == [made["id"]] and read["eventInForce"] is None
    assert admin.post("/api/admin/rooms", json=read).status_code == 200
    # refusals
    for body, code in (
        ({"startsAt": iso(3600), "endsAt": iso(3500)}, "invalid_event"),
        ({"startsAt": iso(-7200), "endsAt": iso(-3600)}, "invalid_event"),  # already over
        ({"startsAt": iso(4000), "endsAt": iso(4100)}, "event_overlap"),
        ({"startsAt": iso(9000), "endsAt": iso(9100), "state": "paused"}, "invalid_event"),
        ({"startsAt": iso(9000), "endsAt": iso(9100), "shuffle": True}, "invalid_event"),
    ):
        r = admin.post(base, json=body)
        assert r.status_code == 400 and r.json()["code"] == code, (body, r.text)
    dup = admin.post(base, json={"id": made["id"], "startsAt": iso(9000), "endsAt": iso(9100)})
    assert dup.status_code == 409 and dup.json()["code"] == "event_exists"
    for i in range(4):
        ok = admin.post(base, json={"startsAt": iso(10_000 + i * 1000), "endsAt": iso(10_500 + i * 1000)})
        assert ok.status_code == 201, ok.text
    full = admin.post(base, json={"startsAt": iso(20_000), "endsAt": iso(20_500)})
    assert full.status_code == 409 and full.json()["code"] == "too_many_events"
    assert admin.get(f"{base}/nope").json()["code"] == "no_event"
    assert admin.delete(f"{base}/{made['id']}").json() == {"ok": True, "deleted": made["id"]}
    assert admin.delete(f"{base}/{made['id']}").status_code == 404
    assert len(admin.get(base).json()["events"]) == 4
    rows = [r for r in admin.get(f"/api/admin/audit?roomId={rid}").json()["audit"] if r["action"] == "room.events"]
    assert {r["detail"]["op"] for r in rows if r["ok"]} == {"create", "update", "delete"}


def test_an_event_overrides_for_its_span_then_gives_everything_back(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin, ratePerMinute=60, maxConcurrent=10)["id"]
    r = admin.post(
        f"/api/admin/rooms/{rid}/events",
        json={"id": "drop", "startsAt": ms(2), "endsAt": ms(6), "ratePerMinute": 600, "message": {"en": "Drop on"}},
    )
    assert r.status_code == 201, r.text

    def live() -> dict[str, Any] | None:
        read = room_read(admin, rid)
        return read if read["ratePerMinute"] == 600 else None

    during = wait_until(live, timeout=20, what="the event's rate in force")
    assert during["eventInForce"]["id"] == "drop" and during["eventInForce"]["phase"] == "live"
    assert during["brand"]["message"] == {"en": "Drop on"} and during["maxConcurrent"] == 10
    assert admin.get(f"/api/admin/rooms/{rid}/events/drop").json()["event"]["status"] == "live"

    def over() -> dict[str, Any] | None:
        read = room_read(admin, rid)
        return read if read["eventInForce"] is None and read["ratePerMinute"] == 60 else None

    after = wait_until(over, timeout=20, what="the room's own settings back")
    assert after["brand"] is None and after["maxConcurrent"] == 10

    # the audit row follows the change it records
    def both_rows() -> list[dict[str, Any]] | None:
        rows = event_rows(admin, rid)
        return rows if len(rows) >= 2 else None

    rows = wait_until(both_rows, timeout=10, what="the end's audit row")
    assert sorted(r["detail"]["change"] for r in rows) == ["end", "start"]
    assert all(r["actor"] == "system" for r in rows)  # the leader, not an operator
    marks = admin.get(f"/api/admin/series/{rid}?res=10s").json()["marks"]
    notes = [m["note"] for m in marks if m["kind"] == "event"]
    assert any("drop starts" in n for n in notes) and any("drop ends" in n for n in notes), marks
    assert admin.get(f"/api/admin/rooms/{rid}/events").json()["events"][0]["status"] == "ended"


def test_a_shuffled_pre_queue_is_drawn_at_the_start(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin, ratePerMinute=0, queueMaxPerIp=None)["id"]
    r = admin.post(
        f"/api/admin/rooms/{rid}/events",
        json={"id": "sale", "preQueueAt": ms(1), "startsAt": ms(5), "endsAt": ms(60), "shuffle": True},
    )
    assert r.status_code == 201, r.text
    wait_until(lambda: room_read(admin, rid)["opensAt"] is not None, timeout=20, what="the pre-queue open")
    draw = admin.get(f"/api/rooms/{rid}/draw").json()
    assert draw.get("commitment"), draw  # committed before anyone is drawn: the verifiable draw
    with server.client() as a, server.client() as b:
        assert join(a, rid).json()["state"] == "scheduled"
        assert join(b, rid).json()["state"] == "scheduled"
        wait_until(lambda: status(a, rid)["state"] == "waiting", timeout=20, what="drawn into the line")
        places = sorted(status(c, rid)["position"] for c in (a, b))
        assert places == [1, 2]
    proof = admin.get(f"/api/rooms/{rid}/draw").json()
    assert proof.get("seed"), proof  # revealed after the draw

    def begun() -> dict[str, Any] | None:
        read = room_read(admin, rid)
        return read if read["eventInForce"]["phase"] == "live" else None

    read = wait_until(begun, timeout=10, what="the event's span begun")
    assert read["opensAt"] is None  # the drop that drew the pre-queue is done


@pytest.mark.stores("valkey")
def test_two_instances_apply_each_boundary_once(make_server: ServerFactory) -> None:
    a = make_server()
    b = start_server(peer_env(a))
    try:
        rid = unique_id("ev")
        with a.admin() as admin_a, b.admin() as admin_b:
            create_room(admin_a, rid, ratePerMinute=60)
            r = admin_b.post(
                f"/api/admin/rooms/{rid}/events",
                json={"id": "w", "startsAt": ms(2), "endsAt": ms(5), "ratePerMinute": 300},
            )
            assert r.status_code == 201, r.text
            wait_until(lambda: room_read(admin_a, rid)["ratePerMinute"] == 300, timeout=20, what="in force")
            assert room_read(admin_b, rid)["ratePerMinute"] == 300
            wait_until(lambda: room_read(admin_b, rid)["eventInForce"] is None, timeout=20, what="over")
            wait_until(lambda: len(event_rows(admin_a, rid)) >= 2, timeout=10, what="the audit rows")
            time.sleep(2)  # any second application would be written by now: none may come
            assert sorted(r["detail"]["change"] for r in event_rows(admin_a, rid)) == ["end", "start"]
            assert room_read(admin_a, rid)["ratePerMinute"] == 60
    finally:
        b.stop()
