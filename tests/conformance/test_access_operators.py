"""Named operator keys and roles: minting, listing, revoking, what each role may do, inline = owner.

Black-box: every assertion is on an HTTP answer (and, for shutdown, the process's own exit).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from harness import Server, create_room, join, unique_id, wait_until

ServerFactory = Callable[..., Server]

# ---------------------------------------------------------------------- helpers


def mint(admin: httpx.Client, role: str, name: str | None = None) -> dict[str, Any]:
    """POST /api/admin/operators; returns the whole 201 answer (operator, key, shownOnce)."""
    r = admin.post("/api/admin/operators", json={"name": name or unique_id(role), "role": role})
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


def bearer(srv: Server, key: str) -> httpx.Client:
    return srv.client(headers={"Authorization": f"Bearer {key}"})


def operators(admin: httpx.Client) -> list[dict[str, Any]]:
    r = admin.get("/api/admin/operators")
    assert r.status_code == 200, r.text
    ops: list[dict[str, Any]] = r.json()["operators"]
    return ops


def refused_role(r: httpx.Response, what: str = "") -> None:
    assert r.status_code == 403, (what, r.status_code, r.text)
    assert r.json()["code"] == "insufficient_role", (what, r.text)


def audit_rows(admin: httpx.Client, **params: str) -> list[dict[str, Any]]:
    r = admin.get("/api/admin/audit", params=params)
    assert r.status_code == 200, r.text
    rows: list[dict[str, Any]] = r.json()["audit"]
    return rows


@pytest.fixture(scope="module")
def keys(server: Server) -> dict[str, str]:
    """One operator per role, minted with ADMIN_KEY, shared by the module's tests."""
    with server.admin() as a:
        return {role: str(mint(a, role, f"the-{role}")["key"]) for role in ("owner", "operator", "viewer")}


@pytest.fixture
def as_role(server: Server, keys: dict[str, str]) -> Iterator[dict[str, httpx.Client]]:
    clients = {role: bearer(server, key) for role, key in keys.items()}
    try:
        yield clients
    finally:
        for c in clients.values():
            c.close()


# ---------------------------------------------------------------------- operators


def test_mint_operator_returns_key_once(server: Server, admin: httpx.Client) -> None:
    body = mint(admin, "operator", "Night ops")
    op = body["operator"]
    assert op["name"] == "Night ops"
    assert op["role"] == "operator"
    assert body["shownOnce"] is True
    assert re.fullmatch(rf"qmo_{re.escape(op['id'])}_\S+", body["key"]), body["key"]
    assert op["active"] is True
    # the key is a working Bearer, with that role
    with bearer(server, body["key"]) as c:
        r = c.get("/api/admin/whoami")
        assert r.status_code == 200, r.text
        principal = r.json()["principal"]
        assert principal["role"] == "operator"
        assert principal["operatorId"] == op["id"]
        assert c.get("/api/admin/rooms").status_code == 200


def test_operator_list_carries_no_key_material(admin: httpx.Client) -> None:
    body = mint(admin, "viewer")
    key: str = body["key"]
    secret_part = key.split("_", 2)[2]
    r = admin.get("/api/admin/operators")
    assert r.status_code == 200, r.text
    text = r.text
    assert secret_part not in text and key not in text
    listed = {o["id"]: o for o in r.json()["operators"]}
    row = listed[body["operator"]["id"]]
    assert row["liveLinks"] == 0
    assert row["role"] == "viewer"
    for o in listed.values():
        assert not {"key", "verifier", "mac", "hash", "keyHash"} & set(o), o
        assert "liveLinks" in o
    # nothing that looks like a verifier (a long hex digest) anywhere in the list
    assert not re.search(r"[0-9a-f]{40,}", text), text


def test_revoke_disables_but_keeps_the_operator(server: Server, admin: httpx.Client) -> None:
    body = mint(admin, "operator")
    op_id, key = body["operator"]["id"], body["key"]
    with bearer(server, key) as c:
        assert c.get("/api/admin/rooms").status_code == 200
        r = admin.delete(f"/api/admin/operators/{op_id}")
        assert r.status_code == 200, r.text
        assert r.json()["linksRevoked"] == 0
        r = c.get("/api/admin/rooms")
        assert r.status_code == 401, r.text
        assert r.json()["code"] == "unauthorized"
    row = next(o for o in operators(admin) if o["id"] == op_id)
    assert row["active"] is False
    assert row["revokedAt"] is not None
    # revoked, not deleted: its audit entries still resolve to a name
    assert any(a["action"] == "operator.revoke" for a in audit_rows(admin))


def test_purge_removes_the_operator(server: Server, admin: httpx.Client) -> None:
    body = mint(admin, "viewer")
    op_id = body["operator"]["id"]
    r = admin.delete(f"/api/admin/operators/{op_id}", params={"purge": "1"})
    assert r.status_code == 200, r.text
    assert op_id not in {o["id"] for o in operators(admin)}
    with bearer(server, body["key"]) as c:
        assert c.get("/api/admin/rooms").status_code == 401
    r = admin.delete(f"/api/admin/operators/{op_id}")
    assert r.status_code == 404, r.text
    assert r.json()["code"] == "no_operator"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"name": "x", "role": "admin"}, "invalid_role"),
        ({"name": "x", "role": "monitor"}, "invalid_role"),
        ({"name": "x", "role": "OWNER"}, "invalid_role"),
        ({"name": "x", "role": "operator", "key": "qmo_mine_chosen"}, "unknown_field"),
        ({"name": "x", "role": "viewer", "isAdmin": True}, "unknown_field"),
    ],
)
def test_operator_create_refusals(admin: httpx.Client, body: dict[str, Any], code: str) -> None:
    before = len(operators(admin))
    r = admin.post("/api/admin/operators", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["code"] == code
    assert len(operators(admin)) == before  # nothing was created


@pytest.mark.parametrize("role", ["operator", "viewer"])
def test_only_owner_manages_operators(
    server: Server, admin: httpx.Client, as_role: dict[str, httpx.Client], role: str
) -> None:
    victim = mint(admin, "viewer")["operator"]["id"]
    c = as_role[role]
    refused_role(c.get("/api/admin/operators"), "list")
    refused_role(c.post("/api/admin/operators", json={"name": "escalate", "role": "owner"}), "create")
    refused_role(c.delete(f"/api/admin/operators/{victim}"), "revoke")
    refused_role(c.delete(f"/api/admin/operators/{victim}", params={"purge": "1"}), "purge")
    assert next(o for o in operators(admin) if o["id"] == victim)["active"] is True
    assert "escalate" not in {o["name"] for o in operators(admin)}


def test_owner_operator_manages_operators(as_role: dict[str, httpx.Client], admin: httpx.Client) -> None:
    owner = as_role["owner"]
    r = owner.post("/api/admin/operators", json={"name": "made-by-owner", "role": "viewer"})
    assert r.status_code == 201, r.text
    op_id = r.json()["operator"]["id"]
    assert owner.get("/api/admin/operators").status_code == 200
    r = owner.delete(f"/api/admin/operators/{op_id}", params={"purge": "1"})
    assert r.status_code == 200, r.text
    assert op_id not in {o["id"] for o in operators(admin)}


# ---------------------------------------------------------------------- 401 vs 403


def test_wrong_key_is_401_valid_key_on_forbidden_route_is_403(
    server: Server, admin: httpx.Client, keys: dict[str, str]
) -> None:
    rid = create_room(admin)["id"]
    for wrong in ("qmo_deadbeef_not-a-real-key", keys["viewer"] + "x", "totally-wrong"):
        with bearer(server, wrong) as c:
            r = c.post(f"/api/admin/rooms/{rid}/pause")
            assert r.status_code == 401, (wrong, r.text)
            assert r.json()["code"] == "unauthorized"
    with bearer(server, keys["viewer"]) as c:
        r = c.post(f"/api/admin/rooms/{rid}/pause")
        refused_role(r)
        assert r.json()["code"] != "unauthorized"


# ---------------------------------------------------------------------- roles


def test_viewer_reads_everything_and_changes_nothing(
    server: Server, admin: httpx.Client, as_role: dict[str, httpx.Client]
) -> None:
    rid = create_room(admin, ratePerMinute=0, returnOrigins=["https://a.example"], rules=[{"pattern": "/x*"}])["id"]
    with server.client() as visitor:
        ticket = join(visitor, rid).json()["ticket"]
    v = as_role["viewer"]
    for path in (
        "/api/admin/rooms",
        f"/api/admin/rooms/{rid}",
        "/api/admin/health",
        "/metrics",
        f"/api/admin/rooms/{rid}/visitors/{ticket}",
        f"/api/admin/rooms/{rid}/rules",
        "/api/admin/audit",
        "/api/admin/whoami",
    ):
        r = v.get(path)
        assert r.status_code == 200, (path, r.text)
    # a viewer is a person on the team: it sees the origin lists and rules a share link may not
    room = v.get(f"/api/admin/rooms/{rid}").json()["room"]
    assert room["returnOrigins"] == ["https://a.example"]
    assert room["rules"] and room["rules"][0]["pattern"] == "/x*"

    writes: list[tuple[str, str, Any]] = [
        ("POST", "/api/admin/rooms", {"id": unique_id(), "targetUrl": "https://shop.example/"}),
        ("POST", "/api/admin/rooms", {"id": rid, "name": "renamed-by-viewer"}),
        ("DELETE", f"/api/admin/rooms/{rid}", None),
        ("POST", f"/api/admin/rooms/{rid}/pause", {}),
        ("POST", f"/api/admin/rooms/{rid}/resume", {}),
        ("POST", f"/api/admin/rooms/{rid}/rate", {"ratePerMinute": 99}),
        ("POST", f"/api/admin/rooms/{rid}/schedule", {"opensAt": "2099-01-01T00:00:00Z"}),
        ("POST", f"/api/admin/rooms/{rid}/purge", {}),
        ("POST", f"/api/admin/rooms/{rid}/eject", {"ticket": ticket}),
        ("POST", "/api/admin/monitor-links", {}),
        ("POST", "/api/admin/shutdown", {}),
    ]
    for method, path, body in writes:
        refused_role(v.request(method, path, json=body), f"{method} {path}")
    after = admin.get(f"/api/admin/rooms/{rid}").json()["room"]
    assert after["state"] == "active" and after["name"] is None
    assert after["ratePerMinute"] == 0 and after["opensAt"] is None and after["waiting"] == 1
    assert v.get("/healthz").status_code == 200  # the server is still up


def test_operator_runs_the_queue(server: Server, admin: httpx.Client, as_role: dict[str, httpx.Client]) -> None:
    op = as_role["operator"]
    rid = unique_id()
    r = op.post("/api/admin/rooms", json={"id": rid, "targetUrl": "https://shop.example/", "ratePerMinute": 0})
    assert r.status_code == 201, r.text
    assert op.post("/api/admin/rooms", json={"id": rid, "name": "edited"}).status_code == 200
    assert op.post(f"/api/admin/rooms/{rid}/pause").json()["room"]["state"] == "paused"
    assert op.post(f"/api/admin/rooms/{rid}/resume").json()["room"]["state"] == "active"
    r = op.post(f"/api/admin/rooms/{rid}/rate", json={"ratePerMinute": 0})
    assert r.status_code == 200, r.text
    r = op.post(f"/api/admin/rooms/{rid}/schedule", json={"opensAt": "2099-01-01T00:00:00Z"})
    assert r.status_code == 200, r.text
    r = op.post(f"/api/admin/rooms/{rid}/schedule", json={"opensAt": None})
    assert r.status_code == 200, r.text
    with server.client() as a, server.client() as b:
        t1 = join(a, rid).json()["ticket"]
        join(b, rid)
    r = op.post(f"/api/admin/rooms/{rid}/eject", json={"ticket": t1})
    assert r.status_code == 200, r.text
    r = op.post(f"/api/admin/rooms/{rid}/purge")
    assert r.status_code == 200, r.text
    assert admin.get(f"/api/admin/rooms/{rid}").json()["room"]["waiting"] == 0
    r = op.post("/api/admin/monitor-links")
    assert r.status_code == 201, r.text

    refused_role(op.delete(f"/api/admin/rooms/{rid}"), "delete room")
    assert admin.get(f"/api/admin/rooms/{rid}").status_code == 200  # the room survived
    refused_role(op.post("/api/admin/shutdown"), "shutdown")
    assert op.get("/healthz").status_code == 200  # still running


def test_owner_operator_deletes_rooms(admin: httpx.Client, as_role: dict[str, httpx.Client]) -> None:
    rid = create_room(admin)["id"]
    r = as_role["owner"].delete(f"/api/admin/rooms/{rid}")
    assert r.status_code == 200, r.text
    assert admin.get(f"/api/admin/rooms/{rid}").status_code == 404


# ---------------------------------------------------------------------- inline requires owner

PROXY = "http://origin-a.internal.test:8080"  # a name: a private IP literal is refused at save


def test_operator_cannot_create_an_inline_room(admin: httpx.Client, as_role: dict[str, httpx.Client]) -> None:
    rid = unique_id()
    body = {"id": rid, "targetUrl": "https://inline-a.example/", "proxyOrigin": PROXY}
    r = as_role["operator"].post("/api/admin/rooms", json=body)
    assert r.status_code == 403, r.text
    assert r.json()["code"] == "inline_requires_owner"
    assert admin.get(f"/api/admin/rooms/{rid}").status_code == 404  # nothing was created
    rows = [a for a in audit_rows(admin, roomId=rid) if a["action"] == "room.create"]
    assert rows, audit_rows(admin, roomId=rid)
    assert rows[0]["ok"] is False
    assert rows[0]["actor"] == "the-operator" and rows[0]["role"] == "operator"
    # the same room as a snippet room is the operator's to make
    r = as_role["operator"].post("/api/admin/rooms", json={k: v for k, v in body.items() if k != "proxyOrigin"})
    assert r.status_code == 201, r.text


def test_operator_cannot_change_an_inline_rooms_routing(admin: httpx.Client, as_role: dict[str, httpx.Client]) -> None:
    rid = create_room(admin, targetUrl="https://inline-b.example/", proxyOrigin=PROXY)["id"]
    op = as_role["operator"]
    for change in (
        {"proxyOrigin": "http://origin-b.internal.test:8080"},
        {"proxyOrigin": None},
        {"targetUrl": "https://elsewhere.example/"},
    ):
        r = op.post("/api/admin/rooms", json={"id": rid, **change})
        assert r.status_code == 403, (change, r.text)
        assert r.json()["code"] == "inline_requires_owner"
    room = admin.get(f"/api/admin/rooms/{rid}").json()["room"]
    assert room["proxyOrigin"] == PROXY and room["targetUrl"] == "https://inline-b.example/"
    refusals = [a for a in audit_rows(admin, roomId=rid) if a["action"] == "room.update" and a["ok"] is False]
    assert len(refusals) == 3, refusals
    # giving a snippet room a proxyOrigin (making it inline) is refused too
    snippet = create_room(admin)["id"]
    r = op.post("/api/admin/rooms", json={"id": snippet, "proxyOrigin": PROXY})
    assert r.status_code == 403, r.text
    assert r.json()["code"] == "inline_requires_owner"


def test_operator_resending_inline_fields_unchanged_is_allowed(
    admin: httpx.Client, as_role: dict[str, httpx.Client]
) -> None:
    rid = create_room(admin, targetUrl="https://inline-c.example/", proxyOrigin=PROXY)["id"]
    current = admin.get(f"/api/admin/rooms/{rid}").json()["room"]
    body = {"id": rid, "targetUrl": current["targetUrl"], "proxyOrigin": current["proxyOrigin"], "name": "op-edit"}
    r = as_role["operator"].post("/api/admin/rooms", json=body)
    assert r.status_code == 200, r.text
    room = admin.get(f"/api/admin/rooms/{rid}").json()["room"]
    assert room["name"] == "op-edit" and room["proxyOrigin"] == PROXY
    assert not [
        a for a in audit_rows(admin, roomId=rid) if a["action"] == "room.inline" and a["actor"] == "the-operator"
    ]


def test_operator_resending_equivalent_proxy_origin_is_not_a_change(
    admin: httpx.Client, as_role: dict[str, httpx.Client]
) -> None:
    sent = {"targetUrl": "https://inline-d.example/", "proxyOrigin": PROXY + "/"}
    rid = create_room(admin, **sent)["id"]
    r = as_role["operator"].post("/api/admin/rooms", json={"id": rid, **sent, "name": "script-save"})
    assert r.status_code == 200, r.text


def test_owner_inline_change_is_audited_with_old_and_new(admin: httpx.Client, as_role: dict[str, httpx.Client]) -> None:
    rid = create_room(admin, targetUrl="https://inline-e.example/", proxyOrigin=PROXY)["id"]
    new = "http://origin-c.internal.test:9090"
    r = as_role["owner"].post("/api/admin/rooms", json={"id": rid, "proxyOrigin": new})
    assert r.status_code == 200, r.text
    rows = [a for a in audit_rows(admin, roomId=rid) if a["action"] == "room.inline"]
    mine = [a for a in rows if a["actor"] == "the-owner"]
    assert len(mine) == 1, rows
    detail = json.dumps(mine[0])
    assert PROXY in detail and new in detail, mine[0]
    assert mine[0]["role"] == "owner" and mine[0]["ok"] is True


# ---------------------------------------------------------------------- shutdown


def test_shutdown_answers_then_the_process_exits(make_server: ServerFactory) -> None:
    srv = make_server()
    with srv.admin() as a:
        r = a.post("/api/admin/shutdown")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["ok"] is True and body["stopping"] is True
    assert type(body["uptimeSec"]) is int and body["uptimeSec"] >= 0  # whole seconds, as on health
    wait_until(lambda: srv.returncode is not None, timeout=15, what="the process to exit by itself")


def test_shutdown_exit_code_is_zero(make_server: ServerFactory) -> None:
    srv = make_server()
    with srv.admin() as a:
        assert a.post("/api/admin/shutdown").status_code == 200
    assert srv.wait(15) == 0
