"""GET /api/admin/reports over HTTP: the hourly history's rows, columns, filters, coverage and storage.

On both stores: the CSV's column order, from/to filtering and refusals, blocked/warned per room. On
STORE=valkey + SIDESTORE=pg (the rows live in PostgreSQL): the rows survive a restart, joins made through
two instances are counted once, a killed instance leaves a partial row, old rows are deleted after
HISTORY_RETAIN_DAYS, a report PostgreSQL cannot answer is 503 storage_unavailable, and a history table
that cannot be read refuses the boot.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from harness import (
    Server,
    create_room,
    join,
    spawn_server,
    start_server,
    status,
    unique_id,
    valkey_services,
    wait_for_state,
    wait_until,
)
from relay import relayed

ServerFactory = Callable[..., Server]

SHARED = ("VALKEY_PREFIX", "PG_SCHEMA", "SECRET", "ADMIN_KEY")
COLUMNS = [
    "roomId",
    "bucket",
    "start",
    "startIso",
    "joins",
    "passes",
    "netUnserved",
    "peakDepth",
    "avgDepth",
    "peakActive",
    "waitP50Sec",
    "waitP90Sec",
    "waitMaxSec",
    "waitAvgSec",
    "measuredWaits",
    "blocked",
    "warned",
    "refusedFull",
    "sessionsRevoked",
    "samples",
    "partial",
    "coveredSec",
    "missingSec",
]
BOT = {"User-Agent": "curl/8.5.0"}


def rows(admin: httpx.Client, room: str, query: str = "") -> list[dict[str, Any]]:
    r = admin.get(f"/api/admin/reports?roomId={room}{query}")
    assert r.status_code == 200, r.text
    return list(r.json()["rows"])


def open_row(
    admin: httpx.Client, room: str, ok: Callable[[dict[str, Any]], bool], what: str, timeout: float = 15
) -> dict[str, Any]:
    """The room's newest hour row once it satisfies ``ok``."""

    seen: list[Any] = []

    def probe() -> dict[str, Any] | None:
        got = rows(admin, room)
        seen[:] = got[-1:]
        return got[-1] if got and ok(got[-1]) else None

    try:
        return wait_until(probe, timeout=timeout, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the last row: {seen}") from None


def clear_of_the_hour_turn(need_sec: float = 45.0) -> None:
    """A test that compares one hour's row before and after a restart starts with ``need_sec`` left in the
    wall-clock hour, so both readings are of the same row (a wait only in the hour's last seconds)."""
    left = 3600.0 - time.time() % 3600.0
    if left < need_sec:
        time.sleep(left + 1.0)


def first_row(admin: httpx.Client, room: str) -> None:
    """Wait for the room's first sampled row: joins made before it are the room's history before recording."""
    wait_until(lambda: rows(admin, room), timeout=15, what="the room's first row")


def psql(srv: Server, sql: str) -> str:
    out = subprocess.run(
        ["psql", srv.env["DATABASE_URL"], "-q", "-At", "-v", "ON_ERROR_STOP=1", "-c", sql],
        capture_output=True,
        text=True,
        timeout=20,
        check=True,
    )
    return out.stdout.strip()


def stop_keeping_state(srv: Server) -> None:
    """A clean stop (SIGTERM) that leaves the Valkey prefix and the schema in place for the next process."""
    srv.proc.send_signal(signal.SIGTERM)
    assert srv.wait() == 0, srv.stderr  # a clean stop exits 0


def again(srv: Server, tag: str, extra: dict[str, str] | None = None) -> Server:
    return start_server({**{k: srv.env[k] for k in SHARED}, "SPOOL_DIR": srv.env["SPOOL_DIR"] + tag, **(extra or {})})


# ------------------------------------------------------------------------------------------ both stores


def test_csv_columns_filters_and_refusals(make_server: ServerFactory) -> None:
    srv = make_server()
    room, guarded = unique_id("rep"), unique_id("rep")
    with srv.admin() as admin:
        create_room(admin, room, ratePerMinute=0, queueMaxPerIp=None)
        create_room(admin, guarded, ratePerMinute=0, protection={"mode": "enforce"})
        first_row(admin, room)
        first_row(admin, guarded)
        for _ in range(2):
            with srv.client() as c:  # a client each: one cookie jar is one place in line
                join(c, room).raise_for_status()
        with srv.client(headers=BOT) as bot:
            join(bot, room).raise_for_status()  # PROTECTION_MODE=monitor: let through with a warning
            for _ in range(2):
                assert join(bot, guarded).status_code == 403
        row = open_row(admin, room, lambda r: r["joins"] >= 3 and r["warned"] >= 1, "the joins and the warning")
        assert row["joins"] == 3 and row["blocked"] == 0 and row["warned"] >= 1
        refused = open_row(admin, guarded, lambda r: r["blocked"] >= 2, "the refusals, counted for their room")
        assert refused["blocked"] == 2 and refused["joins"] == 0 and refused["warned"] == 0
        assert list(row) == COLUMNS
        body = admin.get(f"/api/admin/reports?roomId={room}").json()
        assert set(body["labels"]) == {"waitP50Sec", "measuredWaits", "netUnserved", "partial", "sessionsRevoked"}
        assert "256" in body["labels"]["waitP50Sec"]
        # CSV: the guide's columns in the guide's order
        text = admin.get(f"/api/admin/reports?roomId={room}&format=csv").text
        table = list(csv.reader(io.StringIO(text)))
        assert table[0] == COLUMNS and len(table) == 2 and table[1][0] == room
        # from/to: date, ISO 8601 and epoch ms; to is exclusive
        start = row["start"]
        hour_iso = dt.datetime.fromtimestamp(start / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        assert rows(admin, room, f"&from={hour_iso}") and rows(admin, room, f"&from={start}")
        assert rows(admin, room, f"&to={start}") == []
        assert rows(admin, room, f"&from={start + 3_600_000}") == []
        day = hour_iso[:10]
        assert len(rows(admin, room, f"&bucket=day&from={day}")) == 1
        for name, bad in (("from", "yesterday"), ("to", "2026-13-40")):
            r = admin.get(f"/api/admin/reports?{name}={bad}")
            assert r.status_code == 400 and r.json()["code"] == "bad_request" and r.json()["field"] == name


def let_through(srv: Server, room: str, n: int) -> list[httpx.Client]:
    """``n`` visitors join ``room`` (a client each) and are returned once each holds a pass."""
    clients = [srv.client() for _ in range(n)]
    for c in clients:
        join(c, room).raise_for_status()
    return clients


def test_waits_of_a_room_created_and_joined_at_once_are_measured() -> None:
    """A room created and joined on a server that has only just started (before its first sample): every
    pass minted from the line is a measured wait, and the wait columns are those waits, exactly.

    The test measures each visitor's wait on its own clock: from its join (sent … answered) to the status
    poll that first saw its pass (the previous poll, which still saw it waiting, … this one's answer). The
    row's maximum and average must lie within those bounds (and the report's 0.1 s rounding), and equal
    the waits the drill-down shows for the same tickets."""
    clear_of_the_hour_turn()
    srv = start_server()
    try:
        room = unique_id("rep")
        with srv.admin() as admin:
            create_room(admin, room, ratePerMinute=60, queueMaxPerIp=None)
            clients = [srv.client() for _ in range(3)]
            sent, answered, tickets = [], [], []
            for c in clients:
                sent.append(time.time())
                r = join(c, room)
                answered.append(time.time())
                r.raise_for_status()
                tickets.append(int(r.json()["ticket"]))
            low: dict[int, float] = {}
            high: dict[int, float] = {}
            last_waiting = list(answered)  # when each was last seen waiting (the poll's start)

            def all_passed() -> bool:
                for i, c in enumerate(clients):
                    if i in high:
                        continue
                    before = time.time()
                    state = status(c, room)["state"]
                    after = time.time()
                    if state in ("passed", "admitted"):
                        low[i], high[i] = last_waiting[i] - answered[i], after - sent[i]
                    else:
                        last_waiting[i] = before
                return len(high) == len(clients)

            wait_until(all_passed, timeout=30, interval=0.02, what="three passes")
            for c in clients:
                c.close()
            row = open_row(admin, room, lambda r: r["passes"] >= 3 and r["measuredWaits"] >= 3, "three waits")
            assert row["joins"] == 3 and row["passes"] == 3 and row["measuredWaits"] == 3
            # within what this test measured, to the report's rounding (0.05 s): no sampling interval's slack
            lows, highs = [low[i] for i in range(3)], [high[i] for i in range(3)]
            assert max(lows) - 0.05 <= row["waitMaxSec"] <= max(highs) + 0.05, (row, lows, highs)
            assert sum(lows) / 3 - 0.05 <= row["waitAvgSec"] <= sum(highs) / 3 + 0.05, (row, lows, highs)
            # and exactly the store's own waits of those tickets, as the drill-down shows them
            waited = []
            for i, n in enumerate(tickets):
                got = admin.get(f"/api/admin/rooms/{room}/visitors/{n}")
                assert got.status_code == 200, got.text
                waited.append(got.json()["visitor"]["waited"])
                # the store stamps a release with its tick's instant, taken a moment before the release runs:
                # on a busy machine a status answered in that moment still says waiting (hence the 0.05 s)
                assert lows[i] - 0.05 <= waited[-1] <= highs[i] + 0.001, (i, waited, lows, highs)
            assert row["waitMaxSec"] == round(max(waited), 1)
            assert row["waitAvgSec"] == round(sum(waited) / 3, 1)
            assert row["waitP50Sec"] is not None and row["waitP90Sec"] is not None
            assert row["waitP50Sec"] <= row["waitP90Sec"] <= row["waitMaxSec"]
            # a stats refresh folds the open hour again: nothing counted twice, nothing lost
            assert admin.post("/api/v1/stats/refresh").status_code == 200
            again_row = rows(admin, room)[-1]
            assert (again_row["joins"], again_row["passes"], again_row["measuredWaits"]) == (3, 3, 3)
            assert (again_row["waitMaxSec"], again_row["waitAvgSec"]) == (row["waitMaxSec"], row["waitAvgSec"])
    finally:
        srv.stop()


# ------------------------------------------------------------------------------------------ valkey + pg


@pytest.mark.stores("valkey")
def test_reports_survive_a_restart_and_count_two_instances_once() -> None:
    clear_of_the_hour_turn()
    a = start_server()
    b: Server | None = None
    c2: Server | None = None
    try:
        b = again(a, "-b")
        room = unique_id("rep")
        with a.admin() as admin_a:
            create_room(admin_a, room, ratePerMinute=0, queueMaxPerIp=None)
            guarded = create_room(admin_a, unique_id("rep"), ratePerMinute=0, protection={"mode": "enforce"})["id"]
            first_row(admin_a, room)
            first_row(admin_a, guarded)
        for srv, n in ((a, 2), (b, 3)):
            for _ in range(n):
                with srv.client() as c:
                    join(c, room).raise_for_status()
            with srv.client(headers=BOT) as bot:
                for _ in range(n):
                    assert join(bot, guarded).status_code == 403
        with b.admin() as admin_b:
            row = open_row(admin_b, room, lambda r: r["joins"] >= 5, "five joins in the row")
            # two more samples later the count is still five: neither instance counted the other's joins again
            later = open_row(admin_b, room, lambda r: r["samples"] >= row["samples"] + 2, "two more samples")
            assert later["joins"] == 5 and row["joins"] == 5
            # refusals through both instances, added up in Valkey and folded by the leader once
            refused = open_row(admin_b, guarded, lambda r: r["blocked"] >= 5, "five refusals from two instances")
            assert refused["blocked"] == 5 and refused["joins"] == 0
        stop_keeping_state(b)
        stop_keeping_state(a)
        c2 = again(a, "-c")
        with c2.admin() as admin:
            kept = rows(admin, room)
            assert kept and kept[-1]["joins"] == 5 and kept[-1]["start"] == row["start"]
    finally:
        for srv in (c2, b, a):
            if srv is not None:
                srv.stop()


@pytest.mark.stores("valkey")
def test_a_new_rooms_first_joins_count_on_the_fleet_whoever_writes_its_first_row() -> None:
    """Two instances on one Valkey + PostgreSQL, the lease still held by a third that was killed: a room is
    created and joined at once through both, everyone let through, before any instance writes its row. The
    leader that takes over counts the room from zero (it was created this hour) and folds the waits the
    instances measured while nobody wrote: joins 3, passes 3, measuredWaits 3 on both instances."""
    clear_of_the_hour_turn(90.0)
    lease = {"LEADER_LEASE_MS": "20000"}  # renewed every ~7 s: at least 13 s without a writer after the kill
    old = start_server(lease)
    a: Server | None = None
    b: Server | None = None
    try:
        with old.client() as c:
            wait_until(lambda: c.get("/healthz").json().get("leader") is True, timeout=15, what="the first leader")
        a, b = again(old, "-a", lease), again(old, "-b", lease)
        old.kill()  # the lease stays held until it expires: nobody writes the history meanwhile
        room = unique_id("rep")
        with a.admin() as admin:
            create_room(admin, room, ratePerMinute=60, queueMaxPerIp=None)
        clients = let_through(a, room, 2) + let_through(b, room, 1)
        for c in clients:
            wait_for_state(c, room, None, ("passed", "admitted"), timeout=20)
            c.close()
        for srv in (a, b):
            with srv.admin() as admin:
                row = open_row(admin, room, lambda r: r["passes"] >= 3, "the new leader's row", timeout=45)
                assert (row["joins"], row["passes"]) == (3, 3), row
                assert row["measuredWaits"] == 3 and row["waitMaxSec"] is not None, row
    finally:
        for srv in (b, a, old):
            if srv is not None:
                srv.stop()


@pytest.mark.stores("valkey")
def test_a_killed_leader_leaves_a_partial_row() -> None:
    """About 25 s: the hole is the killed leader's lease running out, and it has to be longer than the 10 s
    that two samples may lie apart and still count as covered (lease 18 s, renewed every 6 s)."""
    clear_of_the_hour_turn()
    lease = {"LEADER_LEASE_MS": "18000"}  # renewed every 6 s: at least 12 s left at the kill, a hole over 10 s
    a = start_server(lease)
    b: Server | None = None
    try:
        room = unique_id("rep")
        with a.admin() as admin:
            create_room(admin, room, ratePerMinute=0)
            first_row(admin, room)
            with a.client() as c:
                join(c, room).raise_for_status()
            before = open_row(admin, room, lambda r: r["joins"] >= 1, "the join in the row")
        a.kill()  # no fold, and the lease stays held until it expires: a hole of about LEADER_LEASE_MS
        b = again(a, "-b", lease)
        with b.admin() as admin:
            after = open_row(
                admin, room, lambda r: r["samples"] > before["samples"] + 1, "the new leader's samples", timeout=40
            )
            assert after["partial"] is True and after["netUnserved"] is None
            # the hole runs from A's last write to B's first (over 10 s, or it would count as covered);
            # `before` was read up to one sample after A's last write, so it already held up to ~2 s of it
            assert after["missingSec"] >= before["missingSec"] + 5
            assert after["joins"] >= 1
            assert after["coveredSec"] + after["missingSec"] <= 3600
        csv_text = b.admin().get(f"/api/admin/reports?roomId={room}&format=csv").text
        last = list(csv.DictReader(io.StringIO(csv_text)))[-1]
        assert last["partial"] == "true" and last["netUnserved"] == ""
    finally:
        if b is not None:
            b.stop()
        a.stop()


@pytest.mark.stores("valkey")
def test_old_rows_are_deleted_and_a_deleted_rooms_history_stays() -> None:
    a = start_server({"HISTORY_RETAIN_DAYS": "2"})
    b: Server | None = None
    try:
        with a.admin() as admin:
            create_room(admin, unique_id("rep"))
        schema = a.env["PG_SCHEMA"]
        now = int(time.time())
        hour = now - now % 3600
        insert = (
            f"INSERT INTO {schema}.history_hourly (room, hour, joins, passes, samples, covered_sec, missing_sec, "
            "partial) VALUES ('gone-old', to_timestamp({at}), 7, 1, 10, 600, 3000, true)"
        )
        psql(a, insert.format(at=hour - 3 * 86400))
        psql(a, insert.replace("gone-old", "gone-new").format(at=hour - 5 * 3600))
        stop_keeping_state(a)
        b = again(a, "-b", {"HISTORY_RETAIN_DAYS": "2"})  # the new leader prunes at its first write

        def pruned() -> bool:
            return psql(b, f"SELECT count(*) FROM {schema}.history_hourly WHERE room = 'gone-old'") == "0"

        wait_until(pruned, timeout=15, what="the row older than HISTORY_RETAIN_DAYS deleted")
        with b.admin() as admin:
            kept = rows(admin, "gone-new", "&bucket=hour&from=" + str((hour - 6 * 3600) * 1000))
            assert [r["joins"] for r in kept] == [7] and kept[0]["partial"] is True and kept[0]["joins"] == 7
            assert kept[0]["netUnserved"] is None and kept[0]["missingSec"] == 3000
            assert admin.get("/api/admin/reports?roomId=never-was").status_code == 404
    finally:
        if b is not None:
            b.stop()
        a.stop()


@pytest.mark.stores("valkey")
def test_a_report_postgres_cannot_answer_is_503() -> None:
    with relayed(valkey_services()["database"], 5432) as (relay, url):
        srv = start_server({"DATABASE_URL": url})
        try:
            with srv.admin() as admin:
                assert admin.get("/api/admin/reports").status_code == 200
                relay.cut()
                r = admin.get("/api/admin/reports")
                assert r.status_code == 503 and r.json()["code"] == "storage_unavailable"
                assert "rows" not in r.json()
        finally:
            relay.restore()
            srv.stop()


@pytest.mark.stores("valkey")
def test_a_history_table_that_cannot_be_read_refuses_the_boot() -> None:
    a = start_server()
    b: Server | None = None
    try:
        stop_keeping_state(a)
        psql(a, f"ALTER TABLE {a.env['PG_SCHEMA']}.history_hourly DROP COLUMN reservoir")
        b = spawn_server({**{k: a.env[k] for k in SHARED}, "SPOOL_DIR": a.env["SPOOL_DIR"] + "-b"})
        code = b.wait(20)
        assert code not in (None, 0)
        assert "[history]" in b.stderr and "history_hourly" in b.stderr
    finally:
        if b is not None:
            b.stop()
        a.stop()
