"""Which client address the server believes: EDGE_SECRET (Cloudflare), TRUST_PROXY(_IPS), undeclared proxies,
and the waiting-page guard that stands down behind one.

Every request here comes from loopback. A second loopback address (127.0.0.2, bound as the client's source
address) plays a peer that is NOT in TRUST_PROXY_IPS.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from harness import HTTP_TIMEOUT_SEC, Server, create_room, join, parse_metrics

ServerFactory = Callable[..., Server]

OTHER_PEER = "127.0.0.2"


def _can_bind(addr: str) -> bool:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((addr, 0))
        return True
    except OSError:
        return False


needs_second_loopback = pytest.mark.skipif(not _can_bind(OTHER_PEER), reason=f"cannot bind {OTHER_PEER}")


def from_peer(srv: Server, addr: str = OTHER_PEER, **kwargs: Any) -> httpx.Client:
    """A client whose socket address is ``addr`` (another loopback address)."""
    return srv.client(transport=httpx.HTTPTransport(local_address=addr), **kwargs)


def health(srv: Server, **headers: str) -> dict[str, Any]:
    r = httpx.get(
        srv.base_url + "/api/admin/health", headers={**srv.admin_headers, **headers}, timeout=HTTP_TIMEOUT_SEC
    )
    assert r.status_code == 200, r.text
    payload: dict[str, Any] = r.json()
    return payload


def warning_text(h: dict[str, Any]) -> str:
    return " | ".join(str(w.get("message", w)) if isinstance(w, dict) else str(w) for w in h["warnings"])


def suggested_trust_list(text: str) -> set[str]:
    """The networks named by the first ``TRUST_PROXY_IPS=…`` line in a warning, normalised."""
    m = re.search(r"TRUST_PROXY_IPS=([0-9A-Fa-f:./,]+[0-9A-Fa-f])", text)
    assert m, text
    return {str(ipaddress.ip_network(entry, strict=False)) for entry in m.group(1).split(",")}


def join_refused(r: httpx.Response) -> None:
    assert r.status_code == 429, r.text
    assert r.json()["code"] == "queue_identity_limit", r.text


# ====================================================================== EDGE_SECRET

OLD = "old-edge-" + "a1b2c3d4e5f6a7b8"
NEW = "new-edge-" + "f0e1d2c3b4a59687"
EDGE = {"X-QM-Edge": NEW}


@pytest.fixture(scope="module")
def edge(make_module_server: ServerFactory) -> Server:
    # TRUST_PROXY(_IPS) are ignored behind the edge secret; they are set here to prove it
    return make_module_server({"EDGE_SECRET": f"{OLD},{NEW}", "TRUST_PROXY": "1", "TRUST_PROXY_IPS": "127.0.0.1"})


def edge_admin(srv: Server, **headers: str) -> httpx.Client:
    return srv.admin(headers={**EDGE, "CF-Connecting-IP": "192.0.2.250", **headers})


def edge_metric(srv: Server, name: str) -> float:
    r = httpx.get(
        srv.base_url + "/metrics",
        headers={**srv.admin_headers, **EDGE, "CF-Connecting-IP": "192.0.2.250"},
        timeout=HTTP_TIMEOUT_SEC,
    )
    assert r.status_code == 200, r.text
    found = [v for n, _, v in parse_metrics(r.text) if n == name]
    assert found, f"{name} missing from /metrics"
    return sum(found)


def edge_health(srv: Server) -> dict[str, Any]:
    return health(srv, **EDGE, **{"CF-Connecting-IP": "192.0.2.250"})


def assert_edge_refusal(r: httpx.Response, *, page: bool) -> None:
    assert r.status_code == 403, r.text
    if page:
        assert r.headers["content-type"].startswith("text/html"), r.headers
    else:
        assert r.headers["content-type"].startswith("application/json"), r.headers
        assert r.json() == {"error": "edge_required", "code": "edge_required"}
    low = r.text.lower()
    assert "x-qm-edge" not in low and "qm-edge" not in low
    assert OLD not in r.text and NEW not in r.text


def test_edge_refuses_api_calls_without_the_header(edge: Server) -> None:
    with edge.admin() as a:
        assert_edge_refusal(a.get("/api/admin/rooms"), page=False)
        assert_edge_refusal(a.get("/metrics"), page=False)
        assert_edge_refusal(a.get("/api/admin/rooms", headers={"X-QM-Edge": NEW[:-1]}), page=False)
        assert_edge_refusal(a.get("/api/admin/rooms", headers={"X-QM-Edge": f"{OLD},{NEW}"}), page=False)
    with edge.client() as c:
        assert_edge_refusal(c.post("/api/join", json={"roomId": "x"}), page=False)
        assert_edge_refusal(c.get("/api/status", params={"roomId": "x"}), page=False)


def test_edge_refuses_a_navigation_with_a_page(edge: Server) -> None:
    with edge.client() as c:
        assert_edge_refusal(c.get("/w/some-room", headers={"Accept": "text/html,application/xhtml+xml"}), page=True)
        assert_edge_refusal(c.get("/w/some-room", headers={"Sec-Fetch-Mode": "navigate", "Accept": "*/*"}), page=True)
        # a fetch() asking for JSON gets JSON, even for the waiting page
        r = c.get("/w/some-room", headers={"Sec-Fetch-Mode": "cors", "Accept": "application/json"})
        assert_edge_refusal(r, page=False)


@pytest.mark.parametrize("secret", [OLD, NEW], ids=["old", "new"])
def test_either_rotation_value_passes(edge: Server, secret: str) -> None:
    with edge.admin(headers={"X-QM-Edge": secret}) as a:
        r = a.get("/api/admin/rooms")
        assert r.status_code == 200, r.text
    with edge.client(headers={"X-QM-Edge": secret}) as c:
        r = c.get("/w/no-such-room-here", headers={"Accept": "text/html"})
        assert r.status_code == 404  # through the gate: the queue's own answer


def test_healthz_is_the_one_exemption(edge: Server) -> None:
    with edge.client() as c:
        assert c.get("/healthz").status_code == 200
        assert c.get("/healthz", params={"probe": "do"}).status_code == 200
        r = c.head("/healthz")
        assert r.status_code == 200 and r.content == b""
        for path in ("/HEALTHZ", "//healthz", "/%68ealthz", "/healthz/", "/api/version"):
            assert_edge_refusal(c.get(path), page=False)
        assert_edge_refusal(c.post("/healthz"), page=False)


def test_cf_connecting_ip_is_the_client_address(edge: Server) -> None:
    with edge_admin(edge) as a:
        rid = create_room(a, queueMaxPerIp=1, ratePerMinute=0)["id"]  # nobody promoted: tickets stay held

    def visitor(cf: str, xff: str | None = None) -> httpx.Client:
        headers = {**EDGE, "CF-Connecting-IP": cf}
        if xff:
            headers["X-Forwarded-For"] = xff
        return edge.client(headers=headers)

    with visitor("203.0.113.1", "198.51.100.1") as v:
        assert join(v, rid).status_code == 200
    with visitor("203.0.113.2", "198.51.100.1") as v:
        assert join(v, rid).status_code == 200  # another CF address: its own place
    with visitor("203.0.113.1", "198.51.100.99") as v:
        join_refused(join(v, rid))  # same CF address: a different X-Forwarded-For buys nothing
    # the audit trail's ip is the CF address too
    with edge_admin(edge, **{"CF-Connecting-IP": "203.0.113.77", "X-Forwarded-For": "198.51.100.5"}) as a:
        assert a.post(f"/api/admin/rooms/{rid}/pause").status_code == 200
        trail = a.get("/api/admin/audit", params={"roomId": rid}).json()["audit"]
    pause = next(x for x in trail if x["action"] == "room.pause")
    assert pause["ip"] == "203.0.113.77", pause


def test_missing_cf_connecting_ip_falls_back_and_is_counted(edge: Server) -> None:
    before = edge_metric(edge, "qm_edge_client_ip_fallback_total")
    before_h = edge_health(edge)["edge"]["clientIpFallbackTotal"]
    with edge.client(headers=EDGE) as c:
        assert c.get("/api/status", params={"roomId": "x"}).status_code == 404
        assert (
            c.get("/api/status", params={"roomId": "x"}, headers={"CF-Connecting-IP": "not-an-ip"}).status_code == 404
        )
    assert edge_metric(edge, "qm_edge_client_ip_fallback_total") == before + 2
    assert edge_health(edge)["edge"]["clientIpFallbackTotal"] == before_h + 2


def test_exempt_healthz_is_not_a_client_ip_fallback(edge: Server) -> None:
    before = edge_metric(edge, "qm_edge_client_ip_fallback_total")
    with edge.client() as c:
        for _ in range(3):
            assert c.get("/healthz").status_code == 200
    assert edge_metric(edge, "qm_edge_client_ip_fallback_total") == before


def test_refusals_are_counted(edge: Server) -> None:
    before = edge_metric(edge, "qm_edge_refused")
    before_h = edge_health(edge)["edge"]["refusedTotal"]
    with edge.client() as c:
        for _ in range(3):
            assert c.get("/api/admin/rooms").status_code == 403
    assert edge_metric(edge, "qm_edge_refused") == before + 3
    h = edge_health(edge)
    assert h["edge"]["refusedTotal"] == before_h + 3
    assert h["edge"]["enforced"] is True


def test_trust_proxy_is_ignored_behind_the_edge_and_says_so(edge: Server) -> None:
    text = warning_text(edge_health(edge))
    assert "TRUST_PROXY" in text and "ignored" in text.lower(), text
    assert OLD not in str(edge_health(edge)) and NEW not in str(edge_health(edge))


def test_forged_forwarded_for_moves_nothing_behind_the_edge(edge: Server) -> None:
    with edge_admin(edge) as a:
        rid = create_room(a, queueMaxPerIp=1, ratePerMinute=0)["id"]  # nobody promoted: tickets stay held
    with edge.client(headers={**EDGE, "X-Forwarded-For": "198.51.100.1"}) as v:
        assert join(v, rid).status_code == 200
    with edge.client(headers={**EDGE, "X-Forwarded-For": "198.51.100.2"}) as v:
        join_refused(join(v, rid))


def test_forwarded_host_is_not_believed_behind_the_edge(edge: Server) -> None:
    """Cloudflare passes a client's own X-Forwarded-Host through: absolute URLs keep Host, with -Proto's scheme."""
    with edge_admin(edge) as a:
        rid = create_room(a)["id"]
    forged = {**EDGE, "X-Forwarded-Host": "evil.example", "X-Forwarded-Proto": "https"}
    with edge.client(headers=forged) as v:
        r = v.get("/api/check", params={"roomId": rid, "url": "https://shop.example/"})
    assert r.status_code == 200, r.text
    wait = r.json()["waitUrl"]
    assert wait.startswith(f"https://{edge.base_url.split('://', 1)[1]}/w/{rid}?"), wait


# ====================================================================== TRUST_PROXY / TRUST_PROXY_IPS


@pytest.fixture(scope="module")
def plain(make_module_server: ServerFactory) -> Server:
    """No proxy declared."""
    return make_module_server({})


@pytest.fixture(scope="module")
def plain_loopback(make_module_server: ServerFactory) -> Server:
    """No proxy declared; the forwarded headers come from 127.0.0.1, as from an undeclared proxy on the host."""
    return make_module_server({})


@pytest.fixture(scope="module")
def trusted(make_module_server: ServerFactory) -> Server:
    return make_module_server({"TRUST_PROXY": "1", "TRUST_PROXY_IPS": "127.0.0.1", "WAITING_LIMIT_PER_MIN": "5"})


@needs_second_loopback
def test_forwarded_for_is_ignored_without_a_declared_proxy(plain: Server) -> None:
    with plain.admin() as a:
        rid = create_room(a, queueMaxPerIp=1, ratePerMinute=0)["id"]  # nobody promoted: tickets stay held
    with from_peer(plain, headers={"X-Forwarded-For": "198.51.100.1"}) as v:
        assert join(v, rid).status_code == 200
    with from_peer(plain, headers={"X-Forwarded-For": "198.51.100.2"}) as v:
        join_refused(join(v, rid))


def test_forwarded_for_from_loopback_is_ignored_without_a_declared_proxy(plain_loopback: Server) -> None:
    with plain_loopback.admin() as a:
        rid = create_room(a, queueMaxPerIp=1, ratePerMinute=0)["id"]  # nobody promoted: tickets stay held
    with plain_loopback.client(headers={"X-Forwarded-For": "198.51.100.1"}) as v:
        assert join(v, rid).status_code == 200
    with plain_loopback.client(headers={"X-Forwarded-For": "198.51.100.2"}) as v:
        join_refused(join(v, rid))


@needs_second_loopback
def test_undeclared_proxy_is_named(plain: Server) -> None:
    with from_peer(plain) as p:
        p.get("/api/status", params={"roomId": "x"}, headers={"X-Forwarded-For": "198.51.100.9"})
        h = health(plain)
        assert h["proxy"]["forwardedFromUndeclaredPeer"] is False  # one forged header does not trip it
        for i in range(12):
            p.get("/api/status", params={"roomId": "x"}, headers={"X-Forwarded-For": f"198.51.100.{i}"})
    h = health(plain)
    assert h["proxy"]["ok"] is False
    assert h["proxy"]["forwardedFromUndeclaredPeer"] is True
    assert OTHER_PEER in h["proxy"]["undeclaredPeers"]
    assert "198.51.100" not in str(h["proxy"]["undeclaredPeers"])  # the forged values are not the proxy
    assert f"TRUST_PROXY_IPS={OTHER_PEER}" in warning_text(h)


def test_undeclared_loopback_proxy_is_named(plain_loopback: Server) -> None:
    with plain_loopback.client(headers={"X-Forwarded-For": "198.51.100.7"}) as p:
        for _ in range(12):
            p.get("/api/status", params={"roomId": "x"})
    h = health(plain_loopback)
    assert h["proxy"]["ok"] is False
    assert h["proxy"]["forwardedFromUndeclaredPeer"] is True
    assert "127.0.0.1" in h["proxy"]["undeclaredPeers"]
    assert "TRUST_PROXY_IPS=127.0.0.1" in warning_text(h)


def test_declared_proxy_forwarded_for_decides(trusted: Server) -> None:
    with trusted.admin() as a:
        rid = create_room(a, queueMaxPerIp=1, ratePerMinute=0)["id"]  # nobody promoted: tickets stay held
    with trusted.client(headers={"X-Forwarded-For": "198.51.100.1"}) as v:
        assert join(v, rid).status_code == 200
    with trusted.client(headers={"X-Forwarded-For": "198.51.100.2"}) as v:
        assert join(v, rid).status_code == 200
    with trusted.client(headers={"X-Forwarded-For": "203.0.113.200, 198.51.100.1"}) as v:
        join_refused(join(v, rid))  # one hop: the rightmost entry is the visitor
    with trusted.admin(headers={"X-Forwarded-For": "198.51.100.33"}) as a:
        assert a.post(f"/api/admin/rooms/{rid}/pause").status_code == 200
        trail = a.get("/api/admin/audit", params={"roomId": rid}).json()["audit"]
    assert next(x for x in trail if x["action"] == "room.pause")["ip"] == "198.51.100.33"
    h = health(trusted)
    assert h["proxy"]["ok"] is True and h["proxy"]["halfConfigured"] is False


@needs_second_loopback
def test_declared_proxy_list_is_the_only_one_believed(trusted: Server) -> None:
    with trusted.admin() as a:
        rid = create_room(a, queueMaxPerIp=1, ratePerMinute=0)["id"]  # nobody promoted: tickets stay held
    with from_peer(trusted, headers={"X-Forwarded-For": "198.51.100.1"}) as v:
        assert join(v, rid).status_code == 200
    with from_peer(trusted, headers={"X-Forwarded-For": "198.51.100.2"}) as v:
        join_refused(join(v, rid))
        for _ in range(12):
            v.get("/api/status", params={"roomId": "x"})
    h = health(trusted)
    assert h["proxy"]["ok"] is False
    assert h["proxy"]["undeclaredPeers"] == [OTHER_PEER]
    # the line to set is the existing entries plus it (127.0.0.1 may be spelled 127.0.0.1/32)
    assert suggested_trust_list(warning_text(h)) == {"127.0.0.1/32", f"{OTHER_PEER}/32"}, warning_text(h)


def test_declared_proxy_never_stands_the_waiting_guard_down(trusted: Server) -> None:
    with trusted.admin() as a:
        rid = create_room(a)["id"]
    html = {"Accept": "text/html"}
    with trusted.client(headers={"X-Forwarded-For": "198.51.100.61", **html}) as v:
        codes = [v.get(f"/w/{rid}").status_code for _ in range(6)]
    assert codes == [200] * 5 + [429], codes  # each visitor behind the proxy is charged
    with trusted.client(headers={"X-Forwarded-For": "198.51.100.62", **html}) as v:
        assert v.get(f"/w/{rid}").status_code == 200  # another visitor: their own budget
    assert health(trusted)["waitingPage"]["enforced"] is True


@pytest.mark.parametrize(
    ("env", "missing"),
    [({"TRUST_PROXY": "1"}, "TRUST_PROXY_IPS"), ({"TRUST_PROXY_IPS": "10.0.0.7"}, "TRUST_PROXY")],
    ids=["only-TRUST_PROXY", "only-TRUST_PROXY_IPS"],
)
def test_half_configured_proxy_is_reported(make_server: ServerFactory, env: dict[str, str], missing: str) -> None:
    srv = make_server(env)
    h = health(srv)
    assert h["proxy"]["ok"] is False
    assert h["proxy"]["halfConfigured"] is True
    assert any(
        isinstance(w, dict) and (w.get("variable") in env or missing in str(w.get("message"))) for w in h["warnings"]
    ), h["warnings"]
    assert missing in warning_text(h)


# ====================================================================== the waiting-page guard


@pytest.fixture(scope="module")
def guarded(make_module_server: ServerFactory) -> Server:
    return make_module_server({"WAITING_LIMIT_PER_MIN": "5"})


def _exhaust(srv: Server, rid: str, client: httpx.Client) -> httpx.Response:
    for _ in range(8):
        r = client.get(f"/w/{rid}", headers={"Accept": "text/html"})
        if r.status_code == 429:
            return r
    raise AssertionError("the waiting page was never throttled")


def test_waiting_page_is_throttled(guarded: Server) -> None:
    with guarded.admin() as a:
        rid = create_room(a)["id"]
    with guarded.client() as c:
        codes = [c.get(f"/w/{rid}", headers={"Accept": "text/html"}).status_code for _ in range(6)]
        assert codes == [200] * 5 + [429], codes
        r = c.get(f"/w/{rid}", headers={"Accept": "text/html"})
    assert r.status_code == 429
    assert r.headers["content-type"].startswith("text/html")
    retry = r.headers.get("retry-after")
    assert retry is not None and retry.isdigit() and int(retry) >= 1
    assert len(r.content) < 4096  # the small self-reloading page, not the waiting page
    for h in ("x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"):
        assert h in r.headers, h


def test_throttled_xhr_gets_plain_text(guarded: Server) -> None:
    with guarded.admin() as a:
        rid = create_room(a)["id"]
    with guarded.client() as c:
        _exhaust(guarded, rid, c)
        r = c.get(f"/w/{rid}", headers={"Accept": "*/*", "Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty"})
    assert r.status_code == 429
    assert r.headers["content-type"].startswith("text/plain"), r.headers["content-type"]


@needs_second_loopback
def test_guard_stands_down_for_an_undeclared_proxy_only(make_server: ServerFactory) -> None:
    srv = make_server({"WAITING_LIMIT_PER_MIN": "5"})
    with srv.admin() as a:
        rid = create_room(a)["id"]
    assert health(srv)["waitingPage"]["enforced"] is True
    html = {"Accept": "text/html"}
    with from_peer(srv) as proxy:
        for i in range(10):  # a proxy forwarding its visitors
            r = proxy.get(f"/w/{rid}", headers={**html, "X-Forwarded-For": f"198.51.100.{i}"})
            assert r.status_code == 200, (i, r.status_code)
        codes = [proxy.get(f"/w/{rid}", headers=html).status_code for _ in range(8)]
    assert codes == [200] * 8, codes  # far past the budget of 5: the guard stood down for this peer
    assert health(srv)["waitingPage"]["enforced"] is False
    with srv.client() as other:  # every other address is still throttled
        codes = [other.get(f"/w/{rid}", headers=html).status_code for _ in range(6)]
    assert codes == [200] * 5 + [429], codes
