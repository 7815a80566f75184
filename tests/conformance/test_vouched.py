"""Vouched door checks: a connector speaks for a visitor with Authorization: Bearer <PUBLIC_API_KEY>."""

from __future__ import annotations

import secrets
from collections.abc import Callable

import httpx
import pytest
from harness import Server, clear_of_the_minute_turn, create_room, metric, wait_until

ServerFactory = Callable[..., Server]

PUBLIC_KEY = "pk-" + secrets.token_urlsafe(24)
REFUSED = "qm_refused_key_checks_all_total"
UA = "Mozilla/5.0 (vouched-test)"


@pytest.fixture(scope="module")
def server(make_module_server: ServerFactory) -> Server:
    return make_module_server({"PUBLIC_API_KEY": PUBLIC_KEY, "CHECK_LIMIT_PER_MIN": "2"})


@pytest.fixture(scope="module")
def room_id(server: Server) -> str:
    with server.admin() as a:
        return str(create_room(a)["id"])


def vouched(srv: Server, room_id: str, ip: str | None, key: str = PUBLIC_KEY, **params: str) -> httpx.Response:
    q = {"roomId": room_id, "url": "https://shop.example/product/1", "agent": UA, **params}
    if ip is not None:
        q["ip"] = ip
    with srv.client(headers={"Authorization": f"Bearer {key}"}) as c:
        return c.get("/api/check", params=q)


def refused_count(srv: Server) -> float:
    return metric(srv, REFUSED) or 0.0


def test_vouched_checks_are_charged_to_the_visitor_in_a_map_of_their_own(server: Server, room_id: str) -> None:
    a, b = "198.51.100.7", "198.51.100.8"
    for _ in range(2):
        r = vouched(server, room_id, a)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["roomId"] == room_id and isinstance(body["admit"], bool)
    r = vouched(server, room_id, a)
    assert r.status_code == 429, r.text  # CHECK_LIMIT_PER_MIN=2 for that visitor
    assert r.json()["code"] == "rate_limited"
    assert r.headers.get("retry-after", "").isdigit()
    # another visitor through the same connector has their own budget
    assert vouched(server, room_id, b).status_code == 200
    # and the connector's own address was never charged: a direct check still has its full budget
    with server.client() as direct:
        for _ in range(2):
            r = direct.get("/api/check", params={"roomId": room_id, "url": "https://shop.example/"})
            assert r.status_code == 200, r.text


def test_admin_key_vouches_too(server: Server, room_id: str) -> None:
    r = vouched(server, room_id, "198.51.100.30", key=server.admin_key)
    assert r.status_code == 200, r.text


def test_key_in_query_is_refused_and_counted(server: Server, room_id: str) -> None:
    before = refused_count(server)
    with server.client() as c:
        r = c.get("/api/check", params={"roomId": room_id, "ip": "198.51.100.9", "agent": UA, "key": PUBLIC_KEY})
    assert r.status_code == 401, r.text
    assert r.json()["code"] == "credential_in_query"
    assert PUBLIC_KEY not in r.text
    assert refused_count(server) == before + 1
    wait_until(lambda: "WARNING /api/check: a Public API key was sent in the URL (?key=)" in server.stderr)
    assert PUBLIC_KEY not in server.stderr


def test_wrong_key_is_refused_and_counted(server: Server, room_id: str) -> None:
    before = refused_count(server)
    r = vouched(server, room_id, "198.51.100.10", key="pk-wrong")
    assert r.status_code == 401, r.text
    assert r.json()["code"] == "unauthorized"
    assert refused_count(server) == before + 1


@pytest.mark.parametrize(
    "ip", [None, "", "not-an-address", "198.51.100.300"], ids=["missing", "empty", "word", "octet"]
)
def test_vouched_check_must_name_a_valid_visitor_address(server: Server, room_id: str, ip: str | None) -> None:
    r = vouched(server, room_id, ip)
    assert r.status_code == 400, r.text
    assert r.json()["code"] == "bad_request"


def test_verify(server: Server) -> None:
    with server.client() as c:
        r = c.get("/api/verify", headers={"Authorization": f"Bearer {PUBLIC_KEY}"})
        assert r.status_code == 200, r.text
        assert r.json()["ok"] is True
        assert r.json()["problems"] == []
        assert r.json()["keyAccepted"] is True and r.json()["keyInUrl"] is False and "room" not in r.json()
        r = c.get("/api/verify", params={"key": PUBLIC_KEY})
        assert r.status_code == 401, r.text
        assert r.json()["ok"] is False and r.json()["keyInUrl"] is True and r.json()["keyAccepted"] is False
        assert "Public API key sent in the URL" in r.json()["problems"]
        # the stderr line names the route that was called, not the door check
        line = "WARNING /api/verify: a Public API key was sent in the URL (?key=)"
        wait_until(lambda: line in server.stderr, what="the ?key= warning")
        r = c.get("/api/verify")
        assert r.status_code == 401, r.text
        assert r.json()["ok"] is False
        r = c.get("/api/verify", headers={"Authorization": "Bearer pk-wrong"})
        assert r.status_code == 401, r.text
        assert r.json()["ok"] is False


def test_verify_reports_what_a_connector_needs_of_its_room(server: Server) -> None:
    with server.admin() as a:
        room = create_room(
            a, targetUrl="https://shop.example/", tagOrigins=["https://landing.example", "https://*.brand.example"]
        )
    bearer = {"Authorization": f"Bearer {PUBLIC_KEY}"}
    with server.client(headers=bearer) as c:
        body = c.get("/api/verify", params={"roomId": room["id"]}).json()
        assert body["ok"] is True and body["problems"] == []
        assert body["room"] == {
            "id": room["id"],
            "exists": True,
            "inline": False,
            "targetUrl": "https://shop.example/",
            "tagOrigins": ["https://shop.example", "https://landing.example", "https://*.brand.example"],
        }
        body = c.get("/api/verify", params={"roomId": room["id"], "origin": "https://www.brand.example"}).json()
        assert body["ok"] is True and body["room"]["originAllowed"] is True
        # a tag may call from there, but the waiting room never sends a visitor back to it (not in returnOrigins)
        assert body["room"]["returnAllowed"] is False
        body = c.get("/api/verify", params={"roomId": room["id"], "origin": "https://shop.example"}).json()
        assert body["room"]["originAllowed"] is True and body["room"]["returnAllowed"] is True
        body = c.get("/api/verify", params={"roomId": room["id"], "origin": "https://elsewhere.example"}).json()
        assert body["ok"] is False and body["room"]["originAllowed"] is False
        assert body["room"]["returnAllowed"] is False
        assert body["problems"] == ["https://elsewhere.example is not in the room's tagOrigins: a tag on it fails open"]
        body = c.get("/api/verify", params={"roomId": "no-such-room"}).json()
        assert body["ok"] is False and body["room"] == {"id": "no-such-room", "exists": False}
        assert body["keyAccepted"] is True


def test_verify_says_whether_visitors_are_sent_back_to_an_origin(server: Server) -> None:
    """What a connector asks at start about its own origin: returnOrigins and the target's origin count."""
    with server.admin() as a:
        room = create_room(a, targetUrl="https://shop.example/", returnOrigins=["https://*.app.example"])
    bearer = {"Authorization": f"Bearer {PUBLIC_KEY}"}
    with server.client(headers=bearer) as c:
        for origin, allowed in [
            ("https://api.app.example", True),  # returnOrigins, by its wildcard
            ("https://shop.example", True),  # the target's own origin, always
            ("http://shop.example", False),  # the scheme must match
            ("https://app.example:8443", False),  # the wildcard needs a subdomain; the port must match
            ("not an origin", False),
        ]:
            body = c.get("/api/verify", params={"roomId": room["id"], "origin": origin}).json()
            assert body["room"]["returnAllowed"] is allowed, (origin, body)


def test_wrong_public_keys_spend_the_admin_allowance(make_server: ServerFactory) -> None:
    srv = make_server({"PUBLIC_API_KEY": PUBLIC_KEY, "ADMIN_AUTH_FAIL_PER_MIN": "3"})
    with srv.admin() as a:
        rid = str(create_room(a)["id"])
    clear_of_the_minute_turn()
    for _ in range(3):
        assert vouched(srv, rid, "198.51.100.11", key="pk-wrong").status_code == 401
    with srv.admin() as a:
        r = a.get("/api/admin/rooms")
    assert r.status_code == 429, r.text
    assert r.json()["code"] == "too_many_auth_failures"
    # a locked-out address's right key is treated as absent: 401, and the connector fails open
    r = vouched(srv, rid, "198.51.100.12")
    assert r.status_code == 401, r.text
