"""Request heads are held to MAX_HEADER_BYTES, MAX_HEADER_COUNT and HEADER_TIMEOUT_MS, and connections that
only wait for a head cannot hold MAX_CONNECTIONS against requests.

Raw sockets for the attacks (an oversized head sent in part, a silent socket, a trickled head); httpx for
what must keep working. Every wait is for a condition (an answer, a close), bounded by a generous timeout.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import time
from collections.abc import Callable, Iterator

import httpx
import pytest
from harness import Server, create_room, iter_sse, join, metric, unique_id, wait_until

ServerFactory = Callable[..., Server]

WAIT = 20.0  # a generous bound on anything the server is expected to do by itself


def _connect(srv: Server) -> socket.socket:
    return socket.create_connection(("127.0.0.1", srv.port), timeout=WAIT)


def _read_to_close(sock: socket.socket) -> tuple[bytes, bool]:
    """Everything the server sends until it closes (or WAIT passes): (bytes, closed)."""
    out = b""
    sock.settimeout(WAIT)
    while True:
        try:
            data = sock.recv(65536)
        except TimeoutError:
            return out, False
        except ConnectionResetError:
            return out, True
        if not data:
            return out, True
        out += data


def _status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


def _body(answer: bytes) -> dict[str, object]:
    return dict(json.loads(answer.split(b"\r\n\r\n", 1)[1]))


def _head(path: str = "/healthz", extra: bytes = b"") -> bytes:
    return b"GET " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n" + extra


def _refused(srv: Server, reason: str) -> float:
    return metric(srv, "qm_request_heads_refused_total", reason=reason) or 0.0


@pytest.fixture(scope="module")
def quick(make_module_server: ServerFactory) -> Server:
    """A server whose heads must be whole within half a second."""
    return make_module_server({"HEADER_TIMEOUT_MS": "500"})


# ---------------------------------------------------------------------- size and number of fields


def test_an_oversized_header_is_refused_431_before_the_rest_is_sent(server: Server) -> None:
    before = _refused(server, "too_large")
    sock = _connect(server)
    try:
        # the first 20 KiB of a 64 KiB header line: the answer and the close come without the rest
        sock.sendall(_head(extra=b"X-Big: ") + b"a" * (20 * 1024))
        answer, closed = _read_to_close(sock)
    finally:
        sock.close()
    assert _status(answer) == 431, answer[:200]
    assert b"connection: close" in answer.lower()
    assert _body(answer)["code"] == "request_head_too_large"
    assert closed
    assert _refused(server, "too_large") == before + 1


def test_an_oversized_request_line_is_refused_431(server: Server) -> None:
    sock = _connect(server)
    try:
        sock.sendall(b"GET /" + b"a" * (20 * 1024))  # no header yet, no end of the line
        answer, closed = _read_to_close(sock)
    finally:
        sock.close()
    assert _status(answer) == 431, answer[:200]
    assert closed


def test_a_head_at_the_limit_is_served_and_one_byte_more_is_not(server: Server) -> None:
    start = _head(extra=b"X-Pad: ")
    pad = 16384 - len(start) - len(b"\r\n\r\n")  # MAX_HEADER_BYTES' default, exactly
    with _connect(server) as sock:
        sock.sendall(start + b"a" * pad + b"\r\n\r\n")
        assert _status(sock.recv(65536)) == 200
    with _connect(server) as sock:
        sock.sendall(start + b"a" * (pad + 1) + b"\r\n\r\n")
        answer, _ = _read_to_close(sock)
        assert _status(answer) == 431


def test_200_header_fields_are_refused_431(server: Server) -> None:
    before = _refused(server, "too_many_fields")
    fields = b"".join(b"X-F%d: v\r\n" % i for i in range(200))
    with _connect(server) as sock:
        sock.sendall(_head(extra=fields) + b"\r\n")
        answer, closed = _read_to_close(sock)
    assert _status(answer) == 431, answer[:200]
    assert _body(answer)["code"] == "too_many_header_fields"
    assert closed
    assert _refused(server, "too_many_fields") == before + 1
    # 99 of them are fine (the Host header makes 100)
    fields = b"".join(b"X-F%d: v\r\n" % i for i in range(99))
    with _connect(server) as sock:
        sock.sendall(_head(extra=fields) + b"\r\n")
        assert _status(sock.recv(65536)) == 200


def test_a_websocket_handshake_is_held_to_the_same_limits(server: Server) -> None:
    upgrade = (
        b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    )
    many = b"".join(b"X-F%d: v\r\n" % i for i in range(200))
    with _connect(server) as sock:
        sock.sendall(_head("/", upgrade + many) + b"\r\n")
        answer, closed = _read_to_close(sock)
    assert _status(answer) == 431 and closed, answer[:200]
    with _connect(server) as sock:
        sock.sendall(_head("/", upgrade + b"Cookie: " + b"c" * (20 * 1024)))
        answer, closed = _read_to_close(sock)
    assert _status(answer) == 431 and closed, answer[:200]


def test_the_limits_are_settings(make_server: ServerFactory) -> None:
    srv = make_server({"MAX_HEADER_BYTES": "4096", "MAX_HEADER_COUNT": "20"})
    with httpx.Client(base_url=srv.base_url, timeout=WAIT) as c:
        assert c.get("/healthz", headers={"Cookie": "c" * 3000}).status_code == 200
        assert c.get("/healthz", headers={f"X-F{i}": "v" for i in range(10)}).status_code == 200
    with _connect(srv) as sock:
        sock.sendall(_head(extra=b"Cookie: " + b"c" * 5000 + b"\r\n") + b"\r\n")
        assert _status(_read_to_close(sock)[0]) == 431
    with _connect(srv) as sock:
        sock.sendall(_head(extra=b"".join(b"X-F%d: v\r\n" % i for i in range(30))) + b"\r\n")
        assert _status(_read_to_close(sock)[0]) == 431


# ---------------------------------------------------------------------- time


def test_a_silent_connection_is_closed(quick: Server) -> None:
    before = metric(quick, "qm_waiting_connections_closed_total", reason="idle") or 0.0
    with _connect(quick) as sock:
        answer, closed = _read_to_close(sock)
    assert closed and answer == b""  # nothing asked, nothing answered: just closed
    assert (metric(quick, "qm_waiting_connections_closed_total", reason="idle") or 0.0) >= before + 1


def _trickle(sock: socket.socket, every: float, lines: int) -> tuple[bytes, bool]:
    """Send a header line every ``every`` seconds, never ending the head, until the server answers or closes."""
    sock.sendall(_head())
    for i in range(lines):
        readable, _, _ = select.select([sock], [], [], every)
        if readable:
            return _read_to_close(sock)
        try:
            sock.sendall(b"X-Slow-%d: v\r\n" % i)
        except (BrokenPipeError, ConnectionResetError):
            return _read_to_close(sock)
    return b"", False


def test_a_trickled_head_is_closed_at_the_head_deadline(quick: Server) -> None:
    """A line every 0.1 s keeps any gap between bytes short; the head as a whole still has 0.5 s."""
    before = _refused(quick, "timeout")
    with _connect(quick) as sock:
        answer, closed = _trickle(sock, 0.1, int(WAIT / 0.1))
    assert closed, "the server kept a trickling head open"
    assert _status(answer) == 408, answer[:200]
    assert _body(answer)["code"] == "request_head_timeout"
    assert _refused(quick, "timeout") == before + 1


def _responses(sock: socket.socket, n: int) -> list[int]:
    """The statuses of the next ``n`` responses on a kept-alive connection (each framed by Content-Length)."""
    got = b""
    statuses: list[int] = []
    while len(statuses) < n:
        head_end = got.find(b"\r\n\r\n")
        if head_end >= 0:
            head = got[:head_end].lower()
            length = int(head.split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0])
            if len(got) >= head_end + 4 + length:
                statuses.append(_status(got))
                got = got[head_end + 4 + length :]
                continue
        data = sock.recv(65536)
        assert data, f"closed after {statuses}"
        got += data
    assert got == b""
    return statuses


def test_keep_alive_and_pipelining_still_work(quick: Server) -> None:
    with _connect(quick) as sock:
        sock.sendall(_head() + b"\r\n" + _head("/api/version") + b"\r\n")  # two requests in one write
        assert _responses(sock, 2) == [200, 200]
        sock.sendall(_head() + b"\r\n")  # the same connection, for a third request
        assert _responses(sock, 1) == [200]


def test_a_stream_outlives_the_head_deadline(quick: Server) -> None:
    """HEADER_TIMEOUT_MS bounds the wait for a head, never the answer: a stream keeps ticking past it."""
    with quick.admin() as admin:
        rid = create_room(admin, ratePerMinute=0)["id"]
    with quick.client() as v, quick.admin() as admin:
        token = join(v, rid).json()["token"]
        request = v.build_request(
            "GET", "/events", params={"roomId": rid, "token": token}, timeout=httpx.Timeout(WAIT, read=WAIT)
        )
        r = v.send(request, stream=True)
        deadline = time.monotonic() + 4 * WAIT  # pings keep a read alive: the whole wait is bounded too
        try:
            assert r.status_code == 200
            frames = 0
            for frame in iter_sse(r):
                assert time.monotonic() < deadline, f"{frames} frames before the deadline"
                if frame.get("event") != "message":
                    continue
                frames += 1
                if frames >= 3:  # the ticks come a second or more apart: well past the 0.5 s
                    break
                # the visitor's view changes each time (an unchanged waiting view sends no frame on Valkey)
                admin.post(f"/api/admin/rooms/{rid}/{'pause' if frames % 2 else 'resume'}").raise_for_status()
        finally:
            r.close()
    assert frames >= 3


# ---------------------------------------------------------------------- MAX_CONNECTIONS


@contextlib.contextmanager
def _held(srv: Server, n: int) -> Iterator[list[socket.socket]]:
    socks = [_connect(srv) for _ in range(n)]
    try:
        yield socks
    finally:
        for s in socks:
            s.close()


def _served(srv: Server, rid: str) -> bool:
    """/healthz ready and a join, each on a new connection."""
    try:
        if httpx.get(srv.base_url + "/healthz", timeout=5.0).status_code != 200:
            return False
        return httpx.post(srv.base_url + "/api/join", json={"roomId": rid}, timeout=5.0).status_code == 200
    except httpx.HTTPError:
        return False


def _ceiling_server(make_server: ServerFactory) -> tuple[Server, str]:
    # a head deadline far beyond the test: only the ceiling's room-making can free the slots
    srv = make_server({"MAX_CONNECTIONS": "30", "CONNECTION_RESERVE": "8", "HEADER_TIMEOUT_MS": "120000"})
    with srv.admin() as admin:
        rid = create_room(admin, unique_id("ceil"))["id"]
    return srv, rid


def test_silent_sockets_cannot_hold_the_ceiling(make_server: ServerFactory) -> None:
    srv, rid = _ceiling_server(make_server)
    with _held(srv, 40):
        assert wait_until(lambda: _served(srv, rid), WAIT, 0.2, "/healthz and a join past 40 silent sockets")


def test_trickling_sockets_cannot_hold_the_ceiling(make_server: ServerFactory) -> None:
    srv, rid = _ceiling_server(make_server)
    with _held(srv, 40) as socks:
        for s in socks:
            s.sendall(_head())
        open_socks = list(socks)

        def trickle_then_serve() -> bool:
            for s in list(open_socks):
                try:
                    s.sendall(b"X-Slow: v\r\n")
                except OSError:
                    open_socks.remove(s)
            return _served(srv, rid)

        assert wait_until(trickle_then_serve, WAIT, 0.2, "/healthz and a join past 40 trickling sockets")
    assert (metric(srv, "qm_waiting_connections_closed_total", reason="ceiling") or 0.0) >= 10


def test_requests_in_progress_still_count_against_the_ceiling(make_server: ServerFactory) -> None:
    """Only connections waiting for a head make room: 30 requests being answered (their bodies not yet
    sent) hold the ceiling, and the next request is shed 503 as before."""
    srv, rid = _ceiling_server(make_server)
    with _held(srv, 30) as socks:
        for s in socks:
            s.sendall(
                b"POST /api/join HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Content-Length: 100\r\n\r\n"
            )

        def shed() -> httpx.Response | None:
            try:
                r = httpx.get(srv.base_url + "/api/version", timeout=5.0)
            except httpx.HTTPError:
                return None
            return r if r.status_code == 503 else None

        assert wait_until(shed, WAIT, 0.2, "the ceiling").json()["code"] == "over_capacity"
    assert wait_until(lambda: _served(srv, rid), WAIT, 0.2, "back under the ceiling")
