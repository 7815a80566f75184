"""Admin routes for the console's sign-in and the server's own state: session, health, metrics, security."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from queue_manager.context import Context
from queue_manager.http.wire import HttpError, Request, Send, send_json
from queue_manager.routes import authn, health
from queue_manager.routes.admin import team as admin_team
from queue_manager.routes.call import Call
from queue_manager.tokens import hkdf_key


async def session_open(ctx: Context, req: Request, send: Send) -> None:
    """POST /api/admin/session {"key": …} with X-QM-CSRF: the key is judged like a Bearer, once."""
    ident = ctx.identity.resolve(req)
    if not req.header(b"x-qm-csrf"):
        raise HttpError(403, "csrf_required", "Signing in needs the X-QM-CSRF header.")
    site = req.header(b"sec-fetch-site")
    if site is not None and site != "same-origin":
        raise HttpError(403, "csrf_required", "Sign in from the console's own origin.")
    retry = await ctx.access.failures.locked(ident.ip)
    if retry is not None:
        raise authn.too_many_failures(retry)
    body = await req.json_object()
    key = body.get("key")
    if not isinstance(key, str) or not key or len(key) > 500:
        raise HttpError(400, "bad_request", 'Send {"key": "<ADMIN_KEY or operator key>"}.')
    principal = await ctx.access.from_bearer(key)
    if principal is None:
        raise await authn.failed(ctx, ident.ip, HttpError(401, "unauthorized", "That key is not valid here."))
    await admin_team.session_open(Call(ctx, req, send, req.receive, ident, principal))


async def metrics(call: Call) -> None:
    await health.metrics(call.ctx, call.req, call.send)


async def admin_health(call: Call) -> None:
    await health.admin_health(call.ctx, call.req, call.send, full=call.who.may("team"))


#: The Security panel's totals that are summed over the live instances; the rest of it is this server's own.
FLEET_TOTALS = ("assessed", "blocked", "warned", "allowlisted", "crawlers")


async def security(call: Call) -> None:
    """What bot protection has seen: the totals summed over the live instances (``fleet`` says how many and
    whether the sum is partial), the signals, crawler names and recent decisions as this server saw them."""
    stats = call.ctx.protection.stats()
    summed, fleet = await health.fleet_counters(call.ctx)
    out: dict[str, object] = {"mode": stats.pop("mode"), "blockAt": stats.pop("blockAt")}
    for name in FLEET_TOTALS:
        out[name] = summed.protection.get(name, stats.pop(name))
        stats.pop(name, None)
    out["fleet"] = fleet
    out["thisInstance"] = {name: getattr(call.ctx.protection, name) for name in FLEET_TOTALS}
    stats["recent"] = _recent(call, stats["recent"])
    out.update(stats)
    await send_json(call.send, 200, out, head=call.req.method == "HEAD")


def _recent(call: Call, recent: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The recent decisions, each with ``client``: a tag of its address keyed with a key derived from SECRET,
    so decisions from one source can be told apart without the address. ``ip`` itself only for a caller
    with the team grant: a monitor link sees no visitor's address (an unkeyed digest of an IPv4 address
    would not do: all 2^32 of them are hashed in minutes)."""
    key = hkdf_key(call.ctx.settings.secret, "qm:protection-client", 32)
    team = call.who.may("team")
    out = []
    for decision in recent:
        ip = str(decision.get("ip") or "")
        tag = hmac.new(key, ip.encode(), hashlib.sha256).hexdigest()[:16]
        out.append({**decision, "ip": decision.get("ip") if team else None, "client": tag})
    return out
