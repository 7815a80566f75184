"""GET /preview/<token>: a room's page forced into one state, as a preview link made in the console shows it.

The token (routes/preview.py) says the room, the state, the language and the figures. The waiting page is the
real one, in the room's brand, handed a synthetic answer to render: its script asks the server for nothing (no
join, no stream, no poll). The origin-down and offline states are those pages, in the room's brand and the
chosen language, without their retries. Nothing here writes: no ticket, no counter, no history row.
"""

from __future__ import annotations

import asyncio
import functools

from queue_manager.context import Context
from queue_manager.engine.model import ROOM_ID_RE
from queue_manager.http.wire import HttpError, Request, Send, send_response
from queue_manager.routes import preview
from queue_manager.routes.pages import branding, pageguard, waiting
from queue_manager.routes.pages.visitor import outage_headers
from queue_manager.web import asset


def _marks() -> dict[str, str]:
    strings = asset.waiting_strings()
    return {code: strings[code]["previewMark"] for code in asset.LANGUAGES}


async def preview_page(ctx: Context, req: Request, send: Send) -> None:
    admitted = await pageguard.admit(ctx, req, send, "pages")
    if admitted is None:
        return
    shown = preview.read(ctx.signer, req.params["token"])
    policy = await ctx.store.room_policy(shown.room_id) if ROOM_ID_RE.match(shown.room_id) else None
    if policy is None:
        raise HttpError(404, "no_room", "The room of this preview no longer exists.", roomId=shown.room_id[:80])
    state = preview.STATES[shown.state]
    head = req.method == "HEAD"
    if state.page != "waiting":
        page = asset.outage_preview(branding.outage_page(state.page, policy.brand, shown.lang), shown.lang, _marks())
        headers = [*outage_headers(page), *admitted, (b"referrer-policy", b"no-referrer")]
        await send_response(send, 200, page, headers, head)
        return
    status = None
    if state.status is not None:
        room = await ctx.store.get_room(shown.room_id)
        passed_ttl = room.get("passedTtlSec")
        status = preview.status_of(
            shown.room_id,
            state,
            preview.Shown(
                position=shown.position,
                wait_sec=shown.wait_sec,
                now_ms=ctx.clock.wall_ms(),
                passed_ttl_sec=passed_ttl if isinstance(passed_ttl, int) else 600,
            ),
        )
    name = policy.name or shown.room_id
    offered = policy.languages if shown.lang in policy.languages else (shown.lang, *policy.languages)
    html = await asyncio.to_thread(
        functools.partial(
            waiting.build, shown.room_id, name, shown.lang, "", False, policy.brand, {"status": status}, offered=offered
        )
    )
    headers = [
        (b"content-type", b"text/html; charset=utf-8"),
        (b"cache-control", b"no-store"),
        *admitted,
        (b"x-robots-tag", b"noindex"),
        (b"content-security-policy", waiting.PAGE_CSP),
        (b"x-content-type-options", b"nosniff"),
        (b"referrer-policy", b"no-referrer"),
    ]
    await send_response(send, 200, html.encode(), headers, head)
