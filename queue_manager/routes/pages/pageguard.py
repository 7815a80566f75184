"""The per-address guard on the pages a stranger can load (WAITING_LIMIT_PER_MIN).

The waiting page is charged to the "waiting" bucket; the console (/), /progress and /docs* to a separate
"pages" bucket of the same size, so an operator reading the guides never spends a visitor's allowance.
The guard stands down for an address recognised as an undeclared proxy (see proxywatch).
"""

from __future__ import annotations

from queue_manager.context import Context
from queue_manager.http.language import pick_language
from queue_manager.http.wire import Request, Send, send_response
from queue_manager.services.edge_secret import wants_page
from queue_manager.web import asset

NO_STORE = (b"cache-control", b"no-store")


async def admit(ctx: Context, req: Request, send: Send, bucket: str) -> list[tuple[bytes, bytes]] | None:
    """Charge one page load to req's address; the rate-limit headers to add, or None once refused (answered)."""
    ident = ctx.identity.resolve(req)
    if ident.ip in ctx.proxywatch.exempt:
        return []  # an undeclared proxy: its visitors cannot be told apart
    allowed, headers = ctx.budgets[bucket].take(ident.ip)
    if allowed:
        return headers
    head = req.method == "HEAD"
    if wants_page(req.scope):  # a navigation: the small page that reloads itself after Retry-After
        await send_response(
            send,
            429,
            asset.refusal_page(headers, pick_language(req)),
            [(b"content-type", b"text/html; charset=utf-8"), NO_STORE, *headers],
            head,
        )
    else:  # an XHR gets plain text
        await send_response(
            send,
            429,
            b"Too many requests from your address; retry after Retry-After.",
            [(b"content-type", b"text/plain; charset=utf-8"), NO_STORE, *headers],
            head,
        )
    return None
