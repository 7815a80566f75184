"""Return-URL and tag-origin policy (returnOrigins / tagOrigins)."""

from __future__ import annotations

import pytest

from queue_manager.engine.errors import EngineError
from queue_manager.engine.model import apply_fields, bare_origin
from queue_manager.engine.origins import origin_allowed, origin_of, parse_origin_pattern, url_host

TARGET = "https://www.shop.example/landing"


def patterns(*texts: str) -> tuple:
    out = tuple(parse_origin_pattern(t) for t in texts)
    assert all(out)
    return out  # type: ignore[return-value]


@pytest.mark.parametrize(
    "url, allowed",
    [
        ("https://www.shop.example/cart?x=1#top", True),  # the target's own origin, always
        ("https://www.shop.example:443/cart", True),  # default port spelled out
        ("https://www.shop.example:8443/cart", False),  # port must match
        ("http://www.shop.example/cart", False),  # scheme must match
        ("https://a.shop.example/x", True),  # wildcard covers a subdomain
        ("https://a.b.shop.example/x", True),
        ("https://shop.example/x", False),  # the wildcard needs the dot: not the bare domain
        ("https://evilshop.example/x", False),  # …and never a look-alike
        ("/relative/path", False),
        ("javascript:alert(1)", False),
        ("https://user:pass@a.shop.example/x", False),  # embedded credentials
        ("https://a.shop.example@evil.example/x", False),
        ("ftp://a.shop.example/x", False),
        ("", False),
        ("https://evil.example\\.shop.example/", False),  # a browser reads the backslash as a slash
        ("https://evil.example\\x.shop.example/p", False),
        ("https://a.shop.example\t/x", False),  # browsers strip tabs and newlines
        ("https://a.shop.example/\nx", False),
        ("https://a_b.shop.example/x", False),  # not a host name
    ],
)
def test_return_policy(url: str, allowed: bool) -> None:
    assert origin_allowed(url, TARGET, patterns("https://*.shop.example")) is allowed


@pytest.mark.parametrize(
    "text",
    [
        "https://*shop.example",
        "https://a.*.example",
        "https://shop.example/path",
        "https://shop.example?q",
        "mailto:x@y",
        "https://",
        "https://*.",
        "https://u:p@shop.example",
        7,
        "https://shop.example:99999",
    ],
)
def test_bad_patterns_are_refused(text: object) -> None:
    assert parse_origin_pattern(text) is None  # type: ignore[arg-type]


def test_pattern_round_trip() -> None:
    assert str(parse_origin_pattern("https://*.Shop.example")) == "https://*.shop.example"
    assert str(parse_origin_pattern("http://localhost:8080")) == "http://localhost:8080"
    assert str(parse_origin_pattern("https://shop.example:443")) == "https://shop.example"


def test_origin_of() -> None:
    assert origin_of("HTTPS://Shop.Example/x") == ("https", "shop.example", 443)
    assert origin_of("http://[::1]:8080/") == ("http", "::1", 8080)
    assert origin_of("https://shop.example:bad/") is None


# ---------------------------------------------------------------------- IPv6 literals keep their brackets


@pytest.mark.parametrize(
    ("text", "stored"),
    [
        ("http://[2001:db8::1]:8080", "http://[2001:db8::1]:8080"),
        ("http://[2001:DB8::1]:8080/", "http://[2001:db8::1]:8080"),
        ("https://[2001:db8::1]:443", "https://[2001:db8::1]"),
        ("http://[::1]", "http://[::1]"),
        ("http://[::ffff:192.0.2.1]:3000", "http://[::ffff:192.0.2.1]:3000"),
        ("http://192.0.2.1:8080", "http://192.0.2.1:8080"),
    ],
)
def test_an_ipv6_origin_is_spelled_with_brackets(text: str, stored: str) -> None:
    parsed = parse_origin_pattern(text)
    assert parsed is not None and str(parsed) == stored
    again = parse_origin_pattern(stored)  # what is stored reads back as the same origin
    assert again == parsed
    assert bare_origin(text) == stored


def test_url_host() -> None:
    assert url_host("2001:db8::1") == "[2001:db8::1]"
    assert url_host("[2001:db8::1]") == "[2001:db8::1]"
    assert url_host("192.0.2.1") == "192.0.2.1"
    assert url_host("shop.example") == "shop.example"


def test_a_room_with_ipv6_origins_reads_back_bracketed_and_loads_again() -> None:
    body = {
        "id": "v6",
        "targetUrl": "http://[2001:db8::10]:8080/shop",
        "proxyOrigin": "http://[2001:db8::1]:8080",
        "returnOrigins": ["https://[2001:db8::2]"],
        "tagOrigins": ["http://[2001:db8::3]:3000"],
    }
    cfg, _ = apply_fields(None, body)
    public = cfg.to_public()
    assert public["proxyOrigin"] == "http://[2001:db8::1]:8080"
    assert public["returnOrigins"] == ["https://[2001:db8::2]"]
    assert public["tagOrigins"] == ["http://[2001:db8::3]:3000"]
    assert public["targetUrl"] == "http://[2001:db8::10]:8080/shop"
    # a store keeps the public form and rebuilds the room from it (store/valkey/codec.py)
    again, _ = apply_fields(None, {k: public[k] for k in body})
    assert again.to_public() == public
    assert origin_allowed("https://[2001:db8::2]/back", cfg.target_url, cfg.return_origins)


def test_an_ipv6_proxy_origin_on_the_rooms_own_public_host_is_a_loop() -> None:
    # read back without brackets, the origin named no host at all and the loop went unnoticed
    with pytest.raises(EngineError) as refused:
        apply_fields(
            None, {"id": "v6", "targetUrl": "http://[2001:db8::1]/", "proxyOrigin": "http://[2001:db8::1]:8080"}
        )
    assert refused.value.code == "proxy_origin_loop"
