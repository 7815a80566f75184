"""Page routes (console): the operator console at / and its content-hashed assets under /assets/; the
console's former addresses (/progress, /public/admin.html) redirect to it.

``/`` is charged to the "pages" budget (WAITING_LIMIT_PER_MIN per address, see pageguard) and served
``no-store`` with a strict CSP (nothing but this origin). Assets are named by a hash of their content
(``/assets/console-<hash>.js``) and served ``immutable`` through web/static.py: a deploy changes the name, never
the bytes.

The script is a set of ES modules, every ``*.js`` file directly under web/console: ``console.js`` is the entry the
page loads with ``<script type="module">``, and each other module is served as ``console-<stem>-<hash>.js``. The
modules import each other by file name (``./api.js``); static.hashed_assets rewrites those specifiers to the
hashed names, so the browser only ever fetches immutable URLs and the CSP needs nothing beyond ``script-src 'self'``.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from queue_manager.context import Context
from queue_manager.http.sendfile import serve_payload
from queue_manager.http.wire import Request, Send, send_response
from queue_manager.routes.pages import pageguard
from queue_manager.web import static

JS = "text/javascript; charset=utf-8"
CSS = "text/css; charset=utf-8"
# what the page names besides the modules: (name in the page, file under web/console, served stem, content type)
STYLES_AND_VENDOR = (
    ("console.css", "console.css", "console", CSS),
    ("uplot.css", "vendor/uplot/uPlot.min.css", "uplot", CSS),
    ("uplot.js", "vendor/uplot/uPlot.iife.min.js", "uplot", JS),
)
ENTRY = "console.js"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'"
)


def _folder() -> resources.abc.Traversable:
    return resources.files("queue_manager.web").joinpath("console")


def sources() -> list[static.Source]:
    """The console's files: its style, the vendored chart library, and every script module."""
    folder = _folder()
    out = [
        static.Source(name, stem, folder.joinpath(file).read_bytes(), ctype)
        for name, file, stem, ctype in STYLES_AND_VENDOR
    ]
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.is_file() and entry.name.endswith(".js"):
            stem = "console" if entry.name == ENTRY else "console-" + entry.name.removesuffix(".js")
            out.append(static.Source(entry.name, stem, entry.read_bytes(), JS, module=True))
    return out


@cache
def assets() -> dict[str, static.Asset]:
    """Every console asset by its public path (``/assets/console-<hash>.js``) and by its source name
    (``console.js``); named once per process."""
    built = static.hashed_assets(sources(), spell=static.short_hash)
    out = dict(built)
    for asset in built.values():
        out["/assets/" + asset.name] = asset
    return out


@cache
def page() -> bytes:
    html = _folder().joinpath("index.html").read_text(encoding="utf-8")
    for name, *_ in (*STYLES_AND_VENDOR, (ENTRY,)):  # relative, so the same page works under /__qm/ on an inline host
        html = html.replace("{{" + name + "}}", "assets/" + assets()[name].name)
    # every other module announced up front: fetched in parallel, not one import level after another
    preload = "".join(
        f'<link rel="modulepreload" href="assets/{asset.name}">\n'
        for source in sources()
        if source.module and source.name != ENTRY
        for asset in (assets()[source.name],)
    )
    html = html.replace("{{modulepreload}}\n", preload)
    return html.encode("utf-8")


async def console_page(ctx: Context, req: Request, send: Send) -> None:
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


async def to_console(ctx: Context, req: Request, send: Send) -> None:
    """``/progress`` and ``/public/admin.html``, the console's addresses in earlier versions: a redirect to
    the console (under ``/__qm/`` on an inline host), charged to the same "pages" budget as the console
    page. 302, not 301: a browser keeps no permanent answer for an address a later version may serve."""
    limit_headers = await pageguard.admit(ctx, req, send, "pages")
    if limit_headers is None:
        return
    location = (req.prefix + "/").encode()
    headers = [(b"location", location), (b"cache-control", b"no-store"), (b"x-robots-tag", b"noindex")]
    await send_response(send, 302, b"", [*headers, *limit_headers], req.method == "HEAD")


async def console_asset(ctx: Context, req: Request, send: Send) -> bool:
    """Serve ``req.path`` if it is one of the console's assets; False if it is not."""
    asset = assets().get(req.path)
    if asset is None:
        return False
    payload = await asset.payload()
    await serve_payload(req, send, payload, [static.IMMUTABLE, static.NOSNIFF])
    return True
