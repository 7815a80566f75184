"""The audit trail: who did what, from where; field names not values; filters and CSV."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import httpx
from harness import Server, create_room, unique_id

COLUMNS = ("ts", "actor", "actorId", "role", "action", "target", "roomId", "ip")


def rows(admin: httpx.Client, **params: str) -> list[dict[str, Any]]:
    r = admin.get("/api/admin/audit", params=params)
    assert r.status_code == 200, r.text
    out: list[dict[str, Any]] = r.json()["audit"]
    return out


def test_fresh_server_records_its_start(server: Server, admin: httpx.Client) -> None:
    starts = [a for a in rows(admin) if a["action"] == "server.start"]
    assert len(starts) == 1, starts
    assert starts[0]["actor"] == "system"


def test_rows_name_actor_role_target_and_address(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin)["id"]
    assert admin.post(f"/api/admin/rooms/{rid}/pause").status_code == 200
    r = admin.post("/api/admin/operators", json={"name": "Auditee", "role": "operator"})
    op_id, key = r.json()["operator"]["id"], r.json()["key"]
    with server.client(headers={"Authorization": f"Bearer {key}"}) as op:
        assert op.post(f"/api/admin/rooms/{rid}/resume").status_code == 200
    trail = rows(admin)
    for row in trail:
        assert set(COLUMNS) <= set(row), row
        assert isinstance(row["ts"], int | float)
    pause = next(a for a in trail if a["action"] == "room.pause" and a["roomId"] == rid)
    assert pause["actor"] == "ADMIN_KEY" and pause["role"] == "owner"
    assert pause["target"] == rid and pause["ip"] == "127.0.0.1"
    resume = next(a for a in trail if a["action"] == "room.resume" and a["roomId"] == rid)
    assert resume["actor"] == "Auditee" and resume["actorId"] == op_id and resume["role"] == "operator"
    assert resume["ip"] == "127.0.0.1"
    # newest first: the resume was the last thing done
    assert trail.index(resume) < trail.index(pause)


def test_room_edit_records_field_names_not_values(admin: httpx.Client) -> None:
    rid = create_room(admin)["id"]
    marker = "Zebra-" + unique_id("distinctive")
    origin = "https://" + unique_id("o") + ".example"
    r = admin.post("/api/admin/rooms", json={"id": rid, "name": marker, "returnOrigins": [origin]})
    assert r.status_code == 200, r.text
    mine = rows(admin, roomId=rid)
    update = next(a for a in mine if a["action"] == "room.update")
    blob = str(update)
    assert "name" in blob and "returnOrigins" in blob, update
    for fmt in ({}, {"format": "csv"}):
        text = admin.get("/api/admin/audit", params=fmt).text
        assert marker not in text
        assert origin not in text


def test_room_filter_and_csv(admin: httpx.Client) -> None:
    a, b = create_room(admin)["id"], create_room(admin)["id"]
    admin.post(f"/api/admin/rooms/{a}/pause")
    admin.post(f"/api/admin/rooms/{b}/pause")
    only_a = rows(admin, roomId=a)
    assert {x["action"] for x in only_a} == {"room.create", "room.pause"}, only_a
    assert {x["roomId"] for x in only_a} == {a}
    r = admin.get("/api/admin/audit", params={"roomId": a, "format": "csv"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/csv")
    table = list(csv.reader(io.StringIO(r.text)))
    header, body = table[0], table[1:]
    for col in COLUMNS:
        assert col in header, header
    assert len(body) == 2, table
    room_col, action_col = header.index("roomId"), header.index("action")
    assert {row[room_col] for row in body} == {a}
    assert {row[action_col] for row in body} == {"room.create", "room.pause"}


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def formula_cells(table: list[list[str]]) -> list[str]:
    """Cells a spreadsheet would run as a formula: text beginning with = + - @ tab or CR (a number is fine)."""
    out = []
    for row in table:
        for value in row:
            if value.startswith(FORMULA_STARTS):
                try:
                    float(value)
                except ValueError:
                    out.append(value)
    return out


def test_the_audit_csv_never_carries_a_formula(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin)["id"]
    names = ["=cmd|' /C calc'!A0", "+SUM(1+1)", "@SUM(1)", "-2+3", '=HYPERLINK("http://x.example","go")']
    for name in names:
        r = admin.post("/api/admin/operators", json={"name": name, "role": "operator"})
        assert r.status_code == 201, r.text
        with server.client(headers={"Authorization": f"Bearer {r.json()['key']}"}) as op:
            assert op.post(f"/api/admin/rooms/{rid}/pause").status_code in (200, 409)
    r = admin.get("/api/admin/audit", params={"format": "csv"})
    assert r.status_code == 200, r.text
    table = list(csv.reader(io.StringIO(r.text)))
    assert formula_cells(table) == [], formula_cells(table)
    actors = {row[table[0].index("actor")] for row in table[1:]}
    for name in names:
        assert "'" + name in actors, (name, actors)  # kept, as text a spreadsheet shows and never runs
    assert "\"'=cmd|' /C calc'!A0\"" in r.text  # the escaped cell is quoted
    # the JSON trail keeps the names as they are
    assert {n for n in names} <= {a["actor"] for a in rows(admin)}


def test_a_refused_rate_conflict_is_audited_with_each_field_once(admin: httpx.Client) -> None:
    """rate is ratePerMinute's alias: an update naming both (and disagreeing) is refused, and its audit row
    names the field once, with why it was refused."""
    rid = create_room(admin)["id"]
    r = admin.post("/api/admin/rooms", json={"id": rid, "rate": 8, "ratePerMinute": 9, "name": "x"})
    assert r.status_code == 400 and r.json()["code"] == "conflicting_field"
    refused = [a for a in rows(admin, roomId=rid) if a["action"] == "room.update" and a["ok"] is False]
    assert len(refused) == 1, refused
    assert refused[0]["detail"]["fields"] == ["name", "ratePerMinute"]
    assert refused[0]["detail"]["refused"] == "conflicting_field"


def test_the_audit_csv_writes_booleans_and_detail_as_json(server: Server, admin: httpx.Client) -> None:
    """ok is true/false and detail is the JSON answer's detail as JSON (true/false, lists), never Python's."""
    rid = create_room(admin)["id"]
    admin.post("/api/admin/rooms", json={"id": rid, "rate": 8, "ratePerMinute": 9})  # a refusal: ok false
    assert admin.post("/api/admin/rooms", json={"id": rid, "name": "Shop", "returnOrigins": []}).status_code == 200
    trail = rows(admin, roomId=rid)
    r = admin.get("/api/admin/audit", params={"roomId": rid, "format": "csv"})
    assert r.status_code == 200, r.text
    table = list(csv.DictReader(io.StringIO(r.text)))
    assert len(table) == len(trail) >= 3
    for cells, row in zip(table, trail, strict=True):
        assert cells["action"] == row["action"]
        assert cells["ok"] == ("true" if row["ok"] else "false")
        assert json.loads(cells["detail"]) == row["detail"], cells["detail"]
    assert {c["ok"] for c in table} == {"true", "false"}
    assert "True" not in r.text and "False" not in r.text and "['" not in r.text
    # the server's own rows too: the start line's booleans
    whole = admin.get("/api/admin/audit", params={"format": "csv"}).text
    start = next(c for c in csv.DictReader(io.StringIO(whole)) if c["action"] == "server.start")
    assert isinstance(json.loads(start["detail"]), dict)
    assert "True" not in start["detail"] and "False" not in start["detail"]
