"""The queue's HTTP application: screen a request, route it through the one table, map errors once.

It knows nothing of what may stand in front of it. The inline proxy wraps it (``inline/front.py``)
and hands it each request the queue should answer; the composition root (``server.py``) builds both
and owns their lifespan.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from queue_manager.engine.errors import EngineError
from queue_manager.http import health
from queue_manager.http.authn import authenticate, require
from queue_manager.http.call import Call
from queue_manager.http.context import Context
from queue_manager.http.edge import REFUSAL_PAGE, wants_page
from queue_manager.http.router import ADMIN_PATHS, ADMIN_PREFIX, canonical
from queue_manager.http.routes import ROUTER
from queue_manager.http.wire import HttpError, Receive, Request, Scope, Send, send_error, send_response
from queue_manager.store.base import StoreUnavailable

log = logging.getLogger("queue_manager")

#: What runs before the router for one request: None when it answered the request itself, else the
#: path the queue serves and the ``send`` to answer through.
Before = Callable[[Request, Send], Awaitable[tuple[str, Send] | None]]


def _no_foreign_host(scope: Scope) -> bool:
    return False


class App:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.settings = ctx.settings
        #: Does this request's Host front a proxied app? There the edge-exempt paths (``/healthz``) are the
        #: app's own and get no exemption. Set by whatever wraps the app.
        self.foreign_host: Callable[[Scope], bool] = _no_foreign_host

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Plain ASGI (HTTP only), for a queue with nothing in front of it."""
        if scope["type"] != "http":
            return
        req = Request(scope, receive, canonical(scope["path"]))
        if not self.screen(req):
            await self.refuse_at_edge(scope, send, req.method == "HEAD")
            return
        await self.serve(req, send)

    # ------------------------------------------------------------------ the screen

    def screen(self, req: Request) -> bool:
        """What every request goes through first: the edge secret, the client's identity, proxy watch.

        False: refused at the edge (the caller answers with :meth:`refuse_at_edge`). Run once per
        request, whichever path serves it.
        """
        ctx = self.ctx
        scope = req.scope
        through_edge = False
        if ctx.edge.enabled:
            through_edge = ctx.edge.passes(scope)
            if not through_edge and not (ctx.edge.exempt(scope) and not self.foreign_host(scope)):
                ctx.counters.edge_refused += 1
                return False
        ident = ctx.identity.resolve(req)
        if ident.edge_fallback and through_edge:  # a platform probe of /healthz is not Cloudflare's
            ctx.counters.edge_client_ip_fallback += 1
        ctx.proxywatch.observe(req, ident.peer, ident.trusted_peer)
        return True

    async def refuse_at_edge(self, scope: Scope, send: Send, head: bool) -> None:
        if wants_page(scope):
            await send_response(
                send,
                403,
                REFUSAL_PAGE,
                [(b"content-type", b"text/html; charset=utf-8"), (b"cache-control", b"no-store")],
                head,
            )
        else:
            await send_error(send, HttpError(403, "edge_required", "edge_required"), head)

    # ------------------------------------------------------------------ serving

    async def serve(self, req: Request, send: Send, before: Before | None = None) -> None:
        """Answer one screened request; every error below becomes the spec's JSON error here."""
        head = req.method == "HEAD"
        try:
            if before is not None:
                routed = await before(req, send)
                if routed is None:
                    return
                req.path, send = routed
            await self.dispatch(req, send)
        except HttpError as err:
            await send_error(send, self._recovering(err), head)
        except EngineError as err:
            await send_error(send, self._recovering(health.engine_error(err)), head)
        except StoreUnavailable as err:
            await send_error(
                send,
                HttpError(503, "storage_unavailable", str(err), headers=[("Retry-After", str(err.retry_after))]),
                head,
            )
        except Exception:
            log.exception("unhandled error on %s %s", req.method, req.path)
            await send_error(send, HttpError(500, "internal_error", "Something went wrong on our side."), head)

    async def dispatch(self, req: Request, send: Send) -> None:
        """The route for ``req.path`` and its method, with the caller signed in first on the admin API."""
        ctx = self.ctx
        path = req.path
        found = ROUTER.match(path)
        if path.startswith(ADMIN_PREFIX) or path in ADMIN_PATHS:
            if found is not None:  # the one admin route open to anyone: signing in
                route = found[0].methods.get(req.method)
                if route is not None and route.visitor is not None:
                    req.params = found[1]
                    await route.visitor(ctx, req, send)
                    return
            ident = ctx.identity.resolve(req)
            who = await authenticate(ctx, req, ident, allow_ticket=found is not None and found[0].ticket)
            if found is None:
                raise HttpError(404, "not_found", "No such route.")
            resource, req.params = found
            route = resource.route_for(req.method)
            for grant in route.grants:
                require(who, grant)
            assert route.admin is not None
            await route.admin(Call(ctx, req, send, req.receive, ident, who))
            return
        if found is None:
            raise HttpError(404, "not_found", "No such route.")
        resource, req.params = found
        route = resource.route_for(req.method)
        assert route.visitor is not None
        await route.visitor(ctx, req, send)

    def _recovering(self, err: HttpError) -> HttpError:
        """A room the journal has but Valkey lost is being rebuilt: 503 with Retry-After, never no_room."""
        backend = self.ctx.backend
        if backend is None or err.code != "no_room" or err.extra.get("roomId") not in backend.known_rooms:
            return err
        return HttpError(
            503,
            "storage_unavailable",
            "This room is being rebuilt from the journal; retry shortly.",
            headers=[("Retry-After", "2")],
            roomId=err.extra.get("roomId"),
        )
