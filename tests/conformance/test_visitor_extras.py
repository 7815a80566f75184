"""More of the visitor contract: binding of a copied pass, CORS on the door, stream caps, the waiting page."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from harness import Server, create_room, join, metric, status, unique_id, wait_for_state, wait_until

PAGE = "https://shop.example/page"


def test_a_copied_pass_is_worthless(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin, ratePerMinute=600)["id"]
    with server.client() as owner, server.client(headers={"User-Agent": "someone-else/1.0"}) as thief:
        mine = join(owner, rid).json()
        passed = wait_for_state(owner, rid, None, ("passed",), timeout=10)
        token = parse_qs(urlsplit(passed["redirectUrl"]).query)["qm_token"][0]

        # another browser (no queue cookie, another fingerprint) replays the pass from a log line
        r = thief.get("/api/check", params={"roomId": rid, "url": PAGE, "qm_token": token})
        assert r.status_code == 200
        assert r.json()["admit"] is False
        assert r.json()["reason"] == "not_owner"

        # the owner walks in; the thief, still without the door key, is told the session is elsewhere
        r = owner.get("/api/check", params={"roomId": rid, "url": PAGE, "qm_token": token})
        assert r.json()["admit"] is True
        r = thief.get("/api/check", params={"roomId": rid, "url": PAGE, "qm_token": token})
        assert r.json()["admit"] is False
        assert r.json()["reason"] in ("session_elsewhere", "not_owner")

        # joining with the copied token gives the thief a place of their own at the back
        stolen = join(thief, rid, token=token).json()
        assert stolen["ticket"] != mine["ticket"]
        assert stolen["reason"] == "not_owner"


def test_token_of_another_room_is_no_ticket(server: Server, admin: httpx.Client) -> None:
    room_a = create_room(admin, ratePerMinute=0)["id"]
    room_b = create_room(admin, ratePerMinute=0)["id"]
    with server.client() as v:
        a = join(v, room_a).json()
        before = metric(server, "qm_rejected_tokens_all_total") or 0.0
        s = status(v, room_b, a["token"])
        assert s["ticket"] is None
        b = join(v, room_b, token=a["token"]).json()
        assert b["state"] == "waiting"
        assert b["roomId"] == room_b
        assert b["position"] == 1
        assert (metric(server, "qm_rejected_tokens_all_total") or 0.0) > before
        assert status(v, room_a)["ticket"] == a["ticket"]  # the place in room A is untouched


def test_v1_aliases_for_the_visitor_routes(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin, ratePerMinute=0)["id"]
    with server.client() as v:
        r = v.post("/api/v1/join", json={"roomId": rid})
        assert r.status_code == 200, r.text
        p = r.json()
        s = v.get("/api/v1/status", params={"roomId": rid})
        assert s.status_code == 200
        assert s.json()["ticket"] == p["ticket"]
        c = v.get("/api/v1/check", params={"roomId": rid, "url": PAGE})
        assert c.status_code == 200
        assert c.json()["admit"] is False
        assert c.json()["reason"] == "waiting"


def test_door_cors(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin, targetUrl="https://shop.example/", returnOrigins=["https://*.shop.example"])["id"]
    with server.client() as v:
        for origin in ("https://shop.example", "https://www.shop.example"):
            r = v.get("/api/check", params={"roomId": rid, "url": PAGE}, headers={"Origin": origin})
            assert r.status_code == 200, (origin, r.text)
            assert r.headers.get("access-control-allow-origin") == origin
            assert r.headers.get("access-control-allow-credentials") == "true"
        r = v.get("/api/check", params={"roomId": rid, "url": PAGE}, headers={"Origin": "https://evilshop.example"})
        assert 400 <= r.status_code < 500
        assert r.status_code != 429  # a 429 would send the visitor to the waiting room, not fail open
        assert "access-control-allow-origin" not in r.headers
        assert isinstance(r.json()["code"], str)


def test_waiting_page_escapes_the_room_name(server: Server, admin: httpx.Client) -> None:
    evil = "</title><script>alert('qm')</script>"
    rid = create_room(admin, name=evil)["id"]
    with server.client() as v:
        r = v.get(f"/w/{rid}", params={"qm_return": "https://shop.example/x"})
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/html")
        assert "<script>alert('qm')" not in r.text
        assert v.head(f"/w/{rid}").status_code == 200
        missing = v.get(f"/w/{unique_id('nope')}")
        assert missing.status_code == 404
        assert "<script>alert" not in v.get("/w/%3Cscript%3Ealert(1)%3C%2Fscript%3E").text


def test_qm_js_is_served(server: Server) -> None:
    with server.client() as v:
        r = v.get("/qm.js")
        assert r.status_code == 200
        assert "javascript" in r.headers["content-type"]
        assert len(r.content) > 0


def test_streamed_body_over_the_limit(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin)["id"]

    def chunks() -> Iterator[bytes]:
        yield b'{"roomId": "' + rid.encode() + b'", "pad": "'
        for _ in range(20):
            yield b"x" * 1024
        yield b'"}'

    with server.client() as v:
        r = v.post("/api/join", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413
        assert r.json()["code"] == "payload_too_large"
        assert r.headers.get_list("set-cookie") == []


def test_stream_cap_per_address(make_server: Callable[..., Server]) -> None:
    srv = make_server({"SSE_PER_IP": "1"})
    with srv.admin() as a:
        rid = create_room(a, ratePerMinute=0)["id"]
    with srv.client() as v:
        join(v, rid)

        def open_stream() -> httpx.Response:
            return v.send(v.build_request("GET", "/events", params={"roomId": rid}), stream=True)

        first = open_stream()
        try:
            assert first.status_code == 200
            second = open_stream()
            second.read()
            second.close()
            assert second.status_code == 429
            assert second.json()["code"] == "too_many_streams"
            assert int(second.headers["retry-after"]) > 0
            assert metric(srv, "qm_sse_subscribers") == 1
        finally:
            first.close()

        # the closed stream gives its place back
        def reopened() -> bool:
            r = open_stream()
            r.close()
            return r.status_code == 200

        wait_until(reopened, timeout=5, what="a stream slot to be released")


def test_harness_cleans_up(make_server: Callable[..., Server]) -> None:
    srv = make_server()
    data_dir = srv.data_dir
    assert os.path.isdir(data_dir)
    srv.kill()
    assert srv.returncode is not None
    srv.stop()
    assert not os.path.exists(data_dir)
    with pytest.raises(httpx.TransportError):
        httpx.get(srv.base_url + "/healthz", timeout=2)


async def test_concurrent_joins_get_distinct_places(server: Server) -> None:
    rid = unique_id()
    n = 40
    async with httpx.AsyncClient(base_url=server.base_url, headers=server.admin_headers, timeout=5) as admin:
        body = {"id": rid, "targetUrl": "https://shop.example/", "ratePerMinute": 0, "queueMaxPerIp": None}
        assert (await admin.post("/api/admin/rooms", json=body)).status_code == 201
        clients = [httpx.AsyncClient(base_url=server.base_url, timeout=5) for _ in range(n)]
        try:
            answers = await asyncio.gather(*(c.post("/api/join", json={"roomId": rid}) for c in clients))
        finally:
            await asyncio.gather(*(c.aclose() for c in clients))
        assert all(r.status_code == 200 for r in answers), [r.text for r in answers if r.status_code != 200]
        payloads = [r.json() for r in answers]
        assert len({p["ticket"] for p in payloads}) == n
        assert sorted(p["position"] for p in payloads) == list(range(1, n + 1))
        room = (await admin.get(f"/api/admin/rooms/{rid}")).json()["room"]
        assert room["waiting"] == n


def test_the_queue_cookie_outlives_a_new_user_agent(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin, ratePerMinute=0)["id"]
    with server.client(headers={"User-Agent": "browser/1"}) as v:
        p = join(v, rid).json()
        v.headers["User-Agent"] = "browser/2 (updated)"
        s = status(v, rid)
        assert s["ticket"] == p["ticket"]
        assert s["reason"] is None
        assert join(v, rid).json()["ticket"] == p["ticket"]
