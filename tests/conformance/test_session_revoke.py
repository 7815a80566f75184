"""The site ends a visitor's session: ``POST /api/sessions/revoke`` over HTTP, on both stores.

A visitor admitted through a connector (door key, ticket token, edge pass) is sent away by the customer's
backend with the Public API key: the slot is free at once and the next visitor in line is promoted, the
door key no longer admits and the edge pass is on the room's revocation list, the room counts it
(``sessionsRevoked``, ``qm_sessions_revoked_total``). A session nobody holds is a no-op (``revoked: false``);
a forged or other room's credential is refused (403 ``invalid_pass`` / ``invalid_token``).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from harness import (
    Server,
    create_room,
    join,
    metric,
    start_server,
    status,
    sync_valkey,
    tamper_signature,
    wait_for_state,
    wait_until,
)
from passkit import PUBLIC_KEY, admitted, bnd, key_of, parts, sign

ServerFactory = Callable[..., Server]
ROOM = {"sessionTtlSec": 600, "maxConcurrent": 1, "presenceSec": None, "queueMaxPerIp": None}


@pytest.fixture(scope="module")
def server(make_module_server: ServerFactory) -> Server:
    return make_module_server({"PASS_SIGNING": "ed25519", "PUBLIC_API_KEY": PUBLIC_KEY})


def _revoke(srv: Server, body: dict[str, Any], key: str | None = PUBLIC_KEY, **params: str) -> httpx.Response:
    headers = {} if key is None else {"Authorization": f"Bearer {key}"}
    with srv.client(headers=headers) as c:
        return c.post("/api/sessions/revoke", json=body, params=params)


def _room(srv: Server, room: str) -> dict[str, Any]:
    with srv.admin() as admin:
        r = admin.get(f"/api/admin/rooms/{room}")
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()["room"]
    return body


def _waiting_token(srv: Server, room: str) -> str:
    with srv.client() as c:
        r = join(c, room)
        assert r.status_code == 200, r.text
        token: str = r.json()["token"]
        return token


def test_a_revoke_frees_the_slot_and_the_next_visitor_gets_in(server: Server) -> None:
    inside = admitted(server, **ROOM)
    room = inside.room_id
    edge_pass = inside.check().json()["edgePass"]
    nxt = _waiting_token(server, room)
    with server.client() as c:
        assert status(c, room, nxt)["state"] == "waiting"  # the one slot is taken
    assert inside.door_key is not None
    r = _revoke(server, {"roomId": room, "doorKey": inside.door_key, "token": inside.token})
    assert r.status_code == 200, r.text
    assert r.json() == {"roomId": room, "revoked": True}
    # the visitor on the site is sent back: the door key no longer admits, the edge pass is refused
    body = inside.check(qm_pass=edge_pass).json()
    assert body["admit"] is False and body["reason"] == "revoked"
    assert body["edgePassRefused"] == "revoked"
    with server.client() as c:
        listed = c.get("/api/passes/revoked", params={"roomId": room}).json()
        assert parts(edge_pass)[1]["sub"] in listed["revoked"]
        # the freed slot goes to the next visitor within the room's cadence
        wait_for_state(c, room, nxt, ("passed",), timeout=15)
    stats = _room(server, room)
    assert (stats["activeSessions"], stats["sessionsRevoked"]) == (0, 1)
    assert metric(server, "qm_sessions_revoked_total", room=room) == 1.0

    def reported() -> dict[str, Any] | None:  # the hourly history samples the room every 2 s
        with server.admin() as admin:
            rows = admin.get("/api/admin/reports", params={"bucket": "hour"}).json()["rows"]
        mine = [row for row in rows if row["roomId"] == room]
        return mine[-1] if mine and mine[-1]["sessionsRevoked"] == 1 else None

    assert wait_until(reported, 15, 0.2, "the report's sessionsRevoked")["sessionsRevoked"] == 1
    # the same again: the session is already over, nothing changes
    again = _revoke(server, {"roomId": room, "doorKey": inside.door_key, "token": inside.token})
    assert again.status_code == 200 and again.json()["revoked"] is False
    assert _room(server, room)["sessionsRevoked"] == 1


def test_a_revoke_by_edge_pass_or_by_door_key_alone(server: Server) -> None:
    inside = admitted(server, **ROOM)
    room = inside.room_id
    edge_pass = inside.check().json()["edgePass"]
    r = _revoke(server, {"roomId": room, "pass": edge_pass})
    assert r.status_code == 200 and r.json()["revoked"] is True, r.text
    assert inside.check().json()["reason"] == "revoked"

    other = admitted(server, **ROOM)
    assert other.door_key is not None
    r = _revoke(server, {"roomId": other.room_id, "doorKey": other.door_key})
    assert r.status_code == 200 and r.json()["revoked"] is True, r.text
    assert _room(server, other.room_id)["sessionsRevoked"] == 1


def test_an_unknown_session_is_a_no_op(server: Server) -> None:
    inside = admitted(server, **ROOM)
    room = inside.room_id
    r = _revoke(server, {"roomId": room, "doorKey": "not-a-door-key-of-anyone"})
    assert r.status_code == 200 and r.json() == {"roomId": room, "revoked": False}
    assert inside.check().json()["admit"] is True  # still inside
    assert _room(server, room)["sessionsRevoked"] == 0
    # a visitor still waiting holds no session either
    waiting = _waiting_token(server, room)
    r = _revoke(server, {"roomId": room, "doorKey": "x" * 24, "token": waiting})
    assert r.status_code == 200 and r.json()["revoked"] is False


def test_forged_or_other_room_credentials_are_refused(server: Server) -> None:
    inside = admitted(server, **ROOM)
    room = inside.room_id
    edge_pass = inside.check().json()["edgePass"]
    with server.admin() as admin:
        elsewhere = create_room(admin, **ROOM)["id"]
    assert inside.door_key is not None

    def refused(body: dict[str, Any], status_code: int, code: str) -> dict[str, Any]:
        r = _revoke(server, body)
        assert r.status_code == status_code, r.text
        answer: dict[str, Any] = r.json()
        assert answer["code"] == code
        return answer

    assert refused({"roomId": elsewhere, "pass": edge_pass}, 403, "invalid_pass")["reason"] == "wrong_room"
    assert refused({"roomId": room, "pass": tamper_signature(edge_pass)}, 403, "invalid_pass")["reason"] in (
        "bad_signature",
        "malformed",
    )
    claims = parts(edge_pass)[1]
    forged = sign(key_of("not-the-server-secret"), {**claims, "bnd": bnd(inside.door_key)})
    assert refused({"roomId": room, "pass": forged}, 403, "invalid_pass")["reason"] == "unknown_kid"
    refused({"roomId": elsewhere, "doorKey": inside.door_key, "token": inside.token}, 403, "invalid_token")
    refused({"roomId": room, "doorKey": inside.door_key, "token": tamper_signature(inside.token)}, 403, "invalid_token")
    # the same door key sent for another room names no session there
    r = _revoke(server, {"roomId": elsewhere, "doorKey": inside.door_key})
    assert r.status_code == 200 and r.json()["revoked"] is False
    # malformed bodies and unknown rooms
    refused({"roomId": room}, 400, "bad_request")
    refused({"roomId": room, "doorKey": inside.door_key, "pass": edge_pass}, 400, "bad_request")
    refused({"roomId": room, "token": inside.token}, 400, "bad_request")
    refused({"roomId": room, "doorKey": 7}, 400, "bad_request")
    refused({"roomId": room, "doorKey": "k", "extra": 1}, 400, "bad_request")
    refused({"roomId": "no-such-room", "doorKey": "k"}, 404, "no_room")
    assert inside.check().json()["admit"] is True  # none of it touched the session
    assert _room(server, room)["sessionsRevoked"] == 0


def test_the_public_api_key_is_required(server: Server) -> None:
    inside = admitted(server, **ROOM)
    body = {"roomId": inside.room_id, "doorKey": inside.door_key}
    for key in (None, "wrong-key"):
        r = _revoke(server, body, key=key)
        assert r.status_code == 401 and r.json()["code"] == "unauthorized", r.text
    with server.client() as c:
        r = c.post("/api/sessions/revoke", json=body, params={"key": PUBLIC_KEY})
    assert r.status_code == 401 and r.json()["code"] == "credential_in_query"
    assert inside.check().json()["admit"] is True


SHARED = ("VALKEY_PREFIX", "PG_SCHEMA", "SECRET", "ADMIN_KEY", "PASS_SIGNING", "PUBLIC_API_KEY")


@pytest.mark.stores("valkey")
def test_a_revoke_works_on_any_instance_and_survives_a_rebuild_from_the_journal() -> None:
    first = start_server({"PASS_SIGNING": "ed25519", "PUBLIC_API_KEY": PUBLIC_KEY})
    second: Server | None = None
    again: Server | None = None
    try:
        inside = admitted(first, **{**ROOM, "maxConcurrent": 5})
        room = inside.room_id
        second = start_server({**{k: first.env[k] for k in SHARED}, "SPOOL_DIR": first.env["SPOOL_DIR"] + "-2"})
        # ended through another instance of the fleet: the first one's door refuses the key at once
        assert inside.door_key is not None
        r = _revoke(second, {"roomId": room, "doorKey": inside.door_key, "token": inside.token})
        assert r.status_code == 200 and r.json()["revoked"] is True, r.text
        assert inside.check().json()["reason"] == "revoked"
        # both killed, and Valkey loses the room: the next process rebuilds it from the journal alone
        for srv in (first, second):
            srv.proc.send_signal(signal.SIGKILL)
            srv.wait()
        client = sync_valkey(first.env["VALKEY_URL"])
        gone = list(client.scan_iter(match=f"{first.env['VALKEY_PREFIX']}{{{room}}}:*", count=1000))
        assert gone
        client.delete(*gone)
        client.close()
        again = start_server(
            {**{k: first.env[k] for k in SHARED}, "SPOOL_DIR": first.env["SPOOL_DIR"] + "-3", "RESYNC_MS": "500"}
        )

        def rebuilt() -> dict[str, Any] | None:
            with again.admin() as admin:  # type: ignore[union-attr]
                r = admin.get(f"/api/admin/rooms/{room}")
            return r.json()["room"] if r.status_code == 200 and r.json()["room"].get("sessionsRevoked") else None

        summary = wait_until(rebuilt, timeout=30, what="the room rebuilt from the journal")
        assert (summary["sessionsRevoked"], summary["activeSessions"]) == (1, 0)
        inside.srv = again
        body = inside.check().json()
        assert body["admit"] is False and body["reason"] == "revoked", body
    finally:
        for srv in (again, second, first):
            if srv is not None:
                srv.stop()
