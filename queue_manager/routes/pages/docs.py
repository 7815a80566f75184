"""The guides at /docs and their Thai translations at /docs/th, rendered from the docs folder.

URLs: ``/docs`` (index), ``/docs/<name>`` (``operations``, ``integration``, …), ``/docs/th`` and
``/docs/th/<name>``; a Thai page whose translation is missing shows the English guide under a notice.
``/docs/OPERATIONS.md`` and a trailing slash redirect to the canonical address.

Every load is charged to the "pages" budget (pageguard). Each page is rendered once per version of the files it
is made from (path, mtime, size), off the event loop, then served from memory through web/static.py: Brotli or gzip
when accepted, an ETag per form, ``private, no-cache`` (a reload is a 304). The page carries a CSP with no script
source at all.

The guides write this server's address as ``render.ADDRESS_PLACEHOLDER``; a page that names it is served filled in
with the base of every absolute URL the server hands out (``IdentityResolver.public_base``: PUBLIC_URL, else a
listed proxy's X-Forwarded-Host, else Host; plus the ``/__qm`` prefix on an inline host when PUBLIC_URL is unset),
HTML-escaped, under a line that says so. The filled pages of the last :data:`FILLED_MAX` addresses are kept.
"""

from __future__ import annotations

import asyncio
import html
import os
from collections import OrderedDict
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from queue_manager.context import Context
from queue_manager.http.sendfile import serve_payload
from queue_manager.http.wire import Request, Send, send_response
from queue_manager.routes.apidoc import reference
from queue_manager.routes.apidoc.document import CONSOLE_OPENAPI_PATH
from queue_manager.routes.apidoc.serve import Description
from queue_manager.routes.pages import pageguard
from queue_manager.web import shipped, static
from queue_manager.web.docs import render

CACHE_CONTROL = (b"cache-control", b"private, no-cache")
NOSNIFF = (b"x-content-type-options", b"nosniff")
REFERRER = (b"referrer-policy", b"same-origin")
API_PAGE = "api"  # /docs/api: the HTTP API reference, rendered from the OpenAPI document
FILLED_MAX = 64  # filled-in pages kept (page × address); the least recently served goes first
FILLED_BROTLI = 9  # a filled page is made on a request: Brotli 9 is ~10x faster than 11, ~10 % larger

# a file's version: (mtime_ns, size), or None when it is missing
Stamp = tuple[tuple[int, int] | None, ...]


def default_docs_dir() -> Path:
    """The guides installed with the package, or the docs/ folder of the checkout it runs from."""
    return shipped.folder("docs")


@dataclass(frozen=True)
class Body:
    """One page ready to send: its status, language and payload (the HTML, its compressed forms, ETags)."""

    status: int
    lang: str
    payload: static.Payload
    fillable: bool = False  # names this server's address (render.ADDRESS_PLACEHOLDER): served filled in

    @classmethod
    def of(cls, status: int, lang: str, text: str) -> Body:
        return cls(status, lang, static.Payload.of(text.encode(), "text/html; charset=utf-8"))

    @classmethod
    def unfilled(cls, status: int, lang: str, text: str) -> Body:
        """A page that may name the address: kept uncompressed when it does (only its filled copies are sent)."""
        if render.ADDRESS_PLACEHOLDER not in text:
            return cls.of(status, lang, text)
        payload = static.Payload.of(text.encode(), "text/html; charset=utf-8", compress=False)
        return cls(status, lang, payload, fillable=True)

    def filled(self, address: str) -> Body:
        """This page with the address filled in (slow: build it off the event loop)."""
        text = render.fill_address(self.payload.body.decode(), address, self.lang)
        payload = static.Payload.of(text.encode(), "text/html; charset=utf-8", brotli_quality=FILLED_BROTLI)
        return Body(self.status, self.lang, payload)


class Library:
    """The rendered pages of one docs folder, each kept until one of its files changes."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._pages: dict[tuple[str, str, str], tuple[Stamp, Body]] = {}
        # (page key, address) -> (stamp, filled page), least recently served first
        self._filled: OrderedDict[tuple[tuple[str, str, str], str], tuple[Stamp, Body]] = OrderedDict()
        self.renders = 0  # how many times a page was (re)built

    def _stat(self, *parts: str) -> tuple[int, int] | None:
        try:
            st = os.stat(self.root.joinpath(*parts))
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def _sources(self, lang: str, name: str) -> list[tuple[str, ...]]:
        if name == "":  # the index names every guide and its title
            files: list[tuple[str, ...]] = [(f,) for f in render.GUIDES.values()]
            return files + [("th", f) for f in render.GUIDES.values()] if lang == "th" else files
        file = render.GUIDES[name]
        return [("th", file), (file,)] if lang == "th" else [(file,)]

    async def page(self, lang: str, name: str, base: str = "", address: str | None = None) -> Body:
        """The page for (lang, guide name or '' for the index, path prefix), rendered again only when a source
        changed; with ``address``, this server's address filled in where the guide names it."""
        stamp: Stamp = tuple(self._stat(*p) for p in self._sources(lang, name))
        key = (lang, name, base)
        hit = self._pages.get(key)
        if hit is None or hit[0] != stamp:
            hit = (stamp, await asyncio.to_thread(self._build, lang, name, base))
            self.renders += 1
            self._pages[key] = hit
        plain = hit[1]
        if address is None or not plain.fillable:
            return plain
        filled_key = (key, address)
        done = self._filled.get(filled_key)
        if done is not None and done[0] == stamp:
            self._filled.move_to_end(filled_key)
            return done[1]
        body = await asyncio.to_thread(plain.filled, address)
        self._filled[filled_key] = (stamp, body)
        self._filled.move_to_end(filled_key)
        while len(self._filled) > FILLED_MAX:
            self._filled.popitem(last=False)
        return body

    def _read(self, *parts: str) -> str | None:
        try:
            return self.root.joinpath(*parts).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None

    def _guide(self, lang: str, name: str, base: str) -> tuple[render.Rendered, bool, str] | None:
        """(rendered guide, whether it is the Thai translation, source path) or None when missing."""
        file = render.GUIDES[name]
        if lang == "th":
            text = self._read("th", file)
            if text is not None:
                return render.render_markdown(text, "th", "th", base), True, f"docs/th/{file}"
        text = self._read(file)
        if text is None:
            return None
        return render.render_markdown(text, "", "en", base), False, f"docs/{file}"

    def _build(self, lang: str, name: str, base: str) -> Body:
        if name == "":
            return self._index(lang, base)
        found = self._guide(lang, name, base)
        if found is None:
            return not_found(lang, base)
        doc, translated, source = found
        ui = render.UI[lang]
        main, notice, content_lang = doc.body, "", lang
        if lang == "th" and not translated:
            notice = (
                f'<div class="notice" role="note"><p>{ui["fallback"]}</p>'
                f'<p lang="en">{render.UI["th"]["fallback_en"]}</p></div>'
            )
            main, content_lang = f'<div lang="en">{doc.body}</div>', "en"
        footer = f"{ui['source']} <code>{html.escape(source)}</code>"
        text = render.page(
            lang=lang,
            title=doc.title,
            main=main,
            toc=render.toc_html(doc.headings, lang, content_lang),
            name=name,
            footer=footer,
            notice=notice,
            base=base,
        )
        return Body.unfilled(200, lang, text)

    def _index(self, lang: str, base: str) -> Body:
        ui = render.UI[lang]
        items: list[str] = []
        for name in render.GUIDES:
            found = self._guide(lang, name, base)
            if found is None:
                continue
            doc, translated, _ = found
            href = f"{base}/docs/th/{name}" if lang == "th" else f"{base}/docs/{name}"
            english = lang == "th" and not translated
            attr = ' lang="en"' if english else ""
            tag = f'<span class="tag">({ui["english_only"]})</span>' if english else ""
            summary = f"<p{attr}>{html.escape(doc.summary)}</p>" if doc.summary else ""
            items.append(f'<li><a href="{href}"{attr}>{html.escape(doc.title)}</a>{tag}{summary}</li>')
        listing = f'<ul class="guides">{"".join(items)}</ul>' if items else f"<p>{ui['not_installed']}</p>"
        main = f'<h1>{ui["index_title"]}</h1><p class="lede">{ui["index_lede"]}</p>{listing}{_api_item(lang, base)}'
        footer = f"{ui['source']} <code>docs/</code>"
        text = render.page(lang=lang, title=ui["index_title"], main=main, footer=footer, base=base)
        return Body.unfilled(200, lang, text)


def _api_item(lang: str, base: str) -> str:
    """The index's link to the API reference (rendered from the server itself: there with or without docs/)."""
    href = f"{base}/docs/th/{API_PAGE}" if lang == "th" else f"{base}/docs/{API_PAGE}"
    attr = ' lang="en"' if lang != "en" else ""
    return (
        f'<ul class="guides"><li><a href="{href}"{attr}>HTTP API reference</a><p{attr}>Every route, its '
        f"parameters, answers and codes, from <code>{CONSOLE_OPENAPI_PATH}</code>.</p></li></ul>"
    )


def api_reference(description: Description, lang: str, base: str = "") -> Body:
    """``/docs/api``: the HTTP API reference, rendered from the OpenAPI document (English on both languages'
    pages)."""
    main, headings = reference.render(description.rendered().document, base)
    if lang != "en":
        main = f'<div lang="en">{main}</div>'
    text = render.page(
        lang=lang,
        title="HTTP API reference",
        main=main,
        toc=render.toc_html(headings, lang, "en"),
        name=API_PAGE,
        footer=f"{render.UI[lang]['source']} <code>{CONSOLE_OPENAPI_PATH}</code>",
        base=base,
    )
    return Body.of(200, lang, text)


@cache
def not_found(lang: str, base: str = "") -> Body:
    ui = render.UI[lang]
    index = base + ("/docs/th" if lang == "th" else "/docs")
    main = f'<h1>{ui["missing_title"]}</h1><p>{ui["missing_body"]}</p><p><a href="{index}">{ui["missing_link"]}</a></p>'
    return Body.of(404, lang, render.page(lang=lang, title=ui["missing_title"], main=main, base=base))


def path_prefix(req: Request) -> str:
    """'/__qm' when the request came in under an inline host's queue prefix (the app stripped it), else ''."""
    outer: str = req.scope.get("path", "")
    if outer != req.path and outer.endswith(req.path):
        return outer[: len(outer) - len(req.path)]
    return ""


_LIBRARIES: dict[Path, Library] = {}


def library(ctx: Context) -> Library:
    root = Path(ctx.settings.docs_dir) if ctx.settings.docs_dir else default_docs_dir()
    lib = _LIBRARIES.get(root)
    if lib is None:
        lib = _LIBRARIES[root] = Library(root)
    return lib


def resolve(path: str) -> tuple[str, str | None, str | None]:
    """/docs path -> (lang, guide name ('' = index) or None when unknown, canonical path to redirect to or None)."""
    rest = path[len("/docs") :]
    lang = "en"
    if rest == "/th" or rest.startswith("/th/"):
        lang, rest = "th", rest[3:]
    prefix = "/docs/th" if lang == "th" else "/docs"
    if rest in ("", "/"):
        return lang, "", (prefix if rest else None)
    piece = rest[1:]
    if piece.endswith("/"):
        piece = piece[:-1]
    if "/" in piece or not piece:
        return lang, None, None
    name = piece.lower()
    if name.endswith(".md"):
        name = render.BY_FILE.get(name, "")
    if name not in render.GUIDES and name != API_PAGE:
        return lang, None, None
    canonical = f"{prefix}/{name}"
    return lang, name, (canonical if canonical != path else None)


def own_address(ctx: Context, req: Request, prefix: str) -> str:
    """The address the guides are filled in with: the base of every absolute URL this server hands out, and
    on an inline host (PUBLIC_URL unset) the queue's prefix there, where the queue's own paths answer."""
    base = ctx.identity.public_base(req)
    return base if ctx.identity.public_url else base + prefix


class Guides:
    """The ``/docs`` handler of one table of routes: the guides, and ``/docs/api`` rendered once per language and
    path prefix from that table's description."""

    __slots__ = ("_references", "description")

    def __init__(self, description: Description) -> None:
        self.description = description
        self._references: dict[tuple[str, str], Body] = {}

    def api_reference(self, lang: str, base: str = "") -> Body:
        key = (lang, base)
        body = self._references.get(key)
        if body is None:
            body = self._references[key] = api_reference(self.description, lang, base)
        return body

    async def docs_page(self, ctx: Context, req: Request, send: Send) -> None:
        limits = await pageguard.admit(ctx, req, send, "pages")
        if limits is None:
            return  # refused: pageguard answered 429
        head = req.method == "HEAD"
        lang, name, canonical = resolve(req.path)
        base = path_prefix(req)
        if canonical is not None:
            location = (base + canonical).encode()
            await send_response(send, 301, b"", [(b"location", location), CACHE_CONTROL, *limits], head)
            return
        lib = library(ctx)
        if name is None:
            body = not_found(lang, base)
        elif name == API_PAGE:
            body = self.api_reference(lang, base)
        else:
            body = await lib.page(lang, name, base, own_address(ctx, req, base))
        headers: list[tuple[bytes, bytes]] = [
            CACHE_CONTROL,
            NOSNIFF,
            REFERRER,
            (b"content-security-policy", render.content_security_policy(base).encode()),
            (b"content-language", body.lang.encode()),
            *limits,
        ]
        # only a guide is revalidated: the "no such guide" page carries no ETag
        await serve_payload(req, send, body.payload, headers, status=body.status, conditional=body.status == 200)
