"""onBackendDown on an inline host (STORE=valkey): Valkey cut through a relay the test owns.

Runs against this machine's Valkey/Redis and PostgreSQL (``TEST_VALKEY_URL`` / ``TEST_DATABASE_URL``
when set, else 127.0.0.1:6379 db 13 and a ``qm_inline_test`` database), with a key prefix and a schema
of its own, both removed afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import tempfile
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from tests.conformance.harness import Server, start_server, unique_id, wait_until
from tests.conformance.relay import Relay, through
from tests.inline.conftest import visitor
from tests.inline.peer import Peer

VALKEY_URL = os.environ.get("TEST_VALKEY_URL") or "redis://127.0.0.1:6379/13"
DATABASE_URL = os.environ.get("TEST_DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/qm_inline_test"


def _reachable(url: str, default_port: int) -> bool:
    parts = urlsplit(url)
    try:
        socket.create_connection((parts.hostname or "127.0.0.1", parts.port or default_port), timeout=1).close()
    except OSError:
        return False
    return True


_SERVICES_UP = _reachable(VALKEY_URL, 6379) and _reachable(DATABASE_URL, 5432)
if not _SERVICES_UP and (os.environ.get("CI") or os.environ.get("QM_REQUIRE_VALKEY") == "1"):
    raise RuntimeError(f"Valkey ({VALKEY_URL}) and PostgreSQL are required in CI and one is unreachable")
pytestmark = pytest.mark.skipif(
    not _SERVICES_UP, reason="needs Valkey/Redis and PostgreSQL on this machine (environment guard)"
)


async def _ensure_database() -> None:
    import asyncpg

    parts = urlsplit(DATABASE_URL)
    name = parts.path.lstrip("/")
    admin = await asyncpg.connect(urlunsplit(parts._replace(path="/postgres")))
    try:
        if not await admin.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name):
            with contextlib.suppress(asyncpg.DuplicateDatabaseError):
                await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()


async def _drop(prefix: str, schema: str) -> None:
    import asyncpg
    import redis.asyncio as redis

    r = redis.from_url(VALKEY_URL)
    try:
        keys = [k async for k in r.scan_iter(match=prefix + "*", count=500)]
        if keys:
            await r.delete(*keys)
    finally:
        await r.aclose()
    conn = await asyncpg.connect(DATABASE_URL)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


def networked_env(valkey_url: str, tag: str) -> tuple[dict[str, str], str, str]:
    """An inline server's env on STORE=valkey + SIDESTORE=pg, on a key prefix and schema of its own.

    Returns (env, prefix, schema); ``_drop(prefix, schema)`` removes what the server wrote.
    """
    suffix = uuid.uuid4().hex[:10]
    prefix, schema = f"{tag}{suffix}:", f"{tag}_{suffix}"
    env = {
        "STORE": "valkey",
        "SIDESTORE": "pg",
        "VALKEY_URL": valkey_url,
        "DATABASE_URL": DATABASE_URL,
        "VALKEY_PREFIX": prefix,
        "PG_SCHEMA": schema,
        "SPOOL_DIR": tempfile.mkdtemp(prefix=f"{tag}-spool-"),
        "PROXY_ALLOW_PRIVATE": "1",
    }
    return env, prefix, schema


@pytest.fixture
def valkey_env() -> Iterator[tuple[dict[str, str], Relay]]:
    asyncio.run(_ensure_database())
    parts = urlsplit(VALKEY_URL)
    relay = Relay(parts.hostname or "127.0.0.1", parts.port or 6379)
    env, prefix, schema = networked_env(through(relay, VALKEY_URL), "qmi")
    env["RESYNC_MS"] = "600000"
    try:
        yield env, relay
    finally:
        relay.restore()
        relay.close()
        asyncio.run(_drop(prefix, schema))


@pytest.fixture
def valkey_server(valkey_env: tuple[dict[str, str], Relay]) -> Iterator[tuple[Server, Relay]]:
    env, relay = valkey_env
    srv = start_server(env)
    try:
        yield srv, relay
    finally:
        relay.restore()
        srv.stop()


def _room(srv: Server, origin: str, mode: str) -> tuple[str, str]:
    room_id = unique_id("bd")
    host = f"{room_id}.shop.test"
    body = {"id": room_id, "targetUrl": f"http://{host}", "proxyOrigin": origin, "onBackendDown": mode}
    with srv.admin() as admin:
        r = admin.post("/api/admin/rooms", json=body)
    assert r.status_code == 201, r.text
    return room_id, host


def _ws_status(srv: Server, host: str) -> tuple[int, Any, Any]:
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    try:
        with connect(f"ws://{host}/ws", sock=sock, open_timeout=10) as ws:
            return 101, {}, json.loads(ws.recv(timeout=10))
    except InvalidStatus as err:
        return err.response.status_code, err.response.headers, err.response.body


def test_on_backend_down_open_forwards_closed_answers_retry(valkey_server: tuple[Server, Relay], peer: Peer) -> None:
    srv, relay = valkey_server
    opened, open_host = _room(srv, peer.url, "open")
    closed, closed_host = _room(srv, peer.url, "closed")
    with visitor(srv, open_host) as c:  # normal service first: gated
        assert c.get("/api/echo").status_code == 503
    relay.cut()
    with visitor(srv, open_host, timeout=60) as slow:  # the first failure may wait for its command timeout
        slow.get("/api/echo")
    with visitor(srv, open_host) as c:
        r = c.get("/api/echo")
        assert r.status_code == 200 and r.headers["x-app"] == "peer"  # open: the app, ungated
    with visitor(srv, closed_host) as c:
        page = c.get("/", headers={"Sec-Fetch-Mode": "navigate"})
        assert page.status_code == 503 and page.headers["retry-after"] == "5"
        assert page.headers["content-type"].startswith("text/html")
        api = c.get("/api/echo", headers={"Accept": "application/json"})
        assert api.status_code == 503 and api.json()["code"] == "storage_unavailable"
        # the gated wait in JSON, asked for even on a navigation: state backend_down, the page's Retry-After
        wait = c.get("/account", headers={"Sec-Fetch-Mode": "navigate", "X-QM-Accept": "json"})
        assert wait.status_code == 503 and wait.headers["content-type"].startswith("application/json")
        assert wait.headers["retry-after"] == "5" and wait.headers["cache-control"] == "no-store"
        assert "Accept" in wait.headers["vary"]
        body = wait.json()
        assert body["state"] == "backend_down" and body["roomId"] == closed and body["retryAfterSec"] == 5
        assert body["waitingUrl"].startswith(f"http://{closed_host}/__qm/w/{closed}?qm_return=")
        assert body["position"] is None and body["etaSec"] is None
    # WebSocket upgrades follow the same setting
    status, _, hello = _ws_status(srv, open_host)
    assert status == 101 and hello["path"] == "/ws"
    status, headers, _ = _ws_status(srv, closed_host)
    assert status == 503 and headers.get("Retry-After") == "5"
    relay.restore()

    def back() -> bool:
        with visitor(srv, closed_host) as c:
            r = c.get("/api/echo", headers={"Accept": "application/json"})
        return r.status_code == 503 and r.json()["code"] == "queued"

    wait_until(back, 30, 0.2, "the gate answers normally once Valkey is back")
    with srv.admin() as admin:
        metrics = admin.get("/metrics").text
        inline = admin.get("/api/admin/health").json()["inline"]
    assert inline["backendDownOpenTotal"] >= 2 and inline["backendDownClosedTotal"] >= 3
    assert "qm_proxy_backend_down_total{instance=" in metrics and 'mode="open"' in metrics
    assert opened in inline["rooms"] and closed in inline["rooms"]


def test_the_host_index_is_kept_through_the_outage(valkey_server: tuple[Server, Relay], peer: Peer) -> None:
    srv, relay = valkey_server
    _, host = _room(srv, peer.url, "closed")
    relay.cut()
    with visitor(srv, host, timeout=60) as slow:
        slow.get("/")
    # well past the index's 1 s re-read: the host is still known as inline (not the queue's own 404)
    wait_until(lambda: httpx.get(f"http://127.0.0.1:{srv.port}/healthz", timeout=5).status_code in (200, 503), 5)
    with visitor(srv, host) as c:
        for _ in range(3):
            r = c.get("/some/app/page", headers={"Accept": "application/json"})
            assert r.status_code == 503 and r.json()["code"] == "storage_unavailable"


def test_booting_while_valkey_is_down_builds_the_index_from_postgres(
    valkey_env: tuple[dict[str, str], Relay], peer: Peer
) -> None:
    env, relay = valkey_env
    first = start_server(env)
    try:
        _, host = _room(first, peer.url, "closed")
    finally:
        first.stop()
    relay.cut()
    srv = start_server(env, timeout=40)  # boots degraded, reconnecting
    try:
        with visitor(srv, host, timeout=60) as c:
            r = c.get("/some/page", headers={"Accept": "application/json"})
            # a closed room's host answers the retry reply, never a 404 or the origin
            assert r.status_code == 503 and r.json()["code"] == "storage_unavailable"
            assert r.headers["retry-after"] == "5"
        assert "inline host index built from Postgres" in srv.stderr
        relay.restore()

        def back() -> bool:
            with visitor(srv, host) as c:
                got = c.get("/some/page", headers={"Accept": "application/json"})
            return got.status_code == 503 and got.json()["code"] == "queued"

        wait_until(back, 40, 0.3, "the gate answers normally once Valkey is reachable")

        def from_valkey() -> bool:
            with srv.admin() as admin:
                return bool(admin.get("/api/admin/health").json()["inline"]["indexFrom"] == "valkey")

        wait_until(from_valkey, 10, 0.3, "the index replaced with Valkey's copy")
    finally:
        srv.stop()


async def _set_fence(prefix: str, room_id: str, on: bool) -> None:
    import redis.asyncio as redis

    from queue_manager.store.valkey.keys import room_key

    r = redis.from_url(VALKEY_URL)
    try:
        key = room_key(prefix, room_id, "fence")
        await (r.set(key, b"1") if on else r.delete(key))
    finally:
        await r.aclose()


def test_a_room_being_rebuilt_keeps_its_host(valkey_env: tuple[dict[str, str], Relay], peer: Peer) -> None:
    """While a room is fenced (being rebuilt from the journal) its host still belongs to it: the gate answers
    what onBackendDown says (503, Retry-After), never the 404 of a host no room claims, and never the app."""
    env, _relay = valkey_env
    srv = start_server(env)
    try:
        room_id, host = _room(srv, peer.url, "closed")
        with visitor(srv, host) as c:
            assert c.get("/api/echo").status_code == 503  # gated: the queue, not the app
        asyncio.run(_set_fence(env["VALKEY_PREFIX"], room_id, True))
        # a room saved on this instance re-reads the host index before its answer is sent
        _room(srv, peer.url, "closed")
        with visitor(srv, host) as c:
            page = c.get("/", headers={"Sec-Fetch-Mode": "navigate"})
            api = c.get("/api/echo", headers={"Accept": "application/json"})
        assert page.status_code == 503 and page.headers["retry-after"] == "5", page.status_code
        assert api.status_code == 503 and api.json()["code"] == "storage_unavailable", api.text
        with srv.admin() as admin:
            inline = admin.get("/api/admin/health").json()["inline"]
        assert room_id in inline["rooms"]
        asyncio.run(_set_fence(env["VALKEY_PREFIX"], room_id, False))
        with visitor(srv, host) as c:
            assert c.get("/api/echo").status_code == 503 and c.get("/api/echo").headers.get("x-qm-queued") == "1"
    finally:
        srv.stop()
