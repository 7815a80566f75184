"""The inline proxy, wrapped around the queue's app.

:class:`InlineFront` is the ASGI application the server runs. Every request is screened by the queue's
app (edge secret, identity), then :func:`route` answers it itself (proxied to the app, gated, shed) or
returns the path the queue's router should serve (the ``/__qm`` prefix stripped on an inline host).
WebSockets are the proxied app's only. The queue's app is reached through the small :class:`Queue`
interface; the gate itself reaches the inline component as a callable (:class:`~.component.QueueSide`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import orjson

from queue_manager.context import Context
from queue_manager.http.wire import HttpError, Message, Receive, Request, Scope, Send, api_path
from queue_manager.inline import pages, proxy, surface, websocket
from queue_manager.inline.component import Inline
from queue_manager.inline.hosts import InlineRoom, is_address_literal, request_host_key

HEALTH_PATHS = frozenset({"/healthz", "/__qm/healthz"})
PREPARED = "qm.request"  # scope key: a Request the fast path already screened (inline/fastpath.py)

GET_HEAD = frozenset({"GET", "HEAD"})


class Queue(Protocol):
    """What the inline front needs of the queue's app (routes/app.py's ``App``)."""

    ctx: Context
    foreign_host: Callable[[Scope], bool]

    def screen(self, req: Request) -> bool: ...

    async def refuse_at_edge(self, scope: Scope, send: Send, head: bool) -> None: ...

    def dispatch(self, req: Request, send: Send) -> Awaitable[None]: ...

    async def fail(self, req: Request, send: Send, exc: Exception) -> None: ...


class InlineFront:
    """The ASGI application in front of the queue: inline hosts' traffic here, the rest to the queue."""

    def __init__(self, queue: Queue, inline: Inline) -> None:
        self.queue = queue
        self.ctx = queue.ctx
        self.inline = inline
        queue.foreign_host = self.inline_host
        #: the ASGI lifespan, handled by whoever owns the parts (the composition root plugs it in)
        self.lifespan: Callable[[Receive, Send], Awaitable[None]] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self.http(scope, receive, send)
        elif kind == "websocket":
            await websocket.handle(self.ctx, self.inline, scope, receive, send)
        elif kind == "lifespan" and self.lifespan is not None:
            await self.lifespan(receive, send)

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        prepared = scope.pop(PREPARED, None)
        if isinstance(prepared, Request):
            req = prepared
            req.receive = receive
        else:
            req = Request(scope, receive, api_path(scope["path"]))
            if not self.queue.screen(req):
                await self.queue.refuse_at_edge(scope, send, req.method == "HEAD")
                return
        try:
            # an inline host's own paths, /__qm and the connection ceiling, before the queue's router
            path = await route(self.ctx, self.inline, req, send)
            if path is None:
                return
            req.path = path
            out = send
            if req.method not in GET_HEAD and path.startswith("/api/admin/rooms"):
                out = admin_send(self.ctx, self.inline, req, send)
            await self.queue.dispatch(req, out)
        except Exception as exc:
            await self.queue.fail(req, send, exc)

    def inline_host(self, scope: Scope) -> bool:
        """Does this request's Host front an inline room? (There /healthz is the app's path, not exempt.)"""
        return inline_host(self.inline, scope)


def inline_host(inline: Inline, scope: Scope) -> bool:
    """Does this request's Host front an inline room?"""
    if not inline.index:
        return False
    for k, v in scope.get("headers", ()):
        if k == b"host":
            return inline.index.lookup(v) is not None
    return False


def _console_literal(ctx: Context, host: bytes | None, path: str) -> bool:
    """An admin path on an address-literal Host with no ADMIN_HOST: the queue's console, not the app."""
    if not path.startswith("/api/admin/") or ctx.settings.admin_hosts:
        return False
    name = request_host_key(host.decode("latin-1")) if host else ""
    return is_address_literal(name.rsplit(":", 1)[0] if name.count(":") == 1 else name)


def app_room(ctx: Context, inline: Inline, req: Request) -> InlineRoom | None:
    """The inline room whose app this request is for, when :func:`route` would hand it to the proxy."""
    if not inline.index or inline.at_ceiling():
        return None
    host = req.headers.get(b"host")
    room = inline.index.lookup(host)
    if room is None or surface.strip_prefix(req.path) is not None or _console_literal(ctx, host, req.path):
        return None
    return room


async def route(ctx: Context, inline: Inline, req: Request, send: Send) -> str | None:
    path = req.path
    if inline.at_ceiling() and path not in HEALTH_PATHS:  # the probe still answers: ready is false there
        ctx.counters.connections_shed += 1
        await pages.shed(send, req.method == "HEAD")
        return None
    if not inline.index:
        if surface.strip_prefix(path) is not None:
            raise surface.not_inline_host(ctx.settings)
        return path
    settings = ctx.settings
    host = req.headers.get(b"host")
    room = inline.index.lookup(host)
    if room is not None:
        inner = surface.strip_prefix(path)
        if inner is None:
            if _console_literal(ctx, host, path):
                # an admin path on an address literal is the console's: the queue answers it, never the app
                return path
            await proxy.serve(ctx, inline, req, room, send)
            return None
        inner = api_path(inner)
        req.prefix = surface.PREFIX
        # with ADMIN_HOST set and this host not in it, only the visitor paths remain: the router answers
        # every other route of its table 404 (routes/app.py, from each route's visitor_path)
        req.visitors_only = not surface.console_allowed(settings, inline.index, host, room)
        if inner == "/api/join" and req.method == "POST":
            surface.with_return_url(req, room.room_id, ctx.identity.resolve(req).scheme)
        return inner
    if surface.strip_prefix(path) is not None:
        raise surface.not_inline_host(settings)
    if surface.is_console_path(path) and not surface.console_allowed(settings, inline.index, host, None):
        raise HttpError(404, "not_found", "No such route.")
    return path


def admin_send(ctx: Context, inline: Inline, req: Request, send: Send) -> Send:
    """Room saves refresh the host index, and warn when this console's host is about to be withheld, or when
    the save took the last inline room off the host this console is used through.

    For a write under ``/api/admin/rooms`` (the front calls it for those only)."""
    state: dict[str, Any] = {"status": 0}  # the status seen, and a held POST's start message
    # the inline host this console is used through (under /__qm/), as it was before the save
    host = req.headers.get(b"host")
    before = inline.index.lookup(host) if surface.strip_prefix(req.scope["path"]) is not None else None

    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            state["status"] = message["status"]
            if 200 <= message["status"] < 300:
                await inline.refresh()  # in effect from the next request on, on this instance
            if req.method == "POST" and req.path == "/api/admin/rooms" and message["status"] in (200, 201):
                state["hold"] = 1
                state["start"] = message
                return
        elif message["type"] == "http.response.body" and state.get("hold"):
            start: Message = state.pop("start")
            state["hold"] = 0
            body = _with_warning(ctx, inline, req, message.get("body", b""))
            if before is not None and inline.index.lookup(host) is None:
                body = _with_move(ctx, host, body)
            headers = [(k, v) for k, v in start["headers"] if k != b"content-length"]
            headers.append((b"content-length", str(len(body)).encode()))
            await send({**start, "headers": headers})
            message = {**message, "body": body}
        await send(message)

    return wrapped


def _with_warning(ctx: Context, inline: Inline, req: Request, body: bytes) -> bytes:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body
    room = data.get("room") if isinstance(data, dict) else None
    if not isinstance(room, dict) or not room.get("proxyOrigin"):
        return body
    settings = ctx.settings
    if settings.admin_hosts or settings.public_url:
        return body
    host = req.headers.get(b"host")
    if surface.console_host(settings, host) or inline.index.lookup(host) is not None:
        return body
    name = request_host_key(host.decode("latin-1")) if host else ""
    warning = {
        "code": "console_host_withheld",
        "host": name,
        "message": (
            f"With an inline room and neither ADMIN_HOST nor PUBLIC_URL set, the console on {name} answers 404 "
            f"from the next request on. Set ADMIN_HOST={name} (or PUBLIC_URL) and restart."
        ),
    }
    data.setdefault("warnings", []).append(warning)
    return orjson.dumps(data)


def _with_move(ctx: Context, host: bytes | None, body: bytes) -> bytes:
    """The save took the last inline room off the host this console was used through (under ``/__qm/``):
    that host's ``/__qm/*``, this console included, answers ``404 not_inline_host`` from the next request
    on. The answer names where the console is now (PUBLIC_URL), so the console can move there."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body
    if not isinstance(data, dict):
        return body
    name = request_host_key(host.decode("latin-1")) if host else ""
    where = surface.console_url(ctx.settings)
    message = (
        f"{name} no longer fronts an inline room, so the queue's own /__qm/* surface is off that host, "
        "including this console."
    )
    message += f" The console is at {where}." if where else " Set PUBLIC_URL so the console can name where it went."
    warning = {"code": "console_moved", "host": name, "consoleUrl": where, "message": message}
    data.setdefault("warnings", []).append(warning)
    return orjson.dumps(data)
