"""The server.start and server.stop lines of the audit trail say what happened.

* the start line says whether the previous run of this QM_INSTANCE_ID stopped cleanly: null on its
  first run (and always on STORE=memory, and with a QM_INSTANCE_ID that is new on each boot), true
  after a clean stop, false after a kill -9 or a stop with PostgreSQL unreachable;
* the stop line says clean: true only when the events journal's last commit landed; with PostgreSQL
  cut it says WITH STORAGE FAILING (on stderr at least, since the audit row may not land either);
* the exit status says the same: 0 after a clean stop on SIGTERM, 4 after one WITH STORAGE FAILING.

A restart runs on the first server's Valkey prefix and PostgreSQL schema (the same fleet state). A
clean stop here is SIGTERM and a wait, not ``Server.stop()``, which also deletes that state.
"""

from __future__ import annotations

import contextlib
import signal
from typing import Any

import pytest
from harness import Server, create_room, join, start_server, unique_id, valkey_services, wait_until
from relay import Relay, relayed

SHARED = ("VALKEY_PREFIX", "PG_SCHEMA", "SPOOL_DIR", "SECRET", "ADMIN_KEY", "QM_INSTANCE_ID")


def relayed_database() -> contextlib.AbstractContextManager[tuple[Relay, str]]:
    """DATABASE_URL through a relay the test owns (cut it, and PostgreSQL is unreachable)."""
    return relayed(valkey_services()["database"], 5432)


def trail(srv: Server, action: str) -> list[dict[str, Any]]:
    """The audit rows of ``action``, newest first."""
    with srv.admin() as admin:
        r = admin.get("/api/admin/audit", params={"limit": "500"})
    assert r.status_code == 200, r.text
    return [row for row in r.json()["audit"] if row["action"] == action]


def newest_start(srv: Server) -> dict[str, Any]:
    starts = trail(srv, "server.start")
    assert starts, "no server.start line"
    detail: dict[str, Any] = starts[0]["detail"]
    return detail


def sigterm(srv: Server) -> int:
    """SIGTERM, as a service manager stops it, and wait for the exit (the shared state stays): the exit status."""
    srv.proc.send_signal(signal.SIGTERM)
    return srv.wait()


def stop_cleanly(srv: Server) -> None:
    """A clean stop exits 0 (the signal is not raised again once the server stopped)."""
    assert sigterm(srv) == 0, srv.stderr


def restart(srv: Server) -> Server:
    return start_server({k: srv.env[k] for k in SHARED})


@pytest.mark.stores("memory")
def test_memory_keeps_nothing_so_the_previous_run_is_unknown(server: Server) -> None:
    start = newest_start(server)
    assert start["previousRunClean"] is None
    assert "STORE=memory" in start["previousRun"]


@pytest.mark.stores("valkey")
def test_a_random_instance_id_cannot_know_its_previous_run() -> None:
    srv = start_server({"QM_INSTANCE_ID": None})
    try:
        start = newest_start(srv)
        assert start["previousRunClean"] is None
        assert start["previousRun"] == "unknown: QM_INSTANCE_ID is new on each boot"
    finally:
        srv.stop()


@pytest.mark.stores("valkey")
def test_first_run_is_null_and_after_a_clean_stop_the_next_start_says_true() -> None:
    first = start_server({"QM_INSTANCE_ID": unique_id("qm")})
    again: Server | None = None
    try:
        start = newest_start(first)
        assert start["previousRunClean"] is None
        assert "first run" in start["previousRun"]
        stop_cleanly(first)
        assert "WITH STORAGE FAILING" not in first.stderr
        again = restart(first)
        stops = trail(again, "server.stop")
        assert len(stops) == 1 and stops[0]["detail"]["clean"] is True, stops
        assert stops[0]["target"] == first.env["QM_INSTANCE_ID"]
        assert "storage" not in stops[0]["detail"]
        assert newest_start(again)["previousRunClean"] is True
        assert len(trail(again, "server.start")) == 2
    finally:
        if again is not None:
            again.stop()
        first.stop()


@pytest.mark.stores("valkey")
def test_after_a_kill_9_the_next_start_says_false() -> None:
    first = start_server({"QM_INSTANCE_ID": unique_id("qm")})
    again: Server | None = None
    try:
        first.kill()  # SIGKILL: no stop line, the run is never marked stopped
        again = restart(first)
        assert trail(again, "server.stop") == []
        start = newest_start(again)
        assert start["previousRunClean"] is False
        assert "no clean stop" in start["previousRun"]
    finally:
        if again is not None:
            again.stop()
        first.stop()


@pytest.mark.stores("valkey")
def test_a_stop_with_postgres_down_says_with_storage_failing_and_the_next_start_says_false() -> None:
    with relayed_database() as (relay, url):
        first = start_server({"QM_INSTANCE_ID": unique_id("qm"), "DATABASE_URL": url})
        again: Server | None = None
        try:
            with first.admin() as admin, first.client() as c:
                room = create_room(admin, ratePerMinute=0, queueMaxPerIp=None)["id"]
                assert join(c, room).status_code == 200
            relay.cut()

            def refused() -> bool:
                with first.client() as c:
                    return join(c, room).status_code == 503

            wait_until(refused, timeout=30, what="a join refused: its events did not reach the journal")
            assert sigterm(first) == 4, first.stderr  # a stop that is not clean says so in its exit status too
            assert "shutdown WITH STORAGE FAILING" in first.stderr, first.stderr
            assert "not in the events journal" in first.stderr
            again = restart(first)  # PostgreSQL directly: reachable again
            for stop in trail(again, "server.stop"):  # the row could not be written; if it was, it says so
                assert stop["detail"]["clean"] is False and stop["detail"]["storage"] == "WITH STORAGE FAILING"
            start = newest_start(again)
            assert start["previousRunClean"] is False
        finally:
            if again is not None:
                again.stop()
            first.stop()
