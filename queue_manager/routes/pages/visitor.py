"""The visitor's pages (their routes are in routes/table.py).

/w/<room> (the waiting page), /w/<room>/<file> (the room's brand stylesheet and logo, routes/pages/branding.py),
/assets/waiting-<hash>.css|.js, /fonts/<file>, and /offline.html and /origin-down.html (the
self-contained outage pages).
"""

from __future__ import annotations

from queue_manager.context import Context
from queue_manager.engine.model import ROOM_ID_RE
from queue_manager.http.wire import Request, Send, send_response
from queue_manager.routes.pages import branding, waiting
from queue_manager.web import asset


async def waiting_page(ctx: Context, req: Request, send: Send) -> None:
    room_id, slash, name = req.path[3:].partition("/")
    if slash:
        await branding.brand_file(ctx, req, send, room_id, name)
        return
    await waiting.waiting_page(ctx, req, send, room_id)


def outage_headers(page: bytes) -> list[tuple[bytes, bytes]]:
    """What an outage page is served with: no-store, noindex, and a CSP allowing only its own inline code."""
    return [
        (b"content-type", b"text/html; charset=utf-8"),
        (b"cache-control", b"no-store"),
        (b"x-robots-tag", b"noindex"),
        (b"content-security-policy", asset.inline_csp(page)),
        (b"x-content-type-options", b"nosniff"),
    ]


async def _outage(ctx: Context, req: Request, send: Send, kind: str) -> None:
    """``?room=<id>``: the page in that room's brand (an unknown room, or none: the plain page)."""
    room_id = req.query.get("room", "")
    policy = await ctx.store.room_policy(room_id) if room_id and ROOM_ID_RE.match(room_id) else None
    page = branding.outage_page(kind, None if policy is None else policy.brand)
    await send_response(send, 200, page, outage_headers(page), req.method == "HEAD")


async def offline_page(ctx: Context, req: Request, send: Send) -> None:
    await _outage(ctx, req, send, "offline")


async def origin_down_page(ctx: Context, req: Request, send: Send) -> None:
    await _outage(ctx, req, send, "origin_down")
