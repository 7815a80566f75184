"""/docs and /docs/th over HTTP: the guides, the Thai translations and their fallback, caching, the page guard."""

from __future__ import annotations

import gzip
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from harness import Server, create_room, unique_id

ServerFactory = Callable[..., Server]

REPO_DOCS = Path(__file__).resolve().parents[2] / "docs"
NAV = {"accept": "text/html", "sec-fetch-mode": "navigate", "sec-fetch-dest": "document"}
GUIDES = {
    "operations": "Operating Queue Manager",
    "integration": "Queue Manager: integration guide",
    "configuration": "Configuration: environment variables",
}


@pytest.fixture(scope="module")
def docs_server(make_module_server: ServerFactory) -> Server:
    return make_module_server()


@pytest.fixture
def client(docs_server: Server) -> Iterator[httpx.Client]:
    # a guide is rendered on its first request (the Thai operations guide is half a megabyte of HTML:
    # about 1.5 s of CPU, several times that on a loaded machine), so the read waits longer than the default
    with docs_server.client(timeout=60.0) as c:
        yield c


def _plain(c: httpx.Client, path: str, **headers: str) -> httpx.Response:
    """A request that asks for no compression (httpx would otherwise send gzip and decode it)."""
    return c.get(path, headers={"accept-encoding": "identity", **headers})


@pytest.mark.store_independent
def test_index_lists_the_guides(client: httpx.Client) -> None:
    r = _plain(client, "/docs")
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/html; charset=utf-8"
    assert '<html lang="en">' in r.text
    for name in ("operations", "integration", "configuration", "protection", "events", "decisions"):
        assert f'href="/docs/{name}"' in r.text
    for title in GUIDES.values():
        assert title in r.text


@pytest.mark.parametrize(("name", "title"), GUIDES.items())
@pytest.mark.store_independent
def test_each_guide_renders_with_anchors_and_a_table_of_contents(client: httpx.Client, name: str, title: str) -> None:
    r = _plain(client, f"/docs/{name}")
    assert r.status_code == 200
    assert f"<title>{title} · Queue Manager</title>" in r.text
    assert re.search(r'<h2 id="[^"]+">', r.text), "headings carry ids"
    assert 'aria-labelledby="toc-title"' in r.text, "a table of contents"
    assert "<table>" in r.text, "tables are rendered"
    if name != "configuration":
        assert '<pre tabindex="0"><code' in r.text, "code blocks are rendered"
    assert r.headers["content-language"] == "en"


@pytest.mark.store_independent
def test_intra_doc_links_point_at_the_site(client: httpx.Client) -> None:
    ops = _plain(client, "/docs/operations").text
    assert 'href="/docs/integration"' in ops
    assert 'href="/docs/configuration"' in ops
    integration = _plain(client, "/docs/integration").text
    assert 'href="#1-choosing-how-to-deploy"' in integration
    assert 'id="1-choosing-how-to-deploy"' in integration


@pytest.mark.store_independent
def test_thai_index_and_guides(client: httpx.Client) -> None:
    index = _plain(client, "/docs/th")
    assert index.status_code == 200
    assert '<html lang="th">' in index.text and index.headers["content-language"] == "th"
    assert 'href="/docs/th/operations"' in index.text and 'href="/docs/th/integration"' in index.text
    ops = _plain(client, "/docs/th/operations")
    assert ops.status_code == 200
    assert "การดูแลระบบ Queue Manager" in ops.text
    assert 'href="/docs/th/integration"' in ops.text, "a Thai guide links to the Thai sibling"
    assert 'href="/docs/operations"' in ops.text, "and to its English original"
    assert "ยังไม่มีฉบับแปล" not in ops.text
    integration = _plain(client, "/docs/th/integration")
    assert integration.status_code == 200 and "คู่มือการเชื่อมต่อ" in integration.text


@pytest.mark.store_independent
def test_thai_page_without_a_translation_falls_back_to_english_with_a_notice(client: httpx.Client) -> None:
    assert not (REPO_DOCS / "th" / "configuration.md").exists()
    r = _plain(client, "/docs/th/configuration")
    assert r.status_code == 200
    assert "ยังไม่มีฉบับแปลภาษาไทย" in r.text
    assert "has no Thai translation yet" in r.text
    assert GUIDES["configuration"] in r.text
    assert '<div lang="en">' in r.text


@pytest.mark.parametrize("path", ["/docs/nope", "/docs/th/nope", "/docs/operations/extra", "/docs/th/x/y"])
@pytest.mark.store_independent
def test_unknown_doc_is_a_404_page(client: httpx.Client, path: str) -> None:
    r = _plain(client, path)
    assert r.status_code == 404
    assert r.headers["content-type"] == "text/html; charset=utf-8"
    assert "<h1>" in r.text and 'href="/docs' in r.text


@pytest.mark.parametrize(
    ("path", "location"),
    [
        ("/docs/", "/docs"),
        ("/docs/th/", "/docs/th"),
        ("/docs/OPERATIONS.md", "/docs/operations"),
        ("/docs/th/INTEGRATION.md", "/docs/th/integration"),
        ("/docs/Integration", "/docs/integration"),
    ],
)
@pytest.mark.store_independent
def test_other_spellings_redirect_to_the_canonical_address(client: httpx.Client, path: str, location: str) -> None:
    r = _plain(client, path)
    assert r.status_code == 301
    assert r.headers["location"] == location


@pytest.mark.store_independent
def test_etag_and_no_cache_make_a_reload_a_304(client: httpx.Client) -> None:
    first = _plain(client, "/docs/operations")
    etag = first.headers["etag"]
    assert first.headers["cache-control"] == "private, no-cache"
    again = _plain(client, "/docs/operations", **{"if-none-match": etag})
    assert again.status_code == 304
    assert again.content == b""
    assert again.headers["etag"] == etag
    other = _plain(client, "/docs/operations", **{"if-none-match": '"something-else"'})
    assert other.status_code == 200


@pytest.mark.store_independent
def test_gzip_when_accepted(client: httpx.Client) -> None:
    plain = _plain(client, "/docs/integration")
    with client.stream("GET", "/docs/integration", headers={"accept-encoding": "gzip"}) as r:
        raw = b"".join(r.iter_raw())
        assert r.headers["content-encoding"] == "gzip"
        assert r.headers["vary"] == "Accept-Encoding"
        assert int(r.headers["content-length"]) == len(raw) < len(plain.content) / 2
        gz_etag = r.headers["etag"]
    assert gzip.decompress(raw) == plain.content
    assert gz_etag != plain.headers["etag"]
    assert _plain(client, "/docs/integration", **{"if-none-match": gz_etag}).status_code == 304
    refused = _plain(client, "/docs/integration", **{"accept-encoding": "gzip;q=0"})
    assert "content-encoding" not in refused.headers


@pytest.mark.store_independent
def test_head_answers_the_headers_without_a_body(client: httpx.Client) -> None:
    get = _plain(client, "/docs/th/operations")
    head = client.head("/docs/th/operations", headers={"accept-encoding": "identity"})
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-length"] == get.headers["content-length"]
    assert head.headers["etag"] == get.headers["etag"]
    assert client.head("/docs/nope").status_code == 404


@pytest.mark.store_independent
def test_post_is_refused(client: httpx.Client) -> None:
    r = client.post("/docs/operations")
    assert r.status_code == 405
    assert r.json()["code"] == "method_not_allowed"


@pytest.mark.store_independent
def test_no_other_origin_and_no_script_source(client: httpx.Client) -> None:
    r = _plain(client, "/docs/integration")
    csp = r.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src" not in csp
    assert "<script" not in r.text.replace("&lt;script", "")
    # every URL the page itself loads (stylesheet, fonts, images) is on this origin
    assert not re.search(r'(src|href)="(https?:)?//', r.text.split("<main")[0])


@pytest.fixture
def own_docs(tmp_path: Path) -> Path:
    (tmp_path / "th").mkdir()
    (tmp_path / "OPERATIONS.md").write_text(
        "# Ops\n\nFirst paragraph.\n\n## Section\n\n<script>alert('md')</script>\n\n"
        '<img src=x onerror="alert(1)">\n\n[click](javascript:alert(1))\n',
        encoding="utf-8",
    )
    return tmp_path


@pytest.mark.store_independent
def test_raw_html_in_the_markdown_never_becomes_markup(make_server: ServerFactory, own_docs: Path) -> None:
    srv = make_server({"DOCS_DIR": str(own_docs)})
    with srv.client() as c:
        r = _plain(c, "/docs/operations")
    assert r.status_code == 200
    assert "<script" not in r.text and "<img" not in r.text
    assert "&lt;script&gt;alert(" in r.text
    assert 'href="javascript:' not in r.text
    # only the guides that exist in DOCS_DIR are listed
    with srv.client() as c:
        index = _plain(c, "/docs").text
    assert 'href="/docs/operations"' in index and 'href="/docs/integration"' not in index


@pytest.mark.store_independent
def test_a_changed_file_is_rendered_again_and_an_unchanged_one_is_not(
    make_server: ServerFactory, own_docs: Path
) -> None:
    srv = make_server({"DOCS_DIR": str(own_docs)})
    with srv.client() as c:
        first = _plain(c, "/docs/operations").headers["etag"]
        assert _plain(c, "/docs/operations").headers["etag"] == first
        path = own_docs / "OPERATIONS.md"
        path.write_text("# Ops\n\nA newer version of the guide.\n", encoding="utf-8")
        later = time.time() + 5  # a distinct mtime even on a coarse-grained file system
        os.utime(path, (later, later))
        r = _plain(c, "/docs/operations")
        assert r.headers["etag"] != first
        assert "A newer version of the guide." in r.text
        assert _plain(c, "/docs/operations", **{"if-none-match": first}).status_code == 200


@pytest.mark.store_independent
def test_a_docs_dir_that_is_not_a_directory_warns(make_server: ServerFactory, tmp_path: Path) -> None:
    srv = make_server({"DOCS_DIR": str(tmp_path / "missing")})
    with srv.admin() as admin:
        warnings = admin.get("/api/admin/health").json()["warnings"]
    mine = [w for w in warnings if w["variable"] == "DOCS_DIR"]
    assert mine and mine[0]["set"] == str(tmp_path / "missing") and "DOCS_DIR unset" in mine[0]["message"]
    with srv.client() as c:  # the built-in default is in effect: the repository's guides
        assert _plain(c, "/docs/operations").status_code == 200


def test_rate_guard_refuses_with_the_small_page_and_spares_the_waiting_page(make_server: ServerFactory) -> None:
    srv = make_server({"WAITING_LIMIT_PER_MIN": "2"})
    room = unique_id("docs")
    with srv.admin() as admin:
        create_room(admin, room)
    with srv.client() as c:
        assert _plain(c, "/docs", **NAV).status_code == 200
        second = _plain(c, "/docs/operations", **NAV)
        assert second.status_code == 200
        assert second.headers["x-ratelimit-remaining"] == "0"
        refused = _plain(c, "/docs/th", **NAV)
        assert refused.status_code == 429
        assert int(refused.headers["retry-after"]) > 0
        assert refused.headers["content-type"].startswith("text/html")
        assert "http-equiv=refresh" in refused.text and len(refused.content) < 2048
        # an XHR is told in plain text
        xhr = _plain(c, "/docs", accept="*/*")
        assert xhr.status_code == 429 and xhr.headers["content-type"].startswith("text/plain")
        # a 304 is a load too, and it is refused as well
        assert _plain(c, "/docs", **NAV).status_code == 429
        # the waiting page has a budget of its own
        assert _plain(c, f"/w/{room}", **NAV).status_code == 200


def test_on_an_inline_host_the_docs_live_under_the_queue_prefix(make_server: ServerFactory) -> None:
    srv = make_server()
    with srv.admin() as admin:
        create_room(admin, unique_id("inl"), targetUrl="http://shop.test", proxyOrigin="http://localhost:9")
    with srv.client(headers={"host": "shop.test"}) as c:
        r = _plain(c, "/__qm/docs/operations")
        assert r.status_code == 200
        assert 'href="/__qm/docs/integration"' in r.text and 'href="/__qm/docs/th/operations"' in r.text
        assert 'url("/__qm/fonts/' in r.text
        assert "BASE=http://shop.test/__qm " in r.text  # this server's address there: the queue's prefix on the host
        assert not re.search(r'(href|src)="/(?!__qm/)', r.text), "every link stays under the queue's prefix"
        assert _plain(c, "/__qm/docs/OPERATIONS.md").headers["location"] == "/__qm/docs/operations"
        thai = _plain(c, "/__qm/docs/th/integration")
        assert thai.status_code == 200 and 'href="/__qm/docs/integration" lang="en"' in thai.text
        # the API reference links to its document where the console's cookie reaches on this host
        api = _plain(c, "/__qm/docs/api")
        assert api.status_code == 200 and 'href="/__qm/api/admin/openapi.json"' in api.text
        assert c.get("/__qm/api/admin/openapi.json", headers=srv.admin_headers).status_code == 200
    with srv.client() as c:  # the same guide on the server's own address keeps its plain links
        assert 'href="/docs/integration"' in _plain(c, "/docs/operations").text


@pytest.mark.store_independent
def test_a_docs_dir_without_guides_says_how_to_point_at_them(make_server: ServerFactory, tmp_path: Path) -> None:
    srv = make_server({"DOCS_DIR": str(tmp_path)})
    with srv.client() as c:
        index = _plain(c, "/docs")
        assert index.status_code == 200 and "Set DOCS_DIR" in index.text
        assert _plain(c, "/docs/operations").status_code == 404
        assert _plain(c, "/docs/th/operations").status_code == 404


@pytest.mark.store_independent
def test_the_api_reference_lists_every_operation_of_the_document(docs_server: Server, client: httpx.Client) -> None:
    with docs_server.admin() as admin:
        doc = admin.get("/api/openapi.json").json()
    r = _plain(client, "/docs/api")
    assert r.status_code == 200 and r.headers["content-type"] == "text/html; charset=utf-8"
    assert "<title>HTTP API reference · Queue Manager</title>" in r.text
    assert "<script" not in r.text and "script-src" not in r.headers["content-security-policy"]
    # the link goes where the console's session cookie reaches (Path=/api/admin), so a signed-in console opens it
    assert 'href="/api/admin/openapi.json"' in r.text
    assert client.get("/api/admin/openapi.json").status_code == 401  # not public
    with docs_server.admin() as admin:
        assert admin.get("/api/admin/openapi.json").json() == doc
    listed = 0
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method in ("get", "post", "put", "delete"):
                section = re.search(rf'<section class="api-op" id="{op["operationId"]}">(.*?)</section>', r.text)
                assert section is not None, f"{method.upper()} {path} is not on /docs/api"
                assert f"<code>{method.upper()} {path}</code>" in section.group(1)
                for status in op["responses"]:
                    assert f"<td>{status}</td>" in section.group(1), (path, method, status)
                listed += 1
    assert listed == len(re.findall(r'<section class="api-op"', r.text)) > 60
    assert 'id="post_api_join"' in r.text and "<code>no_room</code>" in r.text


@pytest.mark.store_independent
def test_the_api_reference_renders_inline_code_not_backticks(client: httpx.Client) -> None:
    """The descriptions are written with Markdown inline code for the OpenAPI document; the page shows it as code."""
    r = _plain(client, "/docs/api")
    assert r.status_code == 200
    assert "`" not in r.text, re.findall(r".{60}`.{60}", r.text)[:5]
    verify = re.search(r'<section class="api-op" id="get_api_verify">(.*?)</section>', r.text)
    assert verify is not None
    assert "(<code>originAllowed</code>)" in verify.group(1) and "(<code>returnAllowed</code>)" in verify.group(1)
    assert "(<code>ok: false</code> with <code>code</code> and <code>problems</code>)" in verify.group(1)


@pytest.mark.store_independent
def test_the_api_reference_is_linked_from_both_indexes_and_has_a_thai_address(client: httpx.Client) -> None:
    assert 'href="/docs/api"' in _plain(client, "/docs").text
    th = _plain(client, "/docs/th")
    assert 'href="/docs/th/api"' in th.text
    r = _plain(client, "/docs/th/api")
    assert r.status_code == 200 and '<html lang="th">' in r.text and '<div lang="en"><h1>HTTP API reference' in r.text
    again = client.get("/docs/api", headers={"if-none-match": _plain(client, "/docs/api").headers["etag"]})
    assert again.status_code == 304
