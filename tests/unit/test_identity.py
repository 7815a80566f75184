"""The client address a request uses: socket peer unless a listed proxy forwards it; and the public base of the
absolute URLs it is handed."""

from __future__ import annotations

from dataclasses import replace

import pytest

from queue_manager.config import load_settings
from queue_manager.http.wire import Request
from queue_manager.services.identity import IdentityResolver, valid_host


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


def test_public_base_is_public_url_first() -> None:
    r = resolver(PUBLIC_URL="https://queue.example.com/", TRUST_PROXY="1", TRUST_PROXY_IPS="10.0.0.0/8")
    req = request(
        "10.0.0.7", {"Host": "10.0.0.2:8080", "X-Forwarded-Host": "shop.example", "X-Forwarded-Proto": "http"}
    )
    assert r.public_base(req) == "https://queue.example.com"


def test_public_base_from_a_listed_proxy_names_its_forwarded_host_and_scheme() -> None:
    r = resolver(TRUST_PROXY="1", TRUST_PROXY_IPS="10.0.0.0/8")
    headers = {
        "Host": "10.0.0.2:8080",
        "X-Forwarded-Host": "Queue.Example.com, evil.example",
        "X-Forwarded-Proto": "https",
    }
    assert r.public_base(request("10.0.0.7", headers)) == "https://queue.example.com"
    with_port = {"Host": "internal", "X-Forwarded-Host": "queue.example.com:8443"}
    assert r.public_base(request("10.0.0.7", with_port)) == "http://queue.example.com:8443"
    v6 = {"Host": "internal", "X-Forwarded-Host": "[2001:db8::1]:443", "X-Forwarded-Proto": "https"}
    assert r.public_base(request("10.0.0.7", v6)) == "https://[2001:db8::1]:443"
    no_forwarded_host = {"Host": "internal:8080", "X-Forwarded-Proto": "https"}
    assert r.public_base(request("10.0.0.7", no_forwarded_host)) == "https://internal:8080"


def test_public_base_ignores_a_direct_clients_forwarded_host() -> None:
    r = resolver(TRUST_PROXY="1", TRUST_PROXY_IPS="10.0.0.0/8")
    headers = {"Host": "queue.example.com", "X-Forwarded-Host": "evil.example", "X-Forwarded-Proto": "https"}
    assert r.public_base(request("203.0.113.9", headers)) == "http://queue.example.com"
    alone = resolver(TRUST_PROXY="1")  # TRUST_PROXY without a list believes nobody
    assert alone.public_base(request("10.0.0.7", headers)) == "http://queue.example.com"


def test_public_base_behind_the_edge_secret_keeps_host() -> None:
    settings = replace(load_settings({"TRUST_PROXY": "1", "TRUST_PROXY_IPS": "10.0.0.0/8"}), edge_secrets=("x" * 20,))
    r = IdentityResolver(settings)
    headers = {"Host": "queue.example.com", "X-Forwarded-Host": "evil.example", "X-Forwarded-Proto": "https"}
    assert r.public_base(request("10.0.0.7", headers)) == "https://queue.example.com"


@pytest.mark.parametrize(
    "forwarded",
    [
        "evil.example/path",
        "user@evil.example",
        "evil.example:0",
        "evil.example:65536",
        "evil.example:80x",
        "evil example",
        "evil.example?x=1",
        "-evil.example",
        "2001:db8::1",
        "[2001:db8::zz]",
        "[2001:db8::1]x",
        "[fe80::1%eth0]",
        "",
        "a" * 64 + ".example",
        "evil.example:",
    ],
)
def test_public_base_refuses_a_malformed_forwarded_host(forwarded: str) -> None:
    r = resolver(TRUST_PROXY="1", TRUST_PROXY_IPS="10.0.0.0/8")
    headers = {"Host": "queue.example.com:8080", "X-Forwarded-Host": forwarded, "X-Forwarded-Proto": "https"}
    assert r.public_base(request("10.0.0.7", headers)) == "https://queue.example.com:8080"


def test_valid_host() -> None:
    assert valid_host(" Shop.Example. ") == "shop.example."
    assert valid_host("127.0.0.1:8080") == "127.0.0.1:8080"
    assert valid_host("[::1]") == "[::1]"
    assert valid_host("localhost") == "localhost"
    assert valid_host("a,b") is None


def test_public_base_is_worked_out_once_per_request() -> None:
    r = resolver(TRUST_PROXY="1", TRUST_PROXY_IPS="10.0.0.0/8")
    req = request("10.0.0.7", {"Host": "internal", "X-Forwarded-Host": "queue.example.com"})
    first = r.public_base(req)
    req.headers[b"x-forwarded-host"] = b"elsewhere.example"
    assert r.public_base(req) is first
    assert r.resolve(req).public == first


def test_public_base_without_host_names_the_listening_address() -> None:
    assert resolver(PORT="9000").public_base(request("203.0.113.9", {})) == "http://127.0.0.1:9000"
    assert resolver(HOST="0.0.0.0", PORT="9000").public_base(request("203.0.113.9", {})) == "http://localhost:9000"
    assert resolver(HOST="::1", PORT="9000").public_base(request("203.0.113.9", {})) == "http://[::1]:9000"
