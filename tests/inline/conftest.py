"""Fixtures for the inline proxy tests: a real peer app process and real Queue Manager processes.

Every server these fixtures start runs once per proxy path (``proxy_path``, ids ``fast`` and ``asgi``):
``PROXY_FAST_PATH=1`` (requests the gate lets through are relayed by the server's own protocol,
inline/fastpath.py) and ``PROXY_FAST_PATH=0`` (everything through the ASGI app, inline/proxy.py). The
same black-box assertions hold for both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import httpx
import pytest

from tests.conformance.harness import Server, start_server, unique_id, wait_until
from tests.inline.peer import Peer

PROXY_PATHS = {"fast": "1", "asgi": "0"}


@pytest.fixture(scope="package")
def peer() -> Iterator[Peer]:
    p = Peer()
    try:
        yield p
    finally:
        p.stop()


@pytest.fixture(scope="package", params=list(PROXY_PATHS))
def proxy_path(request: pytest.FixtureRequest) -> str:
    """``fast`` or ``asgi``: which path the servers of this run serve proxied requests on."""
    return str(request.param)


def path_env(proxy_path: str) -> dict[str, str]:
    return {"PROXY_FAST_PATH": PROXY_PATHS[proxy_path]}


ServerFactory = Callable[..., Server]


@pytest.fixture
def make_server(proxy_path: str) -> Iterator[ServerFactory]:
    started: list[Server] = []

    def make(env: Mapping[str, str | None] | None = None) -> Server:
        srv = start_server({"PROXY_ALLOW_PRIVATE": "1", **path_env(proxy_path), **(env or {})})
        started.append(srv)
        return srv

    yield make
    for srv in started:
        srv.stop()


@pytest.fixture(scope="module")
def qm(proxy_path: str) -> Iterator[Server]:
    """One server (PROXY_ALLOW_PRIVATE=1) shared by a module's tests; each test makes its own room/host."""
    srv = start_server({"PROXY_ALLOW_PRIVATE": "1", "PROXY_TIMEOUT_MS": "3000", **path_env(proxy_path)})
    try:
        yield srv
    finally:
        srv.stop()


def inline_room(srv: Server, origin: str, host: str | None = None, **fields: Any) -> tuple[str, str]:
    """Create an inline room whose public host is ``host`` (default ``localhost:<port>``); returns (id, host)."""
    host = host or f"localhost:{srv.port}"
    room_id = fields.pop("id", None) or unique_id("in")
    body = {"id": room_id, "targetUrl": f"http://{host}", "proxyOrigin": origin, "ratePerMinute": 6000, **fields}
    with srv.admin() as admin:
        r = admin.post("/api/admin/rooms", json=body)
    assert r.status_code == 201, r.text
    return room_id, host


def visitor(srv: Server, host: str, **kwargs: Any) -> httpx.Client:
    """A client that talks to the server's socket but names ``host`` in Host (the inline public host)."""
    headers = {"Host": host, **kwargs.pop("headers", {})}
    kwargs.setdefault("timeout", 10)
    return httpx.Client(base_url=f"http://127.0.0.1:{srv.port}", headers=headers, **kwargs)


def admitted(client: httpx.Client, room_id: str) -> dict[str, Any]:
    """Join through /__qm/api/join and wait for the pass: the client's jar then carries qm_<room>."""
    r = client.post("/__qm/api/join", json={"roomId": room_id})
    assert r.status_code == 200, r.text

    def passed() -> dict[str, Any] | None:
        s = client.get("/__qm/api/status", params={"roomId": room_id}).json()
        return s if s["state"] in ("passed", "admitted") else None

    return wait_until(passed, 10, 0.1, "a pass")
