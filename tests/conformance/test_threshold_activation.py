"""Threshold activation end to end: a bypass room puts its own queue up under a burst of arrivals and
takes it down after a quiet spell with nobody in line; a paused room is never touched.

Arrivals per minute is a one-minute window (no shorter one to configure, on purpose). Rather than
wait a minute for the burst to age out of it, the release test reaches "quiet" the other way an
operator can: raising ``joinsPerMin`` above the window's count. The release path is the same one
(arrivals below the threshold for ``releaseAfterSec`` with nobody in line); the window's own ageing
is proven on both stores with a fake clock in ``tests/store/test_contract.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness import Server, create_room, join, wait_until

ServerFactory = Callable[..., Server]

ENV = {"ALERT_EVERY_MS": "200", "ALERT_HOLD_SEC": "3600"}


def room_state(srv: Server, room: str) -> dict[str, Any]:
    with srv.admin() as admin:
        r = admin.get(f"/api/admin/rooms/{room}")
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()["room"]
    return body


def burst(srv: Server, room: str, n: int) -> None:
    """n visitors, each a join followed by a door check, as a snippet visitor's page would make."""
    for _ in range(n):
        with srv.client() as c:  # a visitor of their own: no cookie re-presents an earlier place
            assert join(c, room).status_code == 200
            assert c.get("/api/check", params={"roomId": room, "url": "https://shop.example/"}).status_code == 200


def threshold_rows(srv: Server, room: str) -> list[dict[str, Any]]:
    with srv.admin() as admin:
        rows: list[dict[str, Any]] = admin.get("/api/admin/audit").json()["audit"]
    return [r for r in rows if r.get("action") == "room.threshold" and r.get("roomId", r.get("room_id")) == room]


def test_a_burst_puts_the_queue_up_and_quiet_takes_it_down(make_server: ServerFactory) -> None:
    srv = make_server(ENV)
    auto = {"enabled": True, "joinsPerMin": 20, "sustainSec": 1, "releaseAfterSec": 1}
    with srv.admin() as admin:
        room = create_room(admin, state="bypass", autoActivate=auto)["id"]
    burst(srv, room, 15)  # 30 arrivals
    up = wait_until(lambda: (r := room_state(srv, room))["state"] == "active" and r, timeout=20, what="activation")
    assert up["autoSelf"]["action"] == "activate" and up["autoSelf"]["joinsPerMin"] >= 20
    # the audit row is written just after the state changed: read until it is there
    (row,) = wait_until(lambda: threshold_rows(srv, room), timeout=10, what="the activation's audit row")
    assert row["actor"] == "system"
    assert row["detail"]["change"] == "bypass → active" and row["detail"]["joinsPerMin"] >= 20
    with srv.admin() as admin:
        marks = admin.get(f"/api/admin/series/{room}").json()["marks"]
        assert any(m["kind"] == "threshold" and "bypass → active" in m["note"] for m in marks), marks
        # somebody in line: the queue stays up however quiet it gets
        assert admin.post(f"/api/admin/rooms/{room}/rate", json={"ratePerMinute": 0}).status_code == 200
    with srv.client() as c:
        assert join(c, room).json()["state"] == "waiting"
    # the operator raises the threshold above the window's count: from here on the room is quiet
    assert room_state(srv, room)["joinsLastMinute"] >= 20  # the burst is still in the window
    with srv.admin() as admin:
        raised = {**auto, "joinsPerMin": 1000}
        r = admin.post("/api/admin/rooms", json={"id": room, "autoActivate": raised})
        assert r.status_code == 200, r.text
    changed = room_state(srv, room)
    assert changed["autoActivate"]["joinsPerMin"] == 1000 and changed["state"] == "active"
    assert changed["joinsLastMinute"] >= 20  # quiet by the raised threshold, not by the window ageing
    seen = room_state(srv, room)["generation"]
    wait_until(lambda: len(threshold_rows(srv, room)) == 1 and room_state(srv, room)["waiting"] == 1, timeout=20)
    with srv.admin() as admin:
        frames = admin.get("/api/admin/alerts").json()["lastFrameAt"]
        wait_until(lambda: admin.get("/api/admin/alerts").json()["lastFrameAt"] >= frames + 2000, timeout=20)
    assert room_state(srv, room)["state"] == "active"  # quiet for 2 s > releaseAfterSec, but one is waiting
    assert room_state(srv, room)["generation"] == seen
    with srv.admin() as admin:
        assert admin.post(f"/api/admin/rooms/{room}/purge").status_code == 200
    wait_until(lambda: room_state(srv, room)["state"] == "bypass", timeout=20, what="the queue taken down")

    def both_rows() -> list[dict[str, Any]] | None:
        found = threshold_rows(srv, room)
        return found if len(found) >= 2 else None

    rows = wait_until(both_rows, timeout=10, what="the take-down's audit row")
    assert [r["detail"]["change"] for r in rows] == ["active → bypass", "bypass → active"]  # newest first
    assert rows[0]["actor"] == "system"


def test_a_paused_room_stays_paused_under_any_burst(make_server: ServerFactory) -> None:
    srv = make_server(ENV)
    auto = {"enabled": True, "joinsPerMin": 5, "sustainSec": 1, "releaseAfterSec": 1}
    with srv.admin() as admin:
        room = create_room(admin, state="paused", autoActivate=auto, queueMaxPerIp=None)["id"]
    burst(srv, room, 15)
    assert room_state(srv, room)["joinsLastMinute"] >= 5
    with srv.admin() as admin:
        # the first alert frame may not have run yet on a server this young: wait for one, then for 3 s more
        frames = wait_until(lambda: admin.get("/api/admin/alerts").json()["lastFrameAt"], timeout=20)
        wait_until(lambda: admin.get("/api/admin/alerts").json()["lastFrameAt"] >= frames + 3000, timeout=20)
    assert room_state(srv, room)["state"] == "paused"
    assert threshold_rows(srv, room) == []


def test_an_unarmed_bypass_room_counts_arrivals_and_stays_in_bypass(make_server: ServerFactory) -> None:
    srv = make_server(ENV)
    with srv.admin() as admin:
        room = create_room(admin, state="bypass")["id"]
    burst(srv, room, 10)
    r = room_state(srv, room)
    assert r["joinsLastMinute"] == 20 and r["joinsTotal"] == 0  # arrivals, not tickets
    assert r["state"] == "bypass" and r["autoSelf"] is None
