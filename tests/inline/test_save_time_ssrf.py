"""Saving a room whose proxyOrigin is a private or internal IP literal (a real server process, over HTTP).

Without PROXY_ALLOW_PRIVATE=1 the save itself is refused (400 proxy_origin_private), not only the
connection later; a host name is still accepted at save time (DNS can change; the connect-time rule covers it).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conformance.harness import Server, start_server, unique_id

PRIVATE = [
    "http://127.0.0.1:3000",
    "http://10.0.0.5:3000",
    "http://169.254.169.254",
    "http://[::1]:8080",
    "http://[::ffff:10.0.0.1]:3000",
    "https://192.168.1.20",
    "http://[fd00:ec2::254]",
]


def _save(srv: Server, room_id: str | None = None, **fields: object) -> tuple[int, dict[str, object]]:
    body = {"id": room_id or unique_id("ssrf"), "targetUrl": f"https://{unique_id('h')}.shop.test", **fields}
    with srv.admin() as admin:
        r = admin.post("/api/admin/rooms", json=body)
    return r.status_code, r.json()


@pytest.fixture(scope="module")
def strict() -> Iterator[Server]:
    srv = start_server({"PROXY_ALLOW_PRIVATE": None})
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def lenient() -> Iterator[Server]:
    srv = start_server({"PROXY_ALLOW_PRIVATE": "1"})
    try:
        yield srv
    finally:
        srv.stop()


@pytest.mark.parametrize("origin", PRIVATE)
def test_a_private_literal_is_refused_at_save_time(strict: Server, origin: str) -> None:
    room_id = unique_id("ssrf")
    status, body = _save(strict, room_id, proxyOrigin=origin)
    assert status == 400, body
    assert body["code"] == "proxy_origin_private"
    assert "PROXY_ALLOW_PRIVATE=1" in str(body["error"])
    with strict.admin() as admin:
        assert admin.get(f"/api/admin/rooms/{room_id}").status_code == 404  # nothing was created


@pytest.mark.parametrize("origin", PRIVATE)
def test_the_same_literal_is_accepted_with_proxy_allow_private(lenient: Server, origin: str) -> None:
    status, body = _save(lenient, proxyOrigin=origin)
    assert status == 201, body
    assert body["room"]["proxyOrigin"]  # type: ignore[index]


def test_a_public_literal_and_a_host_name_are_accepted(strict: Server) -> None:
    status, body = _save(strict, proxyOrigin="http://203.0.113.10:8080")
    assert status == 201, body
    assert body["room"]["proxyOrigin"] == "http://203.0.113.10:8080"  # type: ignore[index]
    status, body = _save(strict, proxyOrigin="http://[2001:db8::10]:8080")
    assert status == 201, body
    # a name is judged when it is connected to, on every connection, not when it is saved
    status, body = _save(strict, proxyOrigin="http://localhost:3000")
    assert status == 201, body


def test_changing_an_existing_room_to_a_private_literal_is_refused_and_leaves_it_unchanged(strict: Server) -> None:
    room_id = unique_id("ssrf")
    target = f"https://{unique_id('h')}.shop.test"
    with strict.admin() as admin:
        r = admin.post("/api/admin/rooms", json={"id": room_id, "targetUrl": target, "proxyOrigin": "http://app.test"})
        assert r.status_code == 201, r.text
        r = admin.post("/api/admin/rooms", json={"id": room_id, "proxyOrigin": "http://10.1.2.3:8080"})
        assert r.status_code == 400 and r.json()["code"] == "proxy_origin_private"
        assert admin.get(f"/api/admin/rooms/{room_id}").json()["room"]["proxyOrigin"] == "http://app.test"
        audit = admin.get("/api/admin/audit", params={"roomId": room_id}).json()["audit"]
    refused = [e for e in audit if e["ok"] is False]
    assert len(refused) == 1 and refused[0]["detail"]["refused"] == "proxy_origin_private"
