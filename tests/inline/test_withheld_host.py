"""ADMIN_HOST set: on the customer's inline host only the visitor paths under /__qm/ remain.

The walk covers the router's whole table, every route and every method: each path is asked once on the
admin host (where everything answers) and once under /__qm/ on the customer's host. A visitor path answers
the customer's host exactly as it answers the admin host; every other path (the admin API, the console's
pages and sign-in, the guides, the connectors' downloads, /metrics, the system surface, the OpenAPI
document) answers the customer's host 404 not_found, for every method, without asking who is calling.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import httpx

from queue_manager.routes.table import TABLE
from tests.conformance.harness import Server
from tests.inline.conftest import ServerFactory, inline_room
from tests.inline.peer import Peer

ADMIN_HOST = "admin.example"
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
FONT = "Geist-Regular-Latin.woff2"


def _host() -> str:
    return f"{uuid.uuid4().hex[:8]}.shop.test"


def _concrete(pattern: str, room_id: str, asset: str) -> str:
    """A path the pattern matches, chosen so the route answers with something of its own (not a 404)."""
    if pattern == "/assets/{file...}":
        return asset
    if pattern == "/fonts/{file...}":
        return f"/fonts/{FONT}"
    if pattern == "/connectors/{file...}":
        return "/connectors/node"
    if pattern == "/docs/{page...}":
        return "/docs/operations"
    values = {"room": room_id, "file": "x", "page": "x", "visitor": "x", "operator": "x", "link": "x"}
    values.update(event="x", token="x")
    return re.sub(r"\{(\w+)(?:\.\.\.)?\}", lambda m: values[m.group(1)], pattern)


def _answer(c: httpx.Client, method: str, path: str, host: str) -> tuple[int, str | None]:
    """The status and, for a JSON answer, its code (a HEAD has no body: its status alone)."""
    r = c.request(method, path, headers={"Host": host, "Accept": "application/json"})
    code = None
    if method != "HEAD" and r.headers.get("content-type", "").startswith("application/json"):
        body: Any = r.json()
        code = body.get("code") if isinstance(body, dict) else None
    return r.status_code, code


def _waiting_asset(c: httpx.Client, room_id: str) -> str:
    page = c.get(f"/w/{room_id}", headers={"Host": ADMIN_HOST})
    assert page.status_code == 200, page.text
    found = re.search(r'(/assets/waiting-[A-Za-z0-9_-]+\.css)"', page.text)
    assert found, "the waiting page names its stylesheet"
    return found.group(1)


def test_only_the_visitor_paths_answer_on_a_host_admin_host_leaves_to_visitors(
    make_server: ServerFactory, peer: Peer
) -> None:
    srv: Server = make_server({"ADMIN_HOST": ADMIN_HOST})
    room_id, host = inline_room(srv, peer.url, host=_host())
    visitor_paths = {r.pattern for r in TABLE if r.visitor_path}
    # what a visitor's page and the customer's site need is among them; the operators' surface is not
    assert {"/api/join", "/api/status", "/events", "/w/{room...}", "/assets/{file...}", "/healthz"} <= visitor_paths
    assert not {"/", "/progress", "/public/admin.html", "/metrics", "/api/openapi.json", "/docs"} & visitor_paths
    assert not any(p.startswith(("/api/admin", "/api/system/", "/internal/")) for p in visitor_paths)

    checked = 0
    with httpx.Client(base_url=f"http://127.0.0.1:{srv.port}", timeout=10) as c:
        asset = _waiting_asset(c, room_id)
        for pattern in sorted({r.pattern for r in TABLE}):
            path = _concrete(pattern, room_id, asset)
            own = {r.method for r in TABLE if r.pattern == pattern}
            for method in METHODS:
                if method == "GET" and pattern in ("/events", "/api/admin/events"):
                    continue  # a live stream (asked with HEAD and the other methods only)
                where = f"{method} {path}"
                on_admin = _answer(c, method, path, ADMIN_HOST)
                on_customer = _answer(c, method, "/__qm" + path, host)
                if method in own:
                    assert on_admin[0] != 404 or on_admin[1] not in (None, "not_found"), (where, on_admin)
                if pattern in visitor_paths:
                    assert on_customer == on_admin, (where, on_customer, on_admin)
                else:
                    expected = (404, None if method == "HEAD" else "not_found")
                    assert on_customer == expected, (where, on_customer, "on the admin host", on_admin)
                checked += 1
        # a path no route has, even one under the admin API, is the same bare not_found there: no sign-in first
        assert _answer(c, "GET", "/__qm/api/admin/nothing", host) == (404, "not_found")
        assert _answer(c, "GET", "/api/admin/nothing", ADMIN_HOST)[0] == 401
        # a Bearer key changes nothing on the customer's host
        bearer = {"Host": host, "Authorization": f"Bearer {srv.admin_key}"}
        for path in (
            "/__qm/metrics",
            "/__qm/api/admin/rooms",
            "/__qm/api/openapi.json",
            "/__qm/api/v1/system/maintenance",
        ):
            r = c.get(path, headers=bearer)
            assert (r.status_code, r.json()["code"]) == (404, "not_found"), path
        assert (
            c.get("/metrics", headers={"Host": ADMIN_HOST, "Authorization": bearer["Authorization"]}).status_code == 200
        )
    assert checked >= len(METHODS) * len({r.pattern for r in TABLE}) - 2


def test_without_admin_host_the_customer_host_keeps_the_whole_surface_under_the_prefix(
    make_server: ServerFactory, peer: Peer
) -> None:
    srv = make_server()
    room_id, host = inline_room(srv, peer.url, host=_host())
    auth = {"Host": host, "Authorization": f"Bearer {srv.admin_key}"}
    with httpx.Client(base_url=f"http://127.0.0.1:{srv.port}", timeout=10) as c:
        for path in (
            "/__qm/metrics",
            "/__qm/api/admin/rooms",
            "/__qm/api/openapi.json",
            "/__qm/api/v1/system/maintenance",
        ):
            assert c.get(path, headers=auth).status_code == 200, path
        assert c.get("/__qm/progress", headers={"Host": host}).status_code == 302
    assert room_id
