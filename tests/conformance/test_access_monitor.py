"""Monitor (share) links: the read grant that leaves the team, and how it is revoked."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from harness import Server, create_room, free_port, iter_sse, join, unique_id, wait_until

ServerFactory = Callable[..., Server]

INTERNAL = "http://app-776655.internal.test:8080"  # an "internal address" a share link must never see
RETURN_ORIGIN = "https://return-secret.example"
TAG_ORIGIN = "https://tag-secret.example"
RULE = "/secret-rule-path*"
FORGER = "127.0.0.2"  # a second loopback address: a peer that forwards headers it was never trusted for


def _can_bind(addr: str) -> bool:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((addr, 0))
        return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def server(make_module_server: ServerFactory) -> Server:
    # TRUST_PROXY alone is a half configuration: the full health report carries a warning for it
    return make_module_server({"TRUST_PROXY": "1"})


@pytest.fixture(scope="module")
def room(server: Server) -> dict[str, Any]:
    with server.admin() as a:
        room = create_room(  # rate 0: the one visitor stays in the line however slow the machine
            a,
            targetUrl="https://shop-monitor.example/",
            ratePerMinute=0,
            proxyOrigin=INTERNAL,
            returnOrigins=[RETURN_ORIGIN],
            tagOrigins=[TAG_ORIGIN],
            rules=[{"pattern": RULE}],
        )
    with server.client() as v:
        assert join(v, room["id"]).status_code == 200
    return room


def mint(client: httpx.Client) -> dict[str, Any]:
    r = client.post("/api/admin/monitor-links")
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


@pytest.fixture
def monitor(server: Server, admin: httpx.Client) -> Iterator[httpx.Client]:
    with server.client(headers={"Authorization": f"Bearer {mint(admin)['token']}"}) as c:
        yield c


def refused_role(r: httpx.Response, what: str) -> None:
    assert r.status_code == 403, (what, r.status_code, r.text)
    assert r.json()["code"] == "insufficient_role", (what, r.text)


def audit(admin: httpx.Client) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = admin.get("/api/admin/audit").json()["audit"]
    return rows


def test_mint_returns_token_and_fragment_url(admin: httpx.Client) -> None:
    body = mint(admin)
    token = body["token"]
    assert token and body["url"].endswith(f"#monitor={token}")
    assert "?" not in body["url"].split("#", 1)[0]  # the token rides in the fragment only
    listed = admin.get("/api/admin/monitor-links")
    assert listed.status_code == 200, listed.text
    assert token not in listed.text  # the list carries no tokens
    assert body["link"]["id"] in {link["id"] for link in listed.json()["links"]}


def test_monitor_reads_rooms_without_internal_fields(monitor: httpx.Client, room: dict[str, Any]) -> None:
    for path in ("/api/admin/rooms", f"/api/admin/rooms/{room['id']}"):
        r = monitor.get(path)
        assert r.status_code == 200, (path, r.text)
        for needle in ("app-776655", RETURN_ORIGIN, TAG_ORIGIN, RULE):
            assert needle not in r.text, (path, needle)
    rooms = {x["id"]: x for x in monitor.get("/api/admin/rooms").json()["rooms"]}
    seen = rooms[room["id"]]
    assert seen["waiting"] == 1  # the live numbers are there
    for field in ("proxyOrigin", "returnOrigins", "tagOrigins", "rules"):
        assert seen.get(field) in (None, []), (field, seen)


@pytest.mark.skipif(not _can_bind(FORGER), reason=f"cannot bind {FORGER}")
def test_monitor_reads_metrics_and_a_trimmed_health(server: Server, monitor: httpx.Client, admin: httpx.Client) -> None:
    # a peer forwarding headers it is not trusted for is named in the full report
    with server.client(transport=httpx.HTTPTransport(local_address=FORGER)) as f:
        for i in range(12):
            f.get("/api/status", params={"roomId": "nope"}, headers={"X-Forwarded-For": f"198.51.100.{i}"})
    full = admin.get("/api/admin/health").json()
    assert full["warnings"] and "keys" in full and "hardening" in full and "settings" in full
    assert FORGER in json.dumps(full["proxy"])

    assert monitor.get("/metrics").status_code == 200
    r = monitor.get("/api/admin/health")
    assert r.status_code == 200, r.text
    h = r.json()
    for hidden in ("warnings", "hardening", "settings", "keys"):
        assert hidden not in h, hidden
    assert "proxy" in h and h["proxy"]["ok"] is False  # whether the proxy settings are coherent: yes
    assert FORGER not in r.text  # which peer: no
    assert "trustProxyIps" not in h["proxy"] and "undeclaredPeers" not in h["proxy"]
    assert "enforced" not in h.get("edge", {})  # whether EDGE_SECRET is enforced: no
    assert server.admin_key not in r.text


def test_monitor_is_refused_team_only_reads(monitor: httpx.Client, room: dict[str, Any]) -> None:
    rid = room["id"]
    refused_role(monitor.get(f"/api/admin/rooms/{rid}/visitors/1"), "drill-down")
    refused_role(monitor.get("/api/admin/audit"), "audit")
    refused_role(monitor.get("/api/admin/audit", params={"format": "csv"}), "audit csv")
    refused_role(monitor.get(f"/api/admin/rooms/{rid}/rules"), "rules")
    refused_role(monitor.post(f"/api/admin/rooms/{rid}/rules/test", json={"url": "https://x.example/"}), "rules/test")


def test_monitor_changes_nothing(server: Server, monitor: httpx.Client, admin: httpx.Client) -> None:
    rid = create_room(admin, ratePerMinute=0)["id"]
    with server.client() as v:
        ticket = join(v, rid).json()["ticket"]
    writes: list[tuple[str, str, Any]] = [
        ("POST", "/api/admin/rooms", {"id": unique_id(), "targetUrl": "https://shop.example/"}),
        ("POST", "/api/admin/rooms", {"id": rid, "name": "by-monitor"}),
        ("DELETE", f"/api/admin/rooms/{rid}", None),
        ("POST", f"/api/admin/rooms/{rid}/pause", {}),
        ("POST", f"/api/admin/rooms/{rid}/resume", {}),
        ("POST", f"/api/admin/rooms/{rid}/rate", {"ratePerMinute": 5}),
        ("POST", f"/api/admin/rooms/{rid}/schedule", {"opensAt": "2099-01-01T00:00:00Z"}),
        ("POST", f"/api/admin/rooms/{rid}/purge", {}),
        ("POST", f"/api/admin/rooms/{rid}/eject", {"ticket": ticket}),
        ("GET", "/api/admin/operators", None),
        ("POST", "/api/admin/operators", {"name": "by-monitor", "role": "owner"}),
        ("GET", "/api/admin/monitor-links", None),
        ("POST", "/api/admin/monitor-links", {}),
        ("POST", "/api/admin/monitor-links/revoke-all", {}),
        ("POST", "/api/admin/shutdown", {}),
    ]
    for method, path, body in writes:
        refused_role(monitor.request(method, path, json=body), f"{method} {path}")
    # nor can it trade itself for a console session
    r = monitor.post(
        "/api/admin/session", json={"key": monitor.headers["authorization"][7:]}, headers={"X-QM-CSRF": "1"}
    )
    assert r.status_code in (401, 403), r.text
    assert "qm_console" not in r.headers.get("set-cookie", "")
    after = admin.get(f"/api/admin/rooms/{rid}").json()["room"]
    assert after["state"] == "active" and after["name"] is None and after["waiting"] == 1
    assert after["ratePerMinute"] == 0 and after["opensAt"] is None
    assert "by-monitor" not in admin.get("/api/admin/operators").text


def test_monitor_sign_out_closes_nothing_and_writes_no_audit_row(monitor: httpx.Client, admin: httpx.Client) -> None:
    """A monitor link has no console session: signing it out, however often, leaves the trail as it was."""
    before = admin.get("/api/admin/audit", params={"limit": "10000"}).json()["audit"]
    answers = [monitor.delete("/api/admin/session") for _ in range(50)]
    after = admin.get("/api/admin/audit", params={"limit": "10000"}).json()["audit"]
    assert after == before, [a for a in after if a not in before][:3]
    for r in answers:
        assert r.status_code == 200, r.text
        assert r.json() == {"ok": True, "closed": False}, r.text
        assert "qm_console" not in r.headers.get("set-cookie", "")
    assert monitor.get("/api/admin/rooms").status_code == 200  # and the link still works


def test_reveal_returns_the_same_token_and_is_audited_apart_from_mint(admin: httpx.Client) -> None:
    body = mint(admin)
    link_id = body["link"]["id"]
    r = admin.post(f"/api/admin/monitor-links/{link_id}/reveal")
    assert r.status_code == 200, r.text
    assert r.json()["token"] == body["token"]
    assert r.json()["url"].endswith("#monitor=" + body["token"])
    mine = [a for a in audit(admin) if a["target"] == link_id]
    actions = sorted(a["action"] for a in mine)
    assert actions == ["monitor_token.mint", "monitor_token.reveal"], mine
    assert body["token"] not in json.dumps(audit(admin))  # the trail never holds a token


def test_revoke_one_link(server: Server, admin: httpx.Client) -> None:
    gone, kept = mint(admin), mint(admin)
    r = admin.delete(f"/api/admin/monitor-links/{gone['link']['id']}")
    assert r.status_code == 200, r.text
    with server.client(headers={"Authorization": f"Bearer {gone['token']}"}) as c:
        r = c.get("/api/admin/rooms")
        assert r.status_code == 401, r.text
        assert r.json()["code"] == "unauthorized"
    with server.client(headers={"Authorization": f"Bearer {kept['token']}"}) as c:
        assert c.get("/api/admin/rooms").status_code == 200
    r = admin.post(f"/api/admin/monitor-links/{gone['link']['id']}/reveal")
    assert r.status_code == 404, r.text
    assert r.json()["code"] == "no_link"
    r = admin.delete(f"/api/admin/monitor-links/{gone['link']['id']}")
    assert r.status_code == 404, r.text


def test_revoke_all_links(server: Server, admin: httpx.Client) -> None:
    links = [mint(admin) for _ in range(3)]
    r = admin.post("/api/admin/monitor-links/revoke-all")
    assert r.status_code == 200, r.text
    assert r.json()["revoked"] >= 3
    for link in links:
        with server.client(headers={"Authorization": f"Bearer {link['token']}"}) as c:
            assert c.get("/api/admin/rooms").status_code == 401
        assert admin.post(f"/api/admin/monitor-links/{link['link']['id']}/reveal").status_code == 404
    fresh = mint(admin)  # minting works again afterwards
    with server.client(headers={"Authorization": f"Bearer {fresh['token']}"}) as c:
        assert c.get("/api/admin/rooms").status_code == 200


def test_revoking_an_operator_closes_only_the_links_they_minted(server: Server, admin: httpx.Client) -> None:
    r = admin.post("/api/admin/operators", json={"name": "ADMIN_KEY", "role": "operator"})  # names are free text
    assert r.status_code == 201, r.text
    op_id, key = r.json()["operator"]["id"], r.json()["key"]
    with server.client(headers={"Authorization": f"Bearer {key}"}) as op:
        theirs = [mint(op), mint(op)]
    owners = mint(admin)
    assert theirs[0]["link"]["createdById"] == op_id
    row = next(o for o in admin.get("/api/admin/operators").json()["operators"] if o["id"] == op_id)
    assert row["liveLinks"] == 2
    r = admin.delete(f"/api/admin/operators/{op_id}")
    assert r.status_code == 200, r.text
    assert r.json()["linksRevoked"] == 2
    for link in theirs:
        with server.client(headers={"Authorization": f"Bearer {link['token']}"}) as c:
            assert c.get("/api/admin/rooms").status_code == 401
    with server.client(headers={"Authorization": f"Bearer {owners['token']}"}) as c:
        assert c.get("/api/admin/rooms").status_code == 200  # ADMIN_KEY's link stays open
    row = next(o for o in admin.get("/api/admin/operators").json()["operators"] if o["id"] == op_id)
    assert row["liveLinks"] == 0
    revoke = [a for a in audit(admin) if a["action"] == "operator.revoke"]
    assert revoke and "2" in json.dumps(revoke[0]), revoke


# an address literal of the test client (IPv4, or IPv6 loopback; an IPv4-mapped one ends in the IPv4 form)
ADDRESS = re.compile(r"(?<![0-9.])(?:[0-9]{1,3}\.){3}[0-9]{1,3}(?![0-9.])|(?<![0-9A-Fa-f:])::1(?![0-9A-Fa-f:])")


def _first_frame(srv: Server, client: httpx.Client) -> str:
    ticket = client.post("/api/admin/sse-ticket").json()["ticket"]
    with (
        httpx.Client(base_url=srv.base_url, timeout=httpx.Timeout(5.0, read=10.0)) as c,
        c.stream("GET", "/api/admin/events", params={"ticket": ticket}) as resp,
    ):
        assert resp.status_code == 200
        for ev in iter_sse(resp):
            if "data" in ev:
                return ev["data"]
    raise AssertionError("the admin stream sent no frame")


def test_a_monitor_link_sees_no_address(make_server: ServerFactory) -> None:
    """Bot protection's recent decisions, an inline origin's probe error and every other read a share link
    may make: no visitor's or internal address in any of them, where the owner's view still has them."""
    srv = make_server({"PROXY_ALLOW_PRIVATE": "1"})
    with srv.admin() as admin:
        room = create_room(admin)["id"]
        dead_origin = f"http://127.0.0.1:{free_port()}"  # nothing listens there: the probe's error names it
        inline = create_room(admin, targetUrl=f"http://localhost:{srv.port}", proxyOrigin=dead_origin)["id"]
        token = admin.post("/api/admin/monitor-links").json()["token"]
        with srv.client() as v:
            assert join(v, room).status_code == 200  # scored by bot protection from 127.0.0.1
        owner_security = admin.get("/api/admin/security").json()
        assert [d["ip"] for d in owner_security["recent"]] == ["127.0.0.1"], owner_security["recent"]

        def probed() -> dict[str, Any] | None:
            origins = admin.get("/api/admin/health").json().get("inline", {}).get("origins", {})
            found: dict[str, Any] | None = origins.get(inline)
            return found if found and found.get("error") else None

        assert "127.0.0.1" in str(wait_until(probed, timeout=20, what="the inline origin's probe to fail")["error"])
        with srv.client(headers={"Authorization": f"Bearer {token}"}) as monitor:
            reads = {
                path: monitor.get(path)
                for path in (
                    "/api/admin/whoami",
                    "/api/admin/health",
                    "/api/admin/security",
                    "/api/admin/alerts",
                    "/api/admin/rooms",
                    f"/api/admin/rooms/{room}",
                    f"/api/admin/rooms/{inline}",
                    f"/api/admin/series/{room}",
                    f"/api/admin/series/{room}?format=csv",
                    "/api/admin/reports",
                    "/api/admin/reports?format=csv",
                    "/metrics",
                )
            }
            texts = {path: r.text for path, r in reads.items()}
            texts["/api/admin/events"] = _first_frame(srv, monitor)
        for path, r in reads.items():
            assert r.status_code == 200, (path, r.status_code, r.text)
        leaks = {path: (found, text[:600]) for path, text in texts.items() if (found := ADDRESS.findall(text))}
        assert not leaks, leaks
        seen = reads["/api/admin/security"].json()
        assert seen["recent"] and all(d["ip"] is None for d in seen["recent"]), seen["recent"]
        # a keyed tag still tells one source from another, the same in both views
        assert [d["client"] for d in seen["recent"]] == [d["client"] for d in owner_security["recent"]]
        assert all(isinstance(d["client"], str) and len(d["client"]) == 16 for d in seen["recent"])
