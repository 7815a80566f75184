"""``POST /api/admin/rooms/<room>/preview``: a signed link to the room's waiting page forced into one state.

The body is ``{state, lang, position, waitSec}`` (routes/preview.py checks it); the answer is ``{url, expiresAt}``.
The link opens the page with no credential for an hour, and opening it creates no ticket and counts nothing.
Making one is audited (``room.preview``), since whoever holds the link can see the room's page.
"""

from __future__ import annotations

from queue_manager.http.wire import HttpError, send_json
from queue_manager.routes import preview
from queue_manager.routes.call import Call


async def preview_link(call: Call) -> None:
    room_id = call.req.params["room"]
    body = await call.req.json_object()
    wanted = preview.parse(room_id, body)
    if not await call.ctx.store.room_exists(room_id):
        raise HttpError(404, "no_room", f"No room with id {room_id[:80]!r}.", roomId=room_id[:80])
    token, expires_at = preview.sign(call.ctx.signer, wanted)
    url = f"{call.ctx.identity.public_base(call.req)}/preview/{token}"
    await call.audit("room.preview", target=room_id, room_id=room_id, state=wanted.state, lang=wanted.lang)
    await send_json(call.send, 200, {"url": url, "expiresAt": expires_at, "state": wanted.state, "lang": wanted.lang})
