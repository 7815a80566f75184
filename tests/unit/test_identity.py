"""The client address a request uses: socket peer unless a listed proxy forwards it."""

from __future__ import annotations

from dataclasses import replace

from queue_manager.config import load_settings
from queue_manager.http.identity import IdentityResolver
from queue_manager.http.wire import Request


def request(peer: str, headers: dict[str, str], scheme: str = "http") -> Request:
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/",
        "scheme": scheme,
        "client": (peer, 5555),
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "query_string": b"",
    }

    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": b""}

    return Request(scope, receive, "/")


def resolver(**env: str) -> IdentityResolver:
    return IdentityResolver(load_settings(env))


def test_forwarded_header_ignored_from_an_unlisted_peer() -> None:
    r = resolver(TRUST_PROXY="1")
    ident = r.resolve(request("203.0.113.9", {"X-Forwarded-For": "1.1.1.1", "X-Forwarded-Proto": "https"}))
    assert ident.ip == "203.0.113.9" and ident.scheme == "http" and not ident.trusted_peer
    assert ident.client(None).fp2 is None  # no second tier without a listed proxy


def test_listed_proxy_hops() -> None:
    r = resolver(TRUST_PROXY="1", TRUST_PROXY_IPS="10.0.0.0/8,2001:db8::/32")
    ident = r.resolve(request("10.0.0.7", {"X-Forwarded-For": "6.6.6.6, 198.51.100.4", "X-Forwarded-Proto": "https"}))
    assert ident.ip == "198.51.100.4" and ident.scheme == "https" and ident.trusted_peer
    assert r.secure(ident)
    two = resolver(TRUST_PROXY="2", TRUST_PROXY_IPS="10.0.0.0/8")
    assert two.resolve(request("10.0.0.7", {"X-Forwarded-For": "6.6.6.6, 198.51.100.4"})).ip == "6.6.6.6"
    v6 = r.resolve(request("2001:db8::1", {"X-Forwarded-For": "2001:db8:ffff::9"}))
    assert v6.ip == "2001:db8:ffff::9"
    junk = r.resolve(request("10.0.0.7", {"X-Forwarded-For": "not-an-ip"}))
    assert junk.ip == "10.0.0.7"


def test_fingerprints() -> None:
    r = resolver(TRUST_PROXY="1", TRUST_PROXY_IPS="10.0.0.0/8")
    a = r.resolve(request("10.0.0.7", {"X-Forwarded-For": "198.51.100.4", "User-Agent": "UA"})).client("c")
    b = r.resolve(request("10.0.0.8", {"X-Forwarded-For": "198.51.100.4", "User-Agent": "UA"})).client("c")
    assert a.fp != b.fp  # the strict tier pins the socket peer (another edge node)
    assert a.fp2 == b.fp2 is not None  # the second tier survives the move between edge nodes
    assert a.cookie == b.cookie and a.cookie is not None


def test_edge_secret_uses_cf_connecting_ip() -> None:
    settings = replace(load_settings({}), edge_secrets=("x" * 20,))
    r = IdentityResolver(settings)
    ident = r.resolve(request("203.0.113.9", {"CF-Connecting-IP": "198.51.100.7", "X-Forwarded-For": "1.1.1.1"}))
    assert ident.ip == "198.51.100.7" and not ident.edge_fallback
    missing = r.resolve(request("203.0.113.9", {}))
    assert missing.ip == "203.0.113.9" and missing.edge_fallback
