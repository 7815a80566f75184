"""One proxied exchange on the fast path, driven by callbacks from both sockets.

The ASGI path (inline/proxy.py) moves a proxied response through the server's request cycle: a task,
ASGI messages, a second header pass. Here the same exchange runs without any of that: the visitor's
parser callbacks (inline/fastpath.py) feed the request body to the app's connection, and that
connection's parser callbacks (client.Upstream in callback mode) write the answer straight to the
visitor's transport. Semantics are the ASGI path's, rule for rule:

* the same upstream head (``proxy.upstream_request``) and response headers (``forward.downstream_headers``);
* bodies streamed both ways with backpressure: the visitor's reading pauses while the app's socket is
  full, the app's reading pauses while the visitor's is;
* ``PROXY_TIMEOUT_MS`` for the response head, counted from the request being fully sent;
* a kept-alive connection the app closed while idle is retried once on a fresh one (no body sent yet);
* the origin down before the head → the origin-down page or JSON (502/504, ``X-QM-Origin``); after it
  → the visitor's connection is cut (a broken transfer, never a short file); each counted per room
  and phase, a visitor who leaves counted apart.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE

from queue_manager.context import Context
from queue_manager.http.eager import run_now
from queue_manager.http.wire import Message, Send
from queue_manager.inline import gate, pages
from queue_manager.inline.client import NO_EVENT, Upstream, UpstreamError
from queue_manager.inline.component import Inline
from queue_manager.inline.forward import commands, downstream_headers
from queue_manager.inline.hosts import InlineRoom
from queue_manager.inline.proxy import count_disconnect, count_origin_error
from queue_manager.ssrf import OriginRefused

if TYPE_CHECKING:
    from queue_manager.inline.fastpath import InlineProtocol

log = logging.getLogger("queue_manager.inline")

CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
HELD_MAX = 64 * 1024  # request body held while the app's connection is being opened, before reading pauses
FLUSH_AT = 256 * 1024  # response bytes gathered from one read of the app's socket before they are written
CLOSE = b"connection: close\r\n"
CHUNKED = b"transfer-encoding: chunked\r\n"
LAST_CHUNK = b"0\r\n\r\n"


class Relay:
    """The visitor's request to the app and the app's answer back; the protocol's current cycle.

    ``response_complete``, ``keep_alive``, ``disconnected`` and ``message_event`` are what uvicorn's
    protocol reads and writes on its cycle (pipelining, shutdown, a lost connection).
    """

    message_event = NO_EVENT
    __slots__ = (
        "body_done",
        "body_kind",
        "chunked_out",
        "conn",
        "connecting",
        "ctx",
        "disconnected",
        "expect_continue",
        "extra",
        "finished",
        "head",
        "head_request",
        "held",
        "held_size",
        "http10",
        "inline",
        "keep_alive",
        "out",
        "out_size",
        "proto",
        "request_headers",
        "response_complete",
        "retried",
        "reused",
        "room",
        "session",
        "started",
        "timing",
        "transport",
    )  # fmt: skip

    def __init__(
        self,
        proto: InlineProtocol,
        ctx: Context,
        inline: Inline,
        room: InlineRoom,
        head: bytes,
        body_kind: str,
        *,
        head_request: bool,
        request_headers: dict[bytes, bytes],
        extra: list[tuple[bytes, bytes]],
        keep_alive: bool,
        http10: bool,
        expect_continue: bool,
        session: tuple[str | None, str | None] | None = None,
    ) -> None:
        self.proto = proto
        self.session = session
        self.transport = proto.transport
        self.ctx = ctx
        self.inline = inline
        self.room = room
        self.head = head
        self.body_kind = body_kind
        self.head_request = head_request
        self.request_headers = request_headers  # read only when the origin fails: is the answer a page?
        self.extra = extra
        self.keep_alive = keep_alive
        self.http10 = http10
        self.expect_continue = expect_continue and body_kind != "none"
        # uvicorn's cycle interface
        self.response_complete = False
        self.disconnected = False
        # exchange state
        self.conn: Upstream | None = None
        self.reused = False
        self.retried = False
        self.body_done = body_kind == "none"
        self.held: list[bytes] = []
        self.held_size = 0
        self.started = False  # the response head has gone to the visitor
        self.finished = False  # over, one way or another
        self.chunked_out = False
        self.out: list[bytes] = []
        self.out_size = 0
        self.timing = False
        self.connecting: asyncio.Task[None] | None = None

    # ---------------------------------------------------------------- start

    def start(self) -> None:
        self.inline.active_proxied += 1
        conn = self.inline.pool.take_idle(self.room.origin)
        if conn is not None:
            self._attach(conn, reused=True)
        else:
            self._connect()

    def _connect(self) -> None:
        self.connecting = asyncio.get_running_loop().create_task(self._open())

    async def _open(self) -> None:
        try:
            conn = await self.inline.pool.connect(self.room.origin)
        except OriginRefused as err:
            log.warning("inline %s: %s", self.room.room_id, err)
            self._origin_failed("refused", 502)
            return
        except UpstreamError as err:
            self._origin_failed(err.phase, 504 if err.phase == "timeout" else 502)
            return
        except TimeoutError:
            self._origin_failed("timeout", 504)
            return
        finally:
            self.connecting = None
        if self.finished:
            conn.close()
            return
        self._attach(conn, reused=False)

    def _attach(self, conn: Upstream, *, reused: bool) -> None:
        self.conn = conn
        self.reused = reused
        try:
            conn.begin_sink(self, self.head, self.head_request)
        except UpstreamError as err:
            self.upstream_failed(conn, err)
            return
        if self.expect_continue:
            self.expect_continue = False
            self.transport.write(CONTINUE)
        if self.held:
            data = b"".join(self.held)
            self.held.clear()
            self.held_size = 0
            conn.write(data)
        if self.body_done:
            self._arm_timer()
        if conn.write_paused:
            self.proto.flow.pause_reading()
        else:
            self.proto.resume_visitor()

    # ---------------------------------------------------------------- the visitor's side

    def request_body(self, chunk: bytes) -> None:
        if self.finished or not chunk:
            return
        data = b"%x\r\n%s\r\n" % (len(chunk), chunk) if self.body_kind == "chunked" else chunk
        conn = self.conn
        if conn is None or conn.closed:
            self.held.append(data)
            self.held_size += len(data)
            if self.held_size > HELD_MAX:
                self.proto.flow.pause_reading()
            return
        conn.write(data)
        if conn.write_paused:
            self.proto.flow.pause_reading()

    def request_done(self) -> None:
        if self.body_done:
            return
        self.body_done = True
        if self.finished:
            return
        conn = self.conn
        if self.body_kind == "chunked":
            if conn is None:
                self.held.append(LAST_CHUNK)
            else:
                conn.write(LAST_CHUNK)
        if conn is not None and not conn.head_done:
            self._arm_timer()

    def visitor_writable(self, ok: bool) -> None:
        conn = self.conn
        if conn is not None and not self.finished:
            if ok:
                conn.resume_reading()
            else:
                conn.pause_reading()

    def visitor_gone(self) -> None:
        """The visitor's connection closed before the exchange ended."""
        if self.finished:
            return
        self.disconnected = True
        count_disconnect(self.ctx, self.room)
        self._end()
        if self.connecting is not None:
            self.connecting.cancel()
        if self.conn is not None:
            self.conn.close()

    # ---------------------------------------------------------------- the app's side (client.Sink)

    def upstream_writable(self, ok: bool) -> None:
        if self.finished or self.body_done:
            return
        if ok:
            self.proto.resume_visitor()
        else:
            self.proto.flow.pause_reading()

    def upstream_head(self, conn: Upstream) -> None:
        self._cancel_timer()
        if self.finished:
            return
        status = conn.status
        default = self.proto.server_state.default_headers
        # everything the head is made of: the app's header lines as sent, its status and framing, the
        # visitor's request (HEAD, HTTP/1.0, kept alive), the queue's own cookies and the server's headers
        key = (
            conn.headers,
            status,
            conn.length is None,
            self.head_request,
            self.http10,
            self.keep_alive,
            self.extra,
            default,
        )
        memo = self.proto.response_head
        made = memo.get(key)
        if made is None:
            made = self._response_head(conn, status, default)
            memo.put(key, made)
        head, self.chunked_out, self.keep_alive, revoke = made
        if revoke:
            self.inline.revoke(self.room.room_id, self.session)
        self.started = True
        self.out.append(head)
        self.out_size += len(head)

    def _response_head(
        self, conn: Upstream, status: int, default: list[tuple[bytes, bytes]]
    ) -> tuple[bytes, bool, bool, bool]:
        """The head the visitor receives, whether the body goes chunked, whether the connection is kept, and
        whether the app's ``X-QM-Command`` asks for a revoke."""
        revoke = b"revoke" in commands(conn.headers)
        no_body = self.head_request or status in (204, 304)
        line = STATUS_LINE.get(status) or b"HTTP/1.1 %d \r\n" % status
        lines = [k + b": " + v for k, v in default]
        lines += [k + b": " + v for k, v in downstream_headers(conn.headers)]
        if self.extra:
            lines += [k + b": " + v for k, v in self.extra]
        parts = [line, b"\r\n".join(lines), b"\r\n"] if lines else [line]
        chunked = False
        keep_alive = self.keep_alive
        if conn.length is None and not no_body:
            if self.http10:
                keep_alive = False  # an HTTP/1.0 visitor: the body ends with the connection
            else:
                chunked = True
                parts.append(CHUNKED)
        if not keep_alive:
            parts.append(CLOSE)
        parts.append(b"\r\n")
        return b"".join(parts), chunked, keep_alive, revoke

    def upstream_body(self, data: bytes) -> None:
        if self.finished or self.head_request:
            return
        if self.chunked_out:
            data = b"%x\r\n%s\r\n" % (len(data), data)
        self.out.append(data)
        self.out_size += len(data)
        if self.out_size >= FLUSH_AT:
            self.upstream_flush()

    def upstream_flush(self) -> None:
        """The end of one read from the app: what it produced goes to the visitor now, in one write."""
        out = self.out
        if not out:
            return
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        self.out_size = 0
        if not self.transport.is_closing():
            self.transport.write(data)

    def upstream_done(self, conn: Upstream) -> None:
        if self.finished:
            return
        if self.chunked_out:
            self.out.append(LAST_CHUNK)
        self.upstream_flush()
        self.response_complete = True
        self._end()
        if self.body_done:
            self.inline.pool.put_back(conn)
        else:
            conn.close()  # the app answered before taking the whole body: this connection is spent
        self.proto.relay_complete(self)

    def upstream_failed(self, conn: Upstream, err: UpstreamError) -> None:
        if self.finished:
            return
        self._cancel_timer()
        conn.close()
        if self.started:
            # the status is already out: cut the visitor's connection, so they see a broken transfer
            self.upstream_flush()
            count_origin_error(self.ctx, self.room, "body")
            self._end()
            self.transport.close()
            return
        if (
            self.reused
            and not self.retried
            and not conn.got_bytes
            and self.body_kind == "none"
            and err.phase == "response"
        ):
            # a kept-alive connection the app closed while idle: once more, on a fresh one
            self.retried = True
            self.conn = None
            self._connect()
            return
        self._origin_failed(err.phase, 504 if err.phase == "timeout" else 502)

    # ---------------------------------------------------------------- endings

    def _arm_timer(self) -> None:
        if not self.timing:
            self.timing = True
            self.inline.deadlines.add(self)

    def _cancel_timer(self) -> None:
        if self.timing:
            self.timing = False
            self.inline.deadlines.discard(self)

    def timed_out(self) -> None:
        self.timing = False
        if self.finished:
            return
        conn = self.conn
        if conn is not None:
            conn.close()  # detaches this relay first: the close is not reported back as a failure
        self._origin_failed("timeout", 504)

    def _origin_failed(self, phase: str, status: int) -> None:
        if self.finished:
            return
        count_origin_error(self.ctx, self.room, phase)
        page = gate.is_navigation(self.request_headers)
        room_id, head, down_page = self.room.room_id, self.head_request, self.room.down_page
        got = collected(
            lambda send: pages.origin_down(
                send, page=page, status=status, room_id=room_id, phase=phase, head=head, body=down_page
            )
        )
        self.write_whole(got.status, got.headers, got.body)
        self.response_complete = True
        self._end()
        self.proto.relay_complete(self)

    def write_whole(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        """A complete answer of the queue's own (its headers carry the length)."""
        parts = [STATUS_LINE[status]]
        for k, v in self.proto.server_state.default_headers:
            parts += [k, b": ", v, b"\r\n"]
        for k, v in headers:
            parts += [k, b": ", v, b"\r\n"]
        if not self.keep_alive:
            parts.append(CLOSE)
        parts += [b"\r\n", body]
        if not self.transport.is_closing():
            self.transport.write(b"".join(parts))

    def _end(self) -> None:
        if not self.finished:
            self.finished = True
            self._cancel_timer()
            self.held.clear()
            self.inline.active_proxied -= 1


class _Collected:
    """An ASGI ``send`` that keeps one whole response (for pages rendered in place)."""

    def __init__(self) -> None:
        self.status = 500
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = b""

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = int(message["status"])
            self.headers = list(message.get("headers", []))
        else:
            self.body += message.get("body", b"")


def collected(render: Callable[[Send], Coroutine[Any, Any, None]]) -> _Collected:
    """Run ``render(send)`` (a coroutine function that never suspends) and keep what it sent."""
    got = _Collected()
    run_now(render(got.send))
    return got
