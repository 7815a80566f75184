"""WebSocket upgrades on an inline host: gated like a page, relayed both ways once through."""

from __future__ import annotations

import json
import socket
import uuid

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from tests.conformance.harness import Server
from tests.inline.conftest import Peer, admitted, inline_room, visitor


def _ws(srv: Server, host: str, path: str, cookies: dict[str, str], **kwargs) -> ClientConnection:  # type: ignore[no-untyped-def]
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    cookie = "; ".join(f"{k}={v}" for k, v in cookies.items())
    headers = {"Cookie": cookie} if cookie else {}
    return connect(f"ws://{host}{path}", sock=sock, additional_headers=headers, open_timeout=10, **kwargs)


def _host() -> str:
    return f"{uuid.uuid4().hex[:8]}.ws.test"


def test_an_admitted_visitor_gets_the_apps_socket_relayed_both_ways(qm: Server, peer: Peer) -> None:
    room_id, host = inline_room(qm, peer.url, host=_host())
    with visitor(qm, host) as c:
        admitted(c, room_id)
        c.get("/api/echo")  # walks in: the door key cookie
        cookies = {**dict(c.cookies.items()), "qm_console": "operator-session"}
    with _ws(qm, host, "/ws?room=1", cookies, subprotocols=["chat.v1"]) as ws:
        assert ws.subprotocol == "chat.v1"
        hello = json.loads(ws.recv(timeout=10))
        seen = hello["headers"]
        assert hello["path"] == "/ws"
        assert seen["host"] == host
        assert seen["x-forwarded-for"] == "127.0.0.1"
        assert seen["x-forwarded-host"] == host and seen["x-forwarded-proto"] == "http"
        assert seen["x-forwarded-port"] == "80"
        assert "qm_console" not in seen.get("cookie", "") and f"qm_{room_id}=" in seen["cookie"]
        ws.send("hello")
        assert ws.recv(timeout=10) == "echo:hello"
        ws.send(b"\x00\x01binary")
        assert ws.recv(timeout=10) == b"\x00\x01binary"
        ws.send("close-please")
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4001  # the app's close code, relayed


def test_a_waiting_visitor_gets_503_on_the_upgrade_and_no_page(qm: Server, peer: Peer) -> None:
    _, host = inline_room(qm, peer.url, host=_host(), state="paused")
    with pytest.raises(InvalidStatus) as refused:
        _ws(qm, host, "/ws", {})
    response = refused.value.response
    assert response.status_code == 503
    assert response.headers["X-QM-Queued"]
    assert json.loads(response.body or b"{}")["code"] == "queued"
    assert "html" not in response.headers.get("Content-Type", "")


def test_upgrades_under_the_queue_prefix_are_501(qm: Server, peer: Peer) -> None:
    _, host = inline_room(qm, peer.url, host=_host())
    with pytest.raises(InvalidStatus) as refused:
        _ws(qm, host, "/__qm/events", {})
    assert refused.value.response.status_code == 501


def test_the_app_refusing_the_handshake_is_passed_on(qm: Server, peer: Peer) -> None:
    room_id, host = inline_room(qm, peer.url, host=_host())
    with visitor(qm, host) as c:
        admitted(c, room_id)
        c.get("/api/echo")
        cookies = dict(c.cookies.items())
    with pytest.raises(InvalidStatus) as refused:
        _ws(qm, host, "/ws-refuse", cookies)
    assert refused.value.response.status_code == 403


def test_a_private_origin_is_refused_for_upgrades_too(make_server, peer: Peer) -> None:  # type: ignore[no-untyped-def]
    srv = make_server({"PROXY_ALLOW_PRIVATE": None})
    room_id, host = inline_room(srv, f"http://localhost:{peer.port}", host=_host())  # a literal is refused at save
    with visitor(srv, host) as c:
        admitted(c, room_id)
        cookies = dict(c.cookies.items())
    with pytest.raises(InvalidStatus) as refused:
        _ws(srv, host, "/ws", cookies)
    assert refused.value.response.status_code == 502
    assert refused.value.response.headers["X-QM-Origin"] == "refused"
