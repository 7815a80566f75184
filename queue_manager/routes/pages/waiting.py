"""The waiting page (/w/<room>), its content-hashed assets (/assets/) and the fonts (/fonts/).

The page is rendered and compressed once per (room, name, language, prefix) and served from memory with
``private, no-cache`` and an ETag, so a reload during a long wait costs a 304. Its style and script are
content-addressed (waiting-<hash>.css/.js, immutable for a year); the fonts are never compressed. All of it goes
out through web/static.py (one Payload per body, one serve()).
"""

from __future__ import annotations

import asyncio
import html
from typing import Any

from queue_manager.context import Context
from queue_manager.engine.brand import Brand
from queue_manager.engine.model import ROOM_ID_RE
from queue_manager.http.language import pick_language
from queue_manager.http.sendfile import serve_payload
from queue_manager.http.wire import NO_STORE, Request, Send, send_response
from queue_manager.routes.pages import branding, pageguard
from queue_manager.web import asset, static, translations

HTML_TYPE = (b"content-type", b"text/html; charset=utf-8")
PAGE_CSP = (
    b"default-src 'none'; script-src 'self'; style-src 'self'; font-src 'self'; connect-src 'self'; "
    b"img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
FONT_CACHE = (b"cache-control", b"public, max-age=604800")
_CACHE_MAX = 4096

#: what a closed room's page (queueing reject) answers beside rejectStatus: a signal for the inline front
#: and connectors, and when a 503 is tried again
CLOSED_HEADER = (b"x-qm-closed", b"1")
CLOSED_RETRY_AFTER = (b"retry-after", b"300")

_Key = tuple[str, str, str, str, bool, str, bool, tuple[str, ...]]
_pages: dict[_Key, static.Payload] = {}


def _key(
    room_id: str,
    name: str,
    lang: str,
    prefix: str,
    email: bool,
    brand: Brand | None,
    closed: bool = False,
    offered: tuple[str, ...] = asset.LANGUAGES,
) -> _Key:
    return (room_id, name, lang, prefix, email, "" if brand is None else brand.fingerprint, closed, offered)


def render(
    room_id: str,
    name: str,
    lang: str,
    prefix: str,
    email: bool = False,
    brand: Brand | None = None,
    closed: bool = False,
    offered: tuple[str, ...] = asset.LANGUAGES,
) -> static.Payload:
    """The page for one room in one language, built once and kept. ``email``: the page offers turn e-mails;
    ``brand``: the room's brand (its fingerprint is part of the key, so a brand change renders anew);
    ``closed``: the room is closed (queueing reject): the page says so as sent, and never joins; ``offered``: the
    languages its picker lists (the room's ``languages``)."""
    key = _key(room_id, name, lang, prefix, email, brand, closed, offered)
    hit = _pages.get(key)
    if hit is not None:
        return hit
    page = build(room_id, name, lang, prefix, email, brand, closed=closed, offered=offered)
    rendered = static.Payload.of(page.encode(), "text/html; charset=utf-8")
    if len(_pages) >= _CACHE_MAX:
        _pages.clear()
    _pages[key] = rendered
    return rendered


def build(
    room_id: str,
    name: str,
    lang: str,
    prefix: str,
    email: bool = False,
    brand: Brand | None = None,
    preview: dict[str, Any] | None = None,
    *,
    closed: bool = False,
    offered: tuple[str, ...] = asset.LANGUAGES,
) -> str:
    """The page's HTML. ``preview``: a preview's synthetic answer (routes/pages/preview.py): the page shows it,
    marked as a preview, and asks the server for nothing. ``closed``: the room's closed page (queueing reject),
    said as sent; its script joins nothing."""
    strings = asset.waiting_strings()
    table = strings[lang]
    page = asset.waiting_template()
    options = "".join(
        f'<option value="{code}" lang="{code}"{" selected" if code == lang else ""}>'
        f"{html.escape(strings[code]['langName'])}</option>"
        for code in offered
    )
    if brand is not None and brand.display_name:
        name = brand.display_name
    settings: dict[str, Any] = {
        "roomId": room_id,
        "name": name,
        "apiBase": prefix,
        "email": email,
        "brandMessage": {} if brand is None else dict(brand.message),
        "closed": closed,
        "languages": list(offered),
    }
    if preview is not None:
        settings["preview"] = preview
    mark = (
        '<p id="preview-mark" class="preview-mark" role="note" data-i18n="previewMark">{{previewMark}}</p>'
        if preview is not None
        else ""
    )
    if closed:  # the closed page reads as such before (and without) its script
        page = page.replace('data-i18n="lead">{{lead}}', 'data-i18n="closedBody">{{closedBody}}', 1).replace(
            'data-i18n="finding">{{finding}}', 'data-i18n="closedHead">{{closedHead}}', 1
        )
    page = (
        page.replace("__QM_CONFIG__", asset.script_json(settings), 1)
        .replace("__QM_PREVIEW_MARK__", mark, 1)
        .replace("__QM_LANG_OPTIONS__", options, 1)
        .replace("__QM_LANG__", lang)
        .replace("__QM_DIR__", translations.direction(lang), 1)
        .replace("__QM_TITLE__", html.escape(name))
        .replace("__QM_CSS__", asset.waiting_asset_name("css"))
        .replace("__QM_JS__", asset.waiting_asset_name("js"))
        .replace("__QM_PREFIX__", html.escape(prefix))
    )
    for k, v in table.items():
        page = page.replace("{{" + k + "}}", html.escape(v))
    # the operator's text goes in last, so nothing in it is taken for a placeholder
    return (
        page.replace("__QM_BRAND_CSS__", branding.head_links(room_id, brand, prefix), 1)
        .replace("__QM_BRAND_LOGO__", branding.logo_img(room_id, brand, prefix, name), 1)
        .replace("__QM_BRAND_HELP__", branding.help_html(brand, table["helpLink"]), 1)
        .replace("__QM_BRAND_MESSAGE__", branding.message_html(brand, lang), 1)
    )


async def waiting_page(ctx: Context, req: Request, send: Send, room_id: str, prefix: str | None = None) -> None:
    """GET/HEAD /w/<room>, or the page an inline host's visitor gets at the address they asked for.

    ``prefix`` is where the page finds this server's paths: "" at /w/<room>; answered at any other URL it is
    an inline host's page, and they live under "/__qm"."""
    if prefix is None:  # req.path has /__qm stripped on an inline host; the address asked for has not
        asked: str = req.scope["path"]
        prefix = "" if req.path.startswith("/w/") and not asked.startswith("/__qm/") else "/__qm"
    admitted = await pageguard.admit(ctx, req, send, "waiting")
    if admitted is None:
        return
    policy = await ctx.store.room_policy(room_id) if ROOM_ID_RE.match(room_id) else None
    if policy is None:
        await send_response(
            send,
            404,
            asset.not_found_page(room_id, pick_language(req)),  # no room: every language is offered
            [HTML_TYPE, NO_STORE, *admitted],
            req.method == "HEAD",
        )
        return
    offered = policy.languages
    name, lang = policy.name or room_id, pick_language(req, offered)
    email = ctx.settings.turn_emails and ctx.addresses is not None
    closed = policy.queueing == "reject"
    page = _pages.get(_key(room_id, name, lang, prefix, email, policy.brand, closed, offered))
    if page is None:  # Brotli at its best setting takes tens of ms: keep it off the event loop
        page = await asyncio.to_thread(render, room_id, name, lang, prefix, email, policy.brand, closed, offered)
    headers = [
        (b"cache-control", b"private, no-cache"),
        *admitted,
        (b"x-robots-tag", b"noindex"),
        (b"content-security-policy", PAGE_CSP),
        (b"x-content-type-options", b"nosniff"),
        (b"referrer-policy", b"no-referrer"),
    ]
    vary = b"Accept-Encoding, Accept-Language, Cookie"
    if closed:  # the operator's status (rejectStatus); a 503 says when to try again
        status = policy.reject_status
        headers += [CLOSED_HEADER, *([CLOSED_RETRY_AFTER] if status == 503 else [])]
        await serve_payload(req, send, page, headers, status=status, conditional=False, vary=vary)
        return
    await serve_payload(req, send, page, headers, vary=vary)


async def _not_found(req: Request, send: Send, what: bytes) -> None:
    await send_response(
        send, 404, what, [(b"content-type", b"text/plain; charset=utf-8"), NO_STORE], req.method == "HEAD"
    )


async def waiting_asset(ctx: Context, req: Request, send: Send) -> None:
    """GET/HEAD /assets/waiting-<hash>.css|.js: only this build's hashes; any other name is 404."""
    found = asset.waiting_assets().get(req.path.removeprefix("/assets/"))
    if found is None:
        await _not_found(req, send, b"No such asset in this build.")
        return
    await serve_payload(req, send, await found.payload(), [static.IMMUTABLE, static.NOSNIFF])


async def font_file(ctx: Context, req: Request, send: Send) -> None:
    """GET/HEAD /fonts/<file>: the woff2 files (never compressed: woff2 is Brotli inside) and their licence."""
    found = asset.font(req.path.removeprefix("/fonts/"))
    if found is None:
        await _not_found(req, send, b"No such font.")
        return
    await serve_payload(req, send, found, [FONT_CACHE, static.NOSNIFF])
