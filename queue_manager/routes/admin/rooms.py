"""Admin routes for rooms: list, create/update, delete, controls, schedule, drill-down, URL rules.

Grants: reading needs ``read``; running the queue needs ``write``; deleting a room and any inline
change (``inline_requires_owner``) need ``owner``; what a share link must never see (proxyOrigin,
origin lists, URL rules, the drill-down) needs ``team``. Every change is audited. A change of a room's
config is told to the inline proxy before the answer goes out (its host index has it from the next
request on), and a save's answer carries the console warnings of ``room_warnings.py``.
"""

from __future__ import annotations

import base64
import ipaddress
from typing import Any
from urllib.parse import urlsplit

from queue_manager import ssrf
from queue_manager.context import Context
from queue_manager.engine.errors import EngineError
from queue_manager.engine.logo import LOGO_MAX_BYTES, LOGO_TYPES
from queue_manager.engine.model import ALIASES, READ_ONLY_FIELDS, bare_origin
from queue_manager.fleet.gapwatch import VoidRefused
from queue_manager.http.wire import HttpError, send_json
from queue_manager.routes import edge_passes as passkeys
from queue_manager.routes.admin import access_dry_run
from queue_manager.routes.admin.room_warnings import console_warnings
from queue_manager.routes.call import Call

TEAM_ONLY_FIELDS = ("proxyOrigin", "returnOrigins", "tagOrigins", "rules", "accessRules")


def with_auto(ctx: Context, rooms: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mark the rooms threshold activation acted on in the last 15 minutes (``autoSelf``: the card's
    AUTO · SELF badge, with when, which way and at what joins/min); null on every other room."""
    alerts = ctx.attached.alerts
    badges = alerts.badges() if alerts is not None else {}
    for room in rooms:
        room["autoSelf"] = badges.get(room["id"])
    return rooms


def _visible(call: Call, room: dict[str, Any]) -> dict[str, Any]:
    if call.who.may("team"):
        return room
    out = {k: v for k, v in room.items() if k not in TEAM_ONLY_FIELDS}
    out["rules"] = None
    return out


async def _changed(ctx: Context, room_id: str) -> None:
    """A room was created, changed or deleted here: announced before the save answers (the inline proxy's
    host index takes it in, so the next request on this instance sees it)."""
    await ctx.room_changes.announce(frozenset((room_id,)))


async def rooms_list(call: Call) -> None:
    rooms = [_visible(call, r) for r in with_auto(call.ctx, await call.ctx.store.list_rooms())]
    await send_json(call.send, 200, {"rooms": rooms, "now": call.ctx.clock.wall_ms()}, head=call.req.method == "HEAD")


async def _inline_change(call: Call, body: dict[str, Any]) -> tuple[bool, dict[str, Any], bool]:
    """(is this an inline change, {field: [old, new]}, creating) — only a change counts."""
    room_id = body.get("id")
    existing = (
        await call.ctx.store.get_room(room_id)
        if isinstance(room_id, str) and await call.ctx.store.room_exists(room_id)
        else None
    )
    if existing is None:
        new_proxy = body.get("proxyOrigin")
        return new_proxy is not None, ({"proxyOrigin": [None, new_proxy]} if new_proxy is not None else {}), True
    changes: dict[str, Any] = {}
    old_proxy = existing.get("proxyOrigin")
    if "proxyOrigin" in body and _same_origin_spelling(body["proxyOrigin"]) != old_proxy:
        changes["proxyOrigin"] = [old_proxy, body["proxyOrigin"]]
    inline = old_proxy is not None or body.get("proxyOrigin") is not None
    if inline and "targetUrl" in body and body["targetUrl"] != existing.get("targetUrl"):
        changes["targetUrl"] = [existing.get("targetUrl"), body["targetUrl"]]
    return bool(changes), changes, False


def _same_origin_spelling(value: Any) -> Any:
    """The stored spelling of a proxyOrigin (``http://h:8080/`` is ``http://h:8080``): only a change counts."""
    if value is None:
        return None
    try:
        return bare_origin(value)
    except EngineError:
        return value


def _private_literal(value: Any) -> str | None:
    """The address when ``value`` is an origin whose host is a private or internal IP literal, else None.

    A host name is not judged here: what it resolves to can change, and the connect-time check covers it.
    """
    if not isinstance(value, str):
        return None
    try:
        host = urlsplit(value.strip()).hostname
    except ValueError:
        return None  # the engine's own validation refuses it with its code
    if not host:
        return None
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        numeric = ssrf.numeric_ipv4(host)  # 127.1, 0x7f000001, 2130706433: an address literal all the same
        return host if numeric is not None and ssrf.is_private(numeric) else None
    return host if ssrf.is_private(host) else None


def _refuse_private_origin(call: Call, changes: dict[str, Any]) -> None:
    """A new or changed proxyOrigin naming a private IP literal is refused unless PROXY_ALLOW_PRIVATE=1."""
    if call.ctx.settings.proxy_allow_private or "proxyOrigin" not in changes:
        return
    address = _private_literal(changes["proxyOrigin"][1])
    if address is not None:
        raise HttpError(
            400,
            "proxy_origin_private",
            f"proxyOrigin {address} is a private or internal address; this server refuses to connect to it "
            "unless PROXY_ALLOW_PRIVATE=1 (set it if the app really is on this network).",
            field="proxyOrigin",
        )


async def rooms_upsert(call: Call) -> None:
    body = await call.req.json_object()
    room_id = body.get("id") if isinstance(body.get("id"), str) else None
    inline, changes, creating = await _inline_change(call, body)

    async def audit_refused(code: str) -> None:
        action = "room.create" if creating else "room.update"
        await call.audit(action, target=room_id, room_id=room_id, ok=False, refused=code, fields=sorted(changes))

    if inline and not call.who.may("owner"):
        await audit_refused("inline_requires_owner")
        advice = (
            "The room can still be created as a snippet room (no proxyOrigin)."
            if creating
            else "Every other setting of this room is still yours to change."
        )
        raise HttpError(
            403,
            "inline_requires_owner",
            f"Serving a room inline (its targetUrl and proxyOrigin) needs the owner role. {advice}",
        )
    try:
        _refuse_private_origin(call, changes)
    except HttpError:
        await audit_refused("proxy_origin_private")
        raise
    fields = sorted(k for k in body if k != "id" and k not in READ_ONLY_FIELDS)  # a read's figures are ignored
    try:
        room, created, changed = await call.ctx.store.upsert_room(body)
    except EngineError as exc:
        await call.audit(
            "room.create" if creating else "room.update",
            target=room_id,
            room_id=room_id,
            ok=False,
            refused=exc.code,
            fields=sorted({ALIASES.get(f, f) for f in fields}),  # rate and ratePerMinute are one field
        )
        raise
    await call.audit("room.create" if created else "room.update", target=room["id"], room_id=room["id"], fields=changed)
    if inline:
        await call.audit("room.inline", target=room["id"], room_id=room["id"], changes=changes)
    await _changed(call.ctx, str(room["id"]))
    shown = _visible(call, room)
    answer: dict[str, Any] = {"ok": True, "created": created, "fields": changed, "room": shown}
    warnings = console_warnings(call.ctx, call.req, shown)
    if warnings:
        answer["warnings"] = warnings
    await send_json(call.send, 201 if created else 200, answer)


def _room(call: Call) -> str:
    return call.req.params["room"]


async def room_get(call: Call) -> None:
    room = with_auto(call.ctx, [await call.ctx.store.get_room(_room(call))])[0]
    await send_json(call.send, 200, {"room": _visible(call, room)}, head=call.req.method == "HEAD")


async def room_delete(call: Call) -> None:
    room_id = _room(call)
    await call.ctx.store.delete_room(room_id)
    await call.audit("room.delete", target=room_id, room_id=room_id)
    await _changed(call.ctx, room_id)
    await send_json(call.send, 200, {"ok": True, "deleted": room_id})


async def _set_state(call: Call, action: str, state: str) -> None:
    room_id = _room(call)
    await call.req.body()
    await _existing(call, room_id)
    room, _, _ = await call.ctx.store.upsert_room({"id": room_id, "state": state})
    await call.audit(f"room.{action}", target=room_id, room_id=room_id)
    await _changed(call.ctx, room_id)
    await send_json(call.send, 200, {"ok": True, "room": _visible(call, room)})


async def room_pause(call: Call) -> None:
    await _set_state(call, "pause", "paused")


async def room_resume(call: Call) -> None:
    await _set_state(call, "resume", "active")


async def room_rate(call: Call) -> None:
    room_id = _room(call)
    body = await call.req.json_object()
    await _existing(call, room_id)
    unknown = sorted(set(body) - {"ratePerMinute", "rate"})
    if unknown or not body:
        raise HttpError(
            400,
            "unknown_field" if unknown else "nothing_to_change",
            'Send {"ratePerMinute": n} (or its alias rate).',
            fields=unknown,
        )
    room, _, _ = await call.ctx.store.upsert_room({"id": room_id, **body})
    await call.audit("room.rate", target=room_id, room_id=room_id, ratePerMinute=room["ratePerMinute"])
    await _changed(call.ctx, room_id)
    await send_json(call.send, 200, {"ok": True, "room": _visible(call, room)})


async def room_schedule(call: Call) -> None:
    room_id = _room(call)
    body = await call.req.json_object()
    room = await call.ctx.store.schedule(room_id, body)
    await call.audit("room.schedule", target=room_id, room_id=room_id, fields=sorted(body))
    await _changed(call.ctx, room_id)
    await send_json(call.send, 200, {"ok": True, "room": _visible(call, room)})


async def room_purge(call: Call) -> None:
    room_id = _room(call)
    await call.req.body()
    purged = await call.ctx.store.purge(room_id)
    await call.audit("room.purge", target=room_id, room_id=room_id, purged=purged)
    await send_json(call.send, 200, {"ok": True, "purged": purged})


async def room_flush(call: Call) -> None:
    """Release every admitted visitor's pass and session at once (their edge passes too); the line stays."""
    room_id = _room(call)
    await call.req.body()
    flushed = await call.ctx.store.flush(room_id)
    await passkeys.revoke_room(call.ctx, room_id)
    await call.audit("room.flush", target=room_id, room_id=room_id, flushed=flushed)
    await send_json(call.send, 200, {"ok": True, "flushed": flushed})


async def room_eject(call: Call) -> None:
    room_id = _room(call)
    body = await call.req.json_object()
    query = _ticket_query(body)
    visitor = await call.ctx.store.eject(room_id, query)
    if isinstance(visitor.get("generation"), int) and isinstance(visitor.get("ticket"), int):
        await passkeys.revoke_ticket(call.ctx, room_id, visitor["generation"], visitor["ticket"])
    await call.audit("visitor.eject", target=str(visitor.get("ticket")), room_id=room_id)
    await send_json(call.send, 200, {"ok": True, "visitor": visitor})


VOID_MAX = 1000  # seqs one void may name


async def room_journal_void(call: Call) -> None:
    """Close seqs of the room's journal that nobody can recover (``seq.void``), then rebuild the room from it."""
    room_id = _room(call)
    body = await call.req.json_object()
    seqs = body.get("seqs")
    unknown = sorted(set(body) - {"seqs"})
    if (
        unknown
        or not isinstance(seqs, list)
        or not 0 < len(seqs) <= VOID_MAX
        or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in seqs)
    ):
        raise HttpError(
            400,
            "bad_request",
            f'Send {{"seqs": [n, …]}}: 1 to {VOID_MAX} seq numbers of the room\'s journal, each 1 or more.',
            fields=unknown,
        )
    fleet = call.ctx.fleet
    if fleet is None:
        raise HttpError(409, "no_journal", "This server keeps no events journal (STORE=memory): nothing to void.")
    try:
        result = await fleet.void.void(room_id, sorted(set(seqs)), call.who.who)
    except VoidRefused as refused:
        raise HttpError(refused.status, refused.code, refused.message, **refused.detail) from None
    await call.audit(
        "journal.void",
        target=room_id,
        room_id=room_id,
        generation=result["generation"],
        seqs=result["voided"],
        committedMeanwhile=result["committedMeanwhile"],
    )
    await send_json(call.send, 200, {"ok": True, **result, "rebuilding": True})


async def room_visitor(call: Call) -> None:
    found = await call.ctx.store.lookup(_room(call), call.req.params["visitor"][:64])
    await send_json(call.send, 200, {"visitor": found}, head=call.req.method == "HEAD")


async def room_rules(call: Call) -> None:
    room = await call.ctx.store.get_room(_room(call))
    payload = {"rules": room["rules"], "unscopedChecks": room["unscopedChecks"], "accessRules": room["accessRules"]}
    await send_json(call.send, 200, payload, head=call.req.method == "HEAD")


async def room_rules_test(call: Call) -> None:
    """The dry run: which URL rule a URL matches, and which access rule a request described by its address,
    path, headers, User-Agent and country would meet (nothing counted; a crawler's claim looked up for real)."""
    body = await call.req.json_object()
    room_id = _room(call)
    url = body.get("url")
    described = any(k in body for k in access_dry_run.FACT_KEYS)
    if url is not None and (not isinstance(url, str) or not url or len(url) > 4096):
        raise HttpError(400, "bad_request", 'Send {"url": "https://…"}.')
    if url is None and not described:
        raise HttpError(400, "bad_request", 'Send {"url": "https://…"} and/or a request: {"address", "path", …}.')
    facts = access_dry_run.facts_of(body, url) if described else None
    payload: dict[str, Any] = await call.ctx.store.match_rule(room_id, url) if url is not None else {}
    if facts is not None:
        policy = await call.ctx.store.room_policy(room_id)
        if policy is None:
            raise HttpError(404, "no_room", f"No room with id {room_id!r}.", roomId=room_id)
        payload["access"] = await access_dry_run.answer(call.ctx.access_gate.crawlers, policy.access_rules, facts, body)
    await send_json(call.send, 200, payload)


async def room_logo_put(call: Call) -> None:
    """POST …/logo: the body is the image itself (Content-Type image/png or image/svg+xml, at most
    LOGO_MAX_BYTES); the engine checks or rebuilds it (engine/logo.py) and the room keeps the result."""
    room_id = _room(call)
    await _existing(call, room_id)
    kind = (call.req.header(b"content-type") or "").split(";", 1)[0].strip().lower()
    data = await call.req.body(limit=LOGO_MAX_BYTES)
    if kind not in LOGO_TYPES:
        raise HttpError(
            415,
            "bad_logo",
            f"Send the logo as image/png or image/svg+xml (Content-Type), not {kind[:60] or 'nothing'!r}.",
        )
    logo = {"type": kind, "data": base64.b64encode(data).decode()}
    try:
        room, _, _ = await call.ctx.store.upsert_room({"id": room_id, "brand": {"logo": logo}})
    except EngineError as err:
        await call.audit("room.logo", target=room_id, room_id=room_id, ok=False, refused=err.code)
        raise
    await call.audit("room.logo", target=room_id, room_id=room_id, sha256=room["brand"]["logo"]["sha256"])
    await _changed(call.ctx, room_id)
    await send_json(call.send, 200, {"ok": True, "logo": room["brand"]["logo"], "room": _visible(call, room)})


async def room_logo_delete(call: Call) -> None:
    room_id = _room(call)
    await _existing(call, room_id)
    current = await call.ctx.store.get_room(room_id)
    room = current
    if current.get("brand") is not None:
        room, _, _ = await call.ctx.store.upsert_room({"id": room_id, "brand": {"logo": None}})
    await call.audit("room.logo", target=room_id, room_id=room_id, sha256=None)
    await _changed(call.ctx, room_id)
    await send_json(call.send, 200, {"ok": True, "logo": None, "room": _visible(call, room)})


async def _existing(call: Call, room_id: str) -> None:
    if not await call.ctx.store.room_exists(room_id):
        raise HttpError(404, "no_room", f"No room with id {room_id[:80]!r}.", roomId=room_id[:80])


def _ticket_query(body: dict[str, Any]) -> str:
    ticket, ref = body.get("ticket"), body.get("ref")
    if isinstance(ticket, int) and not isinstance(ticket, bool) and ticket > 0:
        return str(ticket)
    if isinstance(ref, str) and 1 <= len(ref) <= 16:
        return ref
    raise HttpError(400, "bad_request", 'Send {"ticket": n} or {"ref": "K7Q2MX"}.')
