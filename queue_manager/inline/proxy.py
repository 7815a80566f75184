"""An inline host's own paths: the gate, then the app.

Admitted requests (and static subresources that skip the gate) are forwarded to the room's
``proxyOrigin`` with bodies streamed both ways; everyone else gets the waiting page at the URL they
asked for (a navigation) or the gated wait in JSON (anything else, and whatever asks for JSON: its
position, estimate and where to wait), both 503 with ``X-QM-Queued``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from queue_manager.context import Context
from queue_manager.engine.errors import EngineError
from queue_manager.engine.view import VisitorView
from queue_manager.engine.visitor import CheckResult
from queue_manager.http import cookies
from queue_manager.http.negotiate import VARY_JSON
from queue_manager.http.wire import Message, Receive, Request, Send, cookie_header
from queue_manager.inline import gate, pages
from queue_manager.inline.client import Upstream, UpstreamError
from queue_manager.inline.component import Inline
from queue_manager.inline.forward import commands, downstream_headers, request_head, upstream_headers
from queue_manager.inline.hosts import InlineRoom
from queue_manager.invitation import looks_like_invitation
from queue_manager.services import gated_wait
from queue_manager.services.identity import Identity
from queue_manager.ssrf import OriginRefused
from queue_manager.store.base import StoreUnavailable

log = logging.getLogger("queue_manager.inline")

API_BASE = "/__qm"


def visitor_url(req: Request, ident: Identity) -> str:
    host = req.header(b"host") or ""
    raw = req.scope.get("raw_path") or req.scope["path"].encode()
    qs = req.scope.get("query_string") or b""
    return f"{ident.scheme}://{host}{raw.decode('latin-1')}" + (f"?{qs.decode('latin-1')}" if qs else "")


def trusted_forwarder(ctx: Context, ident: Identity) -> bool:
    """Whose forwarded headers the app may see: a listed proxy, or a request that passed the edge secret."""
    return ident.trusted_peer or ctx.edge.enabled


def admit(
    ctx: Context, inline: Inline, req: Request, ident: Identity, room: InlineRoom
) -> tuple[Coroutine[Any, Any, CheckResult], str | None]:
    """The door check for one request, to be awaited, and the token it is made with (None if not valid).

    Not a coroutine itself: the caller awaits the check directly, one frame fewer on every gated request."""
    room_id = room.room_id
    qs = req.scope.get("query_string")
    query_token = hand_off_token(qs) if qs else None
    token = query_token or req.cookies.get(cookies.TICKET + room_id)
    presented, _ = ctx.read_ticket(room_id, token)
    dk = req.cookies.get(cookies.DOOR_KEY + room_id)
    check = inline.queue.door_check(ctx, req, ident, room_id, presented, dk, visitor_url(req, ident))
    return check, (token if presented is not None else None)


DECISION = "qm.inline.decision"  # scope key: a decision the fast path already made (inline/fastpath.py)


@dataclass(slots=True)
class Decision:
    """What the gate decided for one request on an inline host.

    ``kind``: forward (to the app), redirect (the waiting page's token hand-off), waiting (the page),
    queued (the JSON envelope) or backend_down (onBackendDown closed while the store is unreachable).
    """

    kind: str
    extra: list[tuple[bytes, bytes]] = field(default_factory=list)
    navigation: bool = False
    reason: str = "waiting"
    # an admitted visitor's ticket token and door key: what an app's X-QM-Command: revoke ends
    session: tuple[str | None, str | None] | None = None


FORWARD_PLAIN = "forward"


def skipped(ctx: Context, req: Request, room: InlineRoom) -> Decision | None:
    """A static subresource skips the gate (counted here); None: the door check decides (and, in a room
    with access rules, those rules first: a static file is theirs to bypass or block too)."""
    if room.access_rules:
        return None
    return _static(ctx, req)


def _static(ctx: Context, req: Request) -> Decision | None:
    raw_path: bytes = req.scope.get("raw_path") or req.scope["path"].encode()
    if gate.skips_gate(req.method, raw_path.split(b"?", 1)[0], req.headers.get(b"sec-fetch-dest")):
        ctx.counters.inline_bypassed += 1
        return Decision(FORWARD_PLAIN)
    return None


async def decide(ctx: Context, inline: Inline, req: Request, room: InlineRoom) -> Decision:
    """Skip the gate, or run the door check; counted here once, whichever path answers."""
    skip = skipped(ctx, req, room)
    return skip if skip is not None else await door(ctx, inline, req, room)


async def _access(ctx: Context, req: Request, ident: Identity, room: InlineRoom) -> Decision | None:
    """The room's access rules on this request: forwarded (bypass), refused (block), a static file
    skipping the gate, or None: the door check decides."""
    policy = await ctx.store.room_policy(room.room_id)
    raw_path: bytes = req.scope.get("raw_path") or req.scope["path"].encode()
    path = raw_path.split(b"?", 1)[0].decode("latin-1")
    rule = None if policy is None else await ctx.access_gate.judge(policy, req, ident, path)
    if rule is not None and rule.action == "bypass":
        return Decision(FORWARD_PLAIN)
    if rule is not None and rule.action == "block":
        return Decision("blocked", navigation=gate.is_navigation(req.headers), reason="access_blocked")
    return _static(ctx, req)


async def door(ctx: Context, inline: Inline, req: Request, room: InlineRoom) -> Decision:
    """The door check for a request that does not skip the gate."""
    counters = ctx.counters
    ident = ctx.identity.resolve(req)
    try:
        if room.access_rules:
            ruled = await _access(ctx, req, ident, room)
            if ruled is not None:
                return ruled
        counters.inline_gated += 1
        check, token = admit(ctx, inline, req, ident, room)
        result = await check
    except StoreUnavailable:
        mode = room.on_backend_down
        counters.backend_down[mode] = counters.backend_down.get(mode, 0) + 1
        log_backend_down(room, mode)
        if mode == "open":
            return Decision(FORWARD_PLAIN)
        return Decision("backend_down", navigation=gate.is_navigation(req.headers))
    if result.admit:
        extra: list[tuple[bytes, bytes]] = []
        secure = ctx.identity.secure(ident)
        if result.door_key:
            extra.append(cookie_header(cookies.DOOR_KEY + room.room_id, result.door_key, max_age=None, secure=secure))
        session = None
        if result.state == "admitted":
            session = (token, result.door_key or req.cookies.get(cookies.DOOR_KEY + room.room_id))
        qs = req.scope.get("query_string") or b""
        # (whether the request is a page is asked only here: an admitted request forwards whatever it is)
        if qs and token is not None and hand_off_token(qs) and req.method == "GET" and gate.is_navigation(req.headers):
            # the waiting page's hand-off: keep the token in the cookie, not in the app's URLs and logs
            age = ctx.settings.queue_cookie_max_age_sec
            extra.append(cookie_header(cookies.TICKET + room.room_id, token, max_age=age, secure=secure))
            return Decision("redirect", extra, True)
        if qs and invitation_in(qs) and req.method == "GET" and gate.is_navigation(req.headers):
            # an invitation followed by a visitor already inside: the app never sees it
            return Decision("redirect", extra, True)
        return Decision(FORWARD_PLAIN, extra, session=session)
    navigation = gate.is_navigation(req.headers)
    return Decision("waiting" if navigation else "queued", navigation=navigation, reason=result.reason or "waiting")


async def serve(ctx: Context, inline: Inline, req: Request, room: InlineRoom, send: Send) -> None:
    decision = req.scope.pop(DECISION, None)
    if not isinstance(decision, Decision):
        decision = await decide(ctx, inline, req, room)
    await answer(ctx, inline, req, room, send, decision)


async def answer(ctx: Context, inline: Inline, req: Request, room: InlineRoom, send: Send, d: Decision) -> None:
    head = req.method == "HEAD"
    if d.kind == FORWARD_PLAIN:
        await forward(ctx, inline, req, room, send, d.extra, d.session)
    elif d.kind == "redirect":
        await _redirect_clean(req, send, d.extra)
    elif d.kind == "backend_down":
        url = None if d.navigation else waiting_url(ctx, req, room.room_id)
        await pages.backend_down(send, page=d.navigation, room_id=room.room_id, head=head, waiting_url=url)
    elif d.kind == "waiting":
        await waiting_page(ctx, inline, req, send, room.room_id)
    elif d.kind == "blocked":
        await blocked(ctx, inline, req, send, room.room_id, d.navigation)
    elif d.reason == "room_closed":
        await pages.closed_json(send, room.room_id, head)
    else:
        view = await wait_view(ctx, req, room.room_id)
        wait = gated_wait.body(room.room_id, d.reason, waiting_url(ctx, req, room.room_id), view)
        await pages.queued_json(send, wait, head)


async def blocked(ctx: Context, inline: Inline, req: Request, send: Send, room_id: str, page: bool) -> None:
    """A block rule's refusal: the room's short "not allowed" page to a person, 403 access_blocked to code."""
    render = inline.queue.blocked_page
    brand = None
    if page and render is not None:
        with contextlib.suppress(StoreUnavailable):
            policy = await ctx.store.room_policy(room_id)
            brand = None if policy is None else policy.brand
    await pages.blocked(send, room_id, None if render is None or not page else render(req, brand), req.method == "HEAD")


def waiting_url(ctx: Context, req: Request, room_id: str) -> str:
    """The room's waiting page under /__qm on this host, coming back to the address asked (an invitation it
    carried goes to the page, not into the address to come back to)."""
    ident = ctx.identity.resolve(req)
    qs = req.scope.get("query_string") or b""
    invite = invitation_in(qs)
    url = visitor_url(req, ident)
    if invite is not None:
        kept = without_token(qs).decode("latin-1")
        url = url.split("?", 1)[0] + (f"?{kept}" if kept else "")
    back = quote(url, safe="")
    page = f"{ident.scheme}://{req.header(b'host') or ''}{API_BASE}/w/{quote(room_id, safe='')}?qm_return={back}"
    return page if invite is None else f"{page}&{cookies.TOKEN_PARAM}={quote(invite, safe='')}"


async def wait_view(ctx: Context, req: Request, room_id: str) -> VisitorView | None:
    """The status of the place the request's token names (None: no token, or the store cannot say)."""
    token = hand_off_token(req.scope.get("query_string") or b"") or req.cookies.get(cookies.TICKET + room_id)
    presented, _ = ctx.read_ticket(room_id, token)
    if presented is None:
        return None
    client = ctx.identity.resolve(req).client(req.cookies.get(cookies.SESSION + room_id))
    try:
        return await ctx.store.status(room_id, client, presented)
    except (StoreUnavailable, EngineError):
        return None


BACKEND_DOWN_LOGGED: dict[str, float] = {}


def log_backend_down(room: InlineRoom, mode: str) -> None:
    """One log line per room per minute while the backend is down."""
    now = time.monotonic()
    if now - BACKEND_DOWN_LOGGED.get(room.room_id, -120.0) >= 60.0:
        BACKEND_DOWN_LOGGED[room.room_id] = now
        action = "forwarding to the app ungated" if mode == "open" else "answering 503 with Retry-After: 5"
        log.warning("inline %s: the backend is down; onBackendDown=%s, %s", room.room_id, mode, action)


_TOKEN_EQ = (cookies.TOKEN_PARAM + "=").encode()


def _query_token(query: bytes) -> str | None:
    """``qm_token`` from the raw query string, without parsing the rest: the app's query is the app's."""
    if _TOKEN_EQ not in query:
        return None
    for part in query.split(b"&"):
        if part.startswith(_TOKEN_EQ):
            value = part[len(_TOKEN_EQ) :]
            return value.decode("ascii", "replace") if value else None
    return None


def hand_off_token(query: bytes) -> str | None:
    """The waiting page's hand-off (a ticket) in ``qm_token``; an invitation there is not one."""
    token = _query_token(query)
    return None if token is None or looks_like_invitation(token) else token


def invitation_in(query: bytes) -> str | None:
    """An invitation token (a JWS) that ``qm_token`` carries: it goes to the waiting page, never to the app."""
    token = _query_token(query)
    return token if token is not None and looks_like_invitation(token) else None


def without_token(query: bytes) -> bytes:
    """The query string without its ``qm_token`` parameters."""
    return b"&".join(p for p in query.split(b"&") if p and not p.startswith(_TOKEN_EQ))


async def _redirect_clean(req: Request, send: Send, headers: list[tuple[bytes, bytes]]) -> None:
    raw = req.scope.get("raw_path") or req.scope["path"].encode()
    kept = without_token(req.scope.get("query_string") or b"")
    path = raw.split(b"?", 1)[0]
    # a path that starts with // or /\ is, as a Location, a scheme-relative URL of another host: keep one slash
    if path[1:2] in (b"/", b"\\"):
        path = b"/" + path.lstrip(b"/\\")
    location = path + (b"?" + kept if kept else b"")
    headers += [(b"location", location), (b"cache-control", b"no-store"), (b"content-length", b"0")]
    await send({"type": "http.response.start", "status": 303, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


async def waiting_page(ctx: Context, inline: Inline, req: Request, send: Send, room_id: str) -> None:
    """The room's waiting page at the visitor's own URL: 503 + X-QM-Queued, its API under /__qm.

    The page persists nothing and, served at the visitor's URL, carries no ``qm_return``: the URL to
    come back to is left in a short-lived cookie only the join under the prefix reads (``qmr_<room>``).
    """
    raw = (req.scope.get("raw_path") or req.scope["path"].encode()).split(b"?", 1)[0]
    qs = without_token(req.scope.get("query_string") or b"")  # an invitation is the page's, not the app's
    here = raw.decode("latin-1") + ("?" + qs.decode("latin-1") if qs else "")
    ident = ctx.identity.resolve(req)
    back = cookie_header(
        cookies.RETURN_TO + room_id,
        quote(here, safe="/"),
        max_age=3600,
        secure=ctx.identity.secure(ident),
        path=API_BASE + "/api/",
    )

    async def inline_send(message: Message) -> None:
        if message["type"] == "http.response.start":
            status = message["status"]
            headers = [(k, v) for k, v in message.get("headers", []) if k.lower() not in (b"cache-control", b"etag")]
            headers += [(b"cache-control", b"no-store"), back]
            closed = any(k.lower() == b"x-qm-closed" for k, _ in headers)  # a closed room's page keeps its status
            if status == 200 and not closed:
                status = 503
                headers += [(pages.QUEUED_HEADER, b"1"), pages.EXPOSE, (b"retry-after", b"5"), VARY_JSON]
            message = {**message, "status": status, "headers": headers}
        await send(message)

    await inline.queue.waiting_page(ctx, req, inline_send, room_id, API_BASE)


# ---------------------------------------------------------------------- forwarding


def upstream_request(ctx: Context, req: Request, ident: Identity) -> tuple[bytes, str]:
    """The request head the app receives, and how its body is framed (none | length | chunked)."""
    scope = req.scope
    raw: bytes = scope.get("raw_path") or scope["path"].encode()
    qs: bytes = scope.get("query_string") or b""
    target = raw if b"?" in raw or not qs else raw + b"?" + qs
    framing, body_kind = _body_framing(req)
    headers = upstream_headers(scope["headers"], ident, trusted_forwarder(ctx, ident))
    if framing:
        headers += framing
    return request_head(req.method, target, headers), body_kind


def _body_framing(req: Request) -> tuple[list[tuple[bytes, bytes]], str]:
    """(framing headers for the app, body kind: none | length | chunked)."""
    headers = req.headers
    length = headers.get(b"content-length")
    if length is not None:
        value = length.split(b",")[0].strip()
        return [(b"content-length", value)], ("length" if value not in (b"0", b"") else "none")
    te = headers.get(b"transfer-encoding")
    if te is not None and b"chunked" in te.lower():
        return [(b"transfer-encoding", b"chunked")], "chunked"
    return NO_FRAMING, "none"


NO_FRAMING: list[tuple[bytes, bytes]] = []


async def _pump(conn: Upstream, receive: Receive, chunked: bool) -> bool:
    """Stream the visitor's body to the app with backpressure; False if the visitor went away."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return False
        chunk = message.get("body", b"")
        more = message.get("more_body", False)
        if chunk:
            conn.write(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
            await conn.drain()
        if not more:
            if chunked:
                conn.write(b"0\r\n\r\n")
            return True


async def forward(
    ctx: Context,
    inline: Inline,
    req: Request,
    room: InlineRoom,
    send: Send,
    extra: list[tuple[bytes, bytes]],
    session: tuple[str | None, str | None] | None = None,
) -> None:
    ident = ctx.identity.resolve(req)
    head_request = req.method == "HEAD"
    head, body_kind = upstream_request(ctx, req, ident)
    inline.active_proxied += 1
    try:
        await _exchange(ctx, inline, req, room, send, extra, head, head_request, body_kind, session)
    finally:
        inline.active_proxied -= 1


async def _exchange(
    ctx: Context,
    inline: Inline,
    req: Request,
    room: InlineRoom,
    send: Send,
    extra: list[tuple[bytes, bytes]],
    head: bytes,
    head_request: bool,
    body_kind: str,
    session: tuple[str | None, str | None] | None = None,
) -> None:
    pool = inline.pool
    origin = room.origin
    navigation = gate.is_navigation(req.headers)
    conn: Upstream | None = None
    pump: asyncio.Task[bool] | None = None
    try:
        conn = pool.take_idle(origin)
        for _ in range(2):
            reused = conn is not None
            if conn is None:
                conn = await pool.connect(origin)
            conn.begin(head, head_request)
            if body_kind != "none":
                pump = asyncio.create_task(_pump(conn, req.receive, body_kind == "chunked"))
            try:
                await _head_or_pump_failure(conn, pump, inline.timeout)
                break
            except UpstreamError as err:
                # a kept-alive connection the app closed while idle: try once more on a fresh one
                if reused and not conn.got_bytes and pump is None and err.phase == "response":
                    conn.close()
                    conn = None
                    continue
                raise
        assert conn is not None
    except TimeoutError:
        await _origin_failed(ctx, room, send, "timeout", 504, navigation, head_request, conn, pump)
        return
    except OriginRefused as err:
        log.warning("inline %s: %s", room.room_id, err)
        await _origin_failed(ctx, room, send, "refused", 502, navigation, head_request, conn, pump)
        return
    except UpstreamError as err:
        status = 504 if err.phase == "timeout" else 502
        await _origin_failed(ctx, room, send, err.phase, status, navigation, head_request, conn, pump)
        return
    except BaseException:
        if conn is not None:
            conn.close()
        if pump is not None:
            pump.cancel()
        raise
    if b"revoke" in commands(conn.headers):
        inline.revoke(room.room_id, session)
    await _relay_response(ctx, inline, req, room, conn, pump, send, extra)


async def _head_or_pump_failure(conn: Upstream, pump: asyncio.Task[bool] | None, limit: float) -> None:
    """The response head within PROXY_TIMEOUT_MS of the request being fully sent.

    While an upload is still streaming the clock does not run (a large upload takes as long as it
    takes); an answer that comes first (say a 413) ends the wait, and so does the visitor leaving.
    """
    if pump is None:
        async with asyncio.timeout(limit):
            await conn.response_head()
        return
    head = asyncio.ensure_future(conn.response_head())
    done, _ = await asyncio.wait({head, pump}, return_when=asyncio.FIRST_COMPLETED)
    if head in done:
        head.result()
        return
    exc = pump.exception()
    if exc is None and pump.result():
        async with asyncio.timeout(limit):  # the whole body is up: now wait for the answer
            await head
        return
    if exc is not None:
        if head.done():
            head.result()  # the app answered (and closed) before taking the whole body
            return
        head.cancel()
        raise exc if isinstance(exc, UpstreamError) else UpstreamError("response", str(exc))
    head.cancel()
    raise UpstreamError("visitor", "the visitor went away during the upload")


async def _origin_failed(
    ctx: Context,
    room: InlineRoom,
    send: Send,
    phase: str,
    status: int,
    navigation: bool,
    head: bool,
    conn: Upstream | None,
    pump: asyncio.Task[bool] | None,
) -> None:
    if conn is not None:
        conn.close()
    if pump is not None and not pump.done():
        pump.cancel()
    if phase == "visitor":
        count_disconnect(ctx, room)
        return
    count_origin_error(ctx, room, phase)
    await pages.origin_down(
        send, page=navigation, status=status, room_id=room.room_id, phase=phase, head=head, body=room.down_page
    )


def count_origin_error(ctx: Context, room: InlineRoom, phase: str) -> None:
    key = (room.room_id, phase)
    errors = ctx.counters.origin_errors
    errors[key] = errors.get(key, 0) + 1


def count_disconnect(ctx: Context, room: InlineRoom) -> None:
    d = ctx.counters.visitor_disconnects
    d[room.room_id] = d.get(room.room_id, 0) + 1


async def _relay_response(
    ctx: Context,
    inline: Inline,
    req: Request,
    room: InlineRoom,
    conn: Upstream,
    pump: asyncio.Task[bool] | None,
    send: Send,
    extra: list[tuple[bytes, bytes]],
) -> None:
    headers = downstream_headers(conn.headers) + extra
    await send({"type": "http.response.start", "status": conn.status, "headers": headers})
    if conn.complete and (pump is None or (pump.done() and not pump.cancelled() and pump.exception() is None)):
        # the whole answer is already here (the common small response): no watcher, one send
        await send({"type": "http.response.body", "body": conn.take_all(), "more_body": False})
        if pump is not None and not pump.result():
            conn.close()
            return
        inline.pool.put_back(conn)
        return
    gone = asyncio.Event()
    watcher: asyncio.Task[Any] | None = None

    async def watch() -> None:
        if pump is not None and not await pump:
            gone.set()
            conn.close()
            return
        while True:  # a request without a body still has its one empty http.request message to take
            message = await req.receive()
            if message["type"] == "http.disconnect":
                gone.set()
                conn.close()
                return

    watcher = asyncio.create_task(watch())
    failed = False
    try:
        while True:
            try:
                chunk = await conn.read()
            except UpstreamError:
                failed = not gone.is_set()
                break
            if chunk is None:
                break
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if gone.is_set():
                break
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await watcher
        if pump is not None and not pump.done():
            pump.cancel()
            conn.close()
    if gone.is_set():
        count_disconnect(ctx, room)
        conn.close()
        return
    if failed:
        count_origin_error(ctx, room, "body")
        conn.close()
        # the status is already sent: return without ending the body, so the server cuts the connection
        # and the visitor sees a broken transfer rather than a short file
        return
    await send({"type": "http.response.body", "body": b"", "more_body": False})
    if pump is not None and not (pump.done() and not pump.cancelled() and pump.result()):
        conn.close()
        return
    inline.pool.put_back(conn)
