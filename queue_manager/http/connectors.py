"""The connectors' downloads and their manifest (public, no credential: they hold no secret).

``GET /connectors/manifest.json``: every connector, its version, its download URLs (absolute, from
``PUBLIC_URL``, else a trusted proxy's ``X-Forwarded-Host``/``-Proto``, else ``Host``), the SHA-256
and size of each artefact.
``GET /connectors/<name>``: that connector's entry of the manifest.
``GET /connectors/<name>/latest.js|.tgz|.zip``: the current build (revalidated: ``no-cache`` and an ETag).
``GET /connectors/<name>/<name>-<version>.js|.tgz|.zip``: the same bytes under a name that never changes
(immutable); another version's name is 404.
``GET /connectors/<name>/README.md``: the connector's README.
"""

from __future__ import annotations

import hashlib
from functools import cache
from typing import Any

from queue_manager import __version__
from queue_manager.http.context import Context
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
        ext = art.filename.rsplit(".", 1)[1]
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
        ext = art.filename.rsplit(".", 1)[1]
        if file in (f"latest.{ext}", art.filename):
            cache = REVALIDATE if file.startswith("latest.") else static.IMMUTABLE
            headers = [cache, CORS, static.NOSNIFF]
            if ext != "js":
                disposition = f'attachment; filename="{art.filename}"'.encode()
                headers.append((b"content-disposition", disposition))
            await serve_payload(req, send, _payload(name, art.filename), headers)
            return
    raise HttpError(404, "not_found", f"The {name} connector has no file {file[:80]!r} (version {built.version}).")
