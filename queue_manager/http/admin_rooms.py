"""Admin routes for rooms: list, create/update, delete, controls, schedule, drill-down, URL rules.

Grants: reading needs ``read``; running the queue needs ``write``; deleting a room and any inline
change (``inline_requires_owner``) need ``owner``; what a share link must never see (proxyOrigin,
origin lists, URL rules, the drill-down) needs ``team``. Every change is audited.
"""

from __future__ import annotations

import ipaddress
from typing import Any
from urllib.parse import urlsplit

from queue_manager.engine.errors import EngineError
from queue_manager.engine.model import ALIASES, bare_origin
from queue_manager.http.call import Call
from queue_manager.http.wire import HttpError, send_json
from queue_manager.inline import ssrf

TEAM_ONLY_FIELDS = ("proxyOrigin", "returnOrigins", "tagOrigins", "rules")


def _visible(call: Call, room: dict[str, Any]) -> dict[str, Any]:
    if call.who.may("team"):
        return room
    out = {k: v for k, v in room.items() if k not in TEAM_ONLY_FIELDS}
    out["rules"] = None
    return out


async def rooms_list(call: Call) -> None:
    call.need("read")
    rooms = [_visible(call, r) for r in await call.ctx.store.list_rooms()]
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
        return None
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
    call.need("write")
    body = await call.req.json_object()
    room_id = body.get("id") if isinstance(body.get("id"), str) else None
    inline, changes, creating = await _inline_change(call, body)
    if inline and not call.who.may("owner"):
        await call.audit(
            "room.create" if creating else "room.update",
            target=room_id,
            room_id=room_id,
            ok=False,
            refused="inline_requires_owner",
            fields=sorted(changes),
        )
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
        await call.audit(
            "room.create" if creating else "room.update",
            target=room_id,
            room_id=room_id,
            ok=False,
            refused="proxy_origin_private",
            fields=sorted(changes),
        )
        raise
    fields = sorted(k for k in body if k != "id")
    try:
        room, created, changed = await call.ctx.store.upsert_room(body)
    except EngineError:
        await call.audit(
            "room.create" if creating else "room.update",
            target=room_id,
            room_id=room_id,
            ok=False,
            fields=[ALIASES.get(f, f) for f in fields],
        )
        raise
    await call.audit("room.create" if created else "room.update", target=room["id"], room_id=room["id"], fields=changed)
    if inline:
        await call.audit("room.inline", target=room["id"], room_id=room["id"], changes=changes)
    await send_json(
        call.send,
        201 if created else 200,
        {"ok": True, "created": created, "fields": changed, "room": _visible(call, room)},
    )


async def room_route(call: Call) -> None:
    req, store = call.req, call.ctx.store
    parts = req.path[len("/api/admin/rooms/") :].split("/")
    room_id, rest = parts[0], parts[1:]
    if not room_id or any(not p for p in rest):
        raise HttpError(404, "not_found", "No such route.")
    method = req.method
    head = method == "HEAD"
    action = "/".join(rest) if rest and rest[0] != "visitors" else (rest[0] if rest else "")
    if action == "":
        if method in ("GET", "HEAD"):
            call.need("read")
            await send_json(call.send, 200, {"room": _visible(call, await store.get_room(room_id))}, head=head)
            return
        if method == "DELETE":
            call.need("owner")
            await store.delete_room(room_id)
            await call.audit("room.delete", target=room_id, room_id=room_id)
            await send_json(call.send, 200, {"ok": True, "deleted": room_id})
            return
        raise _method(["GET", "DELETE"])
    if action in ("pause", "resume"):
        _post(method)
        call.need("write")
        await req.body()
        await _existing(call, room_id)
        state = "paused" if action == "pause" else "active"
        room, _, _ = await store.upsert_room({"id": room_id, "state": state})
        await call.audit(f"room.{action}", target=room_id, room_id=room_id)
        await send_json(call.send, 200, {"ok": True, "room": _visible(call, room)})
        return
    if action == "rate":
        _post(method)
        call.need("write")
        body = await req.json_object()
        await _existing(call, room_id)
        unknown = sorted(set(body) - {"ratePerMinute", "rate"})
        if unknown or not body:
            raise HttpError(
                400,
                "unknown_field" if unknown else "nothing_to_change",
                'Send {"ratePerMinute": n} (or its alias rate).',
                fields=unknown,
            )
        room, _, _ = await store.upsert_room({"id": room_id, **body})
        await call.audit("room.rate", target=room_id, room_id=room_id, ratePerMinute=room["ratePerMinute"])
        await send_json(call.send, 200, {"ok": True, "room": _visible(call, room)})
        return
    if action == "schedule":
        _post(method)
        call.need("write")
        body = await req.json_object()
        room = await store.schedule(room_id, body)
        await call.audit("room.schedule", target=room_id, room_id=room_id, fields=sorted(body))
        await send_json(call.send, 200, {"ok": True, "room": _visible(call, room)})
        return
    if action == "purge":
        _post(method)
        call.need("write")
        await req.body()
        purged = await store.purge(room_id)
        await call.audit("room.purge", target=room_id, room_id=room_id, purged=purged)
        await send_json(call.send, 200, {"ok": True, "purged": purged})
        return
    if action == "eject":
        _post(method)
        call.need("write")
        call.need("team")
        body = await req.json_object()
        query = _ticket_query(body)
        visitor = await store.eject(room_id, query)
        await call.audit("visitor.eject", target=str(visitor.get("ticket")), room_id=room_id)
        await send_json(call.send, 200, {"ok": True, "visitor": visitor})
        return
    if action == "visitors" and len(rest) == 2:
        if method not in ("GET", "HEAD"):
            raise _method(["GET"])
        call.need("team")
        await send_json(call.send, 200, {"visitor": await store.lookup(room_id, rest[1][:64])}, head=head)
        return
    if action == "rules":
        if method not in ("GET", "HEAD"):
            raise _method(["GET"])
        call.need("team")
        room = await store.get_room(room_id)
        await send_json(call.send, 200, {"rules": room["rules"], "unscopedChecks": room["unscopedChecks"]}, head=head)
        return
    if action == "rules/test":
        _post(method)
        call.need("team")
        body = await req.json_object()
        url = body.get("url")
        if not isinstance(url, str) or not url or len(url) > 4096:
            raise HttpError(400, "bad_request", 'Send {"url": "https://…"}.')
        await send_json(call.send, 200, await store.match_rule(room_id, url))
        return
    raise HttpError(404, "not_found", "No such route.")


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


def _post(method: str) -> None:
    if method != "POST":
        raise _method(["POST"])


def _method(allowed: list[str]) -> HttpError:
    return HttpError(405, "method_not_allowed", f"Use {' or '.join(allowed)}.", headers=[("Allow", ", ".join(allowed))])
