"""The admin surface's router: authenticate once, then dispatch with the caller in hand."""

from __future__ import annotations

from queue_manager.http import admin_console, admin_rooms, admin_stream, admin_team, health
from queue_manager.http.authn import authenticate
from queue_manager.http.call import Call
from queue_manager.http.context import Context
from queue_manager.http.wire import HttpError, Receive, Request, Send, send_json

GET = frozenset({"GET", "HEAD"})


def _allow(req: Request, methods: frozenset[str]) -> None:
    if req.method not in methods:
        allowed = ", ".join(sorted(methods))
        raise HttpError(405, "method_not_allowed", f"Use {allowed}.", headers=[("Allow", allowed)])


async def session_open(ctx: Context, req: Request, send: Send, receive: Receive) -> None:
    """POST /api/admin/session {"key": …} with X-QM-CSRF: the key is judged like a Bearer, once."""
    ident = ctx.identity.resolve(req)
    if not req.header(b"x-qm-csrf"):
        raise HttpError(403, "csrf_required", "Signing in needs the X-QM-CSRF header.")
    site = req.header(b"sec-fetch-site")
    if site is not None and site != "same-origin":
        raise HttpError(403, "csrf_required", "Sign in from the console's own origin.")
    retry = ctx.access.failures.locked(ident.ip)
    if retry is not None:
        raise HttpError(
            429,
            "too_many_auth_failures",
            "Too many failed sign-ins from your address.",
            headers=[("Retry-After", str(retry))],
        )
    body = await req.json_object()
    key = body.get("key")
    if not isinstance(key, str) or not key or len(key) > 500:
        raise HttpError(400, "bad_request", 'Send {"key": "<ADMIN_KEY or operator key>"}.')
    principal = await ctx.access.from_bearer(key)
    if principal is None:
        ctx.access.failures.fail(ident.ip)
        raise HttpError(401, "unauthorized", "That key is not valid here.")
    await admin_team.session_open(Call(ctx, req, send, receive, ident, principal))


async def dispatch(ctx: Context, req: Request, send: Send, receive: Receive) -> None:
    path = req.path
    if path == "/api/admin/session" and req.method == "POST":
        await session_open(ctx, req, send, receive)
        return
    ident = ctx.identity.resolve(req)
    who = await authenticate(ctx, req, ident, allow_ticket=path == "/api/admin/events")
    call = Call(ctx, req, send, receive, ident, who)
    if path == "/metrics":
        _allow(req, GET)
        call.need("read")
        await health.metrics(ctx, req, send)
    elif path == "/api/admin/health":
        _allow(req, GET)
        call.need("read")
        await health.admin_health(ctx, req, send, full=who.may("team"))
    elif path == "/api/admin/rooms":
        _allow(req, frozenset({"GET", "HEAD", "POST"}))
        await (admin_rooms.rooms_upsert(call) if req.method == "POST" else admin_rooms.rooms_list(call))
    elif path.startswith("/api/admin/rooms/"):
        await admin_rooms.room_route(call)
    elif path == "/api/admin/session":
        _allow(req, frozenset({"DELETE", "POST"}))
        await admin_team.session_close(call)
    elif path == "/api/admin/whoami":
        _allow(req, GET)
        await admin_team.whoami(call)
    elif path == "/api/admin/events":
        _allow(req, frozenset({"GET"}))
        await admin_stream.events(call)
    elif path == "/api/admin/sse-ticket":
        await admin_team.sse_ticket(call)
    elif path == "/api/admin/operators":
        await admin_team.operators(call)
    elif path.startswith("/api/admin/operators/"):
        await admin_team.operator_delete(call, path[len("/api/admin/operators/") :])
    elif path == "/api/admin/monitor-links" or path.startswith("/api/admin/monitor-links/"):
        rest = [p for p in path[len("/api/admin/monitor-links") :].split("/") if p]
        await admin_team.monitor_links(call, rest)
    elif path == "/api/admin/audit":
        _allow(req, GET)
        await admin_team.audit(call)
    elif path == "/api/admin/security":
        _allow(req, GET)
        call.need("read")
        await send_json(send, 200, ctx.protection.stats(), head=req.method == "HEAD")
    elif path == "/api/admin/shutdown":
        await admin_team.shutdown(call)
    elif not await admin_console.dispatch(call):
        raise HttpError(404, "not_found", "No such route.")
