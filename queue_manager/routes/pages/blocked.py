"""The page a room's access rules refuse a person with (a ``block`` rule on an inline host's page):
short, in the room's brand, in the visitor's language (those of the visitor pages), self-contained
and without a script. 403; the JSON form is ``access_blocked`` (the door check and the join answer it too)."""

from __future__ import annotations

import html
from functools import lru_cache

from queue_manager.engine.brand import Brand
from queue_manager.http.language import pick_language
from queue_manager.http.wire import Request
from queue_manager.routes.pages.branding import outage_css
from queue_manager.web import translations

_STYLE = (
    ":root{--bg:#f6f7f9;--card:#fff;--text:#14181f;--muted:#4d5663;--line:#dde1e7;--accent:#1d4ed8}"
    "@media (prefers-color-scheme:dark){:root{--bg:#0e1116;--card:#171b22;--text:#eceff3;--muted:#a8b1bd;"
    "--line:#2c333d;--accent:#8fb3ff}}"
    "body{margin:0;min-height:100vh;display:flex;align-items:center;justify-content:center;background:var(--bg);"
    "color:var(--text);font:16px/1.6 system-ui,-apple-system,'Segoe UI',Roboto,'Noto Sans','Noto Sans Thai',sans-serif;"
    "padding:1.5rem 1rem}main{max-width:32rem;width:100%;background:var(--card);border:1px solid var(--line);"
    "border-top:4px solid var(--accent);border-radius:16px;padding:2rem 1.75rem}"
    "h1{font-size:1.5rem;line-height:1.3;margin:0 0 .75rem}p{margin:0;color:var(--muted)}"
    ".brand{display:flex;align-items:center;gap:.6rem;margin:0 0 .75rem;font-weight:600;color:var(--text)}"
    ".brand img{height:2rem;width:auto;max-width:9rem}"
)


@lru_cache(maxsize=256)
def blocked_page(brand: Brand | None, lang: str) -> bytes:
    """The refusal page in ``lang`` (English for any other), with ``brand``'s name, logo and colours."""
    texts = translations.section("blocked")
    code = lang if lang in texts else "en"
    title, text = texts[code]["title"], texts[code]["body"]
    style = _STYLE
    name_line = ""
    if brand is not None:
        style += outage_css(brand)
        name = brand.display_name or ""
        logo = "" if brand.logo is None else f'<img src="{brand.logo.data_uri()}" alt="">'
        if logo or name:
            name_line = f'<p class="brand">{logo}{html.escape(name)}</p>'
    return (
        f'<!doctype html><html lang="{code}" dir="{translations.direction(code)}"><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="robots" content="noindex, nofollow"><title>{html.escape(title)}</title>'
        f"<style>{style}</style><main>{name_line}<h1>{html.escape(title)}</h1><p>{html.escape(text)}</p></main>"
    ).encode()


def blocked_for(req: Request, brand: Brand | None) -> bytes:
    """The refusal page in the language this request asks for (the qm_lang cookie, else Accept-Language)."""
    return blocked_page(brand, pick_language(req))
