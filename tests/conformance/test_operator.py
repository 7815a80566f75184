"""Operator actions on visitors: eject (by ticket and by Ref), purge, drill-down, delete + recreate."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from harness import Server, create_room, join, status, wait_for_state


@pytest.fixture
def visitors(server: Server) -> Iterator[list[httpx.Client]]:
    clients = [server.client() for _ in range(3)]
    try:
        yield clients
    finally:
        for c in clients:
            c.close()


def _room(admin: httpx.Client, room_id: str) -> dict[str, object]:
    r = admin.get(f"/api/admin/rooms/{room_id}")
    assert r.status_code == 200, r.text
    room: dict[str, object] = r.json()["room"]
    return room


def test_eject_by_ticket_and_by_ref(admin: httpx.Client, visitors: list[httpx.Client]) -> None:
    rid = create_room(admin, ratePerMinute=0)["id"]
    a, b, c = (join(v, rid).json() for v in visitors)
    assert [a["position"], b["position"], c["position"]] == [1, 2, 3]

    r = admin.post(f"/api/admin/rooms/{rid}/eject", json={"ticket": a["ticket"]})
    assert r.status_code == 200, r.text
    sa = status(visitors[0], rid)
    assert sa["ticket"] == a["ticket"]
    assert sa["state"] == "waiting"
    assert sa["reason"] == "ejected"
    assert sa["position"] == 3
    assert status(visitors[1], rid)["position"] == 1
    assert status(visitors[2], rid)["position"] == 2

    r = admin.post(f"/api/admin/rooms/{rid}/eject", json={"ref": b["ref"]})
    assert r.status_code == 200, r.text
    sb = status(visitors[1], rid)
    assert sb["reason"] == "ejected"
    assert sb["position"] == 3
    assert status(visitors[2], rid)["position"] == 1
    assert status(visitors[0], rid)["position"] == 2
    assert _room(admin, rid)["waiting"] == 3


def test_eject_unknown_ticket(admin: httpx.Client, visitors: list[httpx.Client]) -> None:
    rid = create_room(admin, ratePerMinute=0)["id"]
    join(visitors[0], rid)
    r = admin.post(f"/api/admin/rooms/{rid}/eject", json={"ticket": 999})
    assert 400 <= r.status_code < 500, r.text
    assert isinstance(r.json()["code"], str)
    r = admin.post(f"/api/admin/rooms/{rid}/eject", json={"ref": "ZZZZZZ"})
    assert 400 <= r.status_code < 500, r.text
    assert status(visitors[0], rid)["position"] == 1


def test_eject_sends_a_passed_visitor_back(server: Server, admin: httpx.Client, visitors: list[httpx.Client]) -> None:
    rid = create_room(admin, ratePerMinute=600)["id"]
    v = visitors[0]
    p = join(v, rid).json()
    wait_for_state(v, rid, None, ("passed",), timeout=10)
    assert admin.post(f"/api/admin/rooms/{rid}/pause").status_code == 200
    r = admin.post(f"/api/admin/rooms/{rid}/eject", json={"ticket": p["ticket"]})
    assert r.status_code == 200, r.text
    s = status(v, rid)
    assert s["state"] == "waiting"
    assert s["reason"] == "ejected"
    assert s["redirectUrl"] is None
    check = v.get("/api/check", params={"roomId": rid, "url": "https://shop.example/", "qm_token": p["token"]})
    assert check.json()["admit"] is False


def test_purge_empties_the_line(admin: httpx.Client, visitors: list[httpx.Client]) -> None:
    rid = create_room(admin, ratePerMinute=0)["id"]
    tickets = [join(v, rid).json()["ticket"] for v in visitors]
    assert _room(admin, rid)["waiting"] == 3
    r = admin.post(f"/api/admin/rooms/{rid}/purge")
    assert r.status_code == 200, r.text
    assert r.json()["purged"] == 3
    assert _room(admin, rid)["waiting"] == 0
    for v, old in zip(visitors, tickets, strict=True):
        s = status(v, rid)
        assert s["state"] != "waiting"
        assert s["position"] is None
        again = join(v, rid).json()
        assert again["state"] == "waiting"
        assert again["ticket"] != old
        assert again["reason"] == "purged"
    assert _room(admin, rid)["waiting"] == 3


def test_drill_down_by_ticket_and_ref(admin: httpx.Client, visitors: list[httpx.Client]) -> None:
    rid = create_room(admin, ratePerMinute=0)["id"]
    a = join(visitors[0], rid).json()
    b = join(visitors[1], rid).json()
    for query, expected in ((str(a["ticket"]), a), (b["ref"], b)):
        r = admin.get(f"/api/admin/rooms/{rid}/visitors/{query}")
        assert r.status_code == 200, (query, r.text)
        found = r.json()["visitor"]
        assert found["ticket"] == expected["ticket"]
        assert found["state"] == "waiting"
        assert found["position"] == expected["position"]
        assert isinstance(found["waiting"], int | float) and found["waiting"] >= 0
    r = admin.get(f"/api/admin/rooms/{rid}/visitors/12345")
    assert r.status_code == 404
    assert isinstance(r.json()["code"], str)


def test_delete_and_recreate_is_a_new_generation(admin: httpx.Client, visitors: list[httpx.Client]) -> None:
    rid = create_room(admin, ratePerMinute=0)["id"]
    old = join(visitors[0], rid).json()
    assert admin.delete(f"/api/admin/rooms/{rid}").status_code == 200
    create_room(admin, rid, ratePerMinute=0)

    s = status(visitors[0], rid, old["token"])
    assert s["reason"] == "previous_generation"
    assert s["position"] is None
    assert s["ticket"] is None

    r = admin.get(f"/api/admin/rooms/{rid}/visitors/{old['ref']}")
    assert r.status_code == 200, r.text
    assert r.json()["visitor"]["state"] == "previous_generation"

    fresh = join(visitors[0], rid).json()
    assert fresh["state"] == "waiting"
    assert fresh["reason"] == "previous_generation"
    assert fresh["position"] == 1
    assert fresh["token"] != old["token"]


def test_drill_down_by_lower_case_ref(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin, ratePerMinute=0, queueMaxPerIp=None)["id"]
    found = None
    with server.client() as v:
        for _ in range(200):  # about one Ref in ten has no digit
            v.cookies.clear()
            p = join(v, rid).json()
            if p["ref"].isalpha():
                found = p
                break
    assert found is not None, "no digit-free Ref among 200 tickets (about one in a billion runs)"
    r = admin.get(f"/api/admin/rooms/{rid}/visitors/{found['ref']}")
    assert r.status_code == 200, r.text
    r = admin.get(f"/api/admin/rooms/{rid}/visitors/{found['ref'].lower()}")
    assert r.status_code == 200, r.text
    assert r.json()["visitor"]["ticket"] == found["ticket"]
