"""A PostgreSQL cut as an operator sees it, on STORE=valkey + SIDESTORE=pg (memory has no journal to cut).

* health names the backend that is down: while only PostgreSQL is cut (Valkey answering, every tick's
  commit failing), ``backend.valkey`` stays ``up`` and the failure is the journal's (``storage``);
* the joins refused meanwhile are taken back, and the log says so: a summary of the take-backs, never
  "could not take back" for one that was made.

PostgreSQL is cut through a TCP relay the test owns (``relay.py``), the shared server left alone.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from harness import Server, create_room, join, start_server, valkey_services, wait_until
from relay import Relay, relayed

pytestmark = pytest.mark.stores("valkey")


def relayed_database() -> contextlib.AbstractContextManager[tuple[Relay, str]]:
    return relayed(valkey_services()["database"], 5432)


def health(srv: Server) -> dict[str, Any]:
    with srv.admin() as admin:
        body: dict[str, Any] = admin.get("/api/admin/health").json()
    return body


def test_with_only_postgres_cut_healthz_says_valkey_is_up_and_the_journal_failing() -> None:
    with relayed_database() as (relay, url):
        srv = start_server({"DATABASE_URL": url, "ALERT_EVERY_MS": "300"})
        try:
            with srv.admin() as admin:
                # a line that promotes five a second for half a minute: every tick journals promotions
                room = create_room(admin, ratePerMinute=300, queueMaxPerIp=None, presenceSec=None)["id"]
            for _ in range(150):
                with srv.client() as c:
                    assert join(c, room).status_code == 200
            relay.cut()
            # several commits failed: the ticks' promotions (and the alert frames' probes) since the cut
            wait_until(lambda: health(srv)["storage"]["writeErrors"] >= 3, timeout=30, what="failed commits")
            with srv.client() as c:
                for _ in range(5):  # one tick after another, each with promotions it cannot journal
                    body = c.get("/healthz").json()
                    assert body["backend"]["valkey"] == "up", body
                    assert body["status"] == "degraded" and body["ready"] is True, body
            h = health(srv)
            assert h["backend"]["valkey"] == "up", h["backend"]
            assert h["storage"]["ok"] is False and h["storage"]["journal"]["dbHealthy"] is False
            assert "valkey is unreachable from this instance" not in h["incidents"]
            assert any(i.startswith("storage is degraded: events journal commit failed") for i in h["incidents"])
            assert "tick: store unavailable" not in srv.stderr, srv.stderr  # the ticks blame the journal
        finally:
            relay.restore()
            srv.stop()


def test_joins_refused_while_postgres_is_cut_are_taken_back_and_logged_as_taken_back() -> None:
    with relayed_database() as (relay, url):
        srv = start_server({"DATABASE_URL": url})
        try:
            with srv.admin() as admin:
                room = create_room(admin, ratePerMinute=0, queueMaxPerIp=None)["id"]
                relay.cut()
                for _ in range(8):
                    with srv.client() as c:
                        r = join(c, room)
                    assert r.status_code == 503 and r.json()["code"] == "storage_unavailable", r.text
                assert admin.get(f"/api/admin/rooms/{room}").json()["room"]["waiting"] == 0  # all taken back
            wait_until(lambda: "took back" in srv.stderr, timeout=30, what="the take-backs summed up in the log")
            assert "could not take back" not in srv.stderr, srv.stderr  # every one of them was taken back
            line = next(x for x in srv.stderr.splitlines() if "took back" in x)
            assert "join" in line and "whose journal commit failed" in line, line
        finally:
            relay.restore()
            srv.stop()
