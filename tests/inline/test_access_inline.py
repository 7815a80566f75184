"""Access rules on an inline host, on both proxy paths: a bypass is proxied straight to the app, a block
answers the room's short "not allowed" page (403, the visitor's language) or 403 access_blocked in JSON,
a rule reaches a static file too, and a request no rule matches is gated as before."""

from __future__ import annotations

import uuid

from tests.conformance.dnsserver import DnsServer
from tests.conformance.harness import Server
from tests.inline.conftest import ServerFactory, inline_room, visitor
from tests.inline.peer import Peer

GOOGLEBOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"

SECRET = "inline-probe-" + "9" * 12
NAV = {"Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document", "Accept": "text/html"}
RULES = [
    {"id": "probe", "action": "bypass", "match": {"header": {"name": "X-Probe", "value": SECRET}}},
    {"id": "open", "action": "bypass", "match": {"pathPrefix": "/page/open"}},
    {"id": "secret", "action": "block", "match": {"pathPrefix": "/page/secret"}},
    {"id": "scripts", "action": "block", "match": {"extensions": [".js"]}},
]


def test_access_rules_on_an_inline_host(qm: Server, peer: Peer) -> None:
    room_id, host = inline_room(
        qm, peer.url, host=f"{uuid.uuid4().hex[:8]}.app.test", ratePerMinute=0, accessRules=RULES
    )
    with visitor(qm, host) as c:
        assert c.get("/page/x", headers=NAV).status_code == 503  # no rule: the waiting page
        probe = c.get("/page/x", headers={**NAV, "X-Probe": SECRET})
        assert probe.status_code == 200 and "Peer app page /page/x" in probe.text
        assert c.get("/page/x", headers={**NAV, "X-Probe": "nope-" + SECRET}).status_code == 503
        opened = c.get("/page/open/1", headers=NAV)
        assert opened.status_code == 200 and "Peer app page /page/open/1" in opened.text
        page = c.get("/page/secret", headers={**NAV, "Accept-Language": "de-DE,de;q=0.9"})
        assert page.status_code == 403 and page.headers["content-type"].startswith("text/html")
        assert "Zugriff nicht erlaubt" in page.text and 'lang="de"' in page.text
        thai = c.get("/page/secret", headers={**NAV, "Accept-Language": "th"})
        assert thai.status_code == 403 and "ไม่อนุญาตให้เข้าถึง" in thai.text
        api = c.get("/page/secret/data", headers={"Accept": "application/json"})
        assert api.status_code == 403 and api.json()["code"] == "access_blocked" and api.json()["roomId"] == room_id
        assert c.head("/page/secret", headers=NAV).status_code == 403
        # a static file is the rules' too; one no rule matches still skips the gate
        assert c.get("/static/app.js").status_code == 403
        asset = c.get("/static/logo.png")
        assert asset.status_code == 200 and b"asset /static/logo.png" in asset.content
    with qm.admin() as a:
        counts = {r["id"]: r["matchCount"] for r in a.get(f"/api/admin/rooms/{room_id}").json()["room"]["accessRules"]}
    assert counts == {"probe": 1, "open": 1, "secret": 4, "scripts": 1}


def test_a_verified_crawler_on_an_inline_host(make_server: ServerFactory, peer: Peer) -> None:
    """The crawler's look-up suspends the door decision: the fast path hands the request to the ASGI path,
    which awaits the same look-up (one question asked) and proxies the crawler straight to the app."""
    dns = DnsServer().start()
    try:
        dns.crawler("127.0.0.1", "crawl-127-0-0-1.googlebot.com")
        srv = make_server({"DNS_RESOLVER": dns.address})
        rules = [{"id": "bots", "action": "bypass", "match": {"verifiedCrawlers": ["googlebot"]}}]
        room_id, host = inline_room(
            srv, peer.url, host=f"{uuid.uuid4().hex[:8]}.app.test", ratePerMinute=0, accessRules=rules
        )
        with visitor(srv, host) as c:
            assert c.get("/page/a", headers={**NAV, "User-Agent": "Firefox/120"}).status_code == 503
            for path in ("/page/a", "/page/b"):
                r = c.get(path, headers={**NAV, "User-Agent": GOOGLEBOT})
                assert r.status_code == 200 and f"Peer app page {path}" in r.text
        assert dns.asked[("1.0.0.127.in-addr.arpa", "PTR")] == 1
        with srv.admin() as a:
            room = a.get(f"/api/admin/rooms/{room_id}").json()["room"]
        assert room["accessRules"][0]["matchCount"] == 2
    finally:
        dns.stop()
