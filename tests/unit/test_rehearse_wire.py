"""The rehearsal's HTTP/1.1 pool against a real socket server: framing, keep-alive, the pool's bound."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from queue_manager.rehearse.client import Pool, WireError


class Origin:
    """A tiny HTTP/1.1 server on loopback: /cl (Content-Length), /chunked, /close (then closes), /drop
    (answers, then closes the kept-alive connection behind the client's back)."""

    def __init__(self) -> None:
        self.connections = 0
        self.open = 0
        self.most_open = 0
        self.requests: list[bytes] = []
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.requests.append(head)
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = await reader.readexactly(length) if length else b""
                path = head.split(b" ")[1]
                await asyncio.sleep(0.01)
                if path.startswith(b"/chunked"):
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
                    )
                elif path.startswith(b"/close"):
                    writer.write(b"HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 2\r\n\r\nno")
                    await writer.drain()
                    return
                else:
                    out = b"echo:" + body
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(out), out))
                await writer.drain()
                if path.startswith(b"/drop"):
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            self.open -= 1
            writer.close()


@pytest.fixture
async def origin() -> AsyncIterator[tuple[Origin, str]]:
    o = Origin()
    o.server = await asyncio.start_server(o.handle, "127.0.0.1", 0)
    port = o.server.sockets[0].getsockname()[1]
    try:
        yield o, f"http://127.0.0.1:{port}"
    finally:
        o.server.close()
        await o.server.wait_closed()


async def test_framing_and_the_request_sent(origin: tuple[Origin, str]) -> None:
    o, base = origin
    pool = Pool(base, 2)
    a = await pool.request("POST", "/cl", params={"roomId": "a b"}, headers={"Cookie": "x=1"}, body=b'{"k":1}')
    assert (a.status, a.body) == (200, b'echo:{"k":1}')
    sent = o.requests[0]
    assert sent.startswith(b"POST /cl?roomId=a+b HTTP/1.1\r\n")
    assert b"\r\nCookie: x=1\r\n" in sent and b"\r\nContent-Length: 7\r\n" in sent
    assert b"\r\nHost: 127.0.0.1:" in sent
    c = await pool.request("GET", "/chunked")
    assert (c.status, c.body) == (200, b"abcde")
    closed = await pool.request("GET", "/close")
    assert (closed.status, closed.body) == (404, b"no")
    again = await pool.request("GET", "/cl")
    assert again.body == b"echo:"
    # the Content-Length and chunked answers kept their connection, the closed one did not
    assert o.connections == 2
    pool.close()


async def test_many_requests_share_at_most_size_connections(origin: tuple[Origin, str]) -> None:
    o, base = origin
    pool = Pool(base, 3)
    answers = await asyncio.gather(*(pool.request("GET", f"/cl?{i}") for i in range(40)))
    assert all(a.status == 200 for a in answers)
    assert o.most_open <= 3 and o.connections == 3
    pool.close()


async def test_a_connection_closed_behind_the_pool_is_retried_fresh(origin: tuple[Origin, str]) -> None:
    o, base = origin
    pool = Pool(base, 1)
    assert (await pool.request("GET", "/drop")).status == 200
    await asyncio.sleep(0.05)  # the server has closed it; the pool still holds it as idle
    assert (await pool.request("GET", "/cl")).status == 200
    assert o.connections == 2
    pool.close()


async def test_nobody_listening_is_a_wire_error() -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    pool = Pool(f"http://127.0.0.1:{port}", 2)
    with pytest.raises(WireError):
        await pool.request("GET", "/")
    assert pool.open == 0  # the place it took is free again
