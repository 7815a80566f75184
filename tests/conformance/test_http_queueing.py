"""Queueing methods over HTTP, on every store: a closed room (reject) refuses /api/join and the door with
room_closed and answers its page with the operator's status; passthrough lets every arrival through at
once and counts it; a random line shows a range instead of a position and draws only those present."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from harness import Server, create_room, join, peer_env, start_server, status, wait_for_state, wait_until

PAGE = "https://shop.example/p"


def check(client: httpx.Client, room_id: str, **params: Any) -> dict[str, Any]:
    r = client.get("/api/check", params={"roomId": room_id, "url": PAGE, **params})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def ticket_state(admin: httpx.Client, room_id: str, n: int) -> str:
    r = admin.get(f"/api/admin/rooms/{room_id}/visitors/{n}")
    assert r.status_code == 200, r.text
    return str(r.json()["visitor"]["state"])


def test_a_closed_room_refuses_joins_and_the_door(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin, ratePerMinute=0, queueMaxPerIp=None)["id"]
    with server.client() as waiting, server.client() as late:
        held = join(waiting, rid).json()
        r = admin.post("/api/admin/rooms", json={"id": rid, "queueing": "reject"})
        assert r.status_code == 200 and r.json()["room"]["queueing"] == "reject", r.text
        # a live switch is a room change like any other: audited, and a mark on the room's chart
        audit = admin.get("/api/admin/audit", params={"roomId": rid}).json()["audit"]
        assert any(a["action"] == "room.update" and "queueing" in str(a) for a in audit), audit
        marks = admin.get(f"/api/admin/series/{rid}").json()["marks"]
        assert any(m["kind"] == "edit" and "queueing" in m["note"] for m in marks), marks
        refused = join(late, rid)
        assert refused.status_code == 403 and refused.json()["code"] == "room_closed", refused.text
        assert refused.headers.get_list("set-cookie") == []
        door = check(late, rid)
        assert (door["admit"], door["reason"]) == (False, "room_closed")
        assert door["waitUrl"].endswith(f"/w/{rid}?qm_return=https%3A%2F%2Fshop.example%2Fp")
        mine = check(waiting, rid, qm_token=held["token"])
        assert (mine["admit"], mine["reason"]) == (False, "room_closed")
        # the one waiting keeps the place, told the room is closed; reopened, the line goes on
        seen = status(waiting, rid, held["token"])
        assert (seen["state"], seen["queueing"], seen["position"]) == ("waiting", "reject", 1)
        page = late.get(f"/w/{rid}", headers={"accept-language": "th"})
        assert page.status_code == 503 and page.headers["retry-after"] == "300", page.status_code
        assert page.headers["x-qm-closed"] == "1"
        assert "ห้องรอคิวนี้ปิดอยู่" in page.text and '"closed":true' in page.text
        admin.post("/api/admin/rooms", json={"id": rid, "rejectStatus": 200}).raise_for_status()
        ok = late.get(f"/w/{rid}")
        assert ok.status_code == 200 and "This waiting room is closed" in ok.text and "retry-after" not in ok.headers
        admin.post("/api/admin/rooms", json={"id": rid, "queueing": "fifo", "ratePerMinute": 600}).raise_for_status()
        wait_for_state(waiting, rid, held["token"], ("passed",))
        open_page = late.get(f"/w/{rid}")
        assert open_page.status_code == 200 and "x-qm-closed" not in open_page.headers
    for body, code in (
        ({"queueing": "random-ish"}, "invalid_queueing"),
        ({"rejectStatus": 302}, "invalid_reject_status"),
    ):
        r = admin.post("/api/admin/rooms", json={"id": rid, **body})
        assert r.status_code == 400 and r.json()["code"] == code, r.text


def test_passthrough_lets_every_arrival_through_and_counts_it(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin, ratePerMinute=0, maxConcurrent=1, queueing="passthrough", queueMaxPerIp=None)["id"]
    for _ in range(3):
        with server.client() as v:
            body = join(v, rid).json()
            assert body["state"] == "passed" and body["redirectUrl"].startswith("https://shop.example/"), body
            assert check(v, rid, qm_token=body["token"])["admit"] is True  # no limit: maxConcurrent not applied
    room = admin.get(f"/api/admin/rooms/{rid}").json()["room"]
    assert (room["joinsTotal"], room["passesTotal"], room["waiting"], room["activeSessions"]) == (3, 3, 0, 3)

    def counted_row() -> dict[str, Any] | None:  # the room's history: its hour row in the reports
        r = admin.get("/api/admin/reports", params={"roomId": rid})
        assert r.status_code == 200, r.text
        rows = r.json()["rows"]
        return rows[-1] if rows and rows[-1]["passes"] >= 3 else None

    row = wait_until(counted_row, timeout=20, what="the passthrough room's passes in its report row")
    assert (row["joins"], row["passes"]) == (3, 3)


def test_a_random_line_shows_a_range_and_draws_only_those_present(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin, ratePerMinute=0, queueing="random", presenceSec=5, queueMaxPerIp=None)["id"]
    clients = [server.client() for _ in range(8)]
    try:
        places = [join(c, rid).json() for c in clients]
        last = status(clients[-1], rid, places[-1]["token"])
        assert (last["position"], last["ahead"], last["etaSec"], last["waiting"]) == (None, None, None, 8)
        assert (last["etaLowSec"], last["etaHighSec"], last["nextMinuteOdds"]) == (None, None, None)  # rate 0
        admin.post("/api/admin/rooms", json={"id": rid, "ratePerMinute": 4}).raise_for_status()
        moving = status(clients[-1], rid, places[-1]["token"])
        # 8 waiting at 4 a minute: turns 2 and 6 of 8 → 30 s and 90 s; 4 draws of 8 within a minute
        assert (moving["etaLowSec"], moving["etaHighSec"], moving["nextMinuteOdds"]) == (30, 90, 50)
        admin.post("/api/admin/rooms", json={"id": rid, "ratePerMinute": 0}).raise_for_status()
        present, gone = list(zip(clients[:4], places[:4], strict=True)), places[4:]
        time.sleep(5.5)  # the last four go unseen past presenceSec (a wait, not a timed assertion)
        for c, p in present:
            status(c, rid, p["token"])
        admin.post("/api/admin/rooms", json={"id": rid, "ratePerMinute": 600}).raise_for_status()

        def all_present_passed() -> bool:
            return all(status(c, rid, p["token"])["state"] == "passed" for c, p in present)

        wait_until(all_present_passed, timeout=15, what="every present visitor drawn")
        assert [ticket_state(admin, rid, p["ticket"]) for p in gone] == ["waiting"] * 4
    finally:
        for c in clients:
            c.close()


@pytest.mark.stores("valkey")
def test_a_live_switch_on_one_instance_closes_and_reopens_the_room_on_the_other() -> None:
    """Two instances on one Valkey: closing the room on A refuses joins, the door and the page on B; the
    visitor waiting there keeps the place and is let through once A reopens the room as random."""
    a = start_server()
    b = None
    try:
        b = start_server(peer_env(a))
        with a.admin() as admin, b.client() as waiting, b.client() as late:
            rid = create_room(admin, ratePerMinute=0, queueMaxPerIp=None)["id"]
            held = join(waiting, rid).json()
            admin.post("/api/admin/rooms", json={"id": rid, "queueing": "reject"}).raise_for_status()

            def refused_on_b() -> bool:
                r = join(late, rid)
                return r.status_code == 403 and r.json()["code"] == "room_closed"

            wait_until(refused_on_b, timeout=10, what="B refusing joins to the closed room")
            assert check(waiting, rid, qm_token=held["token"])["reason"] == "room_closed"
            wait_until(lambda: late.get(f"/w/{rid}").status_code == 503, timeout=10, what="B's closed page")
            assert status(waiting, rid, held["token"])["queueing"] == "reject"
            admin.post(
                "/api/admin/rooms", json={"id": rid, "queueing": "random", "ratePerMinute": 600}
            ).raise_for_status()
            wait_for_state(waiting, rid, held["token"], ("passed",), timeout=15)
            assert b.client().get(f"/w/{rid}").status_code == 200
    finally:
        a.stop()
        if b is not None:
            b.stop()


def test_the_gated_wait_names_a_closed_room_and_a_random_lines_ranges(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin, ratePerMinute=4, queueing="random", presenceSec=None, queueMaxPerIp=None)["id"]
    clients = [server.client() for _ in range(8)]
    try:
        tokens = [join(c, rid).json()["token"] for c in clients]
        last = clients[-1]
        wait = check(last, rid, qm_token=tokens[-1], wait="1")["wait"]
        # 8 waiting at 4 a minute: the middle half are turns 2 … 6, 30 s … 90 s; no position
        assert (wait["state"], wait["position"], wait["etaSec"]) == ("waiting", None, None)
        assert (wait["positionRange"], wait["etaRange"]) == ([2, 6], [30, 90])
        admin.post("/api/admin/rooms", json={"id": rid, "queueing": "reject"}).raise_for_status()
        closed = check(last, rid, qm_token=tokens[-1], wait="1")
        assert closed["reason"] == "room_closed" and closed["wait"]["state"] == "closed"
        assert closed["wait"]["waitingUrl"] == closed["waitUrl"] and "positionRange" not in closed["wait"]
    finally:
        for c in clients:
            c.close()
