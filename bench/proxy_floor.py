"""The floor for a Python reverse proxy on this stack: relay bytes, apply no rule at all.

A uvicorn httptools protocol subclass (the same base the inline fast path uses) that forwards every
request head to one upstream over pooled keep-alive connections and writes the answer back in one
write: no gate, no identity, no header rules beyond dropping Connection/Keep-Alive, no timeouts, no
errors handled, GET only. It is not a product and not safe to expose; ``bench/proxy_bench.py`` runs it
beside nginx and Queue Manager to show how much of the gap to nginx is the language and how much is
Queue Manager's rules.

    python bench/proxy_floor.py <listen port> <upstream port>
"""

from __future__ import annotations

import asyncio
import socket
import sys
from typing import Any

import httptools
import uvicorn
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

UPSTREAM_PORT = int(sys.argv[2]) if len(sys.argv) > 2 else 0
IDLE: list[Upstream] = []
HOP = frozenset({b"connection", b"keep-alive", b"transfer-encoding", b"date"})


class Upstream(asyncio.Protocol):
    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.waiter: Exchange | None = None
        self.headers: list[bytes] = []
        self.body: list[bytes] = []

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_message_begin(self) -> None:
        self.headers = []
        self.body = []

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() not in HOP:
            self.headers.append(name + b": " + value + b"\r\n")

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        waiter, self.waiter = self.waiter, None
        IDLE.append(self)
        if waiter is not None:
            head = STATUS_LINE[self.parser.get_status_code()] + b"".join(self.headers) + b"\r\n"
            waiter.done(head + b"".join(self.body))


class Exchange:
    """Stands in for uvicorn's cycle (the attributes its protocol reads)."""

    message_event = asyncio.Event()

    def __init__(self, proto: FloorProtocol) -> None:
        self.proto = proto
        self.response_complete = False
        self.keep_alive = True
        self.disconnected = False

    def done(self, data: bytes) -> None:
        self.proto.transport.write(data)
        self.response_complete = True


class FloorProtocol(HttpToolsProtocol):
    def on_headers_complete(self) -> None:
        parts = [self.parser.get_method() + b" " + self.url + b" HTTP/1.1\r\n"]
        parts += [k + b": " + v + b"\r\n" for k, v in self.headers if k not in HOP]
        parts.append(b"x-forwarded-for: 127.0.0.1\r\n\r\n")
        exchange = Exchange(self)
        self.cycle = exchange  # type: ignore[assignment]
        head = b"".join(parts)
        if IDLE:
            upstream = IDLE.pop()
            upstream.waiter = exchange
            upstream.transport.write(head)
        else:
            self.loop.create_task(self._connect(exchange, head))

    async def _connect(self, exchange: Exchange, head: bytes) -> None:
        _, upstream = await self.loop.create_connection(Upstream, "127.0.0.1", UPSTREAM_PORT)
        upstream.waiter = exchange
        upstream.transport.write(head)

    def on_body(self, body: bytes) -> None:
        pass

    def on_message_complete(self) -> None:
        pass


async def _app(scope: Any, receive: Any, send: Any) -> None:  # never called: every request is relayed
    return None


if __name__ == "__main__":
    uvicorn.run(
        _app,
        host="127.0.0.1",
        port=int(sys.argv[1]),
        http=FloorProtocol,
        loop="uvloop",
        lifespan="off",
        log_level="warning",
        access_log=False,
    )
