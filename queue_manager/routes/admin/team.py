"""Admin routes for people: console sign-in, operators, monitor links, stream tickets, audit, shutdown."""

from __future__ import annotations

import json
import os
import signal

from queue_manager.access.principal import Role
from queue_manager.access.service import READ_ONLY_SIGN_INS_PER_MIN
from queue_manager.http.wire import HttpError, cookie_header, send_json
from queue_manager.routes import csvout
from queue_manager.routes.authn import CONSOLE_COOKIE, clear_console_cookie, console_cookie_path
from queue_manager.routes.call import Call

OPERATOR_ROLES: tuple[Role, ...] = ("owner", "operator", "viewer")


async def whoami(call: Call) -> None:
    await send_json(call.send, 200, {"principal": call.who.public()})


async def session_open(call: Call) -> None:
    """POST /api/admin/session: trade a key once for the qm_console cookie (never stored by the console)."""
    if call.who.role == "monitor":
        raise HttpError(403, "insufficient_role", "A monitor link cannot open a console session.")
    if not call.who.may("write"):
        allowed, limits = call.ctx.budgets["sign_in_read_only"].take(call.who.credential)
        if not allowed:
            raise HttpError(
                429,
                "rate_limited",
                f"This key has opened {READ_ONLY_SIGN_INS_PER_MIN} console sessions in the last minute; "
                "use the one you have, or wait.",
                headers=[(k.decode(), v.decode()) for k, v in limits],
            )
    cookie, sid = call.ctx.access.open_session(call.who)
    secure = call.ctx.identity.secure(call.ident)
    header = cookie_header(
        CONSOLE_COOKIE, cookie, max_age=12 * 3600, secure=secure, same_site="Strict", path=console_cookie_path(call.req)
    )
    await call.audit("session.open", target=call.who.who, session=sid)
    await send_json(call.send, 200, {"ok": True, "principal": call.who.public(), "expiresInSec": 12 * 3600}, [header])


async def session_close(call: Call) -> None:
    """DELETE /api/admin/session: end the console session this request was made with (its cookie).

    A request judged on a Bearer credential (a key or a monitor link) has no console session: nothing is
    ended, nothing is audited and no cookie is touched (``closed: false``). Only a real sign-out is an
    audit row, so repeating this call with a credential that may change nothing grows no trail."""
    if call.who.via != "cookie" or call.who.session_id is None:
        await send_json(call.send, 200, {"ok": True, "closed": False})
        return
    await call.ctx.access.end_session(call.who)
    await call.audit("session.close", target=call.who.who)
    name, value = clear_console_cookie(console_cookie_path(call.req))
    await send_json(call.send, 200, {"ok": True, "closed": True}, [(name.lower().encode(), value.encode())])


async def operators_list(call: Call) -> None:
    operators = await call.ctx.access.list_operators()
    await send_json(call.send, 200, {"operators": operators}, head=call.req.method == "HEAD")


async def operator_create(call: Call) -> None:
    body = await call.req.json_object()
    unknown = sorted(set(body) - {"name", "role"})
    if unknown:
        raise HttpError(400, "unknown_field", f"Unknown field(s): {', '.join(unknown)}.", fields=unknown)
    name, role = body.get("name"), body.get("role", "operator")
    if not isinstance(name, str) or not name.strip() or len(name) > 80:
        raise HttpError(400, "bad_request", "name is required: 1-80 characters.", field="name")
    if role not in OPERATOR_ROLES:
        raise HttpError(400, "invalid_role", "role is one of owner, operator, viewer.", field="role")
    record, key = await call.ctx.access.mint_operator(name.strip(), role, call.who)
    await call.audit("operator.create", target=f"{record.name} ({record.id})", role_granted=role)
    await send_json(call.send, 201, {"operator": {**record.public(), "liveLinks": 0}, "key": key, "shownOnce": True})


async def operator_delete(call: Call) -> None:
    op_id = call.req.params["operator"]
    purge = call.req.query.get("purge") in ("1", "true")
    record, closed = await call.ctx.access.revoke_operator(op_id[:40], purge=purge)
    if record is None:
        raise HttpError(404, "no_operator", "No such operator.")
    action = "operator.purge" if purge else "operator.revoke"
    await call.audit(action, target=f"{record.name}; closed {closed} monitor links", linksRevoked=closed)
    await send_json(call.send, 200, {"ok": True, "operator": record.public(), "linksRevoked": closed, "purged": purge})


def _link_url(call: Call, token: str) -> str:
    return f"{call.ctx.identity.public_base(call.req)}/#monitor={token}"


async def links_list(call: Call) -> None:
    links = await call.ctx.access.list_links()
    await send_json(call.send, 200, {"links": links}, head=call.req.method == "HEAD")


async def link_mint(call: Call) -> None:
    await call.req.body()
    link = await call.ctx.access.mint_link(call.who)
    await call.audit("monitor_token.mint", target=link.id)
    now = call.ctx.clock.wall_ms()
    await send_json(call.send, 201, {"link": link.public(now), "token": link.token, "url": _link_url(call, link.token)})


async def links_revoke_all(call: Call) -> None:
    await call.req.body()
    closed = await call.ctx.access.revoke_all_links()
    await call.audit("monitor_token.revoke_all", target=f"{closed} links")
    await send_json(call.send, 200, {"ok": True, "revoked": closed})


async def link_reveal(call: Call) -> None:
    link_id = call.req.params["link"][:40]
    await call.req.body()
    shown = await call.ctx.access.reveal_link(link_id)
    if shown is None:
        raise HttpError(404, "no_link", "No live link with that id (a revoked or expired link is never shown).")
    await call.audit("monitor_token.reveal", target=link_id)
    await send_json(call.send, 200, {"token": shown.token, "url": _link_url(call, shown.token)})


async def link_revoke(call: Call) -> None:
    link_id = call.req.params["link"][:40]
    if not await call.ctx.access.revoke_link(link_id):
        raise HttpError(404, "no_link", "No live link with that id.")
    await call.audit("monitor_token.revoke", target=link_id)
    await send_json(call.send, 200, {"ok": True})


async def sse_ticket(call: Call) -> None:
    await call.req.body()
    ticket = await call.ctx.access.mint_ticket(call.who, None)
    await send_json(call.send, 200, {"ticket": ticket, "expiresInSec": 30})


AUDIT_COLUMNS = ("ts", "actor", "actorId", "role", "action", "target", "roomId", "ip", "ok", "detail")


async def audit(call: Call) -> None:
    q = call.req.query
    room_id = q.get("roomId") or None
    try:
        limit = max(1, min(10_000, int(q.get("limit", "1000"))))
    except ValueError as exc:
        raise HttpError(400, "bad_request", "limit must be a whole number.") from exc
    rows = [r.public() for r in await call.ctx.access.store.list_audit(room_id, limit)]
    if q.get("format") == "csv":
        # the detail as the JSON answer carries it (true/false, null, lists and objects as JSON), compact
        flat = [
            {**row, "detail": json.dumps(row["detail"], separators=(",", ":"), ensure_ascii=False, default=str)}
            for row in rows
        ]
        await csvout.send(call, csvout.render(AUDIT_COLUMNS, flat), "audit.csv")
        return
    await send_json(call.send, 200, {"audit": rows})


async def shutdown(call: Call) -> None:
    await call.req.body()
    await call.audit("server.shutdown", target=call.ctx.settings.instance_id)
    # whole seconds, as on /api/admin/health
    await send_json(call.send, 200, {"ok": True, "stopping": True, "uptimeSec": int(call.ctx.uptime())})
    if not call.ctx.run.request_stop():  # the same graceful path SIGTERM takes, exiting 0
        os.kill(os.getpid(), signal.SIGTERM)
