"""A room's entry: ``POST /api/admin/rooms/<room>/entry-key`` creates or rotates the key its invitation
tokens are signed with.

The answer carries the key once (``{kid, key, previousKid, previousValidUntil}``); what is kept is the key
sealed under SECRET (``invitation.seal``), which only the join's verification opens. The key it replaces
stays valid for ENTRY_KEY_OVERLAP_SEC. Audited as ``room.entry_key`` with the kids, never the key.
"""

from __future__ import annotations

from queue_manager.http.wire import HttpError, send_json
from queue_manager.invitation import new_key, seal
from queue_manager.routes.call import Call
from queue_manager.sidestores.entrykeys.base import SealedKey


async def entry_key(call: Call) -> None:
    ctx = call.ctx
    room_id = call.req.params["room"]
    if not await ctx.store.room_exists(room_id):
        raise HttpError(404, "no_room", f"No room with id {room_id[:80]!r}.", roomId=room_id[:80])
    kid, key = new_key()
    sealed = SealedKey(kid, seal(ctx.settings.secret, room_id, kid, key), ctx.clock.wall_ms(), None)
    previous = await ctx.entry_keys.rotate(room_id, sealed, ctx.settings.entry_key_overlap_sec * 1000)
    ctx.entry_key_cache.pop(room_id, None)
    previous_kid = None if previous is None else previous.kid
    until = None if previous is None else previous.valid_until_ms
    await call.audit("room.entry_key", target=room_id, room_id=room_id, kid=kid, previousKid=previous_kid)
    await send_json(
        call.send,
        200,
        {"kid": kid, "key": key, "alg": "HS256", "previousKid": previous_kid, "previousValidUntil": until},
    )
