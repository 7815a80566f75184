"""The waiting page (/w/<room>), its content-hashed assets (/assets/) and the fonts (/fonts/).

The page is rendered and compressed once per (room, name, language, prefix) and served from memory with
``private, no-cache`` and an ETag, so a reload during a long wait costs a 304. Its style and script are
content-addressed (waiting-<hash>.css/.js, immutable for a year); the fonts are never compressed.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import html
from dataclasses import dataclass

from queue_manager.engine.model import ROOM_ID_RE
from queue_manager.http import negotiate, pageguard
from queue_manager.http.context import Context
from queue_manager.http.language import pick_language
from queue_manager.http.wire import NO_STORE, Request, Send, send_response
from queue_manager.web import asset

HTML_TYPE = (b"content-type", b"text/html; charset=utf-8")
PAGE_CSP = (
    b"default-src 'none'; script-src 'self'; style-src 'self'; font-src 'self'; connect-src 'self'; "
    b"img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
IMMUTABLE = (b"cache-control", b"public, max-age=31536000, immutable")
FONT_CACHE = (b"cache-control", b"public, max-age=604800")
_CACHE_MAX = 4096


@dataclass(frozen=True, slots=True)
class Rendered:
    body: bytes
    gzip: bytes | None
    br: bytes | None
    etag: bytes


_pages: dict[tuple[str, str, str, str], Rendered] = {}


_assets: dict[str, asset.Static] | None = None


async def built_assets() -> dict[str, asset.Static]:
    """The hashed assets; hashed and compressed once, in a thread, the first time they are asked for."""
    global _assets
    if _assets is None:
        _assets = await asyncio.to_thread(asset.waiting_assets)
    return _assets


def pick_encoding(req: Request) -> str | None:
    """br, gzip or None (identity) from Accept-Encoding; an explicit q=0 refuses a coding."""
    header = req.header(b"accept-encoding")
    for coding in ("br", "gzip"):
        if negotiate.accepts(header, coding):
            return coding
    return None


def render(room_id: str, name: str, lang: str, prefix: str) -> Rendered:
    """The page for one room in one language, built once and kept."""
    key = (room_id, name, lang, prefix)
    hit = _pages.get(key)
    if hit is not None:
        return hit
    strings = asset.waiting_strings()
    table = strings[lang]
    page = asset.waiting_template()
    options = "".join(
        f'<option value="{code}" lang="{code}"{" selected" if code == lang else ""}>'
        f"{html.escape(strings[code]['langName'])}</option>"
        for code in asset.LANGUAGES
    )
    config = asset.script_json({"roomId": room_id, "name": name, "apiBase": prefix})
    page = (
        page.replace("__QM_CONFIG__", config, 1)
        .replace("__QM_LANG_OPTIONS__", options, 1)
        .replace("__QM_LANG__", lang)
        .replace("__QM_TITLE__", html.escape(name))
        .replace("__QM_CSS__", asset.waiting_asset_name("css"))
        .replace("__QM_JS__", asset.waiting_asset_name("js"))
        .replace("__QM_PREFIX__", html.escape(prefix))
    )
    for k, v in table.items():
        page = page.replace("{{" + k + "}}", html.escape(v))
    body = page.encode()
    digest = base64.urlsafe_b64encode(hashlib.sha256(body).digest()).decode()[:22]
    rendered = Rendered(body, *asset.compressed(body), etag=f'"{digest}"'.encode())
    if len(_pages) >= _CACHE_MAX:
        _pages.clear()
    _pages[key] = rendered
    return rendered


def etag_matches(req: Request, etag: bytes) -> bool:
    return negotiate.etag_matches(req.headers.get(b"if-none-match"), etag)


async def send_variant(
    req: Request,
    send: Send,
    body: bytes,
    gz: bytes | None,
    br: bytes | None,
    headers: list[tuple[bytes, bytes]],
) -> None:
    """200 with the best encoding the client accepts (Vary: Accept-Encoding)."""
    coding = pick_encoding(req)
    if coding == "br" and br is not None:
        body = br
        headers.append((b"content-encoding", b"br"))
    elif coding in ("br", "gzip") and gz is not None:
        body = gz
        headers.append((b"content-encoding", b"gzip"))
    await send_response(send, 200, body, headers, req.method == "HEAD")


async def waiting_page(ctx: Context, req: Request, send: Send, room_id: str, prefix: str = "") -> None:
    """GET/HEAD /w/<room>. ``prefix`` is where this server's paths live on the host ("/__qm" inline)."""
    admitted = await pageguard.admit(ctx, req, send, "waiting")
    if admitted is None:
        return
    policy = await ctx.store.room_policy(room_id) if ROOM_ID_RE.match(room_id) else None
    if policy is None:
        await send_response(
            send,
            404,
            asset.not_found_page(room_id, pick_language(req)),
            [HTML_TYPE, NO_STORE, *admitted],
            req.method == "HEAD",
        )
        return
    name, lang = policy.name or room_id, pick_language(req)
    page = _pages.get((room_id, name, lang, prefix))
    if page is None:  # Brotli at its best setting takes tens of ms: keep it off the event loop
        page = await asyncio.to_thread(render, room_id, name, lang, prefix)
    common = [
        (b"cache-control", b"private, no-cache"),
        (b"etag", page.etag),
        (b"vary", b"Accept-Encoding, Accept-Language, Cookie"),
        *admitted,
    ]
    if etag_matches(req, page.etag):
        await send({"type": "http.response.start", "status": 304, "headers": common})
        await send({"type": "http.response.body", "body": b""})
        return
    headers = [
        HTML_TYPE,
        *common,
        (b"x-robots-tag", b"noindex"),
        (b"content-security-policy", PAGE_CSP),
        (b"x-content-type-options", b"nosniff"),
        (b"referrer-policy", b"no-referrer"),
    ]
    await send_variant(req, send, page.body, page.gzip, page.br, headers)


async def waiting_asset(ctx: Context, req: Request, send: Send) -> None:
    """GET/HEAD /assets/waiting-<hash>.css|.js: only this build's hashes; any other name is 404."""
    name = req.path.removeprefix("/assets/")
    found = (await built_assets()).get(name)
    if found is None:
        await send_response(
            send,
            404,
            b"No such asset in this build.",
            [(b"content-type", b"text/plain; charset=utf-8"), NO_STORE],
            req.method == "HEAD",
        )
        return
    etag = f'"{name.split("-", 1)[1].rsplit(".", 1)[0]}"'.encode()
    if etag_matches(req, etag):
        await send({"type": "http.response.start", "status": 304, "headers": [IMMUTABLE, (b"etag", etag)]})
        await send({"type": "http.response.body", "body": b""})
        return
    headers = [
        (b"content-type", found.content_type.encode()),
        IMMUTABLE,
        (b"vary", b"Accept-Encoding"),
        (b"x-content-type-options", b"nosniff"),
        (b"etag", etag),
    ]
    await send_variant(req, send, found.body, found.gzip, found.br, headers)


async def font_file(ctx: Context, req: Request, send: Send) -> None:
    """GET/HEAD /fonts/<file>: the woff2 files (never compressed: woff2 is Brotli inside) and their licence."""
    name = req.path.removeprefix("/fonts/")
    body = asset.font(name)
    if body is None:
        await send_response(
            send,
            404,
            b"No such font.",
            [(b"content-type", b"text/plain; charset=utf-8"), NO_STORE],
            req.method == "HEAD",
        )
        return
    ctype = b"font/woff2" if name.endswith(".woff2") else b"text/plain; charset=utf-8"
    headers = [(b"content-type", ctype), FONT_CACHE, (b"x-content-type-options", b"nosniff")]
    await send_response(send, 200, body, headers, req.method == "HEAD")
