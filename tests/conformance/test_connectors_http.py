"""The connectors over HTTP: ``/connectors/manifest.json`` and the WordPress plugin's update feed
``/connectors/wordpress/update.json`` (absolute URLs under PUBLIC_URL, a trusted proxy's
X-Forwarded-Host, or Host; every download's bytes match the SHA-256 named; latest revalidates,
versioned is immutable; unknown names are 404)."""

from __future__ import annotations

import hashlib
import io
import zipfile
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from harness import Server

ServerFactory = Callable[..., Server]

PUBLIC = "https://waiting.example.org"
PROXY = {"X-Forwarded-Host": "queue.example.com", "X-Forwarded-Proto": "https"}


@pytest.fixture(scope="module")
def server(make_module_server: ServerFactory) -> Server:
    return make_module_server({"TRUST_PROXY": "1", "TRUST_PROXY_IPS": "127.0.0.1"})


@pytest.fixture(scope="module")
def public(make_module_server: ServerFactory) -> Server:
    return make_module_server({"PUBLIC_URL": PUBLIC + "/", "TRUST_PROXY": "1", "TRUST_PROXY_IPS": "127.0.0.1"})


def local(srv: Server, url: str) -> str:
    """An absolute URL the server handed out, fetched from the server itself (its path and query)."""
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def fetch(srv: Server, url: str, **kwargs: Any) -> httpx.Response:
    with srv.client() as c:
        return c.get(local(srv, url), **kwargs)


def test_update_feed_fields_and_its_package(server: Server) -> None:
    with server.client() as c:
        r = c.get("/connectors/wordpress/update.json")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert "no-store" in r.headers["cache-control"]
    feed = r.json()
    assert feed["slug"] == "queue-manager" and feed["name"] == "Queue Manager"
    for field in ("version", "package", "sha256", "requires", "tested", "requires_php", "homepage"):
        assert isinstance(feed[field], str) and feed[field], field
    version = feed["version"]
    assert feed["package"] == f"{server.base_url}/connectors/wordpress/wordpress-{version}.zip"
    assert {"description", "installation", "changelog"} <= set(feed["sections"])
    assert f"<h4>{version}</h4>" in feed["sections"]["changelog"]
    package = fetch(server, feed["package"])
    assert package.status_code == 200
    assert hashlib.sha256(package.content).hexdigest() == feed["sha256"]
    assert len(package.content) == feed["bytes"]
    with zipfile.ZipFile(io.BytesIO(package.content)) as zf:
        main = zf.read("queue-manager/queue-manager.php").decode()
    assert f"Version:           {version}" in main
    assert "__QM_CONNECTOR_VERSION__" not in main
    assert f"define( 'QM_PLUGIN_VERSION', '{version}' );" in main
    # the same entry as the manifest's
    with server.client() as c:
        manifest = c.get("/connectors/manifest.json").json()
    wp = next(e for e in manifest["connectors"] if e["name"] == "wordpress")
    assert wp["version"] == version
    assert wp["downloads"]["archive"]["sha256"] == feed["sha256"]
    assert wp["downloads"]["archive"]["url"] == feed["package"]


def test_update_feed_names_public_url_then_a_trusted_proxy(server: Server, public: Server) -> None:
    with public.client(headers=PROXY) as c:
        feed = c.get("/connectors/wordpress/update.json").json()
    assert feed["package"].startswith(f"{PUBLIC}/connectors/wordpress/wordpress-")
    assert feed["homepage"] == f"{PUBLIC}/connectors/wordpress/README.md"
    with server.client(headers=PROXY) as c:
        feed = c.get("/connectors/wordpress/update.json").json()
    assert feed["package"].startswith("https://queue.example.com/connectors/wordpress/wordpress-")
    assert hashlib.sha256(fetch(server, feed["package"]).content).hexdigest() == feed["sha256"]


def test_update_feed_answers_head(server: Server) -> None:
    with server.client() as c:
        r = c.head("/connectors/wordpress/update.json")
    assert r.status_code == 200 and r.content == b""


def test_manifest_urls_are_absolute_and_every_download_matches_its_sha256(server: Server) -> None:
    with server.client() as c:
        r = c.get("/connectors/manifest.json")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["manifestVersion"] == 1
    assert body["server"]["url"] == server.base_url
    names = {e["name"] for e in body["connectors"]}
    assert {"browser-tag", "wordpress"} <= names
    for entry in body["connectors"]:
        assert entry["version"], entry
        for kind, dl in entry["downloads"].items():
            for key in ("url", "latest"):
                assert dl[key].startswith(server.base_url + "/"), (entry["name"], kind, dl[key])
            got = fetch(server, dl["url"])
            assert got.status_code == 200, (dl["url"], got.status_code)
            assert hashlib.sha256(got.content).hexdigest() == dl["sha256"], dl["url"]
            assert len(got.content) == dl["bytes"]
            latest = fetch(server, dl["latest"])
            assert latest.content == got.content


def test_manifest_under_public_url_and_a_trusted_proxy(server: Server, public: Server) -> None:
    with public.client() as c:
        body = c.get("/connectors/manifest.json").json()
    assert body["server"]["url"] == PUBLIC
    wp = next(e for e in body["connectors"] if e["name"] == "wordpress")
    assert wp["downloads"]["archive"]["url"].startswith(PUBLIC + "/connectors/wordpress/")
    with server.client(headers=PROXY) as c:
        body = c.get("/connectors/manifest.json").json()
    assert body["server"]["url"] == "https://queue.example.com"
    wp = next(e for e in body["connectors"] if e["name"] == "wordpress")
    assert wp["readme"] == "https://queue.example.com/connectors/wordpress/README.md"


def test_latest_revalidates_and_versioned_is_immutable(server: Server) -> None:
    with server.client() as c:
        feed = c.get("/connectors/wordpress/update.json").json()
        latest = c.get("/connectors/wordpress/latest.zip")
        versioned = c.get(local(server, feed["package"]))
    assert latest.status_code == versioned.status_code == 200
    assert latest.content == versioned.content
    assert "no-cache" in latest.headers["cache-control"]
    assert "immutable" in versioned.headers["cache-control"]
    assert latest.headers["content-type"] == "application/zip"
    filename = feed["package"].rsplit("/", 1)[1]
    assert latest.headers["content-disposition"] == f'attachment; filename="{filename}"'
    etag = latest.headers.get("etag")
    if etag:
        with server.client() as c:
            again = c.get("/connectors/wordpress/latest.zip", headers={"If-None-Match": etag})
        assert again.status_code == 304


def test_unknown_connector_and_unknown_version_are_404(server: Server) -> None:
    with server.client() as c:
        for path in (
            "/connectors/nonesuch/latest.zip",
            "/connectors/nonesuch",
            "/connectors/wordpress/wordpress-0.0.1.zip",
            "/connectors/wordpress/latest.tgz",
            "/connectors/nonesuch/update.json",
        ):
            r = c.get(path)
            assert r.status_code == 404, (path, r.status_code)
            assert r.json()["code"] == "not_found", path
