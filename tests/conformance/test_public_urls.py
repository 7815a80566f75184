"""Where the absolute URLs this server hands out point: PUBLIC_URL when set; otherwise, from a proxy listed in
TRUST_PROXY_IPS, its X-Forwarded-Host and X-Forwarded-Proto; otherwise the request's own Host and scheme.

Two of them are checked: the ``waitUrl`` of a door check that sends the visitor to the waiting page, and the
``url`` of a new monitor link. Every request comes from loopback, listed or not depending on the server.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from harness import Server, create_room
from test_edge_proxy import OTHER_PEER, from_peer, needs_second_loopback

ServerFactory = Callable[..., Server]

PAGE = "https://shop.example/drop?size=9"
PROXY = {"X-Forwarded-Host": "queue.example.com", "X-Forwarded-Proto": "https"}


@pytest.fixture(scope="module")
def proxied(make_module_server: ServerFactory) -> Server:
    """Loopback is the listed proxy."""
    return make_module_server({"TRUST_PROXY": "1", "TRUST_PROXY_IPS": "127.0.0.1"})


@pytest.fixture(scope="module")
def direct(make_module_server: ServerFactory) -> Server:
    """A proxy is listed, but it is not loopback: every request here is a direct client's."""
    return make_module_server({"TRUST_PROXY": "1", "TRUST_PROXY_IPS": "10.0.0.7"})


@pytest.fixture(scope="module")
def public(make_module_server: ServerFactory) -> Server:
    """PUBLIC_URL set, and loopback listed as a proxy too: PUBLIC_URL still wins."""
    return make_module_server(
        {"PUBLIC_URL": "https://waiting.example.org/", "TRUST_PROXY": "1", "TRUST_PROXY_IPS": "127.0.0.1"}
    )


def wait_url(srv: Server, client: httpx.Client) -> str:
    """The waitUrl of a door check without a pass, which sends the visitor to the waiting page."""
    with srv.admin() as a:
        rid = create_room(a)["id"]
    r = client.get("/api/check", params={"roomId": rid, "url": PAGE})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    assert body["admit"] is False and body["reason"] == "no_ticket", body
    wait: str = body["waitUrl"]
    parts = urlsplit(wait)
    assert parts.path == f"/w/{rid}" and parse_qs(parts.query)["qm_return"] == [PAGE], wait
    return f"{parts.scheme}://{parts.netloc}"


def link_url(srv: Server, **headers: str) -> str:
    """The origin a new monitor link names."""
    with srv.admin(headers=headers) as a:
        r = a.post("/api/admin/monitor-links")
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    url: str = body["url"]
    assert url.endswith(f"/#monitor={body['token']}"), url
    return url.split("/#", 1)[0]


def own_origin(srv: Server) -> str:
    return srv.base_url.rstrip("/")


def test_public_url_wins(public: Server) -> None:
    with public.client(headers=PROXY) as v:
        assert wait_url(public, v) == "https://waiting.example.org"
    with public.client() as v:
        assert wait_url(public, v) == "https://waiting.example.org"
    assert link_url(public, **PROXY) == "https://waiting.example.org"


def test_a_listed_proxy_names_the_host_and_scheme(proxied: Server) -> None:
    with proxied.client(headers=PROXY) as v:
        assert wait_url(proxied, v) == "https://queue.example.com"
    assert link_url(proxied, **PROXY) == "https://queue.example.com"
    # the first value is the one used, as for X-Forwarded-Proto
    with proxied.client(headers={"X-Forwarded-Host": "Queue.Example.com:8443, other.example"}) as v:
        assert wait_url(proxied, v) == "http://queue.example.com:8443"


def test_a_listed_proxy_without_forwarded_host_names_host(proxied: Server) -> None:
    with proxied.client(headers={"X-Forwarded-Proto": "https"}) as v:
        assert wait_url(proxied, v) == "https://" + urlsplit(proxied.base_url).netloc


@pytest.mark.parametrize(
    "forwarded", ["evil.example/phish", "user@evil.example", "evil.example:99999", "evil example", "[::1"]
)
def test_a_malformed_forwarded_host_falls_back_to_host(proxied: Server, forwarded: str) -> None:
    with proxied.client(headers={"X-Forwarded-Host": forwarded, "X-Forwarded-Proto": "https"}) as v:
        assert wait_url(proxied, v) == "https://" + urlsplit(proxied.base_url).netloc
    assert link_url(proxied, **{"X-Forwarded-Host": forwarded}) == own_origin(proxied)


def test_a_direct_clients_forwarded_host_is_ignored(direct: Server) -> None:
    with direct.client(headers=PROXY) as v:
        assert wait_url(direct, v) == own_origin(direct)
    assert link_url(direct, **PROXY) == own_origin(direct)


@needs_second_loopback
def test_an_unlisted_peer_beside_a_listed_one_is_ignored(proxied: Server) -> None:
    with from_peer(proxied, OTHER_PEER, headers=PROXY) as v:
        assert wait_url(proxied, v) == own_origin(proxied)


# ---------------------------------------------------------------------- the rendered guides

PLACEHOLDER = "https://queue.example.com"  # how the guides in the repository write this server's address
FILLED = {
    "en": "The addresses on this page were filled in with this server's own address, <code>{}</code>.",
    "th": "ที่อยู่ในหน้านี้ถูกเติมด้วยที่อยู่ของเซิร์ฟเวอร์นี้เอง คือ <code>{}</code>",
}
GUIDE = {"en": "/docs/integration", "th": "/docs/th/integration"}


def guide(client: httpx.Client, lang: str) -> str:
    r = client.get(GUIDE[lang], headers={"accept-encoding": "identity"})
    assert r.status_code == 200, r.text
    return r.text


def assert_filled(page: str, lang: str, address: str) -> None:
    assert FILLED[lang].format(address) in page
    assert f"{address}/qm.js" in page  # the script tag names this server
    assert PLACEHOLDER not in page


@pytest.mark.parametrize("lang", ["en", "th"])
def test_the_guides_name_public_url(public: Server, lang: str) -> None:
    with public.client(headers=PROXY) as v:
        assert_filled(guide(v, lang), lang, "https://waiting.example.org")


@pytest.mark.parametrize("lang", ["en", "th"])
def test_the_guides_name_a_listed_proxys_forwarded_host(proxied: Server, lang: str) -> None:
    headers = {"X-Forwarded-Host": "docs.proxy.example.net", "X-Forwarded-Proto": "https"}
    with proxied.client(headers=headers) as v:
        assert_filled(guide(v, lang), lang, "https://docs.proxy.example.net")
    with proxied.client() as v:  # the same page for a request without the header: its own Host
        assert_filled(guide(v, lang), lang, own_origin(proxied))


@pytest.mark.parametrize("lang", ["en", "th"])
def test_the_guides_name_the_host_asked_for(direct: Server, lang: str) -> None:
    port = urlsplit(direct.base_url).port
    headers = {"Host": f"queue.lan.example.net:{port}", "X-Forwarded-Host": "evil.example.net"}
    with direct.client(headers=headers) as v:  # a direct client's forwarded host is ignored
        page = guide(v, lang)
    assert_filled(page, lang, f"http://queue.lan.example.net:{port}")
    assert "evil.example.net" not in page


@pytest.mark.parametrize("lang", ["en", "th"])
def test_a_hostile_host_cannot_put_markup_in_the_guides(direct: Server, lang: str) -> None:
    hostile = 'x"><script>alert(1)</script><a href="'
    with direct.client(headers={"Host": hostile}) as v:
        r = v.get(GUIDE[lang], headers={"accept-encoding": "identity"})
    if r.status_code != 200:  # refused on the way in is as good
        assert r.status_code == 400, r.text
        return
    assert "<script" not in r.text and 'href="x"' not in r.text
    escaped = "http://x&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;a href=&quot;"
    assert FILLED[lang].format(escaped) in r.text
