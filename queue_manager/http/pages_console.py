"""Page routes (console): the operator console at / and its content-hashed assets under /assets/.

``/`` is charged to the "pages" budget (WAITING_LIMIT_PER_MIN per address, see pageguard) and served
``no-store`` with a strict CSP (nothing but this origin). Assets are named by a hash of their content
(``/assets/console-<hash>.js``) and served ``immutable``: a deploy changes the name, never the bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources

from queue_manager.http import pageguard
from queue_manager.http.context import Context
from queue_manager.http.wire import Request, Send, send_response

PageHandler = Callable[[Context, Request, Send], Awaitable[None]]

# (name in the page, file under web/console, content type)
SOURCES = (
    ("console.css", "console.css", "text/css; charset=utf-8"),
    ("console.js", "console.js", "text/javascript; charset=utf-8"),
    ("uplot.css", "vendor/uplot/uPlot.min.css", "text/css; charset=utf-8"),
    ("uplot.js", "vendor/uplot/uPlot.iife.min.js", "text/javascript; charset=utf-8"),
)
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'"
)


@dataclass(frozen=True, slots=True)
class Asset:
    path: str
    body: bytes
    content_type: str


def _read(name: str) -> bytes:
    return resources.files("queue_manager.web").joinpath("console").joinpath(name).read_bytes()


@cache
def assets() -> dict[str, Asset]:
    """Every console asset by its public path, plus the page's name for each ("console.js" -> Asset)."""
    out: dict[str, Asset] = {}
    for logical, file, ctype in SOURCES:
        body = _read(file)
        stem, ext = logical.rsplit(".", 1)
        digest = hashlib.sha256(body).hexdigest()[:12]
        asset = Asset(f"/assets/{stem}-{digest}.{ext}", body, ctype)
        out[asset.path] = asset
        out[logical] = asset
    return out


@cache
def page() -> bytes:
    html = _read("index.html").decode("utf-8")
    for logical, _, _ in SOURCES:  # relative, so the same page works under /__qm/ on an inline host
        html = html.replace("{{" + logical + "}}", assets()[logical].path.lstrip("/"))
    return html.encode("utf-8")


def route(path: str) -> PageHandler | None:
    """The handler for a GET/HEAD page path this module serves, or None."""
    if path == "/" or path == "/index.html":
        return _console
    if path.startswith("/assets/") and path in assets():
        return _asset
    return None


async def _console(ctx: Context, req: Request, send: Send) -> None:
    limit_headers = await pageguard.admit(ctx, req, send, "pages")
    if limit_headers is None:
        return
    await send_response(
        send,
        200,
        page(),
        [
            (b"content-type", b"text/html; charset=utf-8"),
            (b"cache-control", b"no-store"),
            (b"content-security-policy", CSP.encode()),
            (b"x-content-type-options", b"nosniff"),
            (b"referrer-policy", b"no-referrer"),
            (b"x-frame-options", b"DENY"),
            (b"x-robots-tag", b"noindex"),
            *limit_headers,
        ],
        req.method == "HEAD",
    )


async def _asset(ctx: Context, req: Request, send: Send) -> None:
    asset = assets()[req.path]
    await send_response(
        send,
        200,
        asset.body,
        [
            (b"content-type", asset.content_type.encode()),
            (b"cache-control", b"public, max-age=31536000, immutable"),
            (b"x-content-type-options", b"nosniff"),
        ],
        req.method == "HEAD",
    )
