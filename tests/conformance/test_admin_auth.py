"""Admin authentication: every /api/admin/* route and /metrics need Authorization: Bearer <ADMIN_KEY>."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from harness import Server, create_room, unique_id

# (method, path, json body) — paths with {room} get a real room id.
ADMIN_ROUTES: list[tuple[str, str, Any]] = [
    ("GET", "/api/admin/rooms", None),
    ("HEAD", "/api/admin/rooms", None),
    ("POST", "/api/admin/rooms", {"id": "auth-probe", "targetUrl": "https://shop.example/"}),
    ("GET", "/api/admin/rooms/{room}", None),
    ("DELETE", "/api/admin/rooms/{room}", None),
    ("POST", "/api/admin/rooms/{room}/pause", {}),
    ("POST", "/api/admin/rooms/{room}/resume", {}),
    ("POST", "/api/admin/rooms/{room}/rate", {"ratePerMinute": 5}),
    ("POST", "/api/admin/rooms/{room}/schedule", {"opensAt": None}),
    ("POST", "/api/admin/rooms/{room}/purge", {}),
    ("POST", "/api/admin/rooms/{room}/eject", {"ticket": 1}),
    ("GET", "/api/admin/rooms/{room}/visitors/1", None),
    ("GET", "/api/admin/rooms/{room}/rules", None),
    ("POST", "/api/admin/rooms/{room}/rules/test", {"url": "https://shop.example/"}),
    ("GET", "/api/admin/health", None),
    ("GET", "/api/admin/no-such-route", None),
    ("GET", "/metrics", None),
    ("HEAD", "/metrics", None),
]

CREDENTIALS = {
    "none": {},
    "empty-bearer": {"Authorization": "Bearer"},
    "basic": {"Authorization": "Basic YWRtaW46YWRtaW4="},
    "bare-key": {"Authorization": "{key}"},
    "wrong-key": {"Authorization": "Bearer not-the-admin-key"},
    "key-prefix": {"Authorization": "Bearer {key}x"},
}


@pytest.fixture(scope="module")
def room_id(server: Server) -> str:
    with server.admin() as a:
        return str(create_room(a)["id"])


def _expand(path: str, room_id: str) -> str:
    return path.replace("{room}", room_id)


@pytest.fixture(scope="module")
def anon(server: Server) -> Iterator[httpx.Client]:
    with server.client() as c:
        yield c


def _refused(r: httpx.Response, method: str, path: str) -> None:
    assert r.status_code == 401, (method, path, r.status_code, r.text)
    if method != "HEAD":
        assert isinstance(r.json().get("code"), str), r.text


# Every admin route as written, and under the /api/v1 alias (/metrics has none).
ROUTE_PARAMS = [
    pytest.param(m, p.replace("/api/", prefix, 1), b, id=f"{m} {p.replace('/api/', prefix, 1)}")
    for prefix in ("/api/", "/api/v1/")
    for m, p, b in ADMIN_ROUTES
    if prefix == "/api/" or p.startswith("/api/")
]


@pytest.mark.parametrize("cred", ["none", "wrong-key"])
@pytest.mark.parametrize(("method", "path", "body"), ROUTE_PARAMS)
def test_admin_routes_refuse_without_the_key(
    server: Server, anon: httpx.Client, room_id: str, method: str, path: str, body: Any, cred: str
) -> None:
    path = _expand(path, room_id)
    r = anon.request(method, path, json=body, headers=CREDENTIALS[cred])
    _refused(r, method, path)


@pytest.mark.parametrize("cred", list(CREDENTIALS))
def test_malformed_credentials_refused(server: Server, anon: httpx.Client, room_id: str, cred: str) -> None:
    headers = {k: v.replace("{key}", server.admin_key) for k, v in CREDENTIALS[cred].items()}
    for method, path in (("GET", "/api/admin/rooms"), ("DELETE", f"/api/admin/rooms/{room_id}"), ("GET", "/metrics")):
        _refused(anon.request(method, path, headers=headers), method, path)


def test_refused_requests_changed_nothing(server: Server, room_id: str) -> None:
    with server.admin() as a:
        r = a.get(f"/api/admin/rooms/{room_id}")
        assert r.status_code == 200, r.text
        assert r.json()["room"]["state"] == "active"
        assert r.json()["room"]["ratePerMinute"] != 5
        assert a.get("/api/admin/rooms/auth-probe").status_code == 404


def test_right_key_works_and_v1_alias_agrees(server: Server) -> None:
    with server.admin() as a:
        room = create_room(a)
        r1 = a.get("/api/admin/rooms")
        r2 = a.get("/api/v1/admin/rooms")
        assert r1.status_code == r2.status_code == 200
        ids1 = {x["id"] for x in r1.json()["rooms"]}
        ids2 = {x["id"] for x in r2.json()["rooms"]}
        assert room["id"] in ids1
        assert ids1 == ids2
        other = unique_id()
        r = a.post("/api/v1/admin/rooms", json={"id": other, "targetUrl": "https://shop.example/"})
        assert r.status_code == 201, r.text
        assert a.get(f"/api/admin/rooms/{other}").status_code == 200
        assert a.get("/metrics").status_code == 200
        assert a.get("/api/admin/health").status_code == 200
