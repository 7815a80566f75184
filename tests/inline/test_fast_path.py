"""What the inline fast path (inline/fastpath.py, inline/relay.py) must get exactly right, over real sockets.

Every test runs against real server processes on both proxy paths (``[fast]``: ``PROXY_FAST_PATH=1``,
``[asgi]``: ``PROXY_FAST_PATH=0``, from conftest's ``proxy_path``) and a real peer app process; the same
answers are expected from both. Where an HTTP client library would hide what is checked (pipelining,
HTTP/1.0, ``Expect: 100-continue``, the bytes after a HEAD answer, a connection closed by the server),
the tests speak HTTP/1.1 on a raw socket (:class:`Wire`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.conformance.harness import Server, start_server, unique_id
from tests.inline.conftest import Peer, admitted, inline_room, path_env, visitor

# test_backend_down.py's environment guard comes with these: the Held tests are skipped when Valkey or
# PostgreSQL is down here, and the import fails under CI / QM_REQUIRE_VALKEY=1
from tests.inline.test_backend_down import _SERVICES_UP, VALKEY_URL, _drop, _ensure_database, networked_env

# ---------------------------------------------------------------------- a raw HTTP/1.x client


@dataclass
class Answer:
    version: str
    status: int
    headers: dict[str, list[str]] = field(default_factory=dict)
    body: bytes = b""
    chunked: bool = False

    def header(self, name: str) -> str | None:
        values = self.headers.get(name.lower())
        return values[-1] if values else None

    def json(self) -> Any:
        return json.loads(self.body)


class Wire:
    """One client connection: write bytes as given, read answers one at a time, see the server close."""

    def __init__(self, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Wire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> bool:
        chunk = self.sock.recv(65536)
        if not chunk:
            return False
        self.buf += chunk
        return True

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            if not self._fill():
                raise EOFError(f"the connection closed mid-line (had {self.buf[:200]!r})")
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def _exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            if not self._fill():
                raise EOFError(f"the connection closed {n - len(self.buf)} bytes short of {n}")
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def head(self) -> Answer:
        """The next status line and headers (an interim ``100 Continue`` is an answer of its own)."""
        while b"\r\n\r\n" not in self.buf:
            if not self._fill():
                raise EOFError(f"the connection closed before a whole head (had {self.buf[:200]!r})")
        raw, _, self.buf = self.buf.partition(b"\r\n\r\n")
        status_line, *lines = raw.decode("latin-1").split("\r\n")
        version, status, *_ = status_line.split(" ", 2)
        answer = Answer(version, int(status))
        for line in lines:
            name, _, value = line.partition(":")
            answer.headers.setdefault(name.strip().lower(), []).append(value.strip())
        answer.chunked = "chunked" in (answer.header("transfer-encoding") or "").lower()
        return answer

    def chunk(self) -> bytes | None:
        """One chunk of a chunked body; None for the last (trailers skipped)."""
        size = int(self._line().split(b";", 1)[0], 16)
        if size == 0:
            while self._line():
                pass
            return None
        data = self._exactly(size)
        assert self._exactly(2) == b"\r\n", "a chunk not followed by CRLF"
        return data

    def body(self, answer: Answer, head_request: bool = False) -> bytes:
        if head_request or answer.status < 200 or answer.status in (204, 304):
            return b""
        if answer.chunked:
            parts = []
            while (part := self.chunk()) is not None:
                parts.append(part)
            return b"".join(parts)
        length = answer.header("content-length")
        if length is not None:
            return self._exactly(int(length))
        while self._fill():  # the body ends with the connection
            pass
        out, self.buf = self.buf, b""
        return out

    def answer(self, head_request: bool = False) -> Answer:
        a = self.head()
        a.body = self.body(a, head_request)
        return a

    def closed_within(self, seconds: float) -> bool:
        """True once the server closes the connection (EOF or reset) within ``seconds``; False if it stays open."""
        self.sock.settimeout(seconds)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
                self.buf += chunk
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
        finally:
            self.sock.settimeout(10)

    def nothing_pending(self, seconds: float = 0.3) -> bool:
        """No stray bytes arrive (and the connection is not closed) within ``seconds``."""
        return not self.buf and not self.closed_within(seconds) and not self.buf


def request(method: str, target: str, host: str, cookie: str = "", version: str = "1.1", **headers: str) -> bytes:
    lines = [f"{method} {target} HTTP/{version}", f"Host: {host}"]
    if cookie:
        lines.append(f"Cookie: {cookie}")
    lines += [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


# ---------------------------------------------------------------------- shared steps


def _host() -> str:
    return f"{uuid.uuid4().hex[:8]}.fast.test"


def walked_in(srv: Server, peer: Peer, **room: Any) -> tuple[str, str, str]:
    """A room, and an admitted visitor who has walked in once (the door key set): (room id, host, Cookie)."""
    room_id, host = inline_room(srv, peer.url, host=_host(), **room)
    with visitor(srv, host) as c:
        admitted(c, room_id)
        first = c.get("/api/echo")
        assert first.status_code == 200 and first.headers["x-app"] == "peer", first.text[:200]
        cookie = "; ".join(f"{k}={v}" for k, v in c.cookies.items())
    assert f"qm_dk_{room_id}=" in cookie
    return room_id, host, cookie


@pytest.fixture(scope="module")
def site(qm: Server, peer: Peer) -> tuple[str, str, str]:
    """One room on the module's server and a visitor admitted to it: (room id, host, Cookie)."""
    return walked_in(qm, peer)


def echo_target(answer: Answer) -> str:
    assert answer.status == 200, (answer.status, answer.body[:200])
    assert answer.header("x-app") == "peer"
    return str(answer.json()["target"])


def counters(srv: Server) -> tuple[int, int]:
    with srv.admin() as admin:
        inline = admin.get("/api/admin/health").json()["inline"]
    return int(inline["gatedTotal"]), int(inline["bypassedTotal"])


# ---------------------------------------------------------------------- pipelining


def test_two_pipelined_requests_are_answered_whole_and_in_order(
    qm: Server, peer: Peer, site: tuple[str, str, str]
) -> None:
    room_id, host, cookie = site
    with Wire(qm.port) as w:
        # a proxied request, then one of the queue's own, in one write
        w.send(
            request("GET", "/api/echo?n=1", host, cookie)
            + request("GET", f"/__qm/api/status?roomId={room_id}", host, cookie)
        )
        assert echo_target(w.answer()) == "/api/echo?n=1"
        status = w.answer()
        assert status.status == 200 and status.json()["state"] in ("passed", "admitted")
        # the queue's own first, the proxied one behind it
        w.send(
            request("GET", f"/__qm/api/status?roomId={room_id}", host, cookie)
            + request("GET", "/api/echo?n=2", host, cookie)
        )
        assert w.answer().json()["state"] in ("passed", "admitted")
        assert echo_target(w.answer()) == "/api/echo?n=2"
        assert w.nothing_pending()


def test_three_pipelined_requests_wait_for_a_slow_first_answer(
    qm: Server, peer: Peer, site: tuple[str, str, str]
) -> None:
    room_id, host, cookie = site
    key = unique_id("pipe")
    body = b"b" * 5000
    try:
        with Wire(qm.port) as w:
            # the first is held back by the app: the two behind it (one of them the queue's own, which could
            # answer at once) must wait, and come out after it, each whole
            w.send(
                request("GET", f"/api/stream?id={key}", host, cookie)
                + request("GET", f"/__qm/api/status?roomId={room_id}", host, cookie)
                + request("POST", "/api/echo?n=3", host, cookie, Content_Length=str(len(body)))
                + body
            )
            first = w.head()
            assert first.status == 200 and first.chunked
            assert w.chunk() == b"first-part\n"
            assert w.nothing_pending(0.5)  # nothing of the second answer before the first is done
            peer.release(key)
            assert w.body(first) == b"second-part\n"
            assert w.answer().json()["state"] in ("passed", "admitted")
            third = w.answer()
            assert echo_target(third) == "/api/echo?n=3" and third.json()["bodyBytes"] == len(body)
            # and the connection carries on
            w.send(request("GET", "/api/echo?n=4", host, cookie))
            assert echo_target(w.answer()) == "/api/echo?n=4"
    finally:
        peer.release(key)


def pipelined_while_waiting(port: int, host: str) -> None:
    """A waiting visitor's page, the queued JSON and the queue's own answer, asked for in one write."""
    with Wire(port) as w:
        w.send(
            request("GET", "/page/w1", host, Sec_Fetch_Mode="navigate", Sec_Fetch_Dest="document")
            + request("POST", "/api/w2", host, Accept="application/json", Content_Length="4")
            + b"abcd"
            + request("GET", "/__qm/api/version", host)
        )
        page = w.answer()
        assert page.status == 503 and page.header("x-qm-queued")
        assert (page.header("content-type") or "").startswith("text/html") and b'"apiBase":"/__qm"' in page.body
        queued = w.answer()
        assert queued.status == 503 and queued.json()["code"] == "queued" and queued.header("x-qm-queued")
        own = w.answer()
        assert own.status == 200 and own.json()["version"]
        assert w.nothing_pending()


def test_a_waiting_visitors_pipelined_requests_are_answered_in_order(qm: Server, peer: Peer) -> None:
    _room_id, host = inline_room(qm, peer.url, host=_host(), state="paused")
    pipelined_while_waiting(qm.port, host)


# ---------------------------------------------------------------------- HTTP versions and framing


def test_an_http_1_0_request_is_answered_and_the_connection_closed(
    qm: Server, peer: Peer, site: tuple[str, str, str]
) -> None:
    _room_id, host, cookie = site
    with Wire(qm.port) as w:
        w.send(request("GET", "/api/echo?v=10", host, cookie, version="1.0"))
        a = w.answer()
        assert echo_target(a) == "/api/echo?v=10"
        assert a.header("content-length") == str(len(a.body))
        assert w.closed_within(2.5), "an HTTP/1.0 connection left open after the answer"
    # an answer the app streams without a length reaches an HTTP/1.0 client whole, then the close
    key = unique_id("ten")
    peer.release(key)  # released beforehand: the app sends both parts at once
    with Wire(qm.port) as w:
        w.send(request("GET", f"/api/stream?id={key}", host, cookie, version="1.0"))
        a = w.answer()
        assert a.status == 200 and a.body == b"first-part\nsecond-part\n"
        assert w.closed_within(2.5)


def test_connection_close_from_an_http_1_1_client_is_honoured(
    qm: Server, peer: Peer, site: tuple[str, str, str]
) -> None:
    _room_id, host, cookie = site
    with Wire(qm.port) as w:
        w.send(request("GET", "/api/echo?c=1", host, cookie, Connection="close"))
        a = w.answer()
        assert echo_target(a) == "/api/echo?c=1"
        assert (a.header("connection") or "").lower() == "close"
        assert w.closed_within(2.5)


def test_an_answer_without_a_length_reaches_an_http_1_1_client_chunked_and_whole(
    qm: Server, peer: Peer, site: tuple[str, str, str]
) -> None:
    _room_id, host, cookie = site
    key = unique_id("chunk")
    try:
        with Wire(qm.port) as w:
            w.send(request("GET", f"/api/stream?id={key}", host, cookie))
            a = w.head()
            assert a.status == 200 and a.chunked and a.header("content-length") is None
            assert w.chunk() == b"first-part\n"  # before the app has finished
            peer.release(key)
            assert w.body(a) == b"second-part\n"  # then the rest and the last chunk
            # the chunked framing ended exactly: the connection is usable for the next request
            w.send(request("GET", "/api/echo?after=chunked", host, cookie))
            assert echo_target(w.answer()) == "/api/echo?after=chunked"
    finally:
        peer.release(key)


# ---------------------------------------------------------------------- Expect, HEAD, early answers


def test_expect_100_continue_gets_the_interim_answer_then_the_apps(
    qm: Server, peer: Peer, site: tuple[str, str, str]
) -> None:
    _room_id, host, cookie = site
    body = os.urandom(200_000)
    with Wire(qm.port) as w:
        w.send(
            request(
                "POST",
                "/upload",
                host,
                cookie,
                Content_Length=str(len(body)),
                Content_Type="application/octet-stream",
                Expect="100-continue",
            )
        )
        interim = w.answer()  # the client sends nothing more until this
        assert interim.status == 100 and interim.body == b""
        w.send(body)
        final = w.answer()
        assert final.status == 200
        assert final.json() == {"bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()}
        # and exactly one interim answer: the next request's answer is its own
        w.send(request("GET", "/api/echo?after=expect", host, cookie))
        assert echo_target(w.answer()) == "/api/echo?after=expect"


def test_head_of_a_proxied_path_has_the_apps_headers_and_no_body(
    qm: Server, peer: Peer, site: tuple[str, str, str]
) -> None:
    _room_id, host, cookie = site
    with visitor(qm, host) as c:
        page = c.get("/page/head", headers={"Cookie": cookie})
        asset = c.get("/static/app.js")
    assert page.status_code == 200 and asset.status_code == 200
    with Wire(qm.port) as w:
        for target, whole in (("/page/head", page), ("/static/app.js", asset)):  # gated, and a static bypass
            w.send(request("HEAD", target, host, cookie))
            h = w.answer(head_request=True)
            assert h.status == 200
            assert h.header("content-length") == str(len(whole.content))
            assert h.header("content-type") == whole.headers["content-type"]
            assert not h.chunked
            assert w.nothing_pending(), f"bytes after the HEAD answer: {w.buf[:100]!r}"
            # the connection is usable: the GET that follows is answered whole
            w.send(request("GET", target, host, cookie))
            g = w.answer()
            assert g.status == 200 and g.body == whole.content
        # a HEAD and a GET in one write: a body after the HEAD answer would be read as the GET's answer
        w.send(request("HEAD", "/page/head", host, cookie) + request("GET", "/api/echo?after=head", host, cookie))
        assert w.answer(head_request=True).status == 200
        assert echo_target(w.answer()) == "/api/echo?after=head"


def test_an_app_answering_before_the_whole_body_is_passed_on_at_once(
    qm: Server, peer: Peer, site: tuple[str, str, str]
) -> None:
    """The peer answers 404 to an unknown path without reading the body: an early answer, like a 413."""
    _room_id, host, cookie = site
    total = 8 << 20
    with Wire(qm.port, timeout=15) as w:
        w.send(request("POST", "/no-such-upload", host, cookie, Content_Length=str(total)))
        w.send(b"z" * 65536)
        early = w.answer()  # arrives while most of the body is still unsent
        assert early.status == 404 and early.body == b"peer: no such page"
        # the rest of the body is the rest of this request: never read as a request of its own.
        # The server may close the connection, or take the rest and keep it: either way no stray answer.
        try:
            sent = 65536
            block = b"z" * (1 << 20)
            while sent < total:
                n = min(len(block), total - sent)
                w.send(block[:n])
                sent += n
            w.send(request("GET", "/api/echo?after=early", host, cookie))
        except (BrokenPipeError, ConnectionResetError):
            return
        try:
            nxt = w.answer()
        except (EOFError, ConnectionResetError):
            return
        assert echo_target(nxt) == "/api/echo?after=early"


# ---------------------------------------------------------------------- keep-alive


def test_keep_alive_many_requests_then_the_idle_timeout_closes(
    qm: Server, peer: Peer, site: tuple[str, str, str], proxy_path: str
) -> None:
    _room_id, host, cookie = site
    with Wire(qm.port) as w:
        for i in range(8):
            target = f"/api/echo?i={i}" if i % 2 == 0 else f"/page/k{i}"
            w.send(request("GET", target, host, cookie))
            a = w.answer()
            assert a.status == 200
            if i % 2 == 0:
                assert echo_target(a) == target
            else:
                assert f"Peer app page /page/k{i}".encode() in a.body
        w.send(request("GET", "/static/app.js", host))
        assert w.answer().body.startswith(b"/* asset")
        if proxy_path == "asgi":
            return  # the idle clock below is the fast path's own (uvicorn's timer serves the ASGI cycle)
        # idle for a while, short of the keep-alive timeout (uvicorn's 5 s): still open, still served
        assert not w.closed_within(3.0)
        w.send(request("GET", "/api/echo?late=1", host, cookie))
        assert echo_target(w.answer()) == "/api/echo?late=1"
        last = time.monotonic()
        # the idle clock restarted with that request: closed about 5 s after it, not 5 s after the first
        assert w.closed_within(12), "an idle keep-alive connection was never closed"
        idle = time.monotonic() - last
        assert 3.5 <= idle <= 12, f"closed after {idle:.1f} s idle"


def test_requests_of_one_connection_that_differ_are_each_answered_as_their_own(
    qm: Server, peer: Peer, site: tuple[str, str, str]
) -> None:
    """What a keep-alive connection repeats is reused only while it is repeated (inline/repeat.py): a header,
    the method, the cookies that change between two requests change what the app and the visitor get."""
    _room_id, host, cookie = site
    with Wire(qm.port) as w:
        seen = []
        for probe in ("a", "a", "b", "a"):
            w.send(request("GET", "/api/echo", host, cookie, X_Probe=probe))
            a = w.answer()
            assert echo_target(a) == "/api/echo"
            seen.append([v for k, v in a.json()["headers"] if k == "x-probe"])
        assert seen == [["a"], ["a"], ["b"], ["a"]]
        for method in ("GET", "HEAD", "GET"):
            w.send(request(method, "/page/same", host, cookie))
            a = w.answer(head_request=method == "HEAD")
            assert a.status == 200
            assert a.body == (
                b""
                if method == "HEAD"
                else b"<!doctype html><title>Peer</title><h1 id=app>Peer app page /page/same</h1>"
            )
        # the same connection without the visitor's cookies is not let in, and with them again it is
        for jar, status in ((cookie, 200), ("", 503), ("other=1", 503), (cookie, 200)):
            w.send(request("GET", "/page/same", host, jar, Accept="text/html"))
            a = w.answer()
            assert a.status == status, (jar, a.status, a.body[:200])


# ---------------------------------------------------------------------- counted once


def test_the_gate_counters_go_up_by_one_per_request_on_either_path(
    qm: Server, peer: Peer, site: tuple[str, str, str]
) -> None:
    room_id, host, cookie = site
    _paused_id, paused_host = inline_room(qm, peer.url, host=_host(), state="paused")
    wait_path, cart_path = f"/page/wait-{uuid.uuid4().hex[:8]}", f"/api/cart-{uuid.uuid4().hex[:8]}"

    def step(expect: tuple[int, int], do: Any) -> None:
        before = counters(qm)
        do()
        after = counters(qm)
        assert (after[0] - before[0], after[1] - before[1]) == expect, do.__name__

    with visitor(qm, host, headers={"Host": host, "Cookie": cookie}) as c:

        def admitted_get() -> None:
            assert c.get("/api/echo").status_code == 200

        def admitted_post() -> None:
            assert c.post("/api/echo", content=b"x" * 1000).json()["bodyBytes"] == 1000

        def static_get() -> None:
            assert c.get("/static/app.js").status_code == 200

        def static_head() -> None:
            assert c.head("/static/logo.png").status_code == 200

        def queue_own() -> None:
            assert c.get("/__qm/api/status", params={"roomId": room_id}).status_code == 200

        step((1, 0), admitted_get)
        step((1, 0), admitted_post)
        step((0, 1), static_get)
        step((0, 1), static_head)
        step((0, 0), queue_own)

    def pipelined() -> None:  # the second, behind the first, goes through the ASGI cycle
        with Wire(qm.port) as w:
            w.send(request("GET", "/api/echo?p=1", host, cookie) + request("GET", "/api/echo?p=2", host, cookie))
            assert echo_target(w.answer()) == "/api/echo?p=1"
            assert echo_target(w.answer()) == "/api/echo?p=2"

    step((2, 0), pipelined)

    with visitor(qm, paused_host) as c:

        def waiting_page() -> None:
            r = c.get(wait_path, headers={"Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"})
            assert r.status_code == 503 and r.headers["x-qm-queued"] and r.headers["content-type"].startswith("text/")

        def queued_json() -> None:
            r = c.get(cart_path, headers={"Accept": "application/json", "Sec-Fetch-Mode": "cors"})
            assert r.status_code == 503 and r.json()["code"] == "queued"

        def static_while_paused() -> None:
            assert c.get("/static/app.js").status_code == 200

        step((1, 0), waiting_page)
        step((1, 0), queued_json)
        step((0, 1), static_while_paused)
    # the token hand-off (a redirect the ASGI cycle answers): one more, not two
    other_id, other_host = inline_room(qm, peer.url, host=_host())
    with visitor(qm, other_host) as c:
        assert c.get("/page/hand", headers={"Sec-Fetch-Mode": "navigate"}).status_code == 503
        state = admitted(c, other_id)
        target = state["redirectUrl"].split(other_host, 1)[1]

        def hand_off() -> None:
            hop = c.get(target, headers={"Sec-Fetch-Mode": "navigate"})
            assert hop.status_code == 303 and hop.headers["location"] == "/page/hand"

        step((1, 0), hand_off)
    assert hits(peer, wait_path) == 0 and hits(peer, cart_path) == 0  # the queued ones never reached the app


def hits(peer: Peer, path: str) -> int:
    return int(httpx.get(f"{peer.url}/hits", params={"p": path}, timeout=5).json()["count"])


def hits_of(peer: Peer, host: str) -> int:
    """Requests that reached the app for ``host``, the queue's origin probe (HEAD / every 10 s) not counted."""
    return int(httpx.get(f"{peer.url}/hits", params={"visitors": host}, timeout=5).json()["count"])


# ---------------------------------------------------------------------- PROXY_TIMEOUT_MS


def test_a_hung_origin_is_a_504_within_the_timeout_and_the_connection_carries_on(make_server, peer: Peer) -> None:  # type: ignore[no-untyped-def]
    srv = make_server({"PROXY_TIMEOUT_MS": "500"})
    room_id, host, cookie = walked_in(srv, peer)
    key = unique_id("hung")
    try:
        with Wire(srv.port) as w:
            started = time.monotonic()
            w.send(request("GET", f"/slow?id={key}", host, cookie, Accept="application/json"))
            a = w.answer()
            took = time.monotonic() - started
            assert a.status == 504 and a.header("x-qm-origin") == "timeout"
            assert a.json()["phase"] == "timeout" and a.json()["roomId"] == room_id
            assert 0.4 <= took <= 5, f"the 504 came after {took:.2f} s for PROXY_TIMEOUT_MS=500"
            # the same visitor connection is fine, and never sees the hung exchange's late answer
            w.send(request("GET", "/api/echo?after=504", host, cookie))
            assert echo_target(w.answer()) == "/api/echo?after=504"
            peer.release(key)  # the app answers the timed-out request now: that answer goes nowhere
            time.sleep(0.3)
            for i in range(3):
                w.send(request("GET", f"/api/echo?after=release{i}", host, cookie))
                assert echo_target(w.answer()) == f"/api/echo?after=release{i}"
    finally:
        peer.release(key)
    with srv.admin() as admin:
        errors = admin.get("/api/admin/health").json()["inline"]["originErrors"]
    assert errors[room_id] == {"timeout": 1}


def test_the_timeout_runs_only_from_the_request_sent_to_the_head(make_server, peer: Peer) -> None:  # type: ignore[no-untyped-def]
    srv = make_server({"PROXY_TIMEOUT_MS": "500"})
    room_id, host, cookie = walked_in(srv, peer)
    key = unique_id("long")
    try:
        with Wire(srv.port) as w:
            # a body that takes over twice the timeout to upload: the clock has not started yet
            parts = [os.urandom(20_000) for _ in range(4)]
            total = sum(len(p) for p in parts)
            w.send(request("POST", "/upload", host, cookie, Content_Length=str(total)))
            for part in parts:
                time.sleep(0.3)
                w.send(part)
            a = w.answer()
            assert a.status == 200, a.body[:200]
            assert a.json() == {"bytes": total, "sha256": hashlib.sha256(b"".join(parts)).hexdigest()}
            # a head on time, then a body that takes twice the timeout: the clock stopped at the head
            w.send(request("GET", f"/api/stream?id={key}", host, cookie))
            s = w.head()
            assert s.status == 200 and w.chunk() == b"first-part\n"
            time.sleep(1.0)
            peer.release(key)
            assert w.body(s) == b"second-part\n"
    finally:
        peer.release(key)
    with srv.admin() as admin:
        errors = admin.get("/api/admin/health").json()["inline"]["originErrors"]
    assert room_id not in errors


# ---------------------------------------------------------------------- a store over the network (Held)


needs_services = pytest.mark.skipif(
    not _SERVICES_UP, reason="needs Valkey/Redis and PostgreSQL on this machine (environment guard)"
)


@pytest.fixture(scope="module")
def networked(proxy_path: str) -> Iterator[Server]:
    """A server on STORE=valkey + SIDESTORE=pg: each door check is a round trip, the request held meanwhile."""
    if not _SERVICES_UP:
        pytest.skip("needs Valkey/Redis and PostgreSQL on this machine (environment guard)")
    import asyncio

    asyncio.run(_ensure_database())
    env, prefix, schema = networked_env(VALKEY_URL, "qmf")
    srv = start_server({**env, **path_env(proxy_path)})
    try:
        yield srv
    finally:
        srv.stop()
        with contextlib.suppress(Exception):
            asyncio.run(_drop(prefix, schema))


@pytest.fixture(scope="module")
def networked_site(networked: Server, peer: Peer) -> tuple[str, str, str]:
    return walked_in(networked, peer)


@needs_services
def test_held_an_admitted_visitors_requests_reach_the_app(
    networked: Server, networked_site: tuple[str, str, str]
) -> None:
    _room_id, host, cookie = networked_site
    with visitor(networked, host, headers={"Host": host, "Cookie": cookie}) as c:
        page = c.get("/page/held", headers={"Sec-Fetch-Mode": "navigate"})
        assert page.status_code == 200 and "Peer app page /page/held" in page.text
        # many, one after another on one connection
        for i in range(10):
            assert c.get("/api/echo", params={"i": i}).json()["target"] == f"/api/echo?i={i}"


@needs_services
def test_held_a_waiting_visitor_gets_the_waiting_page(networked: Server, peer: Peer) -> None:
    room_id, host = inline_room(networked, peer.url, host=_host(), state="paused")
    before = hits_of(peer, host)
    with visitor(networked, host) as c:
        page = c.get("/page/wait", headers={"Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"})
        assert page.status_code == 503 and page.headers["x-qm-queued"]
        assert page.headers["content-type"].startswith("text/html") and '"apiBase":"/__qm"' in page.text
        api = c.get("/api/cart", headers={"Accept": "application/json", "Sec-Fetch-Mode": "cors"})
        assert api.status_code == 503 and api.json()["code"] == "queued" and api.json()["roomId"] == room_id
        assert api.headers["x-qm-queued"]
        # a body on a queued request is taken and dropped, and the connection carries on
        form = c.post("/checkout", content=b"f" * 100_000, headers={"Sec-Fetch-Mode": "navigate"})
        assert form.status_code == 503 and form.headers["x-qm-queued"]
        assert c.get("/__qm/api/version").status_code == 200
    pipelined_while_waiting(networked.port, host)
    assert hits_of(peer, host) == before  # nothing reached the app


@needs_services
def test_held_a_post_body_arrives_whole(networked: Server, networked_site: tuple[str, str, str]) -> None:
    _room_id, host, cookie = networked_site
    body = os.urandom(3 << 20)  # more than is read before the reading pauses
    digest = hashlib.sha256(body).hexdigest()
    with visitor(networked, host, headers={"Host": host, "Cookie": cookie}, timeout=30) as c:
        r = c.post("/upload", content=body, headers={"Content-Type": "application/octet-stream"})
        assert r.status_code == 200 and r.json() == {"bytes": len(body), "sha256": digest}
        small = c.post("/api/echo", content=b"s" * 10)
        assert small.json()["bodyBytes"] == 10
        chunked = c.post("/upload", content=iter([body[:70_000], body[70_000:140_000]]))
        assert chunked.json() == {"bytes": 140_000, "sha256": hashlib.sha256(body[:140_000]).hexdigest()}
    # the body sent in the same write as the head, and with Expect: the 100 only once the gate decided
    with Wire(networked.port) as w:
        w.send(request("POST", "/upload", host, cookie, Content_Length="5000") + body[:5000])
        assert w.answer().json() == {"bytes": 5000, "sha256": hashlib.sha256(body[:5000]).hexdigest()}
        w.send(request("POST", "/upload", host, cookie, Content_Length="7000", Expect="100-continue"))
        assert w.answer().status == 100
        w.send(body[:7000])
        assert w.answer().json() == {"bytes": 7000, "sha256": hashlib.sha256(body[:7000]).hexdigest()}


@needs_services
def test_held_pipelined_requests_are_answered_in_order(networked: Server, networked_site: tuple[str, str, str]) -> None:
    room_id, host, cookie = networked_site
    with Wire(networked.port) as w:
        w.send(
            request("GET", "/api/echo?h=1", host, cookie)
            + request("GET", f"/__qm/api/status?roomId={room_id}", host, cookie)
            + request("POST", "/api/echo?h=3", host, cookie, Content_Length="3")
            + b"abc"
            + request("GET", "/api/echo?h=4", host, cookie)
        )
        assert echo_target(w.answer()) == "/api/echo?h=1"
        assert w.answer().json()["state"] in ("passed", "admitted")
        third = w.answer()
        assert echo_target(third) == "/api/echo?h=3" and third.json()["bodyBytes"] == 3
        assert echo_target(w.answer()) == "/api/echo?h=4"
        assert w.nothing_pending()
