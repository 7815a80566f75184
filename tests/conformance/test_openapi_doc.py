"""``GET /api/openapi.json``: the API's description, served to a signed-in caller with the read grant.

Black-box: a real server; the document itself (complete, valid OpenAPI 3.1) is judged in
``tests/unit/test_apidoc.py`` and fuzzed against the server in ``test_fuzz_api.py``.
"""

from __future__ import annotations

import httpx
from harness import Server, unique_id

DOC = "/api/openapi.json"


def _key(admin: httpx.Client, role: str) -> str:
    r = admin.post("/api/admin/operators", json={"name": unique_id(role), "role": role})
    assert r.status_code == 201, r.text
    key: str = r.json()["key"]
    return key


def test_the_document_needs_a_signed_in_caller(server: Server) -> None:
    with server.client() as anon:
        r = anon.get(DOC)
        assert r.status_code == 401 and r.json()["code"] == "unauthorized"
        r = anon.get(DOC, headers={"Authorization": "Bearer not-a-key"})
        assert r.status_code == 401 and r.json()["code"] == "unauthorized"


def test_a_viewer_and_a_monitor_link_may_read_it(server: Server, admin: httpx.Client) -> None:
    viewer = _key(admin, "viewer")
    link = admin.post("/api/admin/monitor-links", json={})
    assert link.status_code == 201, link.text
    with server.client() as c:
        for key in (viewer, link.json()["token"]):
            r = c.get(DOC, headers={"Authorization": f"Bearer {key}"})
            assert r.status_code == 200, r.text
            assert r.json()["openapi"] == "3.1.0"


def test_it_is_json_with_an_etag_and_no_cache_and_revalidates(admin: httpx.Client) -> None:
    r = admin.get(DOC)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/json")
    assert r.headers["cache-control"] == "no-cache"
    etag = r.headers["etag"]
    doc = r.json()
    assert "/api/join" in doc["paths"] and "/api/openapi.json" in doc["paths"]
    assert doc["paths"]["/api/join"]["x-aliases"] == ["/api/v1/join"]
    again = admin.get(DOC)
    assert again.headers["etag"] == etag and again.content == r.content  # generated once per process
    cached = admin.get(DOC, headers={"If-None-Match": etag})
    assert cached.status_code == 304 and cached.content == b"" and cached.headers["etag"] == etag
    stale = admin.get(DOC, headers={"If-None-Match": '"something-else"'})
    assert stale.status_code == 200 and stale.content == r.content
    head = admin.head(DOC)
    assert head.status_code == 200 and head.content == b"" and head.headers["etag"] == etag


def test_the_versioned_alias_serves_the_same_document(admin: httpx.Client) -> None:
    plain, versioned = admin.get(DOC), admin.get("/api/v1/openapi.json")
    assert versioned.status_code == 200 and versioned.content == plain.content


def test_a_wrong_method_is_the_one_405(admin: httpx.Client) -> None:
    r = admin.post(DOC, json={})
    assert r.status_code == 405 and r.json()["code"] == "method_not_allowed"
    assert r.headers["allow"] == "GET, HEAD"
