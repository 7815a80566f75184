"""The admin API (Authorization: Bearer <ADMIN_KEY>), health and metrics."""

from __future__ import annotations

import hmac
from typing import Any

from queue_manager.engine.errors import EngineError
from queue_manager.http.context import Context
from queue_manager.http.wire import HttpError, Request, Send, send_json, send_response
from queue_manager.metrics import render as render_metrics


def require_admin(ctx: Context, req: Request) -> None:
    auth = req.header(b"authorization") or ""
    scheme, _, credential = auth.partition(" ")
    if scheme.lower() != "bearer" or not credential.strip():
        raise HttpError(
            401,
            "unauthorized",
            "This route needs Authorization: Bearer <ADMIN_KEY>.",
            headers=[("WWW-Authenticate", 'Bearer realm="queue-manager"')],
        )
    if not hmac.compare_digest(credential.strip().encode(), ctx.settings.admin_key.encode()):
        raise HttpError(
            401,
            "unauthorized",
            "That key is not valid here.",
            headers=[("WWW-Authenticate", 'Bearer realm="queue-manager", error="invalid_token"')],
        )


async def rooms_list(ctx: Context, req: Request, send: Send) -> None:
    await send_json(send, 200, {"rooms": await ctx.store.list_rooms(), "now": ctx.clock.wall_ms()})


async def rooms_upsert(ctx: Context, req: Request, send: Send) -> None:
    body = await req.json_object()
    room, created, fields = await ctx.store.upsert_room(body)
    await send_json(send, 201 if created else 200, {"ok": True, "created": created, "fields": fields, "room": room})


async def room_route(ctx: Context, req: Request, send: Send) -> None:
    parts = req.path[len("/api/admin/rooms/") :].split("/")
    room_id, rest = parts[0], parts[1:]
    if not room_id or any(not p for p in rest):
        raise HttpError(404, "not_found", "No such route.")
    method = req.method
    store = ctx.store
    action = "/".join(rest) if rest and rest[0] != "visitors" else (rest[0] if rest else "")
    if action == "":
        if method in ("GET", "HEAD"):
            await send_json(send, 200, {"room": await store.get_room(room_id)}, head=method == "HEAD")
            return
        if method == "DELETE":
            await store.delete_room(room_id)
            await send_json(send, 200, {"ok": True, "deleted": room_id})
            return
        raise _method(["GET", "DELETE"])
    if action in ("pause", "resume"):
        _post(method)
        await req.body()
        await _existing(ctx, room_id)
        room, _, _ = await store.upsert_room({"id": room_id, "state": "paused" if action == "pause" else "active"})
        await send_json(send, 200, {"ok": True, "room": room})
        return
    if action == "rate":
        _post(method)
        body = await req.json_object()
        await _existing(ctx, room_id)
        unknown = sorted(set(body) - {"ratePerMinute", "rate"})
        if unknown or not body:
            raise HttpError(
                400,
                "unknown_field" if unknown else "nothing_to_change",
                'Send {"ratePerMinute": n} (or its alias rate).',
                fields=unknown,
            )
        room, _, _ = await store.upsert_room({"id": room_id, **body})
        await send_json(send, 200, {"ok": True, "room": room})
        return
    if action == "schedule":
        _post(method)
        room = await store.schedule(room_id, await req.json_object())
        await send_json(send, 200, {"ok": True, "room": room})
        return
    if action == "purge":
        _post(method)
        await req.body()
        purged = await store.purge(room_id)
        await send_json(send, 200, {"ok": True, "purged": purged})
        return
    if action == "eject":
        _post(method)
        body = await req.json_object()
        query = _ticket_query(body)
        await send_json(send, 200, {"ok": True, "visitor": await store.eject(room_id, query)})
        return
    if action == "visitors" and len(rest) == 2:
        if method not in ("GET", "HEAD"):
            raise _method(["GET"])
        await send_json(send, 200, {"visitor": await store.lookup(room_id, rest[1][:64])}, head=method == "HEAD")
        return
    if action == "rules":
        if method not in ("GET", "HEAD"):
            raise _method(["GET"])
        room = await store.get_room(room_id)
        await send_json(
            send, 200, {"rules": room["rules"], "unscopedChecks": room["unscopedChecks"]}, head=method == "HEAD"
        )
        return
    if action == "rules/test":
        _post(method)
        body = await req.json_object()
        url = body.get("url")
        if not isinstance(url, str) or not url or len(url) > 4096:
            raise HttpError(400, "bad_request", 'Send {"url": "https://…"}.')
        await send_json(send, 200, await store.match_rule(room_id, url))
        return
    raise HttpError(404, "not_found", "No such route.")


async def _existing(ctx: Context, room_id: str) -> None:
    if not await ctx.store.room_exists(room_id):
        raise HttpError(404, "no_room", f"No room with id {room_id[:80]!r}.", roomId=room_id[:80])


def _ticket_query(body: dict[str, Any]) -> str:
    ticket, ref = body.get("ticket"), body.get("ref")
    if isinstance(ticket, int) and not isinstance(ticket, bool) and ticket > 0:
        return str(ticket)
    if isinstance(ref, str) and 1 <= len(ref) <= 16:
        return ref
    raise HttpError(400, "bad_request", 'Send {"ticket": n} or {"ref": "K7Q2MX"}.')


def _post(method: str) -> None:
    if method != "POST":
        raise _method(["POST"])


def _method(allowed: list[str]) -> HttpError:
    return HttpError(405, "method_not_allowed", f"Use {' or '.join(allowed)}.", headers=[("Allow", ", ".join(allowed))])


def health_status(ctx: Context) -> tuple[str, bool]:
    now = ctx.clock.wall_ms()
    ctx.clock_incidents[:] = [i for i in ctx.clock_incidents if now - i["at"] < 3_600_000]
    if ctx.shutting_down:
        return "shutting_down", False
    status = "degraded" if ctx.clock_incidents else "ok"
    return status, ctx.ready


def _public_health(ctx: Context) -> dict[str, Any]:
    status, ready = health_status(ctx)
    return {
        "status": status,
        "ready": ready,
        "leader": True,
        "version": ctx.version,
        "store": ctx.store.kind,
        "uptimeSec": round(ctx.uptime(), 3),
    }


async def healthz(ctx: Context, req: Request, send: Send) -> None:
    payload = _public_health(ctx)
    await send_json(send, 200 if payload["ready"] else 503, payload, head=req.method == "HEAD")


async def version(ctx: Context, req: Request, send: Send) -> None:
    await send_json(send, 200, _public_health(ctx), head=req.method == "HEAD")


async def admin_health(ctx: Context, req: Request, send: Send) -> None:
    s = ctx.settings
    rooms = await ctx.store.list_rooms()
    status, ready = health_status(ctx)
    incidents = [f"clock stepped by {i['stepMs']} ms" for i in ctx.clock_incidents]
    c = ctx.counters
    payload = {
        **_public_health(ctx),
        "status": status,
        "ready": ready,
        "instance": s.instance_id,
        "pid": ctx.pid,
        "now": ctx.clock.wall_ms(),
        "startedAt": ctx.started_ms,
        "rooms": len(rooms),
        "visitors": {
            "waiting": sum(r["waiting"] for r in rooms),
            "preQueue": sum(r["preQueue"] for r in rooms),
            "activeSessions": sum(r["activeSessions"] for r in rooms),
            "passesOutstanding": sum(r["passesOutstanding"] for r in rooms),
        },
        "sse": {"streams": ctx.broadcaster.streams, "perIp": s.sse_per_ip, "maxTotal": s.sse_max_total},
        "rateLimits": {
            "joinPerMin": s.join_limit_per_min,
            "checkPerMin": s.check_limit_per_min,
            "waitingPerMin": s.waiting_limit_per_min,
            "maxKeys": s.rate_limit_max_keys,
        },
        "storage": {"kind": ctx.store.kind, "ok": True, "writeErrors": c.storage_write_errors, "lastError": None},
        "counters": {
            "unknownRoomChecks": c.unknown_room_checks,
            "blockedReturnUrls": c.blocked_return_urls,
            "rejectedTokens": c.rejected_tokens,
            "rejectedTokensByReason": c.rejected_tokens_by_reason,
            "unscopedChecks": c.unscoped_checks,
            "rateLimitedChecks": c.rate_limited_checks,
            "refusedOriginChecks": [
                {"roomId": r, "origin": o, "count": n} for (r, o), n in c.refused_origin_checks.items()
            ],
        },
        "blockedReturnUrlsByRoom": {r["id"]: r["blockedReturnUrls"] for r in rooms if r["blockedReturnUrls"]},
        "incidents": incidents,
        "warnings": [
            {"variable": w.variable, "set": w.set_value, "effective": w.effective, "message": w.message}
            for w in s.warnings
        ],
        "hardening": list(s.hardening),
        "keys": {
            "adminKeyDefault": s.admin_key_is_default,
            "secretDefault": s.secret_is_default,
            "tokenSignV2": s.token_sign_v2,
            "kid": ctx.signer.kid,
            "secretPrevious": s.secret_previous is not None,
            "publicApiKey": s.public_api_key is not None,
            "edgeSecret": bool(s.edge_secrets),
        },
        "access": {"sso": False},
    }
    await send_json(send, 200, payload, head=req.method == "HEAD")


async def metrics(ctx: Context, req: Request, send: Send) -> None:
    rooms = await ctx.store.list_rooms()
    body = render_metrics(
        rooms,
        ctx.counters,
        uptime=ctx.uptime(),
        start_time=ctx.started_ms / 1000.0,
        sse_subscribers=ctx.broadcaster.streams,
        shutting_down=ctx.shutting_down,
        instance=ctx.settings.instance_id if ctx.settings.store == "valkey" else None,
    )
    await send_response(
        send,
        200,
        body,
        [(b"content-type", b"text/plain; version=0.0.4; charset=utf-8"), (b"cache-control", b"no-store")],
        req.method == "HEAD",
    )


def engine_error(err: EngineError) -> HttpError:
    return HttpError(err.status, err.code, err.message, headers=list(err.headers.items()), **err.extra)
