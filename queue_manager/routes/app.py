"""The queue's HTTP application: screen a request, route it through the one table, map errors once.

It knows nothing of what may stand in front of it. The inline proxy wraps it (``inline/front.py``):
it has each request screened here once, then hands over the requests the queue should answer; the
composition root (``server.py``) builds both and owns their lifespan.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable

from queue_manager.context import Context
from queue_manager.engine.errors import EngineError
from queue_manager.engine.model import ROOM_ID_RE
from queue_manager.http.wire import HttpError, Request, Scope, Send, send_error, send_response
from queue_manager.routes import health
from queue_manager.routes.authn import authenticate, require
from queue_manager.routes.call import Call
from queue_manager.routes.router import Resource, admin_area
from queue_manager.routes.table import ROUTER
from queue_manager.services.edge_secret import REFUSAL_PAGE, wants_page
from queue_manager.store.base import StoreUnavailable

log = logging.getLogger("queue_manager")

_EXACT = ROUTER.exact


def withheld() -> HttpError:
    """A route that is not a visitor path, asked for on a host where only those remain: the same 404 as a path
    this server has no route for, so the customer's host says nothing of what the admin host serves."""
    return HttpError(404, "not_found", "No such route.")


class App:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.settings = ctx.settings

    # ------------------------------------------------------------------ the screen

    def screen(self, req: Request, foreign_host: bool = False) -> bool:
        """What every request goes through first: the edge secret, the client's identity, proxy watch.

        ``foreign_host``: the request's Host fronts a proxied app (the caller knows); there the edge-exempt
        paths (``/healthz``) are the app's own and get no exemption. False: refused at the edge (the caller
        answers with :meth:`refuse_at_edge`). Run once per request, whichever path serves it.
        """
        ctx = self.ctx
        scope = req.scope
        through_edge = False
        if ctx.edge.enabled:
            through_edge = ctx.edge.passes(scope)
            if not through_edge and not (ctx.edge.exempt(scope) and not foreign_host):
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

    def dispatch(self, req: Request, send: Send) -> Awaitable[None]:
        """The handler's run for this request (a 404 or 405 is raised at once).

        The admin API signs the caller in first, then judges the method (405), then the grants (403). Not a
        coroutine itself: on a visitor route the caller awaits the handler directly, one frame fewer."""
        ctx = self.ctx
        path = req.path
        resource = _EXACT.get(path)
        if resource is None:
            found = ROUTER.match_pattern(path)
            if found is None:
                if admin_area(path) and not req.visitors_only:  # an anonymous caller learns nothing of the
                    return self._admin(req, send, None)  # admin API, not even a 404
                raise HttpError(404, "not_found", "No such route.")
            resource, req.params = found  # a literal path has none: the Request's default
        if req.visitors_only and not resource.visitor_path:  # a host where only the visitor paths remain
            raise withheld()
        route = resource.methods.get(req.method)
        if resource.admin and (route is None or route.admin is not None):
            return self._admin(req, send, resource)
        if route is None:
            raise resource.not_allowed()
        assert route.visitor is not None
        return route.visitor(ctx, req, send)

    async def _admin(self, req: Request, send: Send, resource: Resource | None) -> None:
        """An admin route: the caller signed in, then the method, then the grants, then the handler."""
        ctx = self.ctx
        ident = ctx.identity.resolve(req)
        who = await authenticate(ctx, req, ident, allow_ticket=resource is not None and resource.ticket)
        if resource is None:
            raise HttpError(404, "not_found", "No such route.")
        route = resource.route_for(req.method)
        for grant in route.grants:
            require(who, grant)
        assert route.admin is not None
        await route.admin(Call(ctx, req, send, req.receive, ident, who))

    async def fail(self, req: Request, send: Send, exc: Exception) -> None:
        """The answer for an error raised while serving ``req``: the guide's JSON code, or a logged 500."""
        head = req.method == "HEAD"
        if isinstance(exc, HttpError):
            await send_error(send, self._recovering(exc), head)
        elif isinstance(exc, EngineError):
            await send_error(send, self._recovering(health.engine_error(exc)), head)
        elif isinstance(exc, StoreUnavailable):
            await send_error(
                send,
                HttpError(503, "storage_unavailable", str(exc), headers=[("Retry-After", str(exc.retry_after))]),
                head,
            )
        else:
            log.error("unhandled error on %s %s", req.method, req.path, exc_info=exc)
            await send_error(send, HttpError(500, "internal_error", "Something went wrong on our side."), head)

    def _recovering(self, err: HttpError) -> HttpError:
        """A room the journal has but Valkey lost is being rebuilt: 503 with Retry-After, never no_room. An id
        no room can have (a drop's pre-queue shard is journaled under one) stays no_room."""
        fleet = self.ctx.fleet
        room_id = err.extra.get("roomId")
        if fleet is None or err.code != "no_room" or room_id not in fleet.rooms.known:
            return err
        if not isinstance(room_id, str) or not ROOM_ID_RE.match(room_id):
            return err
        return HttpError(
            503,
            "storage_unavailable",
            "This room is being rebuilt from the journal; retry shortly.",
            headers=[("Retry-After", "2")],
            roomId=err.extra.get("roomId"),
        )
