"""The one way this server serves bytes from memory: the console's, waiting page's and docs' files and pages.

A :class:`Payload` is a body prepared once: its gzip and Brotli forms (each kept only when smaller), its content
type, and a strong ETag per form, all named after one content hash (:func:`content_hash`, SHA-256 of the
uncompressed body). ``http/assets.py`` answers a GET/HEAD with it: the best form the client accepts, ``Vary:
Accept-Encoding``, the ETag of the form sent, and a 304 when If-None-Match names any of the forms' ETags.

:func:`hashed_assets` turns a set of files into content-addressed assets (``<stem>-<hash>.<ext>``, served with
:data:`IMMUTABLE`): a deploy changes the name, never the bytes behind a name. Script modules among the files
import each other by their source names (``import { api } from "./api.js"``); those specifiers are rewritten to
the hashed names before the importing module is hashed, so every URL a browser ever fetches is immutable and the
page's CSP stays ``script-src 'self'`` (no import map, so no inline script to allow).
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import brotli  # type: ignore[import-untyped]

IMMUTABLE = (b"cache-control", b"public, max-age=31536000, immutable")
NOSNIFF = (b"x-content-type-options", b"nosniff")


def content_hash(body: bytes) -> str:
    """The first 22 characters of the base64url SHA-256 of body: every ETag, and the name of a hashed asset."""
    return base64.urlsafe_b64encode(hashlib.sha256(body).digest()).decode()[:22]


def short_hash(body: bytes) -> str:
    """The same SHA-256 spelled as its first 12 hex digits: the console's asset names keep this shape."""
    return hashlib.sha256(body).hexdigest()[:12]


def compressed(body: bytes, brotli_quality: int = 11) -> tuple[bytes | None, bytes | None]:
    """(gzip, br) of body, each None when it would not be smaller. Brotli at its best (11) is slow on a large
    page; a body made per request (a guide filled in with the asking host) is compressed at a lower quality."""
    gz = gzip.compress(body, compresslevel=9, mtime=0)
    br = brotli.compress(body, quality=brotli_quality)
    return (gz if len(gz) < len(body) else None), (br if len(br) < len(body) else None)


# the ETag suffix of each compressed form; the uncompressed body's ETag is the bare hash
_SUFFIX = {"br": "-br", "gzip": "-gz"}


@dataclass(frozen=True, slots=True)
class Payload:
    """One body ready to send: the bytes, the compressed forms worth sending (or None), type and content hash."""

    body: bytes
    content_type: str
    gzip: bytes | None
    br: bytes | None
    digest: str

    @classmethod
    def of(cls, body: bytes, content_type: str, *, compress: bool = True, brotli_quality: int = 11) -> Payload:
        """Prepare body: compressed at the best settings (slow: build it off the event loop), hashed."""
        gz, br = compressed(body, brotli_quality) if compress else (None, None)
        return cls(body, content_type, gz, br, content_hash(body))

    def etag(self, coding: str | None = None) -> bytes:
        """The strong ETag of one form: ``"<hash>"`` uncompressed, ``"<hash>-gz"`` / ``"<hash>-br"`` compressed."""
        return f'"{self.digest}{_SUFFIX.get(coding or "", "")}"'.encode()

    def etags(self) -> tuple[bytes, ...]:
        """The ETags of every form this payload has: any of them in If-None-Match makes a 304."""
        forms: list[str | None] = [None, *(c for c in ("br", "gzip") if self.form(c) is not None)]
        return tuple(self.etag(c) for c in forms)

    def form(self, coding: str | None) -> bytes | None:
        if coding == "br":
            return self.br
        if coding == "gzip":
            return self.gzip
        return self.body

    @property
    def compressible(self) -> bool:
        return self.gzip is not None or self.br is not None


# ------------------------------------------------------------------------------------------ hashed assets


@dataclass(frozen=True, slots=True)
class Source:
    """A file to serve under a hashed name: how the page and other modules name it (``api.js``), the stem of its
    served name (``console-api``), its bytes, content type, and whether it is a script module."""

    name: str
    stem: str
    body: bytes
    content_type: str
    module: bool = False  # a JavaScript module whose imports of siblings are rewritten to their hashed names


@dataclass(frozen=True, slots=True)
class Asset:
    """A content-addressed file: its served name (``console-api-1a2b3c4d5e6f.js``), bytes and content type.

    Naming a set of assets only hashes; compressing one waits for its first request (:meth:`payload`)."""

    name: str
    body: bytes
    content_type: str

    async def payload(self) -> Payload:
        """The asset ready to serve, compressed once per process in a thread (Brotli at its best is slow)."""
        key = (self.name, self.content_type)
        ready = _prepared.get(key)
        if ready is None:
            ready = _prepared[key] = await asyncio.to_thread(Payload.of, self.body, self.content_type)
        return ready


# served name and type -> payload; a name holds its content's hash, so an entry never goes stale
_prepared: dict[tuple[str, str], Payload] = {}


# A static import or re-export naming a sibling module: `from "./x.js"` or a bare `import "./x.js"`. The console's
# modules only import each other this way; dynamic import() is refused when the set is built.
_IMPORT = re.compile(r"""(\bfrom\s*|\bimport\s*)(["'])\./([A-Za-z0-9_.-]+\.js)\2""")
_DYNAMIC_IMPORT = re.compile(r"\bimport\s*\(")


def hashed_assets(sources: Iterable[Source], *, spell: Callable[[bytes], str] = content_hash) -> dict[str, Asset]:
    """Every source as an immutable asset, by its source name. ``spell`` writes the content hash into the name.

    A script that imports a sibling (``./name.js``, a name in ``sources``) is served with that specifier rewritten
    to the sibling's hashed name, so its own hash covers what it imports: changing one module renames it and every
    module that imports it, up to the page's entry point. Imports must form no cycle; an import of a file not in
    the set, or a dynamic ``import()``, is an error when the set is built, not in a browser."""
    by_name = {s.name: s for s in sources}
    built: dict[str, Asset] = {}
    visiting: set[str] = set()

    def build(name: str) -> Asset:
        done = built.get(name)
        if done is not None:
            return done
        if name in visiting:
            raise ValueError(f"{name}: modules import each other in a cycle")
        visiting.add(name)
        src = by_name[name]
        body = src.body
        if src.module:
            text = body.decode("utf-8")
            if _DYNAMIC_IMPORT.search(text):
                raise ValueError(f"{name}: dynamic import() cannot be given a hashed name")

            def rename(m: re.Match[str]) -> str:
                target = m.group(3)
                if target not in by_name:
                    raise ValueError(f"{name} imports ./{target}, which is not in the asset set")
                return f"{m.group(1)}{m.group(2)}./{build(target).name}{m.group(2)}"

            body = _IMPORT.sub(rename, text).encode("utf-8")
        ext = name.rsplit(".", 1)[1]
        asset = Asset(f"{src.stem}-{spell(body)}.{ext}", body, src.content_type)
        visiting.discard(name)
        built[name] = asset
        return asset

    for name in by_name:
        build(name)
    return {name: built[name] for name in by_name}
