"""The connectors' downloads and their manifest (public, no credential: they hold no secret).

``GET /connectors/manifest.json``: every connector, its version, its download URLs (absolute, from
``PUBLIC_URL``, else a trusted proxy's ``X-Forwarded-Host``/``-Proto``, else ``Host``), the SHA-256
and size of each artefact.
``GET /connectors/<name>``: that connector's entry of the manifest.
``GET /connectors/<name>/latest.js|.tgz|.tar.gz|.zip``: the current build (revalidated: ``no-cache`` and an ETag).
``GET /connectors/<name>/<name>-<version>.js|.tgz|.tar.gz|.zip``: the same bytes under a name that never changes
(immutable); another version's name is 404.
``GET /connectors/<name>/README.md``: the connector's README.
``GET /connectors/wordpress/update.json``: the WordPress plugin's update feed (what its update check
reads: the version, the versioned zip's absolute URL and SHA-256, the requirements, the readme's
sections for "View details"), read from the built zip itself.
"""

from __future__ import annotations

import hashlib
import html
import io
import re
import zipfile
from functools import cache
from typing import Any

from queue_manager import __version__
from queue_manager.context import Context
from queue_manager.http.sendfile import serve_payload
from queue_manager.http.wire import HttpError, Request, Send, send_json
from queue_manager.web import asset, connectors, static

REVALIDATE = (b"cache-control", b"no-cache")
CORS = (b"access-control-allow-origin", b"*")
MANIFEST_VERSION = 1


def _entry(built: connectors.Built, base: str) -> dict[str, Any]:
    name = built.connector.name
    here = f"{base}/connectors/{name}"
    downloads: dict[str, Any] = {}
    for kind, art in (("script", built.script), ("archive", built.archive)):
        if art is None:
            continue
        ext = art.ext
        downloads[kind] = {
            "format": ext,
            "url": f"{here}/{art.filename}",
            "latest": f"{here}/latest.{ext}",
            "sha256": art.sha256,
            "bytes": len(art.body),
        }
    return {
        "name": name,
        "title": built.connector.title,
        "version": built.version,
        "readme": f"{here}/README.md",
        "downloads": downloads,
    }


def _tag(base: str) -> dict[str, Any]:
    body = asset.qm_js()
    return {
        "name": "browser-tag",
        "title": "Browser tag (/qm.js)",
        "version": connectors.tag_version(),
        "readme": f"{base}/docs/INTEGRATION.md",
        "downloads": {
            "script": {
                "format": "js",
                "url": f"{base}/qm.js",
                "latest": f"{base}/qm.js",
                "sha256": hashlib.sha256(body).hexdigest(),
                "bytes": len(body),
            }
        },
    }


def manifest(ctx: Context, req: Request) -> dict[str, Any]:
    base = ctx.identity.public_base(req)
    return {
        "manifestVersion": MANIFEST_VERSION,
        "server": {"version": __version__, "url": base},
        "connectors": [_tag(base), *(_entry(b, base) for b in connectors.built())],
    }


@cache
def _payload(name: str, filename: str) -> static.Payload:
    """One artefact prepared for serving, once per process (scripts also compressed)."""
    built = connectors.build(name)
    assert built is not None
    if filename == "README.md":
        return static.Payload.of(built.readme, "text/markdown; charset=utf-8")
    art = next(a for a in (built.script, built.archive) if a is not None and a.filename == filename)
    return static.Payload.of(art.body, art.content_type, compress=filename.endswith(".js"))


_HEADER = re.compile(rb"^[ \t/*#@]*([A-Za-z][A-Za-z ]+?):[ \t]*(\S.*?)[ \t]*$", re.M)
_SECTION = re.compile(r"^==[ \t]*([^=\n]+?)[ \t]*==[ \t]*$", re.M)


def _headers(text: bytes) -> dict[str, str]:
    """``Name: value`` lines (a plugin header block, a readme.txt head): the first of each name."""
    out: dict[str, str] = {}
    for name, value in _HEADER.findall(text):
        out.setdefault(name.decode("utf-8", "replace").strip().lower(), value.decode("utf-8", "replace"))
    return out


def _sections(readme: str) -> dict[str, str]:
    """readme.txt's ``== Name ==`` sections as the plain HTML "View details" shows (escaped, one <p> per
    paragraph, ``= x =`` lines as <h4>, ``*`` lines as a list)."""
    parts = _SECTION.split(readme)
    out: dict[str, str] = {}
    for title, body in zip(parts[1::2], parts[2::2], strict=True):
        blocks = []
        for para in re.split(r"\n\s*\n", body.strip()):
            lines = [line.strip() for line in para.splitlines() if line.strip()]
            if not lines:
                continue
            if all(line.startswith(("* ", "= ")) for line in lines):
                items = []
                for line in lines:
                    if line.startswith("= "):
                        blocks.append(f"<h4>{html.escape(line.strip('= '))}</h4>")
                    else:
                        items.append(f"<li>{html.escape(line[2:])}</li>")
                if items:
                    blocks.append("<ul>" + "".join(items) + "</ul>")
            else:
                blocks.append("<p>" + html.escape(" ".join(lines)) + "</p>")
        out[title.strip().lower().replace(" ", "_")] = "\n".join(blocks)
    return out


@cache
def _wordpress_facts(sha256: str) -> dict[str, Any]:
    """What the feed says of the plugin, read from the zip served (keyed by its SHA-256)."""
    built = connectors.build("wordpress")
    assert built is not None and built.archive.sha256 == sha256
    top = built.connector.top
    with zipfile.ZipFile(io.BytesIO(built.archive.body)) as zf:
        names = set(zf.namelist())
        main = zf.read(f"{top}/{built.connector.main}")
        readme = zf.read(f"{top}/readme.txt") if f"{top}/readme.txt" in names else b""
    plugin, head = _headers(main.split(b"*/", 1)[0]), _headers(readme.split(b"==", 2)[-1].split(b"\n==", 1)[0])
    return {
        "name": plugin.get("plugin name", built.connector.title),
        "version": plugin.get("version", built.version),
        "requires": plugin.get("requires at least") or head.get("requires at least", ""),
        "requires_php": plugin.get("requires php") or head.get("requires php", ""),
        "tested": head.get("tested up to", ""),
        "sections": _sections(readme.decode("utf-8", "replace")),
    }


def wordpress_feed(ctx: Context, req: Request) -> dict[str, Any] | None:
    """The WordPress plugin's update feed (None when this server has no plugin to ship)."""
    built = connectors.build("wordpress")
    if built is None:
        return None
    base = ctx.identity.public_base(req)
    here = f"{base}/connectors/wordpress"
    facts = _wordpress_facts(built.archive.sha256)
    return {
        "name": facts["name"],
        "slug": built.connector.top,
        "version": facts["version"],
        "package": f"{here}/{built.archive.filename}",
        "sha256": built.archive.sha256,
        "bytes": len(built.archive.body),
        "requires": facts["requires"],
        "tested": facts["tested"],
        "requires_php": facts["requires_php"],
        "homepage": f"{here}/README.md",
        "sections": facts["sections"],
    }


async def wordpress_update(ctx: Context, req: Request, send: Send) -> None:
    """``GET /connectors/wordpress/update.json`` (no-store, like every JSON answer: it changes with the server)."""
    feed = wordpress_feed(ctx, req)
    if feed is None:
        raise HttpError(404, "not_found", "This server ships no WordPress plugin.")
    await send_json(send, 200, feed, [CORS], head=req.method == "HEAD")


async def manifest_json(ctx: Context, req: Request, send: Send) -> None:
    await send_json(send, 200, manifest(ctx, req), [CORS], head=req.method == "HEAD")


async def download(ctx: Context, req: Request, send: Send) -> None:
    """``/connectors/<name>[/<file>]`` (see the module docstring)."""
    rest = req.path.removeprefix("/connectors/").strip("/")
    name, _, file = rest.partition("/")
    built = connectors.build(name)
    if built is None:
        raise HttpError(404, "not_found", f"No connector named {name[:60]!r}.")
    if not file:
        await send_json(send, 200, _entry(built, ctx.identity.public_base(req)), [CORS], head=req.method == "HEAD")
        return
    if file == "README.md":
        await serve_payload(req, send, _payload(name, file), [REVALIDATE, CORS, static.NOSNIFF])
        return
    for art in (built.script, built.archive):
        if art is None:
            continue
        ext = art.ext
        if file in (f"latest.{ext}", art.filename):
            cache = REVALIDATE if file.startswith("latest.") else static.IMMUTABLE
            headers = [cache, CORS, static.NOSNIFF]
            if ext != "js":
                disposition = f'attachment; filename="{art.filename}"'.encode()
                headers.append((b"content-disposition", disposition))
            await serve_payload(req, send, _payload(name, art.filename), headers)
            return
    raise HttpError(404, "not_found", f"The {name} connector has no file {file[:80]!r} (version {built.version}).")
