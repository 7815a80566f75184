"""The ASGI application: one router, a lifespan that owns the store and the tick, errors mapped once."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from queue_manager.clock import SystemClock
from queue_manager.config import ConfigRefusal, Settings
from queue_manager.engine.errors import EngineError
from queue_manager.http import admin, health, pages_console, pages_docs, pages_visitor, visitor
from queue_manager.http.context import Context
from queue_manager.http.edge import REFUSAL_PAGE, wants_page
from queue_manager.http.wire import HttpError, Receive, Request, Scope, Send, api_path, send_error, send_response
from queue_manager.inline import entry as inline_entry
from queue_manager.inline import websocket as inline_websocket
from queue_manager.inline.component import Inline
from queue_manager.store.base import Store, StoreUnavailable

log = logging.getLogger("queue_manager")

if TYPE_CHECKING:
    from queue_manager.fleet.backend import Backend

Handler = Callable[[Context, Request, Send], Awaitable[None]]

# page modules, asked in turn for a GET/HEAD path none of the fixed routes own
PAGE_ROUTERS = (pages_visitor.route, pages_console.route, pages_docs.route)

# public routes: (method set, handler)
ROUTES: dict[str, tuple[frozenset[str], Handler]] = {
    "/api/join": (frozenset({"POST"}), visitor.join),
    "/api/status": (frozenset({"GET", "HEAD"}), visitor.status),
    "/api/check": (frozenset({"GET", "HEAD"}), visitor.check),
    "/qm.js": (frozenset({"GET", "HEAD"}), visitor.qm_js),
    "/api/verify": (frozenset({"GET", "HEAD"}), visitor.verify),
    "/healthz": (frozenset({"GET", "HEAD"}), health.healthz),
    "/api/version": (frozenset({"GET", "HEAD"}), health.version),
}


PREPARED = "qm.request"  # scope key: a Request already screened (App.screen) by the inline fast path


def create_store(settings: Settings, clock: SystemClock) -> tuple[Store, Backend | None]:
    if settings.store == "memory":
        from queue_manager.store.memory import MemoryStore

        return MemoryStore(clock), None
    from queue_manager.fleet.backend import Backend as ValkeyBackend

    backend = ValkeyBackend(settings)
    return backend.store, backend


class App:
    def __init__(self, settings: Settings, store: Store | None = None, clock: SystemClock | None = None) -> None:
        self.clock = clock or SystemClock()
        self.settings = settings
        self.backend: Backend | None = None
        if store is None:
            store, self.backend = create_store(settings, self.clock)
        self.ctx = Context.build(settings, store, self.clock)
        self.ctx.backend = self.backend
        self.ctx.inline = Inline(self.ctx)
        if self.backend is not None:  # operators, links, audit, sign-outs and tickets shared by the fleet
            from queue_manager.access.shared import SharedAccessStore

            self.ctx.access.store = SharedAccessStore(
                self.backend.journal,
                self.backend.store.redis,
                settings.valkey_prefix,
                hints=self.backend.hints,
                resync_ms=settings.resync_ms,
            )
        self._tick_task: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self.http(scope, receive, send)
        elif kind == "lifespan":
            await self.lifespan(receive, send)
        elif kind == "websocket":
            await inline_websocket.handle(self.ctx, self.ctx.inline, scope, receive, send)

    # ------------------------------------------------------------------ lifespan

    async def lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.startup()
                except Exception as exc:  # pragma: no cover - reported to the server
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def startup(self) -> None:
        if self.backend is not None:
            try:
                await self.backend.start()
            except ConfigRefusal as refusal:
                print(f"queue-manager: refusing to start: {refusal.message}", file=sys.stderr, flush=True)
                raise
        else:
            await self.ctx.store.start()
        self._tick_task = asyncio.create_task(self._ticker())
        await self.ctx.inline.start()
        self.ctx.ready = True
        # STORE=memory keeps nothing across a restart, so whether the last run stopped cleanly is unknown
        await self.ctx.access.audit(
            None, "server.start", target=self.settings.instance_id, previousRunClean=None, store=self.ctx.store.kind
        )

    def begin_stop(self) -> None:
        """Not ready from this instant; live streams are told to end."""
        self.ctx.shutting_down = True
        self.ctx.ready = False
        self.ctx.broadcaster.close_all()
        self.ctx.admin_streams.close_all()

    async def shutdown(self) -> None:
        self.begin_stop()
        await self.ctx.access.audit(None, "server.stop", target=self.settings.instance_id, clean=True)
        await self.ctx.inline.stop()
        if self._tick_task is not None:
            self._tick_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._tick_task
        if self.backend is not None:
            await self.backend.stop()
        else:
            await self.ctx.store.close()

    async def _ticker(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            next_at += 1.0
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            try:
                await self.ctx.store.tick()
                await self.ctx.series.feed(self.ctx.store, self.clock.wall_ms())
                if self.backend is not None:
                    self.backend.note_store_result(True)
            except StoreUnavailable as exc:
                if self.backend is not None:
                    self.backend.note_store_result(False)
                log.warning("tick: store unavailable: %s", exc)
            except Exception:
                log.exception("tick failed")
            step = self.clock.check_step()
            if step is not None:
                self.ctx.clock_incidents.append({"at": self.clock.wall_ms(), "stepMs": step})
                print(
                    f"WARNING: the wall clock stepped by {step} ms; tickets issued around it may be refused",
                    file=sys.stderr,
                    flush=True,
                )
            if loop.time() - next_at > 5.0:
                next_at = loop.time()

    # ------------------------------------------------------------------ requests

    def _recovering(self, err: HttpError) -> HttpError:
        """A room the journal has but Valkey lost is being rebuilt: 503 with Retry-After, never no_room."""
        backend = self.backend
        if backend is None or err.code != "no_room" or err.extra.get("roomId") not in backend.known_rooms:
            return err
        return HttpError(
            503,
            "storage_unavailable",
            "This room is being rebuilt from the journal; retry shortly.",
            headers=[("Retry-After", "2")],
            roomId=err.extra.get("roomId"),
        )

    async def _edge_refusal(self, scope: Scope, send: Send, head: bool) -> None:
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

    def screen(self, req: Request) -> bool:
        """What every request goes through first: the edge secret, the client's identity, proxy watch.

        False: refused at the edge (the caller answers). Run once per request, whichever path serves
        it: the inline fast path runs it and hands the Request over in the scope (``PREPARED``).
        """
        ctx = self.ctx
        scope = req.scope
        through_edge = False
        if ctx.edge.enabled:
            through_edge = ctx.edge.passes(scope)
            if not through_edge and not (ctx.edge.exempt(scope) and not inline_entry.inline_host(ctx, scope)):
                ctx.counters.edge_refused += 1
                return False
        ident = ctx.identity.resolve(req)
        if ident.edge_fallback and through_edge:  # a platform probe of /healthz is not Cloudflare's
            ctx.counters.edge_client_ip_fallback += 1
        ctx.proxywatch.observe(req, ident.peer, ident.trusted_peer)
        return True

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        ctx = self.ctx
        prepared = scope.pop(PREPARED, None)
        if isinstance(prepared, Request):
            req = prepared
            req.receive = receive
            path = req.path
        else:
            req = Request(scope, receive, api_path(scope["path"]))
            path = req.path
            if not self.screen(req):
                await self._edge_refusal(scope, send, req.method == "HEAD")
                return
        head = req.method == "HEAD"
        try:
            routed = await inline_entry.route(ctx, req, send)  # an inline host's own paths, /__qm, limits
            if routed is None:
                return
            path = req.path = routed
            route = ROUTES.get(path)
            if route is not None:
                methods, handler = route
                if req.method not in methods:
                    raise HttpError(
                        405,
                        "method_not_allowed",
                        f"Use {' or '.join(sorted(methods))}.",
                        headers=[("Allow", ", ".join(sorted(methods)))],
                    )
                await handler(ctx, req, send)
                return
            if path == "/events":
                if req.method != "GET":
                    raise HttpError(405, "method_not_allowed", "Use GET.", headers=[("Allow", "GET")])
                await visitor.events(ctx, req, send, receive)
                return
            if path.startswith("/api/admin/") or path == "/metrics":
                await admin.dispatch(ctx, req, inline_entry.admin_send(ctx, req, send), receive)
                return
            for page_route in PAGE_ROUTERS:
                page = page_route(path)
                if page is not None:
                    if req.method not in ("GET", "HEAD"):
                        raise HttpError(405, "method_not_allowed", "Use GET.", headers=[("Allow", "GET, HEAD")])
                    await page(ctx, req, send)
                    return
            raise HttpError(404, "not_found", "No such route.")
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
            log.exception("unhandled error on %s %s", req.method, path)
            await send_error(send, HttpError(500, "internal_error", "Something went wrong on our side."), head)
