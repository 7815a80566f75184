"""The gated wait in JSON on an inline host: a request that asks for JSON gets its place, not the page."""

from __future__ import annotations

import uuid
from urllib.parse import quote

import httpx

from tests.conformance.harness import Server
from tests.inline.conftest import inline_room, visitor
from tests.inline.peer import Peer

BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"
FIELDS = {"roomId", "state", "position", "etaSec", "retryAfterSec", "waitingUrl", "code", "reason", "roomState"}


def _host() -> str:
    return f"{uuid.uuid4().hex[:8]}.app.test"


def _is_wait(r: httpx.Response) -> dict[str, object]:
    """The gated wait's status and headers, and its body."""
    assert r.status_code == 503, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert r.headers["x-qm-queued"] == "1"
    assert r.headers["retry-after"] == "5"
    assert r.headers["cache-control"] == "no-store"
    assert "Accept" in r.headers["vary"]
    body: dict[str, object] = r.json()
    assert FIELDS <= body.keys()
    assert body["retryAfterSec"] == 5 and body["code"] == "queued"
    return body


def test_a_first_gated_request_asking_for_json_gets_the_wait_not_the_page(qm: Server, peer: Peer) -> None:
    room_id, host = inline_room(qm, peer.url, host=_host(), ratePerMinute=0)
    with visitor(qm, host) as c:
        api = c.get("/api/cart?x=1", headers={"Accept": "application/json"})
        body = _is_wait(api)
        assert body["roomId"] == room_id and body["state"] == "not_in_line" and body["reason"] == "no_ticket"
        assert body["position"] is None and body["etaSec"] is None
        back = quote(f"http://{host}/api/cart?x=1", safe="")
        assert body["waitingUrl"] == f"http://{host}/__qm/w/{room_id}?qm_return={back}"
        # the waiting room it names answers on this host
        page = c.get(str(body["waitingUrl"]).removeprefix(f"http://{host}"))
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        # the two documented headers ask for JSON even where the answer would otherwise be the page
        xhr = c.get("/orders", headers={"Accept": "text/html, */*", "X-Requested-With": "XMLHttpRequest"})
        assert _is_wait(xhr)["state"] == "not_in_line"
        nav = c.get("/orders", headers={"Sec-Fetch-Mode": "navigate", "Accept": BROWSER_ACCEPT, "X-QM-Accept": "json"})
        assert _is_wait(nav)["roomId"] == room_id
        # an Accept that prefers JSON to HTML
        assert _is_wait(c.get("/orders", headers={"Accept": "text/html;q=0.5, application/json"}))
        # HEAD: the same head, no body
        head = c.head("/api/cart", headers={"Accept": "application/json"})
        assert head.status_code == 503 and head.headers["retry-after"] == "5" and head.content == b""
        # a browser still gets the page, and the page says it varies by Accept too
        for headers in (
            {"Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document", "Accept": BROWSER_ACCEPT},
            {"Accept": BROWSER_ACCEPT},
            {"Accept": "application/json, text/html"},  # a tie goes to the page
        ):
            page = c.get("/orders", headers=headers)
            assert page.status_code == 503 and page.headers["content-type"].startswith("text/html"), headers
            assert '"apiBase":"/__qm"' in page.text
            assert "Accept" in page.headers["vary"] and page.headers["x-qm-queued"] == "1"


def test_a_gated_request_with_a_ticket_gets_its_place_and_estimate(qm: Server, peer: Peer) -> None:
    room_id, host = inline_room(qm, peer.url, host=_host(), ratePerMinute=0)
    with visitor(qm, host) as first, visitor(qm, host) as second:
        assert first.post("/__qm/api/join", json={"roomId": room_id}).status_code == 200
        joined = second.post("/__qm/api/join", json={"roomId": room_id}).json()
        assert joined["state"] == "waiting" and joined["position"] == 2
        body = _is_wait(second.get("/api/cart", headers={"Accept": "application/json"}))
        assert body["state"] == "waiting" and body["position"] == 2 and body["reason"] == "waiting"
        assert body["etaSec"] is None  # a rate of 0: the line does not move, no estimate
        assert body["roomState"] == "active"
        # the line moves at 1 a minute: the estimate is the place's minutes (the first may be let in meanwhile)
        with qm.admin() as admin:
            assert admin.post(f"/api/admin/rooms/{room_id}/rate", json={"ratePerMinute": 1}).status_code == 200
        body = _is_wait(second.get("/api/cart", headers={"X-QM-Accept": "json"}))
        assert body["state"] == "waiting" and body["position"] in (1, 2)
        assert body["etaSec"] == 60 * int(str(body["position"]))
        # the token the waiting page hands off in the URL names the place just as well
        token = str(joined["token"])
        with visitor(qm, host) as bare:
            by_query = _is_wait(bare.get(f"/api/cart?qm_token={token}", headers={"Accept": "application/json"}))
        assert by_query["state"] == "waiting" and by_query["position"] == body["position"]
        # a paused room: the place is kept, the state says paused
        with qm.admin() as admin:
            assert admin.post(f"/api/admin/rooms/{room_id}/pause", json={}).status_code == 200
        paused = _is_wait(second.get("/api/cart", headers={"Accept": "application/json"}))
        assert paused["state"] == "paused" and paused["position"] == body["position"]
        assert paused["etaSec"] is None and paused["roomState"] == "paused"
        # the browser on the same ticket still gets the page
        page = second.get("/cart", headers={"Sec-Fetch-Mode": "navigate", "Accept": BROWSER_ACCEPT})
        assert page.status_code == 503 and page.headers["content-type"].startswith("text/html")
