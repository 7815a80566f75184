"""A room's brand on its visitor pages: the stylesheet and logo under /w/<room>/, and the markup pieces
the waiting page and the outage pages insert.

Both files are named for their content (``brand-<fingerprint>.css``, ``logo-<sha256>.png|svg``), so
they are cached for a year and a brand change is a new name on a newly rendered page. Any other name
under /w/<room>/ is 404. An SVG logo goes out with a CSP of its own (no script, no loads, sandboxed),
so even opened on its own it is only a picture.
"""

from __future__ import annotations

import html
from functools import lru_cache

from queue_manager.context import Context
from queue_manager.engine.brand import Brand
from queue_manager.engine.model import ROOM_ID_RE
from queue_manager.http.sendfile import serve_payload
from queue_manager.http.wire import NO_STORE, Request, Send, send_response
from queue_manager.web import asset, static

SVG_CSP = (b"content-security-policy", b"default-src 'none'; style-src 'unsafe-inline'; sandbox")
_CACHE_MAX = 1024
_files: dict[tuple[str, str, str], static.Payload] = {}


def css_name(brand: Brand) -> str | None:
    return None if brand.palette is None else f"brand-{brand.fingerprint}.css"


def css(brand: Brand) -> str:
    """The waiting page's palette for the brand: the whole light or dark palette of waiting.css (whichever
    the background calls for, whatever the visitor's own preference), the brand's colours over it, and
    black or white text where the page sits straight on the brand's background."""
    p = brand.palette
    if p is None:
        return ""
    scheme = p["scheme"]
    palette = {k: v for k, v in asset.waiting_palettes()[scheme].items() if k != "--font"}
    on_card = " ".join(f"{k}: {palette[k]};" for k in ("--text", "--muted", "--faint"))
    palette.update(
        {
            "--bg": p["background"],
            "--bg-grad": p["background"],
            "--text": p["text"],
            "--muted": p["text"],
            "--faint": p["text"],
            "--card": p["card"],
            "--accent": p["accent"],
            "--accent-text": p["accentText"],
            "--accent-soft": f"color-mix(in srgb, {p['accent']} 22%, {p['card']})",
        }
    )
    props = " ".join(f"{k}: {v};" for k, v in palette.items())
    return (
        "/* A room's brand: one whole palette of the page's, the brand's colours over it. */\n"
        f":root, html {{ color-scheme: {scheme}; {props} }}\n"
        f".card, .top {{ {on_card} color: var(--text); }}\n"
        ".top { background: var(--card); }\n"
    )


def head_links(room_id: str, brand: Brand | None, prefix: str) -> str:
    name = None if brand is None else css_name(brand)
    if name is None:
        return ""
    return f'<link rel="stylesheet" href="{html.escape(prefix)}/w/{room_id}/{name}">'


def logo_img(room_id: str, brand: Brand | None, prefix: str, alt: str) -> str:
    if brand is None or brand.logo is None:
        return ""
    src = f"{html.escape(prefix)}/w/{room_id}/{brand.logo.file_name}"
    return f'<img class="brand-logo" src="{src}" alt="{html.escape(alt)}">'


def message_html(brand: Brand | None, lang: str) -> str:
    text = None if brand is None else brand.message_for(lang)
    hidden = "" if text else " hidden"
    # dir="auto": a message the operator wrote in English (the fallback) reads left to right on an Arabic page
    return f'<p id="brand-message" class="brand-message" dir="auto"{hidden}>{html.escape(text or "")}</p>'


def help_html(brand: Brand | None, label: str) -> str:
    if brand is None or brand.help_url is None:
        return ""
    return (
        f'<p class="brand-help"><a id="brand-help" href="{html.escape(brand.help_url)}" '
        f'rel="noopener noreferrer" data-i18n="helpLink">{html.escape(label)}</a></p>'
    )


def outage_css(brand: Brand) -> str:
    """The outage pages' colours (everything there sits on the card, so the card's palette is the text's)."""
    p = brand.palette
    if p is None:
        return ""
    scheme = p["scheme"]
    text = "#14181f" if scheme == "light" else "#eceff3"
    line = "#dde1e7" if scheme == "light" else "#2c333d"
    return (
        f":root {{ color-scheme: {scheme}; --bg: {p['background']}; --card: {p['card']}; --text: {text}; "
        f"--muted: {text}; --line: {line}; --accent: {p['accent']}; --accent-text: {p['accentText']}; "
        f"--soft: color-mix(in srgb, {p['accent']} 18%, {p['card']}); }}"
    )


def outage_page(kind: str, brand: Brand | None, lang: str = "en") -> bytes:
    """offline.html or origin-down.html (``kind`` offline / origin_down), with the room's brand when it has
    one: still one self-contained file (the logo inlined as a data: image, the colours in a hashed <style>)."""
    if brand is None:
        return asset.offline_page() if kind == "offline" else asset.origin_down_page()
    css = outage_css(brand)
    style = f"<style>{css}</style>\n" if css else ""
    name = brand.display_name
    logo = "" if brand.logo is None else f'<img src="{brand.logo.data_uri()}" alt="{html.escape(name or "")}">'
    name_line = f'    <p class="brand-name">{logo}{html.escape(name or "")}</p>\n' if (logo or name) else ""
    message = brand.message_for(lang)
    hidden = "" if message else " hidden"
    lines = f'    <p id="t-brand" class="brand-note" dir="auto"{hidden}>{html.escape(message or "")}</p>\n'
    if brand.help_url is not None:
        lines += (
            f'    <p class="brand-note"><a id="t-help" href="{html.escape(brand.help_url)}" '
            'rel="noopener noreferrer">Help and questions</a></p>\n'
        )
    data = f'<script type="application/json" id="qm-brand">{asset.script_json(dict(brand.message))}</script>\n'
    return asset.branded_outage_page(kind, style, name_line, lines, data)


@lru_cache(maxsize=256)
def origin_down_page(brand: Brand) -> bytes:
    """The origin-down page in ``brand`` (what an inline room's visitors get while its app is down); asked
    for on every rebuild of the inline host index, so kept per brand."""
    return outage_page("origin_down", brand)


def _payload(room_id: str, brand: Brand, name: str) -> static.Payload | None:
    key = (room_id, brand.fingerprint, name)
    hit = _files.get(key)
    if hit is not None:
        return hit
    if name == css_name(brand):
        found = static.Payload.of(css(brand).encode(), "text/css; charset=utf-8")
    elif brand.logo is not None and name == brand.logo.file_name:
        # a PNG is compressed already; an SVG is text and shrinks
        found = static.Payload.of(brand.logo.data, brand.logo.type, compress=brand.logo.ext == "svg")
    else:
        return None
    if len(_files) >= _CACHE_MAX:
        _files.clear()
    _files[key] = found
    return found


async def brand_file(ctx: Context, req: Request, send: Send, room_id: str, name: str) -> None:
    """GET/HEAD /w/<room>/brand-<fingerprint>.css and /w/<room>/logo-<hash>.png|svg."""
    policy = await ctx.store.room_policy(room_id) if ROOM_ID_RE.match(room_id) else None
    found = None if policy is None or policy.brand is None else _payload(room_id, policy.brand, name)
    if found is None:
        await send_response(
            send,
            404,
            b"No such file for this room.",
            [(b"content-type", b"text/plain; charset=utf-8"), NO_STORE],
            req.method == "HEAD",
        )
        return
    headers = [static.IMMUTABLE, static.NOSNIFF]
    if name.endswith(".svg"):
        headers.append(SVG_CSP)
    await serve_payload(req, send, found, headers)
