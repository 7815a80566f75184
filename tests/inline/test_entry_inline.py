"""An invitation on an inline host: ``?qm_token=<JWS>`` goes to the waiting page (at the visitor's URL, or in the
gated wait's ``waitingUrl``), never into the address the visitor comes back to nor into a request the app sees."""

from __future__ import annotations

import uuid
from urllib.parse import parse_qs, unquote, urlsplit

import httpx

from tests.conformance.harness import Server
from tests.conformance.invites import claims, entry_key, sign
from tests.inline.conftest import Peer, admitted, inline_room, visitor

NAVIGATE = {"Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}


def _host() -> str:
    return f"{uuid.uuid4().hex[:8]}.shop.test"


def _hits(peer: Peer, path: str) -> int:
    return int(httpx.get(f"{peer.url}/hits", params={"p": path}, timeout=5).json()["count"])


def test_an_invitation_is_carried_to_the_waiting_page_and_kept_from_the_app(qm: Server, peer: Peer) -> None:
    room_id, host = inline_room(qm, peer.url, host=_host(), ratePerMinute=0, entry="token")
    with qm.admin() as admin:
        key = entry_key(admin, room_id)
    token = sign(key["key"], key["kid"], claims(room_id, "member-3"))
    with visitor(qm, host) as c:
        page = c.get(f"/api/echo/members?tier=gold&qm_token={token}", headers=NAVIGATE)
        assert page.status_code == 503 and page.headers["content-type"].startswith("text/html")
        back = unquote(c.cookies[f"qmr_{room_id}"])
        assert back == "/api/echo/members?tier=gold"  # where the visitor comes back to: no invitation
        # an app's request: the gated wait names the waiting page with the invitation, the return without it
        api = c.get(f"/api/echo/cart?qm_token={token}", headers={"Accept": "application/json"})
        assert api.status_code == 503
        waiting = urlsplit(api.json()["waitingUrl"])
        query = parse_qs(waiting.query)
        assert query["qm_token"] == [token]
        assert "qm_token" not in query["qm_return"][0] and query["qm_return"][0].endswith("/api/echo/cart")
        # the page joins with it (as its script does, under the queue's prefix)
        joined = c.post("/__qm/api/join", json={"roomId": room_id, "token": token})
        assert joined.status_code == 200 and joined.json()["position"] == 1
    assert _hits(peer, "/api/echo/members") == 0 and _hits(peer, "/api/echo/cart") == 0


def test_an_admitted_visitor_following_an_invitation_is_sent_on_without_it(qm: Server, peer: Peer) -> None:
    room_id, host = inline_room(qm, peer.url, host=_host())
    with qm.admin() as admin:
        key = entry_key(admin, room_id)
    with visitor(qm, host) as c:
        admitted(c, room_id)
        token = sign(key["key"], key["kid"], claims(room_id))
        r = c.get(f"/api/echo/welcome?x=1&qm_token={token}", headers=NAVIGATE)
        assert r.status_code == 303, r.text
        assert r.headers["location"] == "/api/echo/welcome?x=1"
        echo = c.get("/api/echo/welcome?x=1", headers=NAVIGATE)
        assert echo.status_code == 200 and "qm_token" not in echo.json()["target"]
