"""Markdown guides -> HTML pages: CommonMark + tables (markdown-it-py), raw HTML off, heading ids, a table of
contents, intra-doc links rewritten to the site's URLs, and the page shell around it.

Raw HTML in a guide is shown as text, never passed through, and markdown-it refuses ``javascript:``/``data:``
links, so a guide cannot inject script; the page's CSP (no script-src at all) is the second wall.
"""

from __future__ import annotations

import hashlib
import html
import posixpath
import re
import unicodedata
from base64 import b64encode
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from string import Template
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # markdown-it is loaded with the first guide rendered, not with the server
    from markdown_it import MarkdownIt
    from markdown_it.token import Token

# the guides the site serves, in index order: url name -> file name under the docs folder
GUIDES: dict[str, str] = {
    "operations": "OPERATIONS.md",
    "integration": "INTEGRATION.md",
    "configuration": "configuration.md",
    "protection": "protection.md",
    "events": "events.md",
    "fairness": "fairness.md",
    "decisions": "decisions.md",
    "architecture": "architecture.md",
    "benchmarks": "benchmarks.md",
}
BY_FILE = {file.lower(): name for name, file in GUIDES.items()}
LANGS = ("en", "th")

#: How the guides in the repository write this server's own address (a name reserved for examples, so it
#: reads as one on GitHub); the pages /docs serves have it filled in with the address the server hands out.
ADDRESS_PLACEHOLDER = "https://queue.example.com"

_LINK_RE = re.compile(r"^(?P<path>[^#?:]*\.md)(?P<frag>#.*)?$", re.IGNORECASE)

# interface text per language
UI: dict[str, dict[str, str]] = {
    "en": {
        "skip": "Skip to content",
        "site": "Site",
        "docs": "Docs",
        "guides": "All guides",
        "console": "Console",
        "toc": "On this page",
        "index_title": "Guides",
        "index_lede": "The guides for running Queue Manager, rendered from the docs/ folder of this server.",
        "source": "Rendered from",
        "missing_title": "No such guide",
        "missing_body": "There is no guide at this address.",
        "missing_link": "See all guides",
        "not_installed": "The guides are not installed next to this server. Set DOCS_DIR to a copy of the "
        "docs/ folder.",
        "table": "Table",
        "code": "Code",
        "filled": "The addresses on this page were filled in with this server's own address, {address}.",
    },
    "th": {
        "skip": "ข้ามไปยังเนื้อหา",
        "site": "เว็บไซต์",
        "docs": "เอกสาร",
        "guides": "คู่มือทั้งหมด",
        "console": "คอนโซล",
        "toc": "ในหน้านี้",
        "index_title": "คู่มือ",
        "index_lede": "คู่มือการใช้งาน Queue Manager แสดงจากโฟลเดอร์ docs/ ของเซิร์ฟเวอร์นี้ ฉบับภาษาอังกฤษเป็นฉบับหลักที่ใช้อ้างอิง",
        "source": "แสดงจาก",
        "missing_title": "ไม่พบคู่มือนี้",
        "missing_body": "ไม่มีคู่มือที่ที่อยู่นี้",
        "missing_link": "ดูคู่มือทั้งหมด",
        "not_installed": "ไม่ได้ติดตั้งคู่มือไว้คู่กับเซิร์ฟเวอร์นี้ ตั้งค่า DOCS_DIR ให้ชี้ไปยังสำเนาของโฟลเดอร์ docs/",
        "fallback": "คู่มือนี้ยังไม่มีฉบับแปลภาษาไทย จึงแสดงต้นฉบับภาษาอังกฤษ",
        "fallback_en": "This guide has no Thai translation yet; the English original is shown.",
        "english_only": "ภาษาอังกฤษ",
        "table": "ตาราง",
        "code": "โค้ด",
        "filled": "ที่อยู่ในหน้านี้ถูกเติมด้วยที่อยู่ของเซิร์ฟเวอร์นี้เอง คือ {address}",
    },
}


@dataclass(frozen=True)
class Heading:
    level: int
    text: str
    slug: str


@dataclass(frozen=True)
class Rendered:
    """One guide rendered: the article HTML, its title, first paragraph and headings."""

    title: str
    summary: str
    body: str
    headings: tuple[Heading, ...]


def slugify(text: str) -> str:
    """GitHub's heading anchors: lower case, letters/marks/digits kept, spaces to '-', other punctuation dropped
    (so Thai headings keep their vowel and tone marks)."""
    out: list[str] = []
    for ch in text.strip().lower():
        if ch == " ":
            out.append("-")
        elif ch in "-_" or unicodedata.category(ch)[0] in "LMN":
            out.append(ch)
    return "".join(out)


def plain_text(inline: Token) -> str:
    parts: list[str] = []
    for child in inline.children or ():
        if child.type in ("text", "code_inline"):
            parts.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            parts.append(" ")
    return "".join(parts)


def site_href(href: str, source_dir: str, base: str = "") -> str | None:
    """The site URL for a relative link to a guide (``INTEGRATION.md#x``, ``../configuration.md``), or None.
    ``base`` is the path prefix the site is served under ('' or ``/__qm`` on an inline host)."""
    m = _LINK_RE.match(href)
    if m is None:
        return None
    target = posixpath.normpath(posixpath.join(source_dir, m.group("path")))
    folder, _, file = target.rpartition("/")
    name = BY_FILE.get(file.lower())
    if name is None or folder not in ("", "th"):
        return None
    prefix = "/docs/th/" if folder == "th" else "/docs/"
    return base + prefix + name + (m.group("frag") or "")


def _table_open(self: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
    env["tables"] = env.get("tables", 0) + 1
    label = f"{env.get('table_label', 'Table')} {env['tables']}"
    return f'<div class="table-wrap" tabindex="0" role="region" aria-label="{html.escape(label)}"><table>\n'


def _table_close(self: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
    return "</table></div>\n"


def _fence(self: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
    token = tokens[idx]
    lang = token.info.strip().split(" ")[0] if token.info else ""
    cls = f' class="language-{html.escape(lang)}"' if lang else ""
    return f'<pre tabindex="0"><code{cls}>{html.escape(token.content, quote=False)}</code></pre>\n'


def _code_inline(self: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
    # a line may break after _ or / inside a long identifier or route (a table column then fits a phone); the
    # server's address is left whole, so the page can fill it in
    parts = html.escape(tokens[idx].content, quote=False).split(ADDRESS_PLACEHOLDER)
    text = ADDRESS_PLACEHOLDER.join(p.replace("_", "_<wbr>").replace("/", "/<wbr>") for p in parts)
    return f"<code>{text}</code>"


@cache
def markdown() -> MarkdownIt:
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable(["table", "strikethrough"])
    md.add_render_rule("table_open", _table_open)
    md.add_render_rule("table_close", _table_close)
    md.add_render_rule("fence", _fence)
    md.add_render_rule("code_block", _fence)
    md.add_render_rule("code_inline", _code_inline)
    return md


def render_markdown(text: str, source_dir: str, lang: str, base: str = "") -> Rendered:
    """One guide's Markdown -> article HTML. ``source_dir`` is the file's folder under docs/ ('' or 'th'),
    against which relative links are resolved."""
    md = markdown()
    env: dict[str, Any] = {"table_label": UI[lang]["table"]}
    tokens = md.parse(text, env)
    seen: dict[str, int] = {}
    headings: list[Heading] = []
    title = ""
    summary = ""
    quoted = 0  # inside a blockquote (a translation's revision note is not the guide's summary)
    for i, token in enumerate(tokens):
        if token.type in ("blockquote_open", "blockquote_close"):
            quoted += 1 if token.type == "blockquote_open" else -1
        if token.type == "heading_open":
            label = plain_text(tokens[i + 1])
            stem = slugify(label) or "section"
            n = seen.get(stem, 0)
            seen[stem] = n + 1
            slug = stem if n == 0 else f"{stem}-{n}"
            token.attrSet("id", slug)
            level = int(token.tag[1])
            headings.append(Heading(level, label, slug))
            if level == 1 and not title:
                title = label
        elif token.type == "paragraph_open" and not summary and title and not quoted:
            summary = plain_text(tokens[i + 1])
        elif token.type == "inline":
            for child in token.children or ():
                if child.type == "link_open":
                    href = str(child.attrGet("href") or "")
                    rewritten = site_href(href, source_dir, base)
                    if rewritten is not None:
                        child.attrSet("href", rewritten)
    body = md.renderer.render(tokens, md.options, env)
    return Rendered(title or "Untitled", _shorten(summary), body, tuple(headings))


def fill_address(page_html: str, address: str, lang: str) -> str:
    """A rendered page with :data:`ADDRESS_PLACEHOLDER` replaced by ``address`` (HTML-escaped: it can come
    from a request's Host header), and the line that says so at the top of its ``main``; unchanged when the
    page names no address."""
    if ADDRESS_PLACEHOLDER not in page_html:
        return page_html
    shown = html.escape(address, quote=True)
    filled = page_html.replace(ADDRESS_PLACEHOLDER, shown)
    note = UI[lang]["filled"].format(address=f"<code>{shown}</code>")
    marker = '<main id="content" tabindex="-1">\n'
    return filled.replace(marker, f'{marker}<p class="filled">{note}</p>\n', 1)


def _shorten(text: str, limit: int = 220) -> str:
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0]
    return cut + "…"


# ---------------------------------------------------------------------------------------------- the shell


@cache
def _asset(name: str) -> str:
    return resources.files("queue_manager.web").joinpath("docs", name).read_text(encoding="utf-8")


@cache
def stylesheet(base: str = "") -> tuple[str, str]:
    """The inline stylesheet (fonts under ``base``) and its CSP hash source."""
    css = _asset("docs.css").replace('url("/fonts/', f'url("{base}/fonts/')
    digest = b64encode(hashlib.sha256(css.encode()).digest()).decode()
    return css, f"'sha256-{digest}'"


def content_security_policy(base: str = "") -> str:
    _, style_hash = stylesheet(base)
    return (
        f"default-src 'none'; style-src {style_hash}; font-src 'self'; img-src 'self' data:; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )


def toc_html(headings: Sequence[Heading], lang: str, content_lang: str | None = None) -> str:
    """The table of contents (levels 2 and 3); ``content_lang`` marks headings in another language than the page."""
    items = [h for h in headings if h.level in (2, 3)]
    if len(items) < 2:
        return ""
    attr = f' lang="{content_lang}"' if content_lang and content_lang != lang else ""
    out = [f'<nav class="toc" aria-labelledby="toc-title"><h2 id="toc-title">{UI[lang]["toc"]}</h2><ol{attr}>']
    open_sub = False
    for h in items:
        link = f'<a href="#{html.escape(h.slug)}">{html.escape(h.text)}</a>'
        if h.level == 3:
            if not open_sub:
                out.append("<ol>")
                open_sub = True
            out.append(f"<li>{link}</li>")
        else:
            if open_sub:
                out.append("</ol></li>")
                open_sub = False
            elif len(out) > 1:
                out.append("</li>")
            out.append(f"<li>{link}")
    out.append("</ol></li>" if open_sub else "</li>")
    out.append("</ol></nav>")
    return "".join(out)


def page(
    *,
    lang: str,
    title: str,
    main: str,
    toc: str = "",
    name: str | None = None,
    footer: str = "",
    notice: str = "",
    base: str = "",
) -> str:
    """The whole HTML document: header (guides, English/ไทย, console), skip link, table of contents, main."""
    ui = UI[lang]
    css, _ = stylesheet(base)
    here = f"/{name}" if name else ""
    en_current = ' aria-current="true"' if lang == "en" else ""  # the language in use, among the two
    th_current = ' aria-current="true"' if lang == "th" else ""
    index = base + ("/docs/th" if lang == "th" else "/docs")
    return Template(_asset("page.html")).substitute(
        lang=lang,
        title=html.escape(title),
        css=css,
        skip=ui["skip"],
        site=ui["site"],
        docs=ui["docs"],
        index=index,
        guides=ui["guides"],
        console=ui["console"],
        en_href=f"{base}/docs{here}",
        th_href=f"{base}/docs/th{here}",
        console_href=f"{base}/",
        en_current=en_current,
        th_current=th_current,
        layout="layout has-toc" if toc else "layout",
        toc=toc,
        notice=notice,
        main=main,
        footer=f'<footer class="foot">{footer}</footer>' if footer else "",
    )
