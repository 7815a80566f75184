"""Files under queue_manager/web, read once per process."""

from __future__ import annotations

import base64
import hashlib
import html
import re
from functools import cache, lru_cache
from importlib import resources
from typing import Any

import orjson

from queue_manager.web import static, translations


@cache
def _text(name: str) -> str:
    return resources.files("queue_manager.web").joinpath(name).read_text(encoding="utf-8")


LANGUAGES = translations.LANGUAGES


def waiting_strings() -> dict[str, dict[str, str]]:
    """The waiting page's text in every language (the ``waiting`` section of web/i18n/<tag>.json)."""
    return translations.section("waiting")


def waiting_template() -> str:
    """waiting/page.html: placeholders __QM_*__ and {{key}} (a string of the waiting section of web/i18n/<tag>.json)."""
    return _text("waiting/page.html")


@cache
def waiting_assets() -> dict[str, static.Asset]:
    """The waiting page's style and script by their served name, waiting-<hash>.css / waiting-<hash>.js."""
    css = _text("waiting/waiting.css").encode()
    strings = orjson.dumps(waiting_strings()).decode().replace("</", "<\\/")
    rtl = orjson.dumps(sorted(translations.RTL)).decode()
    js = ("var QM_STRINGS = " + strings + ";\nvar QM_RTL = " + rtl + ";\n" + _text("waiting/waiting.js")).encode()
    built = static.hashed_assets(
        [
            static.Source("waiting.css", "waiting", css, "text/css; charset=utf-8"),
            static.Source("waiting.js", "waiting", js, "text/javascript; charset=utf-8"),
        ]
    )
    return {a.name: a for a in built.values()}


_CUSTOM_PROPERTY = re.compile(r"(--[a-z-]+):\s*([^;]+);")


@cache
def waiting_palettes() -> dict[str, dict[str, str]]:
    """The waiting page's custom properties in its light and its dark palette, read from waiting.css
    (a room's brand picks one whole palette, then sets its own colours over it: routes/pages/branding.py)."""
    css = _text("waiting/waiting.css")
    light_start = css.index(":root {")
    dark_start = css.index("@media (prefers-color-scheme: dark)")
    light = dict(_CUSTOM_PROPERTY.findall(css[light_start : css.index("}", light_start)]))
    dark_block = css[dark_start : css.index("}", css.index(":root {", dark_start))]
    dark = {**light, **dict(_CUSTOM_PROPERTY.findall(dark_block))}
    return {"light": light, "dark": dark}


def waiting_asset_name(ext: str) -> str:
    return next(name for name in waiting_assets() if name.endswith("." + ext))


FONT_FILES = (
    "Geist-Regular-Latin.woff2",
    "Geist-Medium-Latin.woff2",
    "Geist-SemiBold-Latin.woff2",
    "GeistMono-Regular-Latin.woff2",
)


@cache
def font(name: str) -> static.Payload | None:
    """A file of web/fonts/ (the four woff2 files and LICENSE.txt), or None for any other name. Never compressed:
    woff2 is Brotli inside."""
    if name not in FONT_FILES and name != "LICENSE.txt":
        return None
    body = resources.files("queue_manager.web").joinpath("fonts", name).read_bytes()
    ctype = "font/woff2" if name.endswith(".woff2") else "text/plain; charset=utf-8"
    return static.Payload.of(body, ctype, compress=False)


def script_json(value: Any) -> str:
    """JSON safe to embed in a <script> element."""
    return orjson.dumps(value).decode().translate(_SCRIPT_ESCAPES)


_SCRIPT_ESCAPES = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


def _outage_page(name: str, brand: tuple[str, str, str, str] = ("", "", "", "")) -> bytes:
    """One self-contained outage page: outage/page.html filled from outage/<name>.json (the attempts key and
    the first retry delay) and its section of web/i18n/<tag>.json in every language. English is in the markup;
    the script repaints in qm_lang.

    ``brand``: a room's (style, name line, message, data block) markup, already escaped (routes/pages/branding.py);
    put in last, so nothing in an operator's text is taken for a placeholder."""
    spec = orjson.loads(_text(f"outage/{name}.json"))
    strings = translations.section("offline" if name == "offline" else "originDown")
    en = strings["en"]
    page = (
        _text("outage/page.html")
        .replace("__TITLE__", html.escape(en["title"]), 1)
        .replace("__HEAD__", html.escape(en["head"]), 1)
        .replace("__BODY__", html.escape(en["body"]), 1)
        .replace("__KEEP__", html.escape(en["keep"]), 1)
        .replace("__KEY__", script_json(spec["attemptsKey"]), 1)
        .replace("__FIRST__", str(int(spec["firstSec"])), 1)
        .replace("__STRINGS__", script_json(strings), 1)
        .replace("__RTL__", script_json(sorted(translations.RTL)), 1)
        .replace("__OPTIONS__\n", _language_options(), 1)
    )
    style, name_line, message, data = brand
    page = (
        page.replace("__BRAND_STYLE__\n", style, 1)
        .replace("__BRAND_NAME__\n", name_line, 1)
        .replace("__BRAND_MESSAGE__\n", message, 1)
        .replace("__BRAND_JSON__\n", data, 1)
    )
    return page.encode()


def _language_options() -> str:
    """The outage pages' picker: every language by its own name."""
    names = waiting_strings()
    return "".join(
        f'          <option value="{tag}" lang="{tag}" dir="{translations.direction(tag)}">'
        f"{html.escape(names[tag]['langName'])}</option>\n"
        for tag in LANGUAGES
    )


@lru_cache(maxsize=256)
def branded_outage_page(name: str, style: str, name_line: str, message: str, data: str) -> bytes:
    """``offline`` or ``origin_down`` carrying a room's brand (pieces from routes/pages/branding.py)."""
    return _outage_page(name, (style, name_line, message, data))


@cache
def offline_page() -> bytes:
    """offline.html: the self-contained page an operator hosts on the CDN for when the queue is down
    (retry 20 s → 60 s). Save it from GET /offline.html to host it."""
    return _outage_page("offline")


@cache
def origin_down_page() -> bytes:
    """What a navigation gets when the site behind an inline room answers 502/504 or not at all (15 s → 60 s)."""
    return _outage_page("origin_down")


def outage_preview(page: bytes, lang: str, marks: dict[str, str]) -> bytes:
    """An outage page (plain or branded) as a preview link shows it: in ``lang``, with the "Preview" marker
    (``marks``: its text in each language), and no retries."""
    mark = f'    <p id="t-preview" class="preview-mark" role="note">{html.escape(marks.get(lang, marks["en"]))}</p>\n'
    data = f'<script type="application/json" id="qm-preview">{script_json({"lang": lang, "mark": marks})}</script>\n'
    text = page.decode()
    text = text.replace(
        '<html lang="en">', f'<html lang="{html.escape(lang)}" dir="{translations.direction(lang)}">', 1
    )
    text = text.replace('<div class="card">\n', '<div class="card">\n' + mark, 1)
    text = text.replace("<script>\n(function", data + "<script>\n(function", 1)
    return text.encode()


_INLINE = re.compile(rb"<(script|style)>(.*?)</\1>", re.S)


@lru_cache(maxsize=512)
def inline_csp(page: bytes) -> bytes:
    """A strict Content-Security-Policy for a self-contained page: its inline script and style allowed by hash."""
    hashes: dict[bytes, list[str]] = {b"script": [], b"style": []}
    for kind, body in _INLINE.findall(page):
        hashes[kind].append("'sha256-" + base64.b64encode(hashlib.sha256(body).digest()).decode() + "'")
    script = " ".join(hashes[b"script"]) or "'none'"
    style = " ".join(hashes[b"style"]) or "'none'"
    return (
        f"default-src 'none'; script-src {script}; style-src {style}; img-src data:; base-uri 'none'; "
        "form-action 'none'; frame-ancestors 'none'"
    ).encode()


@cache
def qm_js() -> bytes:
    return _text("qm.js").encode()


def refusal_page(headers: list[tuple[bytes, bytes]], lang: str = "en") -> bytes:
    """The small self-reloading page a throttled navigation gets, in the visitor's language.

    It reloads by script (a meta refresh only inside <noscript>): a delayed meta refresh fails WCAG 2.2.1, and
    a browser running scripts never sees the <noscript> one.
    """
    retry = next((v.decode() for k, v in headers if k == b"retry-after"), "30")
    texts = translations.section("refusal")  # its own small section: the refusal never loads the waiting page's
    lang = lang if lang in texts else "en"
    head, body = texts[lang]["title"], texts[lang]["body"]
    n = html.escape(retry)
    seconds = int(retry) if retry.isascii() and retry.isdigit() else 30
    return (
        f"<!doctype html><html lang={lang} dir={translations.direction(lang)}><meta charset=utf-8>"
        "<meta name=robots content=noindex>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        f'<noscript><meta http-equiv=refresh content="{n}"></noscript><title>{head}</title>'
        f"<script>setTimeout(function(){{location.reload()}},{seconds * 1000})</script>"
        '<body style="font:16px/1.5 system-ui,sans-serif;margin:3rem auto;max-width:30rem;padding:0 1rem;'
        'color:#1a1a1a;background:#fff"><main><h1 style=font-size:1.3rem>'
        f"{head}</h1><p>{body.format(n=n)}</p></main></body></html>"
    ).encode()


def not_found_page(room_id: str, lang: str = "en") -> bytes:
    """The 404 page for /w/<room> when no such room exists, in the visitor's language."""
    table = waiting_strings().get(lang) or waiting_strings()["en"]
    head = html.escape(table["notFoundHead"]).replace("{room}", html.escape(room_id[:80]))
    return (
        f'<!doctype html><html lang="{html.escape(lang)}" dir="{translations.direction(lang)}"><meta charset=utf-8>'
        '<meta name=robots content=noindex><meta name=viewport content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(table['notFoundTitle'])}</title>"
        '<body style="font:16px/1.5 system-ui,sans-serif;margin:3rem auto;max-width:30rem;padding:0 1rem">'
        f"<h1 style=font-size:1.3rem>{head}</h1>"
        f"<p>{html.escape(table['notFoundBody'])}</p></body></html>"
    ).encode()
