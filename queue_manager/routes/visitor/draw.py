"""GET /api/rooms/<id>/draw: a scheduled drop's commitment, and after the draw the seed and the draw.

Public (anyone may check a draw), charged per address to the "draw" budget (the size of
WAITING_LIMIT_PER_MIN; it stands down for an undeclared proxy, as the page guard does). The body is
``engine.draw.public_view``; ``docs/fairness.md`` says how to check it and ``scripts/verify_draw.py``
does.
"""

from __future__ import annotations

from queue_manager.context import Context
from queue_manager.engine.draw import public_view
from queue_manager.engine.model import ROOM_ID_RE
from queue_manager.http.wire import HttpError, Request, Send, send_json
from queue_manager.services import ratelimit


async def room_draw(ctx: Context, req: Request, send: Send) -> None:
    room_id = req.params["room"]
    ip = ctx.identity.resolve(req).ip
    headers: list[tuple[bytes, bytes]] = []
    if ip not in ctx.proxywatch.exempt:  # an undeclared proxy: its visitors cannot be told apart
        allowed, headers = ctx.budgets["draw"].take(ip)
        if not allowed:
            raise ratelimit.refused(headers)
    if not ROOM_ID_RE.match(room_id):
        raise HttpError(404, "no_room", f"No room with id {room_id[:80]!r}.", roomId=room_id[:80])
    state = await ctx.store.draw_state(room_id)
    if state.record is None:
        raise HttpError(
            404,
            "no_draw",
            f"Room {room_id!r} has no drop draw: it was never scheduled (opensAt).",
            roomId=room_id,
        )
    body = public_view(room_id, state.record, scheduled=state.scheduled, pre_count=state.pre_count)
    await send_json(send, 200, body, headers, req.method == "HEAD")
