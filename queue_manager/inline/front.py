"""The inline proxy, in front of the queue's app: the ASGI application the server runs.

One pass per request: the queue's app screens it (edge secret, identity) once, :func:`~.decision.decide`
says whose it is, and the front acts on that: the proxy relays it to the app's origin, or the queue's
app dispatches it (under ``/__qm`` on an inline host with the prefix stripped), or the answer is a
refusal or the connection ceiling's 503. Nothing comes back to the inline layer on the way. WebSockets are
the proxied app's only. The queue's app is reached through the small :class:`QueueApp` interface; the
gate itself reaches the inline component as a callable (:class:`~.component.QueueSide`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from queue_manager.context import Context
from queue_manager.http.wire import Receive, Request, Scope, Send, api_path
from queue_manager.inline import pages, proxy, surface, websocket
from queue_manager.inline.component import Inline
from queue_manager.inline.decision import QUEUE, Proxy, Refuse, ServeQueue, Step, decide

#: scope key: (the Request the fast path already screened, its step), for a request it hands to the ASGI path
PREPARED = "qm.request"


class QueueApp(Protocol):
    """What the inline front needs of the queue's app (routes/app.py's ``App``)."""

    def screen(self, req: Request, foreign_host: bool = False) -> bool: ...

    async def refuse_at_edge(self, scope: Scope, send: Send, head: bool) -> None: ...

    def dispatch(self, req: Request, send: Send) -> Awaitable[None]: ...

    async def fail(self, req: Request, send: Send, exc: Exception) -> None: ...


class InlineFront:
    """The ASGI application in front of the queue: inline hosts' traffic here, the rest to the queue."""

    def __init__(self, app: QueueApp, inline: Inline) -> None:
        self.app = app
        self.ctx: Context = inline.ctx
        self.inline = inline
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
        app = self.app
        prepared: tuple[Request, Step] | None = scope.pop(PREPARED, None)
        if prepared is None:
            req = Request(scope, receive, api_path(scope["path"]))
            inline = self.inline
            room = inline.index.lookup(req.headers.get(b"host")) if inline.index else None
            # on a host that fronts an inline room the edge-exempt paths (/healthz) are the app's: no exemption
            if not app.screen(req, room is not None):
                await app.refuse_at_edge(scope, send, req.method == "HEAD")
                return
            step = decide(self.ctx, inline, req, room)
        else:  # screened and decided on the fast path
            req, step = prepared
            req.receive = receive
        try:
            if step is QUEUE:
                await app.dispatch(req, send)
            elif isinstance(step, Proxy):
                await proxy.serve(self.ctx, self.inline, req, step, send)
            elif isinstance(step, ServeQueue):
                await self._serve_queue(req, step, send)
            elif isinstance(step, Refuse):
                await app.fail(req, send, step.error)
            else:  # Shed
                self.ctx.counters.connections_shed += 1
                await pages.shed(send, req.method == "HEAD")
        except Exception as exc:
            await app.fail(req, send, exc)

    def _serve_queue(self, req: Request, step: ServeQueue, send: Send) -> Awaitable[None]:
        """The queue's own surface on an inline host: the path as the queue's router knows it, the prefix kept
        for whatever names a path back to the browser, and the visitor paths alone where ADMIN_HOST says so."""
        req.path = step.path
        req.prefix = surface.PREFIX
        # with ADMIN_HOST set and this host not in it, only the visitor paths remain: the router answers
        # every other route of its table 404 (routes/app.py, from each route's visitor_path)
        req.visitors_only = step.visitors_only
        if step.path == "/api/join" and req.method == "POST":
            surface.with_return_url(req, step.room.room_id, self.ctx.identity.resolve(req).scheme)
        return self.app.dispatch(req, send)
