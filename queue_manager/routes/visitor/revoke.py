"""The site ends a visitor's session: ``POST /api/sessions/revoke``, and the inline origin's
``X-QM-Command: revoke``.

A finished buyer no longer needs the slot their session holds. The customer's backend (with the Public API
key) names the session by what the visitor carries: the door key (``qm_dk_<room>``, best with the ticket
token ``qm_t_<room>`` beside it) or the edge pass (``qmp_<room>``). The session ends at once (its ticket
finished ``revoked``), its slot is free for the next promotion, and every edge pass of the ticket goes on
the room's revocation list. A session nobody holds (unknown, already ended, another generation) is a
no-op answered ``{"revoked": false}``; a forged credential, or one of another room, is refused.
"""

from __future__ import annotations

from typing import Any

from queue_manager.context import Context
from queue_manager.edgepass import PassError
from queue_manager.engine.visitor import Presented
from queue_manager.http.wire import HttpError, Request, Send, send_json
from queue_manager.routes import edge_passes as passkeys
from queue_manager.routes.visitor.api import _vouched_key, _vouching_header, room_param
from queue_manager.routes.visitor.door import MAX_DOOR_KEY, door_hash

FIELDS = frozenset({"roomId", "doorKey", "token", "pass"})


async def end_session(ctx: Context, room_id: str, gen: int | None, n: int | None, hashed: bytes) -> bool:
    """End the live session holding the door key ``hashed`` (ticket ``n`` when known) and refuse its
    edge passes from now on. False: no live session holds it; nothing changed."""
    ended = await ctx.store.revoke_session(room_id, gen, n, hashed)
    if ended is None:
        return False
    await passkeys.revoke_ticket(ctx, room_id, ended[0], ended[1])
    return True


async def inline_revoke(ctx: Context, room_id: str, presented: Presented | None, door_key: str | None) -> bool:
    """What an inline origin's ``X-QM-Command: revoke`` does: end the session of the visitor the response
    went to (their ticket and door key, as the gate read them)."""
    hashed = door_hash(door_key)
    if hashed is None:
        return False
    gen = None if presented is None else presented.gen
    return await end_session(ctx, room_id, gen, None if presented is None else presented.n, hashed)


def _text(body: dict[str, Any], key: str, limit: int) -> str | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > limit:
        raise HttpError(400, "bad_request", f"{key} must be a non-empty string of at most {limit} characters.")
    return value


async def revoke(ctx: Context, req: Request, send: Send) -> None:
    """POST /api/sessions/revoke ``{roomId, doorKey[, token]}`` or ``{roomId, pass}``."""
    body = await req.json_object()  # read first: an oversized body is refused (413) before anything else
    ident = ctx.identity.resolve(req)
    auth = _vouching_header(ctx, req)
    if auth is None:
        raise HttpError(401, "unauthorized", "Send the Public API key as Authorization: Bearer.")
    await _vouched_key(ctx, auth, ident)
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        raise HttpError(400, "bad_request", "Send roomId with doorKey (and token) or with pass.", fields=unknown)
    room_id = room_param(req, body.get("roomId"))
    door_key = _text(body, "doorKey", MAX_DOOR_KEY)
    token = _text(body, "token", 4096)
    edge_pass = _text(body, "pass", 4096)
    if (door_key is None) == (edge_pass is None) or (token is not None and door_key is None):
        raise HttpError(400, "bad_request", "Send roomId with doorKey (and token) or with pass, not both.")
    if await ctx.store.room_policy(room_id) is None:
        raise HttpError(404, "no_room", f"No room with id {room_id!r}.", roomId=room_id)
    gen: int | None = None
    n: int | None = None
    hashed: bytes | None = None
    if edge_pass is not None:
        if ctx.passes is None:
            raise HttpError(403, "invalid_pass", "This server hands out no edge passes.", reason="unknown_kid")
        try:
            claims = ctx.passes.claims_of(edge_pass, room_id)
        except PassError as err:
            raise HttpError(403, "invalid_pass", "That pass is not one of this room's.", reason=err.reason) from None
        gen, hashed = claims.gen, claims.door_hash
    else:
        hashed = door_hash(door_key)
        if token is not None:
            presented, _ = ctx.read_ticket(room_id, token)
            if presented is None:
                raise HttpError(403, "invalid_token", "That ticket token is not one of this room's.")
            gen, n = presented.gen, presented.n
            if n is None:  # a place in the pre-queue holds no session
                await send_json(send, 200, {"roomId": room_id, "revoked": False})
                return
    assert hashed is not None  # a door key of at most MAX_DOOR_KEY characters, or a pass's binding
    revoked = await end_session(ctx, room_id, gen, n, hashed)
    await send_json(send, 200, {"roomId": room_id, "revoked": revoked})
