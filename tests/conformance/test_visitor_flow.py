"""The visitor wire end to end: join, status, promotion, the door check, limits, return URLs, /events."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from harness import (
    Server,
    cookie_attributes,
    create_room,
    iter_sse,
    join,
    metric,
    set_cookies,
    status,
    unique_id,
    wait_for_state,
)

PAGE = "https://shop.example/drop/sneaker-42?size=9"


def _check(client: httpx.Client, room_id: str, **params: str) -> httpx.Response:
    return client.get("/api/check", params={"roomId": room_id, **params})


# ---------------------------------------------------------------------- join and status


def test_join_sets_cookies_and_answers_the_payload(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin, ratePerMinute=1)["id"]
    with server.client() as v:
        r = join(v, rid)
        assert r.status_code == 200, r.text
        assert r.headers["content-type"].startswith("application/json")
        p = r.json()
        assert p["roomId"] == rid
        assert p["state"] == "waiting"
        assert p["roomState"] == "active"
        assert p["position"] == 1
        assert p["ahead"] == 0
        assert isinstance(p["ticket"], int)
        assert isinstance(p["ref"], str) and p["ref"]
        assert isinstance(p["token"], str) and p["token"]
        assert isinstance(p["etaSec"], int | float) and p["etaSec"] > 0
        assert p["ratePerMinute"] == 1
        assert isinstance(p["joinedAt"], int) and isinstance(p["now"], int)
        assert p["preQueued"] is False
        assert p["redirectUrl"] is None
        assert p["reason"] is None

        cookies = set_cookies(r)
        assert f"qm_{rid}" in cookies and f"qms_{rid}" in cookies, cookies
        assert cookies[f"qm_{rid}"].split(";", 1)[0] == f"qm_{rid}={p['token']}"
        for name in (f"qm_{rid}", f"qms_{rid}"):
            attrs = cookie_attributes(cookies[name])
            assert "httponly" in attrs, cookies[name]
            assert "samesite=lax" in cookies[name].lower().replace(" ", "")
        assert "max-age=86400" in cookies[f"qm_{rid}"].lower().replace(" ", "")  # QUEUE_COOKIE_MAX_AGE_SEC

        # the second visitor is behind the first
        with server.client() as w:
            q = join(w, rid).json()
            assert q["position"] == 2
            assert q["ahead"] == 1
            assert q["ticket"] != p["ticket"]


def test_second_join_with_the_same_cookies_keeps_the_ticket(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin, ratePerMinute=0)["id"]
    with server.client() as v:
        first = join(v, rid).json()
        again = join(v, rid).json()
        assert again["ticket"] == first["ticket"]
        assert again["ref"] == first["ref"]
        assert again["position"] == first["position"] == 1
        assert again["reason"] is None
        # the body token alone (same browser) is the same place too
        by_body = join(v, rid, token=first["token"]).json()
        assert by_body["ticket"] == first["ticket"]
    assert admin.get(f"/api/admin/rooms/{rid}").json()["room"]["waiting"] == 1


def test_anothers_token_gets_a_fresh_place_not_owner(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin, ratePerMinute=0)["id"]
    with server.client() as owner, server.client() as other, server.client() as third:
        mine = join(owner, rid).json()
        join(third, rid)
        stolen = join(other, rid, token=mine["token"])
        assert stolen.status_code == 200, stolen.text
        s = stolen.json()
        assert s["ticket"] != mine["ticket"]
        assert s["reason"] == "not_owner"
        assert s["state"] == "waiting"
        assert s["position"] == 3  # at the back
        assert s["token"] != mine["token"]
        # the owner keeps their place
        still = status(owner, rid)
        assert still["ticket"] == mine["ticket"]
        assert still["position"] == 1
        assert still["reason"] is None


def test_status_by_token_and_by_cookie(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin, ratePerMinute=0)["id"]
    with server.client() as v:
        p = join(v, rid).json()
        by_cookie = status(v, rid)
        assert by_cookie["ticket"] == p["ticket"]
        assert by_cookie["state"] == "waiting"
        assert by_cookie["position"] == 1
        assert isinstance(by_cookie["token"], str)
    with server.client() as bare:  # no cookies at all: the token names the place
        by_token = status(bare, rid, p["token"])
        assert by_token["ticket"] == p["ticket"]
        assert by_token["position"] == 1
        nothing = status(bare, rid)
        assert nothing["ticket"] is None
        assert nothing["position"] is None


# ---------------------------------------------------------------------- promotion and the door


def test_promotion_then_admission(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin, ratePerMinute=600, targetUrl="https://shop.example/")["id"]
    with server.client() as v:
        joined = join(v, rid).json()
        waiting = _check(v, rid, url=PAGE, qm_token=joined["token"])
        assert waiting.status_code == 200
        assert waiting.json()["admit"] is False

        passed = wait_for_state(v, rid, None, ("passed",), timeout=10)
        assert passed["ticket"] == joined["ticket"]
        assert passed["position"] is None
        assert isinstance(passed["passExpiresAt"], int)
        redirect = passed["redirectUrl"]
        assert isinstance(redirect, str)
        assert redirect.startswith("https://shop.example/")
        assert "qm_token=" in redirect
        token = parse_qs(urlsplit(redirect).query)["qm_token"][0]

        r = _check(v, rid, url=PAGE, qm_token=token)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["admit"] is True
        assert body["roomId"] == rid
        assert body["state"] == "admitted"
        door_key = body["doorKey"]
        assert isinstance(door_key, str) and door_key

        assert status(v, rid)["state"] == "admitted"

    # the tag on the customer's origin: no queue-host cookies, only the pass and the door key
    with server.client() as tag:
        replay = _check(tag, rid, url=PAGE, qm_token=token, dk=door_key)
        assert replay.status_code == 200, replay.text
        assert replay.json()["admit"] is True
        assert replay.json()["state"] == "admitted"


def test_check_without_a_ticket(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin)["id"]
    with server.client() as v:
        r = _check(v, rid, url=PAGE)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["admit"] is False
        assert body["reason"] == "no_ticket"
        wait = body["waitUrl"]
        assert wait.startswith(f"{server.base_url}/w/{rid}?qm_return="), wait
        assert parse_qs(urlsplit(wait).query)["qm_return"] == [PAGE]
        page = v.get(urlsplit(wait).path + "?" + urlsplit(wait).query)
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")


def test_bypass_room_admits_everyone(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin, state="bypass")["id"]
    with server.client() as v:
        r = _check(v, rid, url=PAGE)
        assert r.status_code == 200, r.text
        assert r.json()["admit"] is True
        assert r.json()["state"] == "bypass"
        r = _check(v, rid, url=PAGE, qm_token="not-a-token")
        assert r.json()["admit"] is True


def test_unknown_room_check_is_404_and_counted(server: Server) -> None:
    before = metric(server, "qm_unknown_room_checks_total") or 0.0
    with server.client() as v:
        for _ in range(2):
            r = _check(v, unique_id("nowhere"), url=PAGE)
            assert r.status_code == 404
            assert r.json()["code"] == "no_room"
    after = metric(server, "qm_unknown_room_checks_total")
    assert after is not None
    assert after >= before + 2


def test_paused_room_promotes_nobody(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin, ratePerMinute=600, state="paused")["id"]
    with server.client() as v1, server.client() as v2:
        t1 = join(v1, rid).json()
        join(v2, rid)
        end = time.monotonic() + 3.0
        while time.monotonic() < end:
            for v in (v1, v2):
                p = status(v, rid)
                assert p["state"] == "waiting", p
                assert p["roomState"] == "paused"
                assert p["etaSec"] is None
            time.sleep(0.25)
        r = _check(v1, rid, url=PAGE, qm_token=t1["token"])
        assert r.json()["admit"] is False
        assert r.json()["reason"] == "paused"
        assert admin.post(f"/api/admin/rooms/{rid}/resume").status_code == 200
        wait_for_state(v1, rid, None, ("passed",), timeout=10)


def test_queue_max_per_ip(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin, ratePerMinute=0, queueMaxPerIp=2)["id"]
    with server.client() as v1, server.client() as v2, server.client() as v3:
        a = join(v1, rid)
        b = join(v2, rid)
        assert a.status_code == b.status_code == 200
        r = join(v3, rid)
        assert r.status_code == 429, r.text
        assert r.json()["code"] == "queue_identity_limit"
        assert r.headers.get("retry-after") == "30"
        assert r.headers.get_list("set-cookie") == []
        assert "token" not in r.json()
        assert not r.json().get("token")
        # presenting a ticket you already hold is never refused
        again = join(v1, rid)
        assert again.status_code == 200, again.text
        assert again.json()["ticket"] == a.json()["ticket"]
        by_token = join(v2, rid, token=b.json()["token"])
        assert by_token.status_code == 200
        assert by_token.json()["ticket"] == b.json()["ticket"]
    assert admin.get(f"/api/admin/rooms/{rid}").json()["room"]["waiting"] == 2


# ---------------------------------------------------------------------- where a visitor is sent back to

TARGET = "https://www.shop.example/start"
ALLOWED = [
    "https://a.shop.example/x",
    "https://eu.shop.example/checkout?cart=1",
    "https://www.shop.example/other",  # the target's own origin
]
REFUSED = [
    "https://elsewhere.example/phish",
    "https://evilshop.example/x",
    "http://a.shop.example/x",
    "https://a.shop.example:8443/x",
    "/checkout",
    "https://user:pass@a.shop.example/x",
    "javascript:alert(1)",
    "https://shop.example/bare-domain-not-listed",
]


def test_return_url_policy(server: Server, admin: httpx.Client) -> None:
    rid = create_room(
        admin, targetUrl=TARGET, ratePerMinute=600, queueMaxPerIp=None, returnOrigins=["https://*.shop.example"]
    )["id"]
    before = metric(server, "qm_blocked_return_urls_total") or 0.0
    clients = {url: server.client() for url in ALLOWED + REFUSED}
    try:
        for url, c in clients.items():
            r = join(c, rid, returnUrl=url)
            assert r.status_code == 200, (url, r.text)
        after = metric(server, "qm_blocked_return_urls_total")
        assert after == before + len(REFUSED)
        for url, c in clients.items():
            p = wait_for_state(c, rid, None, ("passed",), timeout=10)
            redirect = p["redirectUrl"]
            expected = url if url in ALLOWED else TARGET
            assert redirect.startswith(expected), (url, redirect)
            assert parse_qs(urlsplit(redirect).query)["qm_token"] == [p["token"]]
    finally:
        for c in clients.values():
            c.close()
    room = admin.get(f"/api/admin/rooms/{rid}").json()["room"]
    assert room["blockedReturnUrls"] == len(REFUSED)


@pytest.mark.parametrize("url", ["https://evil.example\\.shop.example/", "https://evil.example\\x.shop.example/p"])
def test_return_url_backslash_trick_is_refused(server: Server, admin: httpx.Client, url: str) -> None:
    rid = create_room(
        admin, targetUrl=TARGET, ratePerMinute=600, queueMaxPerIp=None, returnOrigins=["https://*.shop.example"]
    )["id"]
    before = metric(server, "qm_blocked_return_urls_total") or 0.0
    with server.client() as v:
        assert join(v, rid, returnUrl=url).status_code == 200
        p = wait_for_state(v, rid, None, ("passed",), timeout=10)
    assert p["redirectUrl"].startswith(TARGET), p["redirectUrl"]
    assert metric(server, "qm_blocked_return_urls_total") == before + 1


# ---------------------------------------------------------------------- /events


def _open_stream(client: httpx.Client, room_id: str, token: str | None) -> httpx.Response:
    params = {"roomId": room_id}
    if token is not None:
        params["token"] = token
    request = client.build_request("GET", "/events", params=params, timeout=httpx.Timeout(5.0, read=5.0))
    return client.send(request, stream=True)


def test_events_stream_sends_the_payload_and_ticks(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin, ratePerMinute=0)["id"]
    with server.client() as v:
        p = join(v, rid).json()
        r = _open_stream(v, rid, p["token"])
        try:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            frames: list[dict[str, object]] = []
            deadline = time.monotonic() + 6.0
            for frame in iter_sse(r):
                if "data" in frame and frame["event"] == "message":
                    frames.append(json.loads(frame["data"]))
                if len(frames) >= 2 or time.monotonic() > deadline:
                    break
        finally:
            r.close()
        assert len(frames) >= 2, frames
        for payload in frames:
            assert payload["roomId"] == rid
            assert payload["ticket"] == p["ticket"]
            assert payload["state"] == "waiting"
            assert payload["position"] == 1


def test_events_stream_follows_promotion(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin, ratePerMinute=600, state="paused")["id"]
    with server.client() as v:
        p = join(v, rid).json()
        r = _open_stream(v, rid, None)  # the cookie names the visitor
        try:
            states = []
            deadline = time.monotonic() + 10.0
            resumed = False
            for frame in iter_sse(r):
                if "data" not in frame or frame["event"] != "message":
                    continue
                payload = json.loads(frame["data"])
                assert payload["ticket"] == p["ticket"]
                states.append(payload["state"])
                if not resumed:
                    assert admin.post(f"/api/admin/rooms/{rid}/resume").status_code == 200
                    resumed = True
                if payload["state"] == "passed":
                    assert "qm_token=" in payload["redirectUrl"]
                    break
                assert time.monotonic() < deadline, states
        finally:
            r.close()
        assert states[0] == "waiting"
        assert states[-1] == "passed"


def test_events_refresh(make_server: Callable[..., Server]) -> None:
    srv = make_server({"TOKEN_REFRESH_AFTER_MS": "1000"})
    with srv.admin() as a:
        rid = create_room(a, ratePerMinute=0)["id"]
    with srv.client() as v:
        p = join(v, rid).json()
        r = _open_stream(v, rid, p["token"])
        frames = []
        ended = False
        try:
            deadline = time.monotonic() + 8.0
            for frame in iter_sse(r):
                frames.append(frame)
                if time.monotonic() > deadline:
                    break
            else:
                ended = True
        finally:
            r.close()
        refresh = [f for f in frames if f.get("event") == "refresh"]
        assert refresh, frames
        assert refresh[0].get("data") == "{}"
        assert frames[-1].get("event") == "refresh", "the server ends the stream straight after refresh"
        assert ended, "the stream did not end after event: refresh"
        # the client reconnects with the newest token: first payload is the same place, re-signed
        r2 = _open_stream(v, rid, p["token"])
        try:
            first = next(f for f in iter_sse(r2) if f.get("event") == "message" and "data" in f)
        finally:
            r2.close()
        payload = json.loads(first["data"])
        assert payload["ticket"] == p["ticket"]
        assert isinstance(payload["token"], str) and payload["token"]
