"""The install verifier's page fetch (routes/admin/pagefetch.py) and tag scan (routes/admin/install_check.py).

The sites are ``asyncio`` servers in the test's own loop on loopback addresses. The private-address rule is
exercised per hop by treating only 127.0.0.2 as private: a public-looking first hop that redirects there
must be refused before anything is sent to it.
"""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator

import pytest

from queue_manager import ssrf
from queue_manager.routes.admin import pagefetch
from queue_manager.routes.admin.install_check import scan_tags


class Site:
    """Answers every request with ``answer`` (the raw head and body); ``hang`` answers nothing."""

    def __init__(self, host: str, answer: bytes = b"", hang: bool = False) -> None:
        self.host = host
        self.answer = answer
        self.hang = hang
        self.requests: list[bytes] = []
        self.server: asyncio.Server | None = None
        self.port = 0
        self.release = asyncio.Event()

    @property
    def origin(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, self.host, 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        self.release.set()
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        self.requests.append(head)
        if self.hang:
            await self.release.wait()
        else:
            writer.write(self.answer)
            await writer.drain()
        writer.close()


def response(status: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    lines = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in headers.items()), f"content-length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


@pytest.fixture
async def private_site() -> AsyncIterator[Site]:
    site = Site("127.0.0.2", response("200 OK", {"content-type": "text/html"}, b"<html></html>"))
    await site.start()
    yield site
    await site.stop()


async def test_a_redirect_to_a_private_address_is_refused_before_it_is_connected_to(
    private_site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ssrf, "is_private", lambda address: address == "127.0.0.2")
    first = Site("127.0.0.1", response("302 Found", {"location": f"{private_site.origin}/admin"}))
    await first.start()
    try:
        out = await pagefetch.fetch(first.origin + "/", allow_private=False)
    finally:
        await first.stop()
    assert len(first.requests) == 1 and private_site.requests == []
    assert out.refused is not None and "127.0.0.2" in out.refused and "PROXY_ALLOW_PRIVATE=1" in out.refused
    assert out.final_url == f"{private_site.origin}/admin" and out.redirects == [
        {"status": 302, "location": f"{private_site.origin}/admin"}
    ]
    assert out.as_json()["ok"] is False


async def test_the_same_redirect_is_followed_when_private_addresses_are_allowed(
    private_site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ssrf, "is_private", lambda address: address == "127.0.0.2")
    first = Site("127.0.0.1", response("302 Found", {"location": f"{private_site.origin}/admin"}))
    await first.start()
    try:
        out = await pagefetch.fetch(first.origin + "/", allow_private=True)
    finally:
        await first.stop()
    assert out.refused is None and out.status == 200 and out.body == b"<html></html>"
    assert len(private_site.requests) == 1 and private_site.requests[0].startswith(b"GET /admin HTTP/1.1")


async def test_a_site_that_never_answers_ends_at_the_time_limit() -> None:
    site = Site("127.0.0.1", hang=True)
    await site.start()
    try:
        out = await pagefetch.fetch(site.origin + "/", allow_private=True, seconds=0.3)
    finally:
        await site.stop()
    assert out.error == "no answer within 0.3 s" and out.status is None


async def test_a_content_encoding_it_cannot_bound_is_not_read() -> None:
    site = Site("127.0.0.1", response("200 OK", {"content-type": "text/html", "content-encoding": "br"}, b"xx"))
    await site.start()
    try:
        out = await pagefetch.fetch(site.origin + "/", allow_private=True)
    finally:
        await site.stop()
    assert out.error is not None and "Content-Encoding br" in out.error and out.body == b""


async def test_a_compressed_bomb_is_cut_at_the_limit() -> None:
    bomb = gzip.compress(b"<p>" + b"a" * (8 * 1024 * 1024))
    site = Site("127.0.0.1", response("200 OK", {"content-type": "text/html", "content-encoding": "gzip"}, bomb))
    await site.start()
    try:
        out = await pagefetch.fetch(site.origin + "/", allow_private=True, limit=64 * 1024)
    finally:
        await site.stop()
    assert out.truncated is True and len(out.body) == 64 * 1024


def test_the_scan_finds_every_qm_js_tag_and_only_those() -> None:
    page = b"""<!doctype html><html><head>
    <script src="/app.js"></script>
    <SCRIPT SRC="https://q.example/qm.js?v=2" DATA-ROOM="shop" async></SCRIPT>
    <script src="/__qm/qm.js" data-room="Drop"/>
    <script src="https://q.example/qm.js"></script>
    <script>var src = "qm.js";</script>
    <script src="https://q.example/notqm.js" data-room="shop"></script>
    </head><body><p>caf\xc3\xa9</p></body></html>"""
    assert scan_tags(page, "text/html; charset=utf-8") == [
        {"src": "https://q.example/qm.js?v=2", "room": "shop"},
        {"src": "/__qm/qm.js", "room": "Drop"},
        {"src": "https://q.example/qm.js", "room": None},
    ]
    assert scan_tags(b'<script src="qm.js" data-room="x">', "text/html; charset=nonsense") == [
        {"src": "qm.js", "room": "x"}
    ]
