"""An inline room whose proxyOrigin is an IPv6 literal: stored with its brackets, in the host index, proxied.

The app listens on the IPv6 loopback (``::1``); the server allows private origins (``PROXY_ALLOW_PRIVATE=1``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.conformance.harness import Server, unique_id
from tests.inline.conftest import admitted, visitor
from tests.inline.peer import Peer


@pytest.fixture(scope="module")
def peer6() -> Iterator[Peer]:
    p = Peer("::1")
    try:
        yield p
    finally:
        p.stop()


def test_an_ipv6_literal_origin_reads_back_bracketed_and_is_proxied_to(qm: Server, peer6: Peer) -> None:
    origin = f"http://[::1]:{peer6.port}"
    assert peer6.url == origin
    host = f"{uuid.uuid4().hex[:8]}.v6.test"
    room_id = unique_id("v6")
    body = {"id": room_id, "targetUrl": f"http://{host}", "proxyOrigin": origin + "/", "ratePerMinute": 6000}
    with qm.admin() as admin:
        r = admin.post("/api/admin/rooms", json=body)
        assert r.status_code == 201, r.text
        assert r.json()["room"]["proxyOrigin"] == origin
        assert admin.get(f"/api/admin/rooms/{room_id}").json()["room"]["proxyOrigin"] == origin
        listed = {room["id"]: room for room in admin.get("/api/admin/rooms").json()["rooms"]}
        assert listed[room_id]["proxyOrigin"] == origin
        # the same origin sent again is no change (the stored spelling is recognised as the same)
        r = admin.post("/api/admin/rooms", json={"id": room_id, "proxyOrigin": origin})
        assert r.status_code == 200, r.text
    with visitor(qm, host) as c:
        # the host is inline: a visitor without a pass is queued, not handed the queue's own routes
        r = c.get("/api/echo", headers={"Accept": "application/json"})
        assert r.status_code == 503 and r.json()["code"] == "queued", r.text
        admitted(c, room_id)
        r = c.get("/api/echo?v=6")
        assert r.status_code == 200, r.text
        assert r.headers["x-app"] == "peer"
        assert r.json()["target"] == "/api/echo?v=6"
        assert dict(r.json()["headers"])["host"] == host


def test_the_connector_manifest_base_keeps_an_ipv6_host_bracketed(qm: Server) -> None:
    with httpx.Client(base_url=f"http://127.0.0.1:{qm.port}", headers={"Host": f"[::1]:{qm.port}"}) as c:
        manifest = c.get("/connectors/manifest.json").json()
    assert manifest["server"]["url"] == f"http://[::1]:{qm.port}"
