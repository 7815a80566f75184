"""Page routes (visitor): path -> handler, consulted by the app after the fixed API routes.

/w/<room> (the waiting page), /assets/waiting-<hash>.css|.js, /fonts/<file>, and /offline.html and
/origin-down.html (the self-contained outage pages).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from queue_manager.http import visitor, waiting
from queue_manager.http.context import Context
from queue_manager.http.wire import Request, Send, send_response
from queue_manager.web import asset

PageHandler = Callable[[Context, Request, Send], Awaitable[None]]


def route(path: str) -> PageHandler | None:
    """The handler for a GET/HEAD page path this module serves, or None."""
    if path.startswith("/w/"):
        return _waiting
    if path.startswith("/assets/waiting-"):
        return waiting.waiting_asset
    if path.startswith("/fonts/"):
        return waiting.font_file
    if path == "/offline.html":
        return _offline
    if path == "/origin-down.html":
        return _origin_down
    return None


async def _waiting(ctx: Context, req: Request, send: Send) -> None:
    await visitor.waiting_page(ctx, req, send, req.path[3:])


def outage_headers(page: bytes) -> list[tuple[bytes, bytes]]:
    """What an outage page is served with: no-store, noindex, and a CSP allowing only its own inline code."""
    return [
        (b"content-type", b"text/html; charset=utf-8"),
        (b"cache-control", b"no-store"),
        (b"x-robots-tag", b"noindex"),
        (b"content-security-policy", asset.inline_csp(page)),
        (b"x-content-type-options", b"nosniff"),
    ]


async def _offline(ctx: Context, req: Request, send: Send) -> None:
    page = asset.offline_page()
    await send_response(send, 200, page, outage_headers(page), req.method == "HEAD")


async def _origin_down(ctx: Context, req: Request, send: Send) -> None:
    page = asset.origin_down_page()
    await send_response(send, 200, page, outage_headers(page), req.method == "HEAD")
