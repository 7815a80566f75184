"""The connectors this server hands out, built from their sources (``connectors/``, see :mod:`.shipped`).

Each connector is a folder of its own (``connectors/<name>/``, with its README); :func:`build` packs it
into the artefact a site owner downloads: a gzip'd tarball (the Workers' wrangler projects, the Node
connector), a Python source distribution (``pip install``-able, with its ``PKG-INFO``) or a zip (the
WordPress plugin), and for the Workers also the single script (``latest.js``) that ``wrangler deploy``
takes on its own. Building is reproducible: the same sources give the same bytes (entries sorted, one
fixed timestamp, no owner, no gzip name or time), so the SHA-256 in the manifest names the commit's
artefact, whichever instance built it.

Two tokens in a connector's text files are filled in while building:

* ``__QM_CONNECTOR_VERSION__``: the connector's version (its ``package.json`` ``version``, the Python
  package's ``pyproject.toml`` ``[project] version``, or the ``Version:`` header of the WordPress plugin's
  main file);
* ``__QM_OFFLINE_HTML__``: this build's ``offline.html`` as a JavaScript string literal, so a deployed
  failover Worker serves exactly the page this server ships.

Example::

    built = build("cloudflare")          # None when no connectors/cloudflare/ was shipped
    built.version, built.archive.sha256, built.script.body[:40]
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import tarfile
import tomllib
import zipfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from queue_manager.web import asset, shipped

#: Every entry's modification time (1980-01-01, the earliest a zip can say): the bytes do not depend on a checkout's.
EPOCH = 315532800
#: What is never packed: dependencies installed beside the sources, and dot-files (editor and VCS state).
SKIP_DIRS = frozenset({"node_modules", "__pycache__", "vendor-cache"})
_TEXT = frozenset({".py", ".js", ".mjs", ".cjs", ".json", ".toml", ".md", ".php", ".txt", ".ts", ".html", ".css"})
_PHP_VERSION = re.compile(rb"^[ \t/*#@]*Version:\s*([0-9][0-9A-Za-z.\-+]*)\s*$", re.M)
_TAG_VERSION = re.compile(rb"version:\s*'([0-9][0-9A-Za-z.\-+]*)'")


@dataclass(frozen=True, slots=True)
class Connector:
    """One connector: its URL segment, what it is, how it is packed."""

    name: str  # /connectors/<name>/…
    title: str
    archive: str  # "tgz", "sdist" (a .tar.gz whose folder is <distribution>-<version>) or "zip"
    top: str  # the folder every entry sits in inside the archive (an sdist's: its distribution name)
    script: str | None = None  # the file (relative to the connector's folder) served alone as latest.js
    main: str | None = None  # the WordPress plugin's main file: its Version: header is the version


CONNECTORS: tuple[Connector, ...] = (
    Connector("cloudflare", "Cloudflare edge gate Worker", "tgz", "qm-edge-gate", script="src/worker.js"),
    Connector("cloudflare-failover", "Cloudflare failover Worker", "tgz", "qm-failover", script="src/worker.js"),
    Connector("node", "Node connector (node:http, Express, Connect)", "tgz", "package"),
    Connector("python", "Python connector (ASGI and WSGI: Django, Flask, FastAPI)", "sdist", "queue_manager_gate"),
    Connector("wordpress", "WordPress plugin", "zip", "queue-manager", main="queue-manager.php"),
)
BY_NAME = {c.name: c for c in CONNECTORS}


@dataclass(frozen=True, slots=True)
class Artefact:
    """One downloadable file: its name in the versioned URL, its bytes, their SHA-256 (hex)."""

    filename: str
    body: bytes
    content_type: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.body).hexdigest()

    @property
    def ext(self) -> str:
        """What the file name ends with (``js``, ``tgz``, ``zip``, ``tar.gz``): ``latest.<ext>`` serves it too."""
        return "tar.gz" if self.filename.endswith(".tar.gz") else self.filename.rsplit(".", 1)[1]


@dataclass(frozen=True, slots=True)
class Built:
    connector: Connector
    version: str
    archive: Artefact
    script: Artefact | None
    readme: bytes


def root() -> Path:
    """The connectors' sources: the installed wheel's copy, or the ``connectors/`` folder of the checkout."""
    return shipped.folder("connectors")


def _files(folder: Path) -> list[tuple[str, Path]]:
    out = []
    for path in folder.rglob("*"):
        rel = path.relative_to(folder)
        if any(part.startswith(".") or part in SKIP_DIRS for part in rel.parts) or not path.is_file():
            continue
        out.append((rel.as_posix(), path))
    return sorted(out)


def _version(connector: Connector, folder: Path) -> str:
    if connector.main is not None:
        found = _PHP_VERSION.search((folder / connector.main).read_bytes())
        if found is None:
            raise ValueError(f"connectors/{connector.name}/{connector.main} has no Version: header")
        return found.group(1).decode()
    if (folder / "pyproject.toml").is_file():
        project = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8")).get("project", {})
        version = project.get("version")
        if not isinstance(version, str) or not version:
            raise ValueError(f"connectors/{connector.name}/pyproject.toml has no [project] version")
        return version
    package = json.loads((folder / "package.json").read_text(encoding="utf-8"))
    version = package.get("version")
    if not isinstance(version, str) or not version:
        raise ValueError(f"connectors/{connector.name}/package.json has no version")
    return version


def _fill(rel: str, body: bytes, version: str) -> bytes:
    if Path(rel).suffix not in _TEXT:
        return body
    body = body.replace(b"__QM_CONNECTOR_VERSION__", version.encode())
    if b"__QM_OFFLINE_HTML__" in body:
        # a JSON string is a JavaScript string literal; "</" spelled "<\/" so no script tag can end early
        page = json.dumps(asset.offline_page().decode("utf-8"), ensure_ascii=False).replace("</", "<\\/")
        body = body.replace(b'"__QM_OFFLINE_HTML__"', page.encode()).replace(b"__QM_OFFLINE_HTML__", page.encode())
    return body


def _mode(rel: str) -> int:
    return 0o755 if rel.startswith("bin/") or rel.endswith(".sh") else 0o644


def _pkg_info(folder: Path, version: str) -> bytes:
    """A source distribution's ``PKG-INFO``: its core metadata, from ``pyproject.toml``'s ``[project]``."""
    project = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {project['name']}",
        f"Version: {version}",
        f"Summary: {project.get('description', '')}",
        f"Requires-Python: {project.get('requires-python', '>=3')}",
    ]
    for extra, requirements in sorted(project.get("optional-dependencies", {}).items()):
        lines.append(f"Provides-Extra: {extra}")
        lines.extend(f'Requires-Dist: {req}; extra == "{extra}"' for req in requirements)
    return ("\n".join(lines) + "\n").encode()


def _tgz(top: str, files: list[tuple[str, bytes]]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel, body in files:
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.size, info.mtime, info.mode = len(body), EPOCH, _mode(rel)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(body))
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=9) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def _zip(top: str, files: list[tuple[str, bytes]]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for rel, body in files:
            info = zipfile.ZipInfo(f"{top}/{rel}", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (0o100000 | _mode(rel)) << 16
            info.create_system = 3  # unix, so the mode above is read
            zf.writestr(info, body)
    return out.getvalue()


@cache
def build(name: str) -> Built | None:
    """The connector ``name`` built from its folder; None when it is not one, or its folder was not shipped."""
    connector = BY_NAME.get(name)
    if connector is None:
        return None
    folder = root() / name
    if not folder.is_dir():
        return None
    version = _version(connector, folder)
    files = [(rel, _fill(rel, path.read_bytes(), version)) for rel, path in _files(folder)]
    if connector.archive == "zip":
        archive = Artefact(f"{name}-{version}.zip", _zip(connector.top, files), "application/zip")
    elif connector.archive == "sdist":
        files = sorted([*files, ("PKG-INFO", _pkg_info(folder, version))])
        body = _tgz(f"{connector.top}-{version}", files)
        archive = Artefact(f"{name}-{version}.tar.gz", body, "application/gzip")
    else:
        archive = Artefact(f"{name}-{version}.tgz", _tgz(connector.top, files), "application/gzip")
    script = None
    if connector.script is not None:
        body = dict(files)[connector.script]
        script = Artefact(f"{name}-{version}.js", body, "text/javascript; charset=utf-8")
    readme = dict(files).get("README.md", b"")
    return Built(connector, version, archive, script, readme)


def built() -> list[Built]:
    """Every connector this server has the sources of, built (what the manifest lists)."""
    return [b for c in CONNECTORS if (b := build(c.name)) is not None]


def tag_version() -> str:
    """The browser tag's version (``/qm.js``: ``window.QM.version``)."""
    found = _TAG_VERSION.search(asset.qm_js())
    return found.group(1).decode() if found else "0"
