"""Access rules over HTTP, on each store: bypass by address, by a probe's header, by path and extension;
block on the door check and the join; a country read only from a trusted peer; the first match wins; every
match counted on the rule (matchCount, lastMatchAt) and in qm_access_rule_hits_total; verified crawlers
against a DNS server the module starts; the dry run; bad rules refused.

The module's server trusts one proxy hop from 127.0.0.1 (TRUST_PROXY=1), so X-Forwarded-For names the
client's address the rules see."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from dnsserver import DnsServer
from harness import Server, create_room, join, metric, unique_id, wait_until

ServerFactory = Callable[..., Server]

SECRET = "probe-" + "k" * 20
GOOGLEBOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
BROWSER = "Mozilla/5.0 (X11; Linux x86_64) Firefox/120.0"
TRUSTING = {"TRUST_PROXY": "1", "TRUST_PROXY_IPS": "127.0.0.1/32", "COUNTRY_HEADER": "CF-IPCountry"}


@pytest.fixture(scope="module")
def dns(store: str) -> Iterator[DnsServer]:
    """One DNS server per store's server, so each counts its own questions."""
    server = DnsServer().start()
    server.crawler("192.0.2.10", "crawl-192-0-2-10.googlebot.com")  # genuine
    server.crawler("192.0.2.20", "host-20.impostor.example")  # a PTR outside Google's domains
    server.crawler("192.0.2.30", "crawl-30.googlebot.com", forward=["192.0.2.99"])  # forward mismatch
    yield server
    server.stop()


@pytest.fixture(scope="module")
def server(make_module_server: ServerFactory, dns: DnsServer) -> Server:
    return make_module_server({**TRUSTING, "DNS_RESOLVER": dns.address, "CHECK_LIMIT_PER_MIN": "1000"})


def room_with(srv: Server, *rules: dict[str, Any], **fields: Any) -> str:
    """A room nobody is admitted to on the normal path (rate 0), with ``rules``."""
    with srv.admin() as a:
        return str(create_room(a, ratePerMinute=0, accessRules=list(rules), **fields)["id"])


def check(
    srv: Server, room_id: str, ip: str, *, url: str = "https://shop.example/", ua: str = BROWSER, **headers: str
) -> httpx.Response:
    with srv.client(headers={"X-Forwarded-For": ip, "User-Agent": ua, **headers}) as c:
        return c.get("/api/check", params={"roomId": room_id, "url": url})


def admitted(r: httpx.Response) -> bool:
    assert r.status_code == 200, r.text
    body = r.json()
    if body["admit"]:
        assert body["reason"] == "access_bypass" and body["state"] == "bypass" and body["doorKey"] is None
    return bool(body["admit"])


def read(srv: Server, room_id: str) -> dict[str, Any]:
    with srv.admin() as a:
        r = a.get(f"/api/admin/rooms/{room_id}")
        assert r.status_code == 200, r.text
        room: dict[str, Any] = r.json()["room"]
        return room


def test_bypass_by_address_range(server: Server) -> None:
    rid = room_with(
        server, {"id": "office", "action": "bypass", "match": {"cidrs": ["198.51.100.0/24", "2001:db8::/32"]}}
    )
    assert admitted(check(server, rid, "198.51.100.7"))
    assert admitted(check(server, rid, "2001:db8::7"))
    r = check(server, rid, "203.0.113.7")
    assert not admitted(r) and r.json()["reason"] != "access_bypass"
    assert read(server, rid)["waiting"] == 0  # a bypass takes no place


def test_a_monitoring_probe_by_its_secret_header_which_is_never_read_back(server: Server) -> None:
    probe = {"id": "probe", "action": "bypass", "match": {"header": {"name": "X-Probe", "value": SECRET}}}
    rid = room_with(server, probe)
    assert admitted(check(server, rid, "203.0.113.8", **{"X-Probe": SECRET}))
    assert not admitted(check(server, rid, "203.0.113.8", **{"X-Probe": SECRET[:-1] + "x"}))
    assert not admitted(check(server, rid, "203.0.113.8"))
    with server.admin() as a:
        for path in (f"/api/admin/rooms/{rid}", "/api/admin/rooms", f"/api/admin/rooms/{rid}/rules"):
            r = a.get(path)
            assert r.status_code == 200 and SECRET not in r.text, path
        room = a.get(f"/api/admin/rooms/{rid}").json()["room"]
        assert room["accessRules"][0]["match"]["header"] == {"name": "x-probe", "set": True}
        # the read sent straight back keeps the secret
        back = {"id": rid, "accessRules": room["accessRules"]}
        assert a.post("/api/admin/rooms", json=back).status_code in (200, 201)
    assert admitted(check(server, rid, "203.0.113.8", **{"X-Probe": SECRET}))


def test_static_assets_by_path_and_extension(server: Server) -> None:
    rid = room_with(
        server,
        {"id": "assets", "action": "bypass", "match": {"pathPrefix": "/static/"}},
        {"id": "images", "action": "bypass", "match": {"extensions": [".png", ".css"]}},
    )
    assert admitted(check(server, rid, "203.0.113.9", url="https://shop.example/static/app.js"))
    assert admitted(check(server, rid, "203.0.113.9", url="https://shop.example/img/Logo.PNG?v=2"))
    assert not admitted(check(server, rid, "203.0.113.9", url="https://shop.example/product/1"))
    rules = {r["id"]: r for r in read(server, rid)["accessRules"]}
    assert rules["assets"]["matchCount"] == 1 and rules["images"]["matchCount"] == 1


def test_block_refuses_the_door_check_and_the_join(server: Server) -> None:
    rid = room_with(server, {"id": "bad", "action": "block", "match": {"cidrs": ["203.0.113.66/32"]}})
    r = check(server, rid, "203.0.113.66")
    assert r.status_code == 403 and r.json()["code"] == "access_blocked", r.text
    with server.client(headers={"X-Forwarded-For": "203.0.113.66"}) as c:
        r = join(c, rid)
        assert r.status_code == 403 and r.json()["code"] == "access_blocked", r.text
        assert "set-cookie" not in r.headers
    with server.client(headers={"X-Forwarded-For": "203.0.113.67"}) as c:
        assert join(c, rid).status_code == 200
    assert read(server, rid)["waiting"] == 1
    assert (metric(server, "qm_access_rule_hits_total", room=rid, action="block") or 0) == 2


def test_a_bypassed_join_takes_no_place_and_is_sent_on(server: Server) -> None:
    rid = room_with(server, {"id": "office", "action": "bypass", "match": {"cidrs": ["198.51.100.0/24"]}})
    with server.client(headers={"X-Forwarded-For": "198.51.100.9"}) as c:
        r = join(c, rid, returnUrl="https://shop.example/cart")
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["state"] == "bypass" and body["token"] is None and body["accessRule"] == "office"
        assert body["redirectUrl"] == "https://shop.example/cart"
    assert read(server, rid)["waiting"] == 0


def test_first_match_wins(server: Server) -> None:
    rid = room_with(
        server,
        {"id": "checkout", "action": "queue", "match": {"pathPrefix": "/checkout"}},
        {"id": "office", "action": "bypass", "match": {"cidrs": ["198.51.100.0/24"]}},
    )
    assert not admitted(check(server, rid, "198.51.100.5", url="https://shop.example/checkout/pay"))
    assert admitted(check(server, rid, "198.51.100.5", url="https://shop.example/shop"))
    rules = {r["id"]: r for r in read(server, rid)["accessRules"]}
    assert rules["checkout"]["matchCount"] == 1 and rules["office"]["matchCount"] == 1
    assert isinstance(rules["office"]["lastMatchAt"], int)
    assert (metric(server, "qm_access_rule_hits_total", room=rid, action="queue") or 0) == 1
    assert (metric(server, "qm_access_rule_hits_total", room=rid, action="bypass") or 0) == 1


def test_a_country_from_the_trusted_proxy(server: Server) -> None:
    rid = room_with(server, {"id": "geo", "action": "block", "match": {"countries": ["DE"]}})
    assert check(server, rid, "203.0.113.10", **{"CF-IPCountry": "DE"}).status_code == 403
    assert check(server, rid, "203.0.113.10", **{"CF-IPCountry": "FR"}).status_code == 200
    assert check(server, rid, "203.0.113.10").status_code == 200


def test_a_country_from_an_untrusted_peer_is_never_believed(make_server: ServerFactory) -> None:
    srv = make_server({"COUNTRY_HEADER": "CF-IPCountry"})  # no trusted proxy: the header is anyone's
    rid = room_with(srv, {"id": "geo", "action": "block", "match": {"countries": ["DE"]}})
    assert check(srv, rid, "203.0.113.11", **{"CF-IPCountry": "DE"}).status_code == 200
    assert read(srv, rid)["accessRules"][0]["matchCount"] == 0


def test_a_verified_crawler_is_let_through_and_its_verdict_kept(server: Server, dns: DnsServer) -> None:
    rid = room_with(server, {"id": "bots", "action": "bypass", "match": {"verifiedCrawlers": ["googlebot"]}})
    assert admitted(check(server, rid, "192.0.2.10", ua=GOOGLEBOT))
    assert admitted(check(server, rid, "192.0.2.10", ua=GOOGLEBOT))
    assert dns.asked[("10.2.0.192.in-addr.arpa", "PTR")] == 1  # the second check used the kept verdict
    assert dns.asked[("crawl-192-0-2-10.googlebot.com", "A")] == 1
    # the genuine crawler's address with a browser's User-Agent is no crawler
    assert not admitted(check(server, rid, "192.0.2.10", ua=BROWSER))


def test_a_fake_crawler_is_queued(server: Server, dns: DnsServer) -> None:
    rid = room_with(server, {"id": "bots", "action": "bypass", "match": {"verifiedCrawlers": ["googlebot"]}})
    assert not admitted(check(server, rid, "192.0.2.20", ua=GOOGLEBOT))  # PTR outside googlebot.com/google.com
    assert dns.asked[("host-20.impostor.example", "A")] == 0
    assert not admitted(check(server, rid, "192.0.2.30", ua=GOOGLEBOT))  # the forward look-up disagrees
    assert dns.asked[("crawl-30.googlebot.com", "A")] == 1
    assert not admitted(check(server, rid, "192.0.2.40", ua=GOOGLEBOT))  # no PTR at all
    assert read(server, rid)["accessRules"][0]["matchCount"] == 0


def test_the_dry_run_names_the_rule_and_the_action(server: Server) -> None:
    rid = room_with(
        server,
        {"id": "probe", "action": "bypass", "match": {"header": {"name": "X-Probe", "value": SECRET}}},
        {"id": "geo", "action": "block", "match": {"countries": ["DE"]}},
        {"id": "bots", "action": "bypass", "match": {"verifiedCrawlers": ["googlebot"]}},
    )
    with server.admin() as a:

        def dry(**body: Any) -> dict[str, Any]:
            r = a.post(f"/api/admin/rooms/{rid}/rules/test", json=body)
            assert r.status_code == 200, r.text
            answer: dict[str, Any] = r.json()["access"]
            return answer

        assert dry(address="203.0.113.1", headers={"X-Probe": SECRET})["rule"]["id"] == "probe"
        geo = dry(address="203.0.113.1", country="de", path="/")
        assert geo["action"] == "block" and geo["index"] == 1 and "geo" in geo["why"]
        bot = dry(address="192.0.2.10", userAgent=GOOGLEBOT)
        assert bot["action"] == "bypass" and bot["crawler"] == {"claimed": "googlebot", "verified": True}
        fake = dry(address="192.0.2.20", userAgent=GOOGLEBOT)
        assert fake["rule"] is None and fake["crawler"] == {"claimed": "googlebot", "verified": False}
        assert a.post(f"/api/admin/rooms/{rid}/rules/test", json={"address": "nope"}).status_code == 400
        r = a.post(
            f"/api/admin/rooms/{rid}/rules/test", json={"url": "https://shop.example/x", "address": "203.0.113.1"}
        )
        assert r.status_code == 200 and "protected" in r.json() and r.json()["access"]["rule"] is None
    assert all(rule["matchCount"] == 0 for rule in read(server, rid)["accessRules"])  # a dry run counts nothing


@pytest.mark.parametrize(
    ("rules", "says"),
    [
        ([{"action": "allow", "match": {"cidrs": ["10.0.0.0/8"]}}], "accessRules[0]: action"),
        (
            [{"action": "bypass", "match": {"pathPrefix": "/"}}, {"action": "bypass", "match": {"cidrs": ["x"]}}],
            "accessRules[1]",
        ),
        (
            [{"action": "bypass", "match": {"header": {"name": "X-Probe", "set": True}}}],
            "accessRules[0]: match.header.value: the room holds no value to keep",
        ),
        ([{"action": "bypass", "match": {"pathPrefix": "/"}}] * 51, "at most 50"),
    ],
)
def test_bad_rules_are_refused_naming_the_rule(server: Server, rules: list[Any], says: str) -> None:
    with server.admin() as a:
        r = a.post(
            "/api/admin/rooms", json={"id": unique_id(), "targetUrl": "https://shop.example/", "accessRules": rules}
        )
        assert r.status_code == 400, r.text
        assert r.json()["code"] == "invalid_access_rules" and says in r.json()["error"]


def test_counts_survive_a_save_of_the_same_rules_and_restart_for_a_changed_one(server: Server) -> None:
    office = {"id": "office", "action": "bypass", "match": {"cidrs": ["198.51.100.0/24"]}}
    rid = room_with(server, office)
    assert admitted(check(server, rid, "198.51.100.1"))
    with server.admin() as a:
        assert (
            a.post("/api/admin/rooms", json={"id": rid, "accessRules": [office], "name": "renamed"}).status_code == 200
        )
        assert read(server, rid)["accessRules"][0]["matchCount"] == 1
        changed = {**office, "match": {"cidrs": ["198.51.100.0/25"]}}
        assert a.post("/api/admin/rooms", json={"id": rid, "accessRules": [changed]}).status_code == 200
    wait_until(lambda: read(server, rid)["accessRules"][0]["match"]["cidrs"] == ["198.51.100.0/25"] or None)
    assert read(server, rid)["accessRules"][0]["matchCount"] == 0
