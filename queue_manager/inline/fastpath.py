"""The server's HTTP protocol, with a fast path for what an inline host's app is sent.

uvicorn's httptools protocol serves every request through the ASGI app. Proxied requests are the
bulk of an inline deployment's traffic, and through ASGI each costs a task, a dozen message dicts and
a second pass over every header. This subclass takes, at the end of a request's head, the requests
the gate lets through to the app — a static subresource, or an admitted visitor — and runs them as a
:class:`~.relay.Relay` right on the two sockets. Everything else, and every request this path is not
sure of, goes through uvicorn and the ASGI app exactly as before:

* any host that is not an inline room's, anything under ``/__qm``, upgrades (WebSockets), a request
  behind another still being answered (pipelining), the connection ceiling, the edge secret refused;
* the gate's other answers (the waiting page, the queued envelope, the token hand-off, the backend-down
  page): the decision made here travels in the scope (``proxy.DECISION``) so the door check is never
  run twice and nothing is counted twice.

Both paths call the same functions for every rule (the queue's screen, decision.decide, proxy.skipped and
proxy.door, proxy.upstream_request, forward.downstream_headers); a request this path screened and decided
but does not relay reaches the ASGI app with both done (``front.PREPARED``). ``PROXY_FAST_PATH=0`` turns
this one off.

Whichever path answers, every connection's request heads are held to the limits of ``inline/heads.py``
here, before the parser sees more than a head may hold: ``MAX_HEADER_BYTES`` (the bytes fed to the parser
while a head is being read are counted, and a head that does not end within them is answered 431),
``MAX_HEADER_COUNT`` (431 at the head's end) and ``HEADER_TIMEOUT_MS`` (one timer per connection, re-armed
only when it fires: a request costs one store of the time its answer ended); and past ``MAX_CONNECTIONS``
the connections waiting for a head make room.
"""

from __future__ import annotations

import asyncio
import contextlib
import urllib.parse
from collections.abc import Callable, MutableMapping
from typing import Any

import httptools
import orjson
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from queue_manager.http.eager import run_now
from queue_manager.http.lean import LeanFlow, Pipeline
from queue_manager.http.wire import Message, Request, api_path
from queue_manager.inline import proxy
from queue_manager.inline.client import NO_EVENT
from queue_manager.inline.decision import Proxy, decide
from queue_manager.inline.front import PREPARED, InlineFront
from queue_manager.inline.heads import LINGER_SEC, waiting_for
from queue_manager.inline.hosts import InlineRoom
from queue_manager.inline.relay import Relay
from queue_manager.inline.repeat import CookieJar, ResponseHead, UpstreamHead


async def _no_receive() -> Message:  # the fast path reads bodies from the parser, never through ASGI
    return {"type": "http.disconnect"}


class Held:
    """A request waiting for its door check (a store that answers over the network).

    It stands as the protocol's cycle meanwhile: the visitor's reading is paused and any body that
    already arrived is kept, then handed to the relay or the ASGI cycle the decision picks.
    """

    message_event = NO_EVENT

    def __init__(self, scope: dict[str, Any], keep_alive: bool, expect_continue: bool) -> None:
        self.scope = scope
        self.keep_alive = keep_alive
        self.expect_continue = expect_continue
        self.response_complete = False
        self.disconnected = False
        self.body: list[bytes] = []
        self.complete = False
        self.task: asyncio.Task[None] | None = None


class InlineProtocol(HttpToolsProtocol):
    # this class's own state in slots: uvicorn's attributes then stay few enough (under CPython's 30) for
    # the instance dict to share its keys with every other connection's, about 1.3 KB less a connection
    __slots__ = (
        "cookie_jar",
        "halted",
        "head_room",
        "head_timer",
        "idle_from",
        "idle_timer",
        "max_fields",
        "max_head",
        "qm",
        "relay",
        "response_head",
        "upstream_head",
        "waiting",
        "waiting_since",
    )

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.pipeline = Pipeline()  # type: ignore[assignment]  # uvicorn's deque, 0.7 KB less (http/lean.py)
        app = config.app
        front = getattr(app, "front", app)  # the composition root serves through its InlineFront
        self.qm: InlineFront | None = (
            front if isinstance(front, InlineFront) and front.ctx.settings.proxy_fast_path else None
        )
        self.relay: Relay | Held | None = None
        # what this keep-alive connection's requests repeat (inline/repeat.py)
        self.upstream_head = UpstreamHead()
        self.cookie_jar = CookieJar()
        self.response_head = ResponseHead()
        self.idle_from: float | None = None
        self.idle_timer: asyncio.TimerHandle | None = None
        # request heads (inline/heads.py)
        ctx = front.ctx if isinstance(front, InlineFront) else None
        self.waiting = waiting_for(server_state, ctx.settings if ctx else None, ctx.counters if ctx else None)
        self.max_head = self.waiting.limits.max_bytes
        self.max_fields = self.waiting.limits.max_fields
        # how many more bytes the head being read may take (the bytes arriving are a head's, or the next
        # one's between requests); None while a body is being read
        self.head_room: int | None = self.max_head
        # loop time since when it waits for a head: it connected, or its last answer ended (a request being
        # answered meanwhile, as the current cycle tells, is never waiting)
        self.waiting_since = 0.0
        # the head deadline, armed from the connection's start to its end (re-armed only when it fires), then a
        # refusal's linger
        self.head_timer: asyncio.TimerHandle | None = None
        self.halted = False  # refused, or handed to WebSockets: nothing more is parsed here

    # ---------------------------------------------------------------- the connection

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.flow = LeanFlow(transport)  # uvicorn's, with its event made only if writing ever pauses
        loop = self.loop
        self.waiting_since = loop.time()
        first = min(self.timeout_keep_alive, self.waiting.limits.timeout)
        self.head_timer = loop.call_later(first, self._head_check)
        self.waiting.add(self, loop.time)

    def data_received(self, data: bytes) -> None:
        self.idle_from = None
        room = self.head_room
        if room is not None:
            left = room - len(data)
            if left < 0:
                self._past_room(data)
                return
            self.head_room = left
        super().data_received(data)

    def _past_room(self, data: bytes) -> None:
        """More bytes than the head being read may still take: the parser gets them a head's room at a time,
        and a head that has not ended within its room is refused (the rest is never parsed or kept)."""
        if self.halted:
            return  # refused: what still comes is dropped while the answer lingers
        feed: Callable[[Any], None] = super().data_received  # the parser takes a memoryview as it is
        view = memoryview(data)
        while True:
            room = self.head_room
            if room is None:  # the head ended: its body follows (and what comes after it is not counted)
                feed(view)
                return
            if len(view) <= room:
                self.head_room = room - len(view)
                feed(view)
                return
            self.head_room = 0
            if room:
                feed(view[:room])
                view = view[room:]
            if self.halted or self.transport.is_closing():
                return
            if self.head_room == 0:  # still the same head, and it is already MAX_HEADER_BYTES long
                self._refuse(431, "too_large")
                return
            # the head ended: a body follows, or its request ended too and the next head's room was renewed

    def connection_lost(self, exc: Exception | None) -> None:
        current = self.relay
        if isinstance(current, Relay):
            current.visitor_gone()
        elif isinstance(current, Held) and current.task is not None:
            current.task.cancel()
        self.relay = None
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None
        self._forget()
        super().connection_lost(exc)

    def _forget(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None
        self.waiting.remove(self)

    def handle_websocket_upgrade(self) -> None:
        if self.halted:  # a handshake refused for its head (431) is not upgraded
            return
        self._forget()  # the WebSocket protocol takes the connection over
        self._halt()
        super().handle_websocket_upgrade()

    def pause_writing(self) -> None:
        super().pause_writing()
        if isinstance(self.relay, Relay):
            self.relay.visitor_writable(False)

    def resume_writing(self) -> None:
        super().resume_writing()
        if isinstance(self.relay, Relay):
            self.relay.visitor_writable(True)

    def _cycle(self) -> object:
        """The current cycle: uvicorn's, a Relay or a Held (they stand in for one another)."""
        return self.cycle

    # ---------------------------------------------------------------- request heads

    def _halt(self) -> None:
        """Parse nothing more on this connection (every byte is then "past the room", and dropped)."""
        self.halted = True
        self.head_room = -1

    def _refuse(self, status: int, reason: str) -> None:
        """A head over MAX_HEADER_BYTES or MAX_HEADER_COUNT: 431, and the connection ends."""
        self._halt()
        waiting = self.waiting
        waiting.count(waiting.counters.heads_refused, reason)
        cycle: Any = self._cycle()
        if cycle is not None and not cycle.response_complete:
            cycle.keep_alive = False  # pipelined behind an answer still being written: that answer ends it
            return
        if reason == "too_large":
            self._answer(status, "request_head_too_large", "The request head is larger than this server accepts.")
        else:
            self._answer(
                status, "too_many_header_fields", "The request has more header fields than this server accepts."
            )
        transport = self.transport
        if transport.can_write_eof():  # the client reads the answer; what it still sends is read and dropped
            transport.write_eof()
            self.waiting_since = self.loop.time()  # and the connection may be closed for room meanwhile
            if self.head_timer is not None:
                self.head_timer.cancel()
            self.head_timer = self.loop.call_later(LINGER_SEC, transport.close)
        else:
            transport.close()

    def _answer(self, status: int, code: str, message: str) -> None:
        body = orjson.dumps({"error": message, "code": code})
        parts = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            parts += [name, b": ", value, b"\r\n"]
        parts.append(b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(body))
        parts.append(body)
        self.transport.write(b"".join(parts))

    def _head_check(self) -> None:
        """The connection's one timer: close it once it has waited too long for a request head."""
        self.head_timer = None
        if self.halted or self.transport.is_closing():
            return
        limits = self.waiting.limits
        since = self.waiting_for_head()
        if since is None:  # a request is being answered: look again a whole deadline later
            self.head_timer = self.loop.call_later(limits.timeout, self._head_check)
            return
        silent = self.head_room == limits.max_bytes  # no byte of a head yet
        allowed = limits.timeout
        if silent and self.cycle is None:  # a new connection that has sent nothing: the keep-alive allowance
            allowed = min(allowed, self.timeout_keep_alive)
        left = since + allowed - self.loop.time()
        if left > 0:
            self.head_timer = self.loop.call_later(left, self._head_check)
        else:
            self.close_waiting("idle" if silent else "timeout")

    def waiting_for_head(self) -> float | None:
        """Since when this connection waits for a request head; None while a request is being answered."""
        cycle: Any = self.cycle
        if cycle is not None and not cycle.response_complete:
            return None
        return self.waiting_since

    def close_waiting(self, reason: str) -> None:
        """Close this connection while it waits for a request head: ``timeout`` (408: part of a head came,
        not all of it in time), ``idle`` (nothing came) or ``ceiling`` (room for others past MAX_CONNECTIONS)."""
        room = self.head_room
        partial = not self.halted and room is not None and room < self.max_head
        self._forget()
        self._halt()
        self.connections.discard(self)  # at once: it no longer counts against the ceiling
        waiting = self.waiting
        if reason == "timeout":
            waiting.count(waiting.counters.heads_refused, reason)
        else:
            waiting.count(waiting.counters.waiting_closed, reason)
        transport = self.transport
        if transport.is_closing():
            return
        if partial:
            self._answer(408, "request_head_timeout", "The request head did not arrive in time.")
        transport.close()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        cycle: Any = self.cycle
        if cycle is None or cycle.response_complete:  # nothing queued behind it: it waits for the next head
            self.waiting_since = self.loop.time()

    # ---------------------------------------------------------------- parser callbacks

    def on_headers_complete(self) -> None:
        self.head_room = None
        if len(self.headers) > self.max_fields:
            self._refuse(431, "too_many_fields")
            return
        qm = self.qm
        cycle = self.cycle
        if (
            qm is None
            or not qm.inline.index
            or (cycle is not None and not cycle.response_complete)
            or self.parser.should_upgrade()
        ):
            super().on_headers_complete()
            return
        limit = self.limit_concurrency
        if limit is not None and (len(self.connections) >= limit or len(self.tasks) >= limit):
            super().on_headers_complete()
            return
        self._take(qm)

    def on_body(self, body: bytes) -> None:
        if self.halted:
            return
        current = self.relay
        if current is None or current is not self._cycle():
            super().on_body(body)
        elif isinstance(current, Relay):
            current.request_body(body)
        else:
            current.body.append(body)

    def on_message_complete(self) -> None:
        if self.halted:
            return
        self.head_room = self.max_head  # what follows is the next request's head
        current = self.relay
        if current is None or current is not self._cycle():
            super().on_message_complete()
        elif isinstance(current, Relay):
            current.request_done()
        else:
            current.complete = True

    # ---------------------------------------------------------------- the fast path

    def _take(self, qm: InlineFront) -> None:
        """Serve this request here if the gate lets it through to the app; otherwise hand it to uvicorn."""
        ctx = qm.ctx
        parser = self.parser
        scope: dict[str, Any] = self.scope  # type: ignore[assignment]
        method = parser.get_method().decode("ascii")
        scope["method"] = method
        version = parser.get_http_version()
        if version != "1.1":
            scope["http_version"] = version
        url = httptools.parse_url(self.url)
        raw_path = url.path
        path = raw_path.decode("ascii")
        if "%" in path:
            path = urllib.parse.unquote(path)
        scope["path"] = self.root_path + path
        scope["raw_path"] = self.root_path.encode("ascii") + raw_path
        scope["query_string"] = url.query or b""
        if ctx.edge.enabled and not ctx.edge.passes(scope):
            super().on_headers_complete()  # the ASGI path refuses it (and counts the refusal once)
            return
        req = Request(scope, _no_receive, api_path(scope["path"]))
        inline = qm.inline
        found = inline.index.lookup(req.headers.get(b"host"))
        qm.app.screen(req, found is not None)  # passes: the edge secret, its one refusal, was checked just above
        step = decide(ctx, inline, req, found)
        scope[PREPARED] = (req, step)
        if not isinstance(step, Proxy):  # the queue's, a refusal, the ceiling: the ASGI path acts on it
            super().on_headers_complete()
            return
        room = step
        keep_alive = version != "1.0" and parser.should_keep_alive()
        skip = proxy.skipped(ctx, req, room)
        if skip is not None:  # a static subresource: no door check at all
            self._decided(req, room, skip, keep_alive, self.expect_100_continue, None)
            return
        jar = self.cookie_jar
        jar.lend(req)
        coro = proxy.door(ctx, inline, req, room)
        if ctx.store.immediate:
            try:
                decision = run_now(coro)
            except Exception:  # e.g. the room went away: the ASGI path answers it with the right error
                super().on_headers_complete()
                return
            jar.keep(req)
            self._decided(req, room, decision, keep_alive, self.expect_100_continue, None)
            return
        # a door check over the network: hold the request (and any body) until it answers
        held = Held(scope, keep_alive, self.expect_100_continue)
        self.relay = self.cycle = held  # type: ignore[assignment]
        self.flow.pause_reading()
        held.task = self.loop.create_task(self._await_decision(coro, req, room, held))

    async def _await_decision(self, coro: Any, req: Request, room: InlineRoom, held: Held) -> None:
        try:
            decision: proxy.Decision | None = await coro
        except Exception:  # e.g. the room went away: the ASGI path runs it again and answers the error
            decision = None
        if self.relay is not held or self.transport.is_closing():
            return
        if decision is None:
            self._to_asgi(req.scope, held.keep_alive, held.expect_continue, held)
        else:
            self.cookie_jar.keep(req)
            self._decided(req, room, decision, held.keep_alive, held.expect_continue, held)
        self.resume_visitor()

    def _decided(
        self,
        req: Request,
        room: InlineRoom,
        decision: proxy.Decision,
        keep_alive: bool,
        expect_continue: bool,
        held: Held | None,
    ) -> None:
        qm = self.qm
        assert qm is not None
        ctx = qm.ctx
        inline = qm.inline
        scope = req.scope
        if decision.kind != proxy.FORWARD_PLAIN:
            scope[proxy.DECISION] = decision
            self._to_asgi(scope, keep_alive, expect_continue, held)
            return
        ident = ctx.identity.resolve(req)
        head, body_kind = self.upstream_head.get(ctx, req, ident)
        relay = Relay(
            self,
            ctx,
            inline,
            room,
            head,
            body_kind,
            head_request=req.method == "HEAD",
            request_headers=req.headers,
            extra=decision.extra,
            session=decision.session,
            keep_alive=keep_alive,
            http10=scope.get("http_version") == "1.0",
            expect_continue=expect_continue,
        )
        scope.pop(PREPARED, None)
        if held is None or self._cycle() is held:  # not when a pipelined request's cycle is already current
            self.cycle = relay  # type: ignore[assignment]
        self.relay = relay
        if held is not None:
            for chunk in held.body:
                relay.request_body(chunk)
            if held.complete:
                relay.request_done()
        relay.start()

    def _to_asgi(
        self, scope: MutableMapping[str, Any], keep_alive: bool, expect_continue: bool, held: Held | None
    ) -> None:
        """This request through uvicorn's cycle and the ASGI app, as if the fast path had not looked."""
        if held is None:
            super().on_headers_complete()
            return
        cycle = RequestResponseCycle(
            scope=scope,  # type: ignore[arg-type]
            transport=self.transport,
            flow=self.flow,
            logger=self.logger,
            access_logger=self.access_logger,
            access_log=self.access_log,
            default_headers=self.server_state.default_headers,
            message_event=asyncio.Event(),
            expect_100_continue=expect_continue,
            keep_alive=keep_alive,
            on_response=self.on_response_complete,
        )
        for chunk in held.body:
            cycle.body += chunk
        cycle.more_body = not held.complete
        if held.body or held.complete:
            cycle.message_event.set()
        self.relay = None
        if self._cycle() is held:
            self.cycle = cycle
        self._start_asgi_task(cycle, self.app)

    def resume_visitor(self) -> None:
        """Read from the visitor again, unless requests already queued behind this one keep it paused."""
        if not self.pipeline:
            self.flow.resume_reading()

    def relay_complete(self, relay: Relay) -> None:
        """The relay has written its whole answer: keep the connection for the next request, or close it."""
        if self.relay is relay:
            self.relay = None
        self.server_state.total_requests += 1
        transport = self.transport
        if transport.is_closing():
            return
        if not relay.keep_alive:
            transport.close()
            return
        self.flow.resume_reading()
        if self.pipeline:  # requests queued behind this one: uvicorn starts the next
            self.server_state.total_requests -= 1  # counted there too
            self.on_response_complete()
            return
        self.idle_from = self.waiting_since = self.loop.time()  # and it waits for the next head
        if self.idle_timer is None:
            self.idle_timer = self.loop.call_later(self.timeout_keep_alive, self._idle_check)

    def _idle_check(self) -> None:
        """One timer per connection, not one per request: close it once idle for the keep-alive timeout."""
        self.idle_timer = None
        if self.transport.is_closing() or self.idle_from is None:
            return  # closed, or busy again (the ASGI path keeps its own timer)
        left = self.idle_from + self.timeout_keep_alive - self.loop.time()
        if left <= 0:
            with contextlib.suppress(Exception):
                self.transport.close()
            return
        self.idle_timer = self.loop.call_later(left, self._idle_check)
