"""The system surface over HTTP: journal maintenance and the spool's status, admission ("pop")
maintenance, shared state, the stats refresh, the fleet's /internal routes, and the owner role every
one of them needs. (What the spool does against a PostgreSQL that stops: ``test_journal_spool.py``.)

Black-box: real server processes, every assertion on an HTTP answer. Both stores; the fleet tests (two
instances sharing one Valkey prefix) on STORE=valkey only. The module's server is shared: a test that
turns admission maintenance on turns it off again before it ends.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from harness import (
    Server,
    create_room,
    iter_sse,
    join,
    metric,
    peer_env,
    status,
    unique_id,
    wait_for_state,
    wait_until,
)

ServerFactory = Callable[..., Server]

MAINT = "/api/v1/system/maintenance"
BUFFERS = "/api/v1/status/buffers"
MAINT_ON = "Maintenance mode ENABLED. All PUSHes routing to file buffer."
MAINT_OFF = "Maintenance mode DISABLED. Background processor will drain buffer to DB."
POP = "/api/v1/system/maintenance/pop"
POP_ON = "Pop maintenance mode ENABLED. All POP operations will return empty arrays."
POP_OFF = "Pop maintenance mode is OFF. Normal operation."
ENABLED_REQUIRED = "enabled (boolean) is required"
PAGE = "https://shop.example/drop/sneaker-42?size=9"

ROUTES: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", MAINT, None),
    ("POST", MAINT, {"enabled": False}),
    ("GET", BUFFERS, None),
    ("GET", POP, None),
    ("POST", POP, {"enabled": False}),
    ("GET", "/api/v1/system/shared-state", None),
    ("POST", "/api/v1/stats/refresh", {}),
    ("POST", "/internal/api/notify", {"queue": "nowhere"}),
    ("GET", "/internal/api/shared-state/stats", None),
    ("GET", "/internal/api/inter-instance/stats", None),
]


def _check(client: httpx.Client, room_id: str, token: str) -> dict[str, Any]:
    r = client.get("/api/check", params={"roomId": room_id, "url": PAGE, "qm_token": token})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def _pop(admin: httpx.Client, enabled: bool) -> dict[str, Any]:
    r = admin.post(POP, json={"enabled": enabled})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


@pytest.fixture
def pop_off_after(admin: httpx.Client) -> Iterator[None]:
    try:
        yield
    finally:
        _pop(admin, False)


def _maint(admin: httpx.Client, enabled: bool) -> dict[str, Any]:
    r = admin.post(MAINT, json={"enabled": enabled})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def _drained(admin: httpx.Client) -> dict[str, Any] | None:
    b: dict[str, Any] = admin.get(BUFFERS).json()
    assert b["quarantine"]["count"] == 0, b  # a drain that quarantined its file is no drain
    return b if b["files"] == 0 and b["failover"] == {"pending": 0, "failed": 0} and not b["spooling"] else None


@pytest.fixture
def maint_off_after(admin: httpx.Client) -> Iterator[None]:
    try:
        yield
    finally:
        _maint(admin, False)


# ---------------------------------------------------------------------- journal maintenance


def test_journal_maintenance_answers_the_page_bodies_and_messages(
    server: Server, admin: httpx.Client, store: str, maint_off_after: None
) -> None:
    quiet = {
        "maintenanceMode": False,
        "popMaintenanceMode": False,
        "bufferedMessages": 0,
        "bufferHealthy": True,
        "bufferStats": {
            "pendingCount": 0,
            "failedCount": 0,
            "dbHealthy": True,
            "failedFiles": {"count": 0, "totalBytes": 0, "totalMB": 0.0, "failoverCount": 0, "qos0Count": 0},
        },
    }
    assert admin.get(MAINT).json() == quiet
    for bad in ({}, {"enabled": "yes"}, {"enabled": 1}, {"enabled": None}):
        r = admin.post(MAINT, json=bad)
        assert r.status_code == 400, (bad, r.text)
        assert r.json() == {"error": ENABLED_REQUIRED, "code": "bad_request", "field": "enabled"}, r.text
    for raw in (b"", b"not json", b"[true]"):
        r = admin.post(MAINT, content=raw, headers={"content-type": "application/json"})
        assert r.status_code == 400 and r.json()["error"] == ENABLED_REQUIRED, (raw, r.text)
    on = _maint(admin, True)
    spooled = 1 if store == "valkey" else 0  # the switch's own audit row waits in the spool with the journal
    assert on == {"maintenanceMode": True, "bufferedMessages": spooled, "bufferHealthy": True, "message": MAINT_ON}
    assert admin.get("/api/system/maintenance").json()["maintenanceMode"] is True  # unversioned too
    assert admin.get("/api/v1/system/shared-state").json()["maintenance_mode"] is True
    assert metric(server, "qm_maintenance_mode_enabled") == 1
    rid = create_room(admin, ratePerMinute=0)["id"]  # a room change and joins, while it is on
    with server.client() as v1, server.client() as v2:
        assert join(v1, rid).status_code == 200
        assert join(v2, rid).status_code == 200
        assert status(v2, rid)["position"] == 2
    got = admin.get(MAINT).json()
    buffers = admin.get(BUFFERS).json()
    assert buffers["maintenanceMode"] is True and buffers["qos0"] == {"pending": 0, "failed": 0}, buffers
    if store == "valkey":  # the room's creation and both joins wait in this instance's spool file
        assert got["bufferedMessages"] >= 3 and got["bufferStats"]["pendingCount"] >= 3, got
        assert buffers["spooling"] is True and buffers["spoolingReason"] == "maintenance", buffers
        assert buffers["failover"]["pending"] >= 3 and buffers["store"] == "valkey", buffers
        assert (metric(server, "qm_file_buffer_pending") or 0) >= 3
    else:  # no journal: the flag is kept and reported, nothing is buffered
        assert got == quiet | {"maintenanceMode": True}, got
        assert buffers["spooling"] is False and buffers["failover"] == {"pending": 0, "failed": 0}, buffers
        assert buffers["store"] == "memory" and metric(server, "qm_file_buffer_pending") == 0
    off = _maint(admin, False)
    assert off["maintenanceMode"] is False and off["message"] == MAINT_OFF, off
    drained = wait_until(lambda: _drained(admin), timeout=30, what="the spool drained")
    if store == "valkey":
        assert drained["drained"]["events"] >= 3 and drained["drained"]["conflicts"] == 0, drained
    assert admin.get(MAINT).json() == quiet
    assert metric(server, "qm_maintenance_mode_enabled") == 0 and metric(server, "qm_file_buffer_failed") == 0
    rows = admin.get("/api/admin/audit").json()["audit"]
    flips = [r["detail"]["enabled"] for r in rows if r["action"] == "system.maintenance"]
    assert flips[:2] == [False, True], flips


# ---------------------------------------------------------------------- admission maintenance


def test_pop_maintenance_answers_the_page_bodies_and_messages(
    server: Server, admin: httpx.Client, pop_off_after: None
) -> None:
    assert admin.get(POP).json() == {"popMaintenanceMode": False, "message": POP_OFF}
    for bad in ({}, {"enabled": "yes"}, {"enabled": 1}, {"enabled": None}):
        r = admin.post(POP, json=bad)
        assert r.status_code == 400, (bad, r.text)
        assert r.json()["error"] == ENABLED_REQUIRED and r.json()["code"] == "bad_request", r.text
    for raw in (b"", b"not json", b"[true]"):
        r = admin.post(POP, content=raw, headers={"content-type": "application/json"})
        assert r.status_code == 400 and r.json()["error"] == ENABLED_REQUIRED, (raw, r.text)
    assert _pop(admin, True) == {"popMaintenanceMode": True, "message": POP_ON}
    assert admin.get(POP).json() == {"popMaintenanceMode": True, "message": POP_ON}
    assert admin.get("/api/system/maintenance/pop").json()["popMaintenanceMode"] is True  # unversioned too
    assert _pop(admin, False) == {"popMaintenanceMode": False, "message": POP_OFF}
    assert admin.get(POP).json() == {"popMaintenanceMode": False, "message": POP_OFF}
    rows = admin.get("/api/admin/audit").json()["audit"]
    flips = [r for r in rows if r["action"] == "system.pop_maintenance"]
    assert len(flips) >= 2, rows[:5]


def test_pop_maintenance_holds_the_door_and_the_outflow_and_keeps_places(
    server: Server, admin: httpx.Client, pop_off_after: None
) -> None:
    rid = create_room(admin, ratePerMinute=600)["id"]
    with server.client() as v1, server.client() as v2, server.client() as v3:
        t1 = join(v1, rid).json()
        wait_for_state(v1, rid, None, ("passed",), timeout=10)
        assert admin.post(f"/api/admin/rooms/{rid}/rate", json={"ratePerMinute": 0}).status_code == 200
        t2, t3 = join(v2, rid).json(), join(v3, rid).json()
        assert (t2["position"], t3["position"]) == (1, 2)
        _pop(admin, True)
        # the pass already handed out is not spent at the door
        held = _check(v1, rid, t1["token"])
        assert held["admit"] is False and held["reason"] == "paused", held
        waiting_page = status(v1, rid)  # and the waiting page does not send the visitor to a door that holds
        assert waiting_page["state"] == "passed" and waiting_page["redirectUrl"] is None, waiting_page
        # the outflow promotes nobody, even with a rate set; the line keeps answering, calm and paused
        assert admin.post(f"/api/admin/rooms/{rid}/rate", json={"ratePerMinute": 600}).status_code == 200
        end = time.monotonic() + 2.5
        while time.monotonic() < end:
            for v, place in ((v2, 1), (v3, 2)):
                p = status(v, rid)
                assert p["state"] == "waiting" and p["position"] == place, p
                assert p["roomState"] == "paused" and p["etaSec"] is None, p
            time.sleep(0.25)
        assert _check(v2, rid, t2["token"])["reason"] == "paused"
        # off: the held pass goes through, and the line moves on in its order
        _pop(admin, False)
        assert status(v1, rid)["redirectUrl"], "the pass is usable again"
        assert _check(v1, rid, t1["token"])["admit"] is True
        wait_for_state(v2, rid, None, ("passed",), timeout=10)
        assert status(v3, rid)["state"] in ("waiting", "passed")


# ---------------------------------------------------------------------- shared state and the transport


def test_shared_state_and_transport_stats_on_one_instance(server: Server, admin: httpx.Client, store: str) -> None:
    detail = "store_memory" if store == "memory" else "single_instance"
    state = admin.get("/api/v1/system/shared-state")
    assert state.status_code == 200, state.text
    assert state.json() == {  # the adopted page's answer with no peers configured, or no transport
        "enabled": False,
        "reason": "no_peers",
        "detail": detail,
        "maintenance_mode": False,
        "pop_maintenance_mode": False,
    }
    one = admin.get("/internal/api/shared-state/stats").json()
    alias = admin.get("/internal/api/inter-instance/stats").json()
    assert one["enabled"] is False and one["reason"] == "no_peers" and one["detail"] == detail, one
    assert one["maintenance_mode"] is False and one["pop_maintenance_mode"] is False, one
    assert isinstance(one["server_id"], str) and one["server_id"], one
    assert set(alias) == set(one) and alias["server_id"] == one["server_id"]
    if store == "valkey":
        assert one["transport"] == "valkey-pubsub" and one["peer_count"] == 0 and one["peers"] == [], one
        for field in ("messages_sent", "messages_received", "messages_dropped"):
            assert isinstance(one[field], int), (field, one)


# ---------------------------------------------------------------------- stats refresh


def test_stats_refresh_recounts_the_rooms_and_folds_the_open_hour(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin, ratePerMinute=0)["id"]
    first = admin.post("/api/v1/stats/refresh")
    assert first.status_code == 200, first.text
    body = first.json()
    assert body["engine"] in ("memory", "valkey") and body["rooms"] >= 1 and body["segPartitions"] == body["rooms"]
    with server.client() as v1, server.client() as v2:
        join(v1, rid)
        join(v2, rid)

    def folded() -> dict[str, Any] | None:
        r = admin.post("/api/v1/stats/refresh")
        assert r.status_code == 200, r.text
        out: dict[str, Any] = r.json()
        mine = [row for row in out["rows"] if row["roomId"] == rid]  # two hours' rows across an hour's turn
        return out if out["folded"] and sum(row["joins"] for row in mine) == 2 else None

    out = wait_until(folded, timeout=15, what="the open hour's row with the two joins")
    assert out["waiting"] >= 2 and out["historyRows"] == len(out["rows"])
    rows = admin.get(f"/api/admin/reports?roomId={rid}").json()["rows"]
    assert sum(row["joins"] for row in rows) == 2, rows
    audit = admin.get("/api/admin/audit").json()["audit"]
    assert any(r["action"] == "system.stats_refresh" for r in audit)


# ---------------------------------------------------------------------- notify


def test_notify_answers_ok_and_refuses_a_missing_queue(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin)["id"]
    r = admin.post("/internal/api/notify", json={"queue": rid, "partition": "eu-1"})
    assert r.status_code == 200 and r.json() == {"status": "ok"}, r.text
    for bad in ({}, {"queue": ""}, {"queue": 7}, {"partition": "eu-1"}):
        r = admin.post("/internal/api/notify", json=bad)
        assert r.status_code == 400, (bad, r.text)
        assert r.json()["error"] == "queue (string) is required", r.text
    audit = admin.get("/api/admin/audit").json()["audit"]
    assert any(a["action"] == "system.notify" and a["target"] == rid for a in audit)


# ---------------------------------------------------------------------- the owner role


def test_every_route_needs_the_owner_role(server: Server, admin: httpx.Client) -> None:
    keys = {}
    for role in ("operator", "viewer", "owner"):
        r = admin.post("/api/admin/operators", json={"name": unique_id(role), "role": role})
        assert r.status_code == 201, r.text
        keys[role] = r.json()["key"]
    link = admin.post("/api/admin/monitor-links")
    assert link.status_code == 201, link.text
    keys["monitor"] = link.json()["token"]
    for method, path, body in ROUTES:
        for who in ("operator", "viewer", "monitor"):
            with server.client(headers={"Authorization": f"Bearer {keys[who]}"}) as c:
                r = c.request(method, path, json=body)
                assert r.status_code == 403, (who, method, path, r.status_code, r.text)
                assert r.json()["code"] == "insufficient_role", r.text
        with server.client() as anon:
            r = anon.request(method, path, json=body)
            assert r.status_code == 401, (method, path, r.status_code, r.text)
        with server.client(headers={"Authorization": f"Bearer {keys['owner']}"}) as c:
            r = c.request(method, path, json=body)
            assert r.status_code == 200, (method, path, r.status_code, r.text)


# ---------------------------------------------------------------------- two instances (valkey)


@pytest.fixture
def pair(make_server: ServerFactory) -> tuple[Server, Server]:
    a = make_server()
    b = make_server(peer_env(a))
    return a, b


@pytest.mark.stores("valkey")
def test_two_instances_obey_the_pop_flag_set_on_one(pair: tuple[Server, Server]) -> None:
    a, b = pair
    with a.admin() as admin_a, b.admin() as admin_b, b.client() as v:
        rid = create_room(admin_a, ratePerMinute=0)["id"]
        t = join(v, rid).json()
        _pop(admin_a, True)
        wait_until(lambda: admin_b.get(POP).json()["popMaintenanceMode"], timeout=10, what="b obeying the flag")
        assert admin_b.get(POP).json()["message"] == POP_ON
        assert admin_b.post(f"/api/admin/rooms/{rid}/rate", json={"ratePerMinute": 600}).status_code == 200
        end = time.monotonic() + 2.5
        while time.monotonic() < end:
            p = status(v, rid)
            assert p["state"] == "waiting" and p["position"] == 1 and p["roomState"] == "paused", p
            time.sleep(0.25)
        assert _check(v, rid, t["token"])["admit"] is False
        _pop(admin_b, False)  # off from the other one
        wait_until(lambda: not admin_a.get(POP).json()["popMaintenanceMode"], timeout=10, what="a obeying")
        wait_for_state(v, rid, None, ("passed",), timeout=10)
        assert _check(v, rid, t["token"])["admit"] is True


@pytest.mark.stores("valkey")
def test_two_instances_see_each_other_and_notify_reaches_the_other(pair: tuple[Server, Server]) -> None:
    a, b = pair
    with a.admin() as admin_a, b.admin() as admin_b:
        id_a = admin_a.get("/internal/api/shared-state/stats").json()["server_id"]
        id_b = admin_b.get("/internal/api/shared-state/stats").json()["server_id"]
        assert id_a != id_b

        def sees_a() -> dict[str, Any] | None:
            s: dict[str, Any] = admin_b.get("/internal/api/shared-state/stats").json()
            return s if s.get("peer_count") == 1 else None

        stats_b = wait_until(sees_a, timeout=15, what="b listing a as its peer")
        assert stats_b["enabled"] is True and stats_b["transport"] == "valkey-pubsub", stats_b
        assert (
            [p["server_id"] for p in stats_b["peers"]] == [id_a] and "reason" not in stats_b and "detail" not in stats_b
        )
        state = admin_b.get("/api/v1/system/shared-state").json()
        assert state["enabled"] is True and "reason" not in state, state
        # a notify on a is fanned out: b receives it (and wakes its streams of that room)
        rid = create_room(admin_a)["id"]
        received = stats_b["messages_received"]
        sent = admin_a.get("/internal/api/inter-instance/stats").json()["messages_sent"]
        r = admin_a.post("/internal/api/notify", json={"queue": rid})
        assert r.status_code == 200 and r.json() == {"status": "ok"}
        assert admin_a.get("/internal/api/inter-instance/stats").json()["messages_sent"] > sent
        wait_until(
            lambda: admin_b.get("/internal/api/shared-state/stats").json()["messages_received"] > received,
            timeout=10,
            what="b receiving the wake",
        )


@pytest.mark.stores("valkey")
def test_two_instances_obey_journal_maintenance_set_on_one(pair: tuple[Server, Server]) -> None:
    a, b = pair
    with a.admin() as admin_a, b.admin() as admin_b, b.client() as v:
        rid = create_room(admin_a, ratePerMinute=0)["id"]
        try:
            _maint(admin_a, True)
            # b obeys at once (announced), and spools its own joins in its own SPOOL_DIR
            wait_until(lambda: admin_b.get(BUFFERS).json()["spoolingReason"] == "maintenance", what="b spooling")
            assert admin_b.get(MAINT).json()["maintenanceMode"] is True
            assert join(v, rid).status_code == 200
            mine = admin_b.get(BUFFERS).json()
            assert mine["failover"]["pending"] >= 1 and mine["instance"] != admin_a.get(BUFFERS).json()["instance"]
        finally:
            _maint(admin_b, False)  # off from the other one
        wait_until(lambda: not admin_a.get(MAINT).json()["maintenanceMode"], timeout=10, what="a obeying")
        for admin in (admin_a, admin_b):
            wait_until(lambda admin=admin: _drained(admin), timeout=30, what="both spools drained")
        assert status(v, rid)["position"] == 1


@pytest.mark.stores("valkey")
def test_notify_on_one_instance_frames_the_other_instances_streams_at_once(pair: tuple[Server, Server]) -> None:
    a, b = pair
    with a.admin() as admin_a, b.client() as v:
        rid = create_room(admin_a, ratePerMinute=0)["id"]
        token = join(v, rid).json()["token"]
        wait_until(lambda: admin_a.get("/internal/api/shared-state/stats").json().get("peer_count") == 1, timeout=15)
        with v.stream("GET", "/events", params={"roomId": rid, "token": token}) as stream:
            frames = iter_sse(stream)
            first = next(frames)
            assert first["event"] == "message" and '"position":1' in first["data"], first
            r = admin_a.post("/internal/api/notify", json={"queue": rid})
            assert r.status_code == 200
            # nothing changed in the room: the next frame is the wake's, long before a ping (every 15 s)
            woken = next(frames)
            assert woken.get("event") == "message" and '"position":1' in woken["data"], woken
