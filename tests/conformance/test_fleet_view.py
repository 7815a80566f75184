"""The fleet view: GET /api/admin/health sums the counters of every live instance (STORE=valkey), says how
many it covers in ``fleet``, drops a stopped instance within 15 s; and its ``memory`` block."""

from __future__ import annotations

import signal
from typing import Any

import pytest
from harness import Server, create_room, join, peer_env, start_server, wait_until


def _health(srv: Server) -> dict[str, Any]:
    with srv.admin() as admin:
        r = admin.get("/api/admin/health")
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body


def _unknown_room_checks(srv: Server, n: int) -> None:
    with srv.client() as c:
        for _ in range(n):
            assert c.get("/api/check", params={"roomId": "nope"}).status_code == 404


def test_health_names_the_instances_it_covers_and_the_memory_it_holds(server: Server) -> None:
    before = _health(server)["counters"]["unknownRoomChecks"]
    _unknown_room_checks(server, 2)
    h = _health(server)
    assert h["fleet"] == {"instances": 1, "partial": False}
    assert h["counters"]["unknownRoomChecks"] == before + 2
    memory = h["memory"]
    assert memory["rssBytes"] > 0
    assert memory["linesEstimateBytes"] == memory["ticketsHeld"] * memory["bytesPerTicket"]
    assert memory["linesIn"] == ("valkey" if h["store"] == "valkey" else "process")
    with server.client() as c:
        assert "fleet" not in c.get("/healthz").json()  # the public health carries neither


def _second(a: Server) -> Server:
    """Another instance on A's Valkey and PostgreSQL (its own spool directory)."""
    return start_server(peer_env(a))


def _security(srv: Server) -> dict[str, Any]:
    with srv.admin() as admin:
        r = admin.get("/api/admin/security")
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body


def _joins(srv: Server, room: str, n: int) -> None:
    for _ in range(n):
        with srv.client() as c:  # a fresh visitor each time
            assert join(c, room).status_code == 200


def _one_left(srv: Server) -> dict[str, Any] | None:
    h = _health(srv)
    return h if h["fleet"]["instances"] == 1 else None


@pytest.mark.stores("valkey")
def test_two_instances_show_the_sum_and_a_killed_one_drops_out() -> None:
    a = start_server()
    b = None
    try:
        b = _second(a)
        _unknown_room_checks(a, 2)
        _unknown_room_checks(b, 3)
        with a.admin() as admin:
            create_room(admin, "fleetsec", ratePerMinute=0)
        _joins(a, "fleetsec", 1)
        _joins(b, "fleetsec", 2)  # bot protection assesses every join, on the instance that took it

        def summed(srv: Server) -> dict[str, Any] | None:
            h = _health(srv)
            return h if h["counters"]["unknownRoomChecks"] == 5 else None

        for srv in (a, b):  # each instance writes its counters every 5 s
            h = wait_until(lambda srv=srv: summed(srv), timeout=20, what="the fleet's sum")
            assert h["fleet"] == {"instances": 2, "partial": False}
        # the Security panel's totals are the fleet's too, and it says what is this instance's own
        sec = wait_until(lambda: s if (s := _security(a))["assessed"] >= 3 else None, timeout=20, what="sum")
        assert sec["fleet"] == {"instances": 2, "partial": False}
        assert sec["thisInstance"]["assessed"] == 1
        assert sec["assessed"] == sec["thisInstance"]["assessed"] + _security(b)["thisInstance"]["assessed"]
        b.kill()  # no clean stop: its key expires within 15 s
        h = wait_until(lambda: _one_left(a), timeout=30, what="the killed instance dropping out")
        assert h["counters"]["unknownRoomChecks"] == 2
        assert h["fleet"] == {"instances": 1, "partial": False}
    finally:
        a.stop()
        if b is not None:
            b.stop()


@pytest.mark.stores("valkey")
def test_a_clean_stop_takes_the_instance_out_at_once() -> None:
    a = start_server()
    b = None
    try:
        b = _second(a)
        _unknown_room_checks(b, 3)
        wait_until(lambda: _health(a)["counters"]["unknownRoomChecks"] == 3, timeout=20, what="B's count")
        b.proc.send_signal(signal.SIGTERM)  # a clean stop, and nothing else touching Valkey yet
        b.proc.wait(30)
        h = _health(a)
        assert h["fleet"] == {"instances": 1, "partial": False}
        assert h["counters"]["unknownRoomChecks"] == 0
    finally:
        a.stop()
        if b is not None:
            b.stop()
