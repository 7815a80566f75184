"""Journal maintenance and the disk spool over HTTP, against a PostgreSQL that really stops.

A throwaway PostgreSQL cluster of the module's own (``pg_cluster.py``) is stopped with ``pg_ctl stop
-m fast`` while the server keeps taking joins, acknowledged from its spool; every assertion about
what reached the journal is a query on that cluster. STORE=valkey only: with STORE=memory there is
no journal (``test_journal_maintenance.py`` covers that store's flag).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import Server, create_room, join, start_server, status, sync_valkey, wait_until
from pg_cluster import PgCluster
from receiver import Receiver
from test_alerts import alert_env
from tls_cluster import missing

pytestmark = [pytest.mark.stores("valkey"), pytest.mark.xdist_group("pg-cluster")]

ServerFactory = Callable[..., Server]
MAINT = "/api/v1/system/maintenance"
BUFFERS = "/api/v1/status/buffers"
ON = "Maintenance mode ENABLED. All PUSHes routing to file buffer."
OFF = "Maintenance mode DISABLED. Background processor will drain buffer to DB."


@pytest.fixture(scope="module")
def cluster() -> Iterator[PgCluster]:
    why = missing()
    if why is not None:
        pytest.fail(f"a throwaway PostgreSQL cluster cannot be made here: {why}")
    c = PgCluster.create(Path(tempfile.mkdtemp(prefix="qm-pgc-")))
    try:
        yield c
    finally:
        c.destroy()


@pytest.fixture
def spool_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="qm-spool-"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def up(cluster: PgCluster) -> Iterator[PgCluster]:
    """The cluster, running again after the test whatever it did to it."""
    try:
        yield cluster
    finally:
        if not cluster.running:
            cluster.resume()


def _env(cluster: PgCluster, spool: Path, **extra: str) -> dict[str, str]:
    return {"DATABASE_URL": cluster.url(), "SPOOL_DIR": str(spool), "RESYNC_MS": "500", **extra}


def _maint(admin: httpx.Client, enabled: bool) -> dict[str, Any]:
    r = admin.post(MAINT, json={"enabled": enabled})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    assert body["message"] == (ON if enabled else OFF) and body["maintenanceMode"] is enabled, body
    return body


def _buffers(admin: httpx.Client) -> dict[str, Any]:
    r = admin.get(BUFFERS)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def _drained(admin: httpx.Client) -> dict[str, Any] | None:
    b = _buffers(admin)
    assert b["quarantine"]["count"] == 0, b  # a drain that quarantined its file is no drain
    return b if b["files"] == 0 and b["failover"] == {"pending": 0, "failed": 0} and not b["spooling"] else None


def _joins(srv: Server, room: str, n: int) -> list[str]:
    def one(_: int) -> str:
        with srv.client() as c:
            r = join(c, room)
            assert r.status_code == 200, r.text
            return str(r.json()["token"])

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(one, range(n)))


def _journaled(cluster: PgCluster, schema: str, room: str) -> tuple[int, int]:
    """(join events, distinct seqs of them) in the cluster's journal."""
    out = cluster.psql(
        f"SELECT count(*), count(DISTINCT seq) FROM \"{schema}\".events WHERE room = '{room}' AND type = 'join'"
    )
    total, distinct = out.split("|")
    return int(total), int(distinct)


def _positions(srv: Server, room: str, tokens: list[str]) -> list[int]:
    with srv.client() as c:
        return [int(status(c, room, t)["position"]) for t in tokens]


def _flush_valkey(srv: Server) -> None:
    client = sync_valkey(srv.env["VALKEY_URL"])
    keys = list(client.scan_iter(match=f"{srv.env['VALKEY_PREFIX']}*", count=1000))
    for i in range(0, len(keys), 500):
        client.delete(*keys[i : i + 500])
    client.close()


# ---------------------------------------------------------------------- 1,000 joins with PostgreSQL stopped


def test_a_thousand_joins_with_postgres_stopped_land_once_and_rebuild_the_same(up: PgCluster, spool_dir: Path) -> None:
    srv = start_server(_env(up, spool_dir))
    try:
        schema = srv.env["PG_SCHEMA"]
        with srv.admin() as admin:
            room = create_room(admin, ratePerMinute=0, queueMaxPerIp=None, presenceSec=None)["id"]
            _maint(admin, True)
            assert admin.get(MAINT).json()["maintenanceMode"] is True
            up.halt()  # the planned work: PostgreSQL is down from here
            tokens = _joins(srv, room, 1000)
            rate = admin.post(f"/api/admin/rooms/{room}/rate", json={"ratePerMinute": 0})  # audited, spooled too
            assert rate.status_code == 200, rate.text
            buffers = _buffers(admin)
            assert buffers["spooling"] is True and buffers["spoolingReason"] == "maintenance", buffers
            assert buffers["failover"]["pending"] >= 1000 and buffers["dbHealthy"] is True, buffers
            status_body = admin.get(MAINT).json()  # PostgreSQL away: the flag as this process holds it, no 500
            assert status_body["maintenanceMode"] is True and status_body["bufferedMessages"] >= 1000
            with srv.client() as c:
                assert c.get("/healthz").status_code == 200  # still in rotation
            before = _positions(srv, room, tokens)
            assert sorted(before) == list(range(1, 1001))
            up.resume()
            _maint(admin, False)
            wait_until(lambda: _drained(admin), timeout=60, what="the spool drained into PostgreSQL")
            assert _journaled(up, schema, room) == (1000, 1000)
            audited = up.psql(f"SELECT count(*) FROM \"{schema}\".audit WHERE action = 'room.rate' AND room = '{room}'")
            assert audited == "1"  # the audit row of the change made while PostgreSQL was stopped
            drained = _buffers(admin)["drained"]
            assert drained["events"] >= 1000 and drained["conflicts"] == 0 and drained["duplicates"] == 0, drained
        # Valkey loses the room: it is rebuilt from the journal alone, every place the same
        _flush_valkey(srv)

        def rebuilt() -> list[int] | None:
            with srv.client() as c:
                r = c.get("/api/status", params={"roomId": room, "token": tokens[0]})
            return _positions(srv, room, tokens) if r.status_code == 200 else None

        assert wait_until(rebuilt, timeout=60, what="the room rebuilt from the journal") == before
    finally:
        srv.stop()


def test_a_room_lost_from_valkey_while_events_are_spooled_waits_for_the_drain(up: PgCluster, spool_dir: Path) -> None:
    srv = start_server(_env(up, spool_dir))
    try:
        with srv.admin() as admin:
            room = create_room(admin, ratePerMinute=0, queueMaxPerIp=None, presenceSec=None)["id"]
            early = _joins(srv, room, 3)  # in the journal
            _maint(admin, True)
            late = _joins(srv, room, 4)  # in the spool only
            before = _positions(srv, room, early + late)
            _flush_valkey(srv)  # PostgreSQL is up, but its journal lacks the spooled joins

            def waiting() -> dict[str, Any] | None:
                health = admin.get("/api/admin/health").json()
                held: dict[str, Any] = health["backend"]["recovery"]["unrebuildable"]
                return held if held.get(room) == "spool_pending" else None

            wait_until(waiting, timeout=30, what="the rebuild held back while the spool holds events")
            with srv.client() as c:
                r = c.get("/api/status", params={"roomId": room, "token": late[-1]})
            assert r.status_code == 503 and r.json()["code"] == "storage_unavailable", r.text
            _maint(admin, False)

            def rebuilt() -> list[int] | None:
                with srv.client() as c:
                    r = c.get("/api/status", params={"roomId": room, "token": late[-1]})
                return _positions(srv, room, early + late) if r.status_code == 200 else None

            assert wait_until(rebuilt, timeout=60, what="the room rebuilt once the spool drained") == before
            assert _journaled(up, srv.env["PG_SCHEMA"], room) == (7, 7)
    finally:
        srv.stop()


# ---------------------------------------------------------------------- a drain twice, an outage mid-drain


def test_a_drain_meeting_an_outage_retries_and_a_second_drain_applies_nothing_twice(
    up: PgCluster, spool_dir: Path
) -> None:
    srv = start_server(_env(up, spool_dir))
    try:
        schema = srv.env["PG_SCHEMA"]
        with srv.admin() as admin:
            room = create_room(admin, ratePerMinute=0, queueMaxPerIp=None)["id"]
            _maint(admin, True)
            _joins(srv, room, 40)
            up.halt()
            _maint(admin, False)  # PostgreSQL still away: the file stays and is retried

            def retrying() -> dict[str, Any] | None:
                b = _buffers(admin)
                return b if b["lastError"] and b["files"] == 1 and b["retryInSec"] else None

            waiting = wait_until(retrying, timeout=30, what="the drain failing and waiting to retry")
            assert waiting["quarantine"]["count"] == 0 and waiting["failover"]["failed"] >= 40
            [kept] = list(spool_dir.glob("*.buf"))
            copy = spool_dir / "kept-copy"  # not a spool file name: the drainer leaves it alone
            shutil.copy(kept, copy)
            up.resume()
            wait_until(lambda: _drained(admin), timeout=60, what="the retried drain")
            assert _journaled(up, schema, room) == (40, 40)
            # the same file drained a second time (as after a crash between the insert and the delete)
            shutil.move(copy, spool_dir / kept.name)
            wait_until(
                lambda: _buffers(admin)["drained"]["duplicates"] >= 40 and _drained(admin),
                timeout=30,
                what="the second drain",
            )
            assert _journaled(up, schema, room) == (40, 40)
            assert _buffers(admin)["drained"]["conflicts"] == 0
    finally:
        srv.stop()


def test_kill_9_mid_drain_then_restart_loses_nothing_and_doubles_nothing(up: PgCluster, spool_dir: Path) -> None:
    first = start_server(_env(up, spool_dir))
    second: Server | None = None
    try:
        schema = first.env["PG_SCHEMA"]
        with first.admin() as admin:
            room = create_room(admin, ratePerMinute=0, queueMaxPerIp=None)["id"]
            _maint(admin, True)
            tokens = _joins(first, room, 300)
            up.halt()
            _maint(admin, False)
            wait_until(lambda: _buffers(admin)["lastError"], timeout=30, what="the drain under way, failing")
            before = _positions(first, room, tokens)
        first.kill()  # kill -9 while its drain waits on PostgreSQL
        up.resume()
        shared = ("VALKEY_PREFIX", "PG_SCHEMA", "SECRET", "ADMIN_KEY", "DATABASE_URL", "SPOOL_DIR", "VALKEY_URL")
        second = start_server({k: first.env[k] for k in shared} | {"RESYNC_MS": "500"})
        with second.admin() as admin:
            # the switch off never reached PostgreSQL before the kill: the fleet's record still says on
            assert admin.get(MAINT).json()["maintenanceMode"] is True
            assert _buffers(admin)["failover"]["failed"] >= 300  # the dead instance's spool adopted
            _maint(admin, False)
            wait_until(lambda: _drained(admin), timeout=60, what="the restarted instance draining the spool")
        assert _journaled(up, schema, room) == (300, 300)
        assert _positions(second, room, tokens) == before
    finally:
        if second is not None:
            second.stop()
        first.stop()


# ---------------------------------------------------------------------- a poisoned file


def test_a_poisoned_spool_file_is_quarantined_and_pages(up: PgCluster, spool_dir: Path, receiver: Receiver) -> None:
    srv = start_server(_env(up, spool_dir, **alert_env(receiver, QM_INSTANCE_ID="web-4")))
    try:
        with srv.admin() as admin:
            room = create_room(admin, ratePerMinute=0)["id"]
            event = {
                "type": "join",
                "room": room,
                "gen": 1,
                "seq": 999,
                "ts": 1_767_225_600_000,
                "lv": 1,
                "data": {"n": 999, "ident": "x", "note": "\u0000"},
                "instance": "web-4",
            }
            name = "qm-spool-0000000000001-elsewhere-000001.buf"
            (spool_dir / name).write_text(json.dumps({"v": 1, "events": [event]}) + "\n")

            def quarantined() -> dict[str, Any] | None:
                q: dict[str, Any] = _buffers(admin)["quarantine"]
                return q if q["count"] == 1 else None

            q = wait_until(quarantined, timeout=30, what="the poisoned file quarantined")
            assert q["files"][0]["name"] == name and "PostgreSQL refuses its events" in q["files"][0]["why"]
            assert (spool_dir / "failed" / name).exists() and not (spool_dir / name).exists()
            assert admin.get(MAINT).json()["bufferHealthy"] is False
            page = wait_until(
                lambda: [p for p in receiver.pages() if p and p.get("event") == "storage_failing"],
                timeout=30,
                what="storage_failing paged",
            )[0]
            assert page["status"] == "firing" and "quarantined in failed/ on web-4" in page["message"], page
            (spool_dir / "failed" / name).unlink()  # the operator deals with it
            wait_until(
                lambda: [
                    p
                    for p in receiver.pages()
                    if p and p.get("event") == "storage_failing" and p["status"] == "resolved"
                ],
                timeout=30,
                what="storage_failing resolved",
            )
    finally:
        srv.stop()


# ---------------------------------------------------------------------- SPOOL_ON_FAILURE


def test_spool_on_failure_acknowledges_joins_while_postgres_is_down(up: PgCluster, spool_dir: Path) -> None:
    srv = start_server(_env(up, spool_dir, SPOOL_ON_FAILURE="1"))
    try:
        schema = srv.env["PG_SCHEMA"]
        with srv.admin() as admin:
            room = create_room(admin, ratePerMinute=0, queueMaxPerIp=None)["id"]
            _joins(srv, room, 5)
            up.halt()
            tokens = _joins(srv, room, 200)  # 200 each, no 503
            b = _buffers(admin)
            assert b["spoolingReason"] == "failover" and b["spoolOnFailure"] is True and b["maintenanceMode"] is False
            assert isinstance(b["spoolingSince"], int) and b["dbHealthy"] is False, b
            assert admin.get(MAINT).json()["maintenanceMode"] is False
            up.resume()
            wait_until(lambda: _drained(admin), timeout=60, what="the spool drained by itself")
            assert _journaled(up, schema, room) == (205, 205)
            assert sorted(_positions(srv, room, tokens)) == list(range(6, 206))  # behind the first five
    finally:
        srv.stop()


def test_without_spool_on_failure_a_join_answers_503(up: PgCluster, spool_dir: Path) -> None:
    srv = start_server(_env(up, spool_dir))
    try:
        with srv.admin() as admin:
            room = create_room(admin, ratePerMinute=0)["id"]
        up.halt()
        with srv.client() as c:
            r = join(c, room)
        assert r.status_code == 503 and r.json()["code"] == "storage_unavailable", r.text
        assert not list(spool_dir.glob("*.open"))
    finally:
        srv.stop()
