"""Flush: every admitted visitor's pass and session released at once, the line left as it is.

Over HTTP, on both stores: visitors admitted through a connector (holding a door key and an edge pass) and
one holding a pass not used yet are sent back by ``POST /api/admin/rooms/<id>/flush``; the queue refuses
their door keys and their edge passes (one cutoff on the revocation list, ``revokedBefore``), the people
waiting keep their places, the flush is audited and marked on the chart. On Valkey + PostgreSQL the flush
is in the journal: a restart with Valkey's copy of the room gone rebuilds it flushed.
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
    start_server,
    status,
    sync_valkey,
    unique_id,
    valkey_services,
    wait_until,
)
from passkit import PUBLIC_KEY, Visitor, admitted, parts
from relay import relayed

ServerFactory = Callable[..., Server]


@pytest.fixture(scope="module")
def server(make_module_server: ServerFactory) -> Server:
    return make_module_server({"PASS_SIGNING": "ed25519", "PUBLIC_API_KEY": PUBLIC_KEY})


def _room(admin: httpx.Client, room: str) -> dict[str, Any]:
    r = admin.get(f"/api/admin/rooms/{room}")
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()["room"]
    return body


def _line(srv: Server, room: str, count: int) -> list[str]:
    """``count`` visitors joining a paused room: they wait, in order."""
    tokens = []
    for _ in range(count):
        with srv.client() as c:
            r = join(c, room)
            assert r.status_code == 200, r.text
            tokens.append(r.json()["token"])
    return tokens


def _positions(srv: Server, room: str, tokens: list[str]) -> list[int | None]:
    with srv.client() as c:
        return [status(c, room, token)["position"] for token in tokens]


def _admitted_and_waiting(srv: Server) -> tuple[Visitor, Visitor, list[str]]:
    """One visitor on the site (session, door key, edge pass), one holding a pass, two waiting."""
    inside = admitted(srv, sessionTtlSec=600, maxConcurrent=5, presenceSec=None, queueMaxPerIp=None)
    room = inside.room_id
    holder = Visitor(srv, room)  # promoted; the pass not used yet
    with srv.admin() as admin:
        assert admin.post(f"/api/admin/rooms/{room}/pause").status_code == 200
    return inside, holder, _line(srv, room, 2)


def test_a_flush_sends_every_admitted_visitor_back_and_leaves_the_line(server: Server) -> None:
    inside, holder, waiting = _admitted_and_waiting(server)
    room = inside.room_id
    edge_pass = inside.check().json()["edgePass"]
    claims = parts(edge_pass)[1]
    assert "edgePassRefused" not in inside.check(qm_pass=edge_pass).json()
    with server.admin() as admin:
        before = _room(admin, room)
        assert (before["activeSessions"], before["passesOutstanding"], before["waiting"]) == (1, 1, 2)
        line = _positions(server, room, waiting)
        assert line == [1, 2]

        r = admin.post(f"/api/admin/rooms/{room}/flush")
        assert r.status_code == 200, r.text
        assert r.json() == {"ok": True, "flushed": 2}

        after = _room(admin, room)
        assert (after["activeSessions"], after["passesOutstanding"], after["occupancy"]) == (0, 0, 0)
        assert after["waiting"] == 2 and after["state"] == "paused"
        assert _positions(server, room, waiting) == line  # the line is untouched

    # the visitor on the site: the door key no longer admits, and the edge pass is refused
    body = inside.check(qm_pass=edge_pass).json()
    assert body["admit"] is False and body["reason"] == "flushed"
    assert body["edgePassRefused"] == "revoked"
    assert "edgePass" not in body
    # the one holding a pass: it no longer walks in
    body = holder.check().json()
    assert body["admit"] is False and body["reason"] == "flushed"
    # a connector reads the cutoff: every pass issued before it is refused
    with server.client() as c:
        listed = c.get("/api/passes/revoked", params={"roomId": room}).json()
    assert isinstance(listed["revokedBefore"], int) and listed["revokedBefore"] > claims["iat"]
    assert listed["revoked"] == []  # one cutoff, not one id per pass

    # back to the line, at the back, told why
    with server.client() as c:
        seen = status(c, room, inside.token)
        assert seen["reason"] == "flushed" and seen["position"] is None
        again = join(c, room, token=inside.token).json()
    assert again["state"] == "waiting" and again["reason"] == "flushed" and again["position"] == 3

    with server.admin() as admin:
        rows = admin.get("/api/admin/audit", params={"roomId": room}).json()["audit"]
        flushes = [row for row in rows if row["action"] == "room.flush"]
        assert len(flushes) == 1 and flushes[0]["target"] == room and flushes[0]["roomId"] == room

        def marked() -> list[dict[str, Any]]:
            got = admin.get(f"/api/admin/series/{room}").json()["marks"]
            return [m for m in got if m["kind"] == "flush"]

        mark = wait_until(marked, timeout=15, what="the flush mark on the chart")
        assert mark[0]["note"] == "site flushed: 2 passes and sessions released"


def test_a_flush_with_nobody_admitted_releases_nobody_and_an_unknown_room_is_404(server: Server) -> None:
    with server.admin() as admin:
        room = create_room(admin, ratePerMinute=0)["id"]
        tokens = _line(server, room, 2)
        r = admin.post(f"/api/admin/rooms/{room}/flush")
        assert r.status_code == 200 and r.json() == {"ok": True, "flushed": 0}
        assert _positions(server, room, tokens) == [1, 2]
        missing = admin.post(f"/api/admin/rooms/{unique_id('none')}/flush")
        assert missing.status_code == 404 and missing.json()["code"] == "no_room"
        # the operator role may flush, as it may purge; a viewer may not
        for role, expected in (("viewer", 403), ("operator", 200)):
            minted = admin.post("/api/admin/operators", json={"name": unique_id(role), "role": role})
            assert minted.status_code == 201, minted.text
            with server.client(headers={"Authorization": f"Bearer {minted.json()['key']}"}) as c:
                r = c.post(f"/api/admin/rooms/{room}/flush")
            assert r.status_code == expected, r.text
            if expected == 403:
                assert r.json()["code"] == "insufficient_role"


@pytest.mark.stores("valkey")
def test_a_flush_survives_a_restart_with_the_room_rebuilt_from_the_journal() -> None:
    srv = start_server({"PASS_SIGNING": "ed25519", "PUBLIC_API_KEY": PUBLIC_KEY})
    again: Server | None = None
    try:
        inside, holder, waiting = _admitted_and_waiting(srv)
        room = inside.room_id
        with srv.admin() as admin:
            r = admin.post(f"/api/admin/rooms/{room}/flush")
            assert r.status_code == 200 and r.json()["flushed"] == 2
        line = _positions(srv, room, waiting)
        # a kill, and Valkey loses the room: the next process rebuilds it from the journal alone
        srv.proc.send_signal(signal.SIGKILL)
        srv.wait()
        client = sync_valkey(srv.env["VALKEY_URL"])
        gone = list(client.scan_iter(match=f"{srv.env['VALKEY_PREFIX']}{{{room}}}:*", count=1000))
        assert gone
        client.delete(*gone)
        client.close()
        shared = ("VALKEY_PREFIX", "PG_SCHEMA", "SECRET", "ADMIN_KEY", "PASS_SIGNING", "PUBLIC_API_KEY")
        again = start_server(
            {**{k: srv.env[k] for k in shared}, "SPOOL_DIR": srv.env["SPOOL_DIR"] + "-2", "RESYNC_MS": "500"}
        )

        def rebuilt() -> bool:
            with again.client() as c:  # type: ignore[union-attr]
                r = c.get("/api/status", params={"roomId": room, "token": waiting[0]})
            if r.status_code == 503:
                return False
            assert r.status_code == 200, r.text
            return r.json()["position"] is not None

        wait_until(rebuilt, timeout=30, what="the room rebuilt from the journal")
        assert _positions(again, room, waiting) == line
        with again.admin() as admin:
            summary = _room(admin, room)
            assert (summary["activeSessions"], summary["passesOutstanding"], summary["waiting"]) == (0, 0, 2)
            for n in (1, 2):
                found = admin.get(f"/api/admin/rooms/{room}/visitors/{n}").json()["visitor"]
                assert found["state"] == "expired" and found["reason"] == "flushed", found
        inside.srv = holder.srv = again
        for v in (inside, holder):
            body = v.check().json()
            assert body["admit"] is False and body["reason"] == "flushed", body
    finally:
        if again is not None:
            again.stop()
        srv.stop()


@pytest.mark.stores("valkey")
def test_a_flush_the_journal_cannot_commit_answers_503_and_a_retry_is_safe() -> None:
    with relayed(valkey_services()["database"], 5432) as (relay, url):
        srv = start_server({"DATABASE_URL": url, "PUBLIC_API_KEY": PUBLIC_KEY})
        try:
            inside = admitted(srv, sessionTtlSec=600, presenceSec=None)
            room = inside.room_id
            with srv.admin() as admin:
                relay.cut()
                r = admin.post(f"/api/admin/rooms/{room}/flush")
                assert r.status_code == 503, r.text
                assert r.json()["code"] == "storage_unavailable" and "retry-after" in r.headers
                relay.restore()

                def retried() -> dict[str, Any] | None:
                    again = admin.post(f"/api/admin/rooms/{room}/flush")
                    return dict(again.json()) if again.status_code == 200 else None

                # nothing is released twice: the first flush's change stands, the retry finds nobody admitted
                assert wait_until(retried, timeout=30, what="the flush retried once the journal is back") == {
                    "ok": True,
                    "flushed": 0,
                }
                assert _room(admin, room)["activeSessions"] == 0
            body = inside.check().json()
            assert body["admit"] is False and body["reason"] == "flushed"
        finally:
            relay.restore()
            srv.stop()
