"""The console's page, its assets, and the admin routes it adds: per-room series and reports."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable
from typing import Any

import pytest
from harness import Server, create_room, join, unique_id, wait_until

ServerFactory = Callable[..., Server]
NAV = {"accept": "text/html,application/xhtml+xml", "sec-fetch-mode": "navigate"}


@pytest.fixture(scope="module")
def monitor_token(server: Server) -> str:
    with server.admin() as admin:
        token: str = admin.post("/api/admin/monitor-links").json()["token"]
    return token


def _viewer_key(server: Server) -> str:
    with server.admin() as admin:
        key: str = admin.post("/api/admin/operators", json={"name": "Viewer", "role": "viewer"}).json()["key"]
    return key


# ---------------------------------------------------------------------------------------------- the page


def test_console_page_is_self_contained_and_strict(server: Server) -> None:
    with server.client() as c:
        r = c.get("/", headers=NAV)
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/html")
        assert r.headers["cache-control"] == "no-store"
        csp = r.headers["content-security-policy"]
        assert "default-src 'self'" in csp and "connect-src 'self'" in csp and "script-src 'self'" in csp
        # nothing is fetched from another origin: every src/href is this server's own path
        # (relative, so the same page works under /__qm/ on an inline host)
        refs = re.findall(r'(?:src|href)="([^"]+)"', r.text)
        assert refs and not [ref for ref in refs if ":" in ref.split("/")[0] and not ref.startswith("data:")], refs
        assert not [ref for ref in refs if ref.startswith("//")], refs
        assets = ["/" + ref for ref in refs if ref.startswith("assets/")]
        # two stylesheets, the chart library, the entry module, and every other module preloaded
        preloaded = re.findall(r'<link rel="modulepreload" href="assets/([^"]+)">', r.text)
        assert len(preloaded) >= 5 and len(assets) == 4 + len(preloaded)
        for path in assets:
            a = c.get(path)
            assert a.status_code == 200, path
            assert "immutable" in a.headers["cache-control"]
            assert re.fullmatch(r"/assets/[a-z]+(-[a-z]+)?-[0-9a-f]{12}\.(js|css)", path)
            assert "http://" not in a.text.replace("http://www.w3.org", "") or path.endswith(".js")
        head = c.head("/")
        assert head.status_code == 200 and head.content == b""
        assert c.get("/assets/console-000000000000.js").status_code == 404
        wrong = c.post("/")
        assert wrong.status_code == 405 and wrong.json()["code"] == "method_not_allowed"


def test_console_page_is_charged_to_the_pages_budget(make_server: ServerFactory) -> None:
    srv = make_server({"WAITING_LIMIT_PER_MIN": "2"})
    room = unique_id("pg")
    with srv.admin() as admin:
        create_room(admin, room)
    with srv.client() as c:
        assert c.get("/", headers=NAV).status_code == 200
        assert c.get("/", headers=NAV).status_code == 200
        refused = c.get("/", headers=NAV)
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) > 0
        assert "http-equiv=refresh" in refused.text
        # the assets and the admin API are not charged, and the waiting page has a budget of its own
        assert c.get(f"/w/{room}", headers=NAV).status_code == 200
        assert c.get("/api/admin/whoami", headers=srv.admin_headers).status_code == 200


# ---------------------------------------------------------------------------------------------- series


def test_series_needs_a_credential_and_a_room(server: Server, monitor_token: str) -> None:
    room = unique_id("ser")
    with server.admin() as admin:
        create_room(admin, room)
    with server.client() as c:
        r = c.get(f"/api/admin/series/{room}")
        assert r.status_code == 401 and r.json()["code"] == "unauthorized"
        r = c.get(f"/api/admin/series/{room}", headers={"Authorization": "Bearer wrong-key"})
        assert r.status_code == 401 and r.json()["code"] == "unauthorized"
        monitor = {"Authorization": f"Bearer {monitor_token}"}
        # the read grant is enough: a share link draws the chart too
        assert c.get(f"/api/admin/series/{room}", headers=monitor).status_code == 200
        r = c.get("/api/admin/series/no-such-room", headers=monitor)
        assert r.status_code == 404 and r.json()["code"] == "no_room"
        r = c.get(f"/api/admin/series/{room}?res=5s", headers=monitor)
        assert r.status_code == 400 and r.json()["code"] == "bad_request"
        r = c.get(f"/api/admin/series/{room}?format=xml", headers=monitor)
        assert r.status_code == 400 and r.json()["code"] == "bad_request"
        r = c.post(f"/api/admin/series/{room}", headers=server.admin_headers)
        assert r.status_code == 405 and r.json()["code"] == "method_not_allowed" and "GET" in r.headers["allow"]
        assert c.get(f"/api/admin/series/{room}/extra", headers=monitor).status_code == 404


def test_series_measures_joins_passes_and_actual_waits(server: Server) -> None:
    room = unique_id("flow")
    with server.admin() as admin:
        create_room(admin, room, ratePerMinute=0)

        def recorded(field: str) -> dict[str, Any] | None:
            rows = admin.get(f"/api/admin/series/{room}?res=10s").json()["rows"]
            hit = [r for r in rows if r[field]]
            return hit[-1] if hit else None

        # the recorder has seen the room before anyone joins (joins it saw only as a total have no times)
        wait_until(lambda: recorded("t"), timeout=15, what="the room's first sample")
        for _ in range(3):
            with server.client() as c:
                join(c, room).raise_for_status()

        wait_until(lambda: recorded("depth"), timeout=15, what="a sample with the line in it")
        # open the doors: everyone waiting is let through, and their waits are measured
        admin.post(f"/api/admin/rooms/{room}/rate", json={"ratePerMinute": 600}).raise_for_status()
        row = wait_until(lambda: recorded("measuredWaits"), timeout=15, what="measured waits")
        assert row["waitP50Sec"] is not None and row["waitP90Sec"] >= row["waitP50Sec"] >= 0
        body = admin.get(f"/api/admin/series/{room}?res=1m").json()
        assert body["stepSec"] == 60 and body["res"] == "1m"
        assert sum(r["joins"] for r in body["rows"]) >= 0
        assert sum(r["measuredWaits"] for r in body["rows"]) >= 1
        # the rate change is a mark on the timeline
        marks = admin.get(f"/api/admin/series/{room}").json()["marks"]
        assert any(m["kind"] == "rate" and "600" in m["note"] for m in marks), marks
        admin.post(f"/api/admin/rooms/{room}/pause").raise_for_status()
        wait_until(
            lambda: any(m["kind"] == "pause" for m in admin.get(f"/api/admin/series/{room}").json()["marks"]),
            timeout=15,
            what="a pause mark",
        )
        csv_r = admin.get(f"/api/admin/series/{room}?format=csv")
        assert csv_r.status_code == 200 and csv_r.headers["content-type"].startswith("text/csv")
        rows = list(csv.DictReader(io.StringIO(csv_r.text)))
        assert rows and {"time", "depth", "joinsPerMin", "passesPerMin", "waitP50Sec", "waitP90Sec"} <= set(rows[0])


def test_ejects_and_edits_are_chart_marks_without_naming_anyone(server: Server, monitor_token: str) -> None:
    room = unique_id("mk")
    with server.admin() as admin:
        create_room(admin, room, ratePerMinute=0)
        wait_until(lambda: admin.get(f"/api/admin/series/{room}").json()["rows"], timeout=15, what="a first sample")
        with server.client() as c:
            ticket = join(c, room).json()["ticket"]
        admin.post(f"/api/admin/rooms/{room}/eject", json={"ticket": ticket}).raise_for_status()
        admin.post("/api/admin/rooms", json={"id": room, "name": "Renamed"}).raise_for_status()
        marks = admin.get(f"/api/admin/series/{room}").json()["marks"]
        kinds = {m["kind"]: m["note"] for m in marks}
        assert kinds.get("eject") == f"visitor #{ticket} ejected", marks
        assert kinds.get("edit") == "room edited: name", marks
        # a share link sees that somebody was ejected, not which ticket, and never who did it
        with server.client() as c:
            shared = c.get(f"/api/admin/series/{room}", headers={"Authorization": f"Bearer {monitor_token}"}).json()
        notes = [m["note"] for m in shared["marks"]]
        assert "visitor ejected" in notes and not [n for n in notes if str(ticket) in n or "ADMIN" in n], notes
        assert [m["t"] for m in shared["marks"]] == sorted(m["t"] for m in shared["marks"])


def _formulas(text: str) -> list[str]:
    """Cells of a CSV a spreadsheet would run: text beginning with = + - @ tab or CR (a number is fine)."""
    out = []
    for row in csv.reader(io.StringIO(text)):
        for value in row:
            if value.startswith(("=", "+", "-", "@", "\t", "\r")) and not re.fullmatch(r"-?[0-9.]+(e-?[0-9]+)?", value):
                out.append(value)
    return out


def test_series_and_reports_csv_carry_no_formula(server: Server) -> None:
    room = unique_id("fx")
    with server.admin() as admin:
        create_room(admin, room, name="+SUM(1+1)", brand={"displayName": "=cmd|' /C calc'!A0"})
        with server.client() as c:
            join(c, room).raise_for_status()
        wait_until(lambda: admin.get(f"/api/admin/series/{room}").json()["rows"], timeout=15, what="a sample")
        wait_until(lambda: admin.get(f"/api/admin/reports?roomId={room}").json()["rows"], timeout=15, what="a row")
        for path in (
            f"/api/admin/series/{room}?format=csv",
            f"/api/admin/series/{room}?res=1m&format=csv",
            "/api/admin/reports?format=csv",
            "/api/admin/reports?bucket=day&format=csv",
        ):
            r = admin.get(path)
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv"), (path, r.text)
            assert len(r.text.splitlines()) >= 2, (path, r.text)
            assert _formulas(r.text) == [], (path, _formulas(r.text))


# ---------------------------------------------------------------------------------------------- reports


def test_reports_roll_up_by_hour_and_refuse_bad_input(server: Server, monitor_token: str) -> None:
    room = unique_id("rep")
    with server.admin() as admin:
        create_room(admin, room)
        wait_until(lambda: admin.get(f"/api/admin/reports?roomId={room}").json()["rows"], timeout=15, what="a sample")
        with server.client() as c:
            join(c, room).raise_for_status()

        def row() -> dict[str, Any] | None:
            rows = admin.get(f"/api/admin/reports?roomId={room}").json()["rows"]
            return rows[0] if rows and rows[0]["joins"] >= 1 else None

        got = wait_until(row, timeout=15, what="a report row")
        assert got["roomId"] == room and got["bucket"] == "hour"
        assert got["startIso"].endswith(":00:00Z")
        assert got["partial"] in (True, False) and 0 <= got["coveredSec"] + got["missingSec"] <= 3600
        body = admin.get("/api/admin/reports?bucket=day").json()
        assert body["bucket"] == "day" and body["store"] in ("memory", "valkey")
        r = admin.get("/api/admin/reports?bucket=week")
        assert r.status_code == 400 and r.json()["code"] == "bad_request"
        r = admin.get("/api/admin/reports?roomId=no-such-room")
        assert r.status_code == 404 and r.json()["code"] == "no_room"
        csv_r = admin.get(f"/api/admin/reports?roomId={room}&format=csv")
        header = csv_r.text.splitlines()[0].split(",")
        assert header[:6] == ["roomId", "bucket", "start", "startIso", "joins", "passes"]
        assert header[-3:] == ["partial", "coveredSec", "missingSec"]
    with server.client() as c:
        assert c.get("/api/admin/reports").status_code == 401
        assert c.get("/api/admin/reports", headers={"Authorization": f"Bearer {monitor_token}"}).status_code == 200
        viewer = {"Authorization": f"Bearer {_viewer_key(server)}"}
        assert c.get("/api/admin/reports", headers=viewer).status_code == 200
        r = c.delete("/api/admin/reports", headers=viewer)
        assert r.status_code == 405 and r.json()["code"] == "method_not_allowed"
