"""The wheel a self-hoster installs serves exactly what a checkout serves.

The module builds the wheel from this tree (``uv build --wheel``, the ``make wheel`` command), installs
it with the locked dependencies into a fresh virtual environment of its own (no checkout on its path),
and starts its ``qm`` from an empty folder beside a server run from the checkout. Both answer the same
bytes for every guide page (English and Thai, linked from the two indexes), every connector download
(the manifest's SHA-256s and the files behind them), the console, the waiting page, ``/qm.js``, the
offline page and ``/api/openapi.json``; the addresses in them differ only by each server's own origin.
It also runs the installed ``qm --version`` and ``qm config``.

About 10 s: the build, one install into an empty venv from uv's cache, two servers.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import Server, create_room, start_server

# both servers run on the embedded store whatever the run's stores: the files served are what is compared
pytestmark = pytest.mark.store_independent

ROOT = Path(__file__).resolve().parents[2]
_HREF = re.compile(r'href="(/docs[^"#?]*)"')
INSTALL_TIMEOUT_SEC = 300


def _uv() -> str | None:
    """The uv the Makefile installs (QM_UV), one on the PATH, or the one in .tools/."""
    for candidate in (os.environ.get("QM_UV"), shutil.which("uv"), str(ROOT / ".tools" / "bin" / "uv")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def _run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_SEC, check=False, **kwargs)
    assert done.returncode == 0, f"{' '.join(argv)} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The venv the wheel was installed into (its bin/ has qm)."""
    uv = _uv()
    if uv is None:
        pytest.skip("no uv to build and install the wheel with: run `make install-dev` (CI=true makes this fail)")
    work = tmp_path_factory.mktemp("wheel")
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}
    env.pop("VIRTUAL_ENV", None)
    _run([uv, "build", "-q", "--wheel", "--out-dir", str(work / "dist"), str(ROOT)], env=env)
    wheels = sorted((work / "dist").glob("queue_manager-*-py3-none-any.whl"))
    assert len(wheels) == 1, f"uv build made {wheels}"
    locked = work / "requirements.txt"
    _run(
        [uv, "export", "-q", "--frozen", "--no-dev", "--no-emit-project", "--no-header", "-o", str(locked)],
        cwd=ROOT,
        env=env,
    )
    venv = work / "venv"
    _run([uv, "venv", "-q", "--python", sys.executable, str(venv)], env=env)
    _run(
        [uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"), "-r", str(locked), str(wheels[0])],
        env=env,
    )
    yield venv


@pytest.fixture(scope="module")
def pair(installed: Path) -> Iterator[tuple[Server, Server]]:
    """(a server from the checkout, a server from the wheel), both on the embedded store."""
    checkout = start_server(store="memory")
    try:
        wheel = start_server(store="memory", cmd=[str(installed / "bin" / "qm")])
    except BaseException:
        checkout.stop()
        raise
    try:
        yield checkout, wheel
    finally:
        wheel.stop()
        checkout.stop()


def test_the_wheel_runs_from_its_own_venv_not_the_checkout(installed: Path) -> None:
    code = "import queue_manager, pathlib; print(pathlib.Path(queue_manager.__file__).resolve())"
    where = _run([str(installed / "bin" / "python"), "-c", code], cwd=installed).stdout.strip()
    assert where.startswith(str(installed)) and not where.startswith(str(ROOT)), where


def test_the_installed_command_line(installed: Path, tmp_path: Path) -> None:
    qm = str(installed / "bin" / "qm")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STORE", "ADMIN_KEY", "SECRET", "NODE_ENV"))}
    version = _run([qm, "--version"], cwd=tmp_path, env=env).stdout.strip()
    assert re.fullmatch(r"qm \d+\.\d+\.\d+\S*", version), version
    config = _run([qm, "config"], cwd=tmp_path, env=env).stdout
    assert "STORE" in config and "DOCS_DIR" in config, config


def _same(checkout: Server, wheel: Server, path: str, *, admin: bool = False) -> bytes:
    """GET path on both (``admin``: with each one's key); the same status and the same bytes (each server's own
    origin put back to one)."""
    a = httpx.get(checkout.base_url + path, headers=checkout.admin_headers if admin else None, timeout=30)
    b = httpx.get(wheel.base_url + path, headers=wheel.admin_headers if admin else None, timeout=30)
    assert a.status_code == 200, f"{path} from the checkout: {a.status_code}"
    assert b.status_code == 200, f"{path} from the wheel: {b.status_code} (the checkout answers 200)"
    body_a = a.content.replace(checkout.base_url.encode(), b"ORIGIN")
    body_b = b.content.replace(wheel.base_url.encode(), b"ORIGIN")
    assert body_b == body_a, f"{path}: the wheel's answer differs from the checkout's"
    assert b.headers.get("content-type") == a.headers.get("content-type"), path
    return a.content


def test_every_guide_page_is_the_checkouts(pair: tuple[Server, Server]) -> None:
    checkout, wheel = pair
    pages: set[str] = set()
    for index in ("/docs", "/docs/th"):
        html = _same(checkout, wheel, index).decode()
        pages.update(p.rstrip("/") for p in _HREF.findall(html))
    guides = sorted(p for p in pages if p not in ("/docs", "/docs/th"))
    # every English guide and the Thai translations, and the API reference
    assert {"/docs/operations", "/docs/integration", "/docs/th/operations", "/docs/api"} <= set(guides), guides
    for page in guides:
        body = _same(checkout, wheel, page)
        assert b"DOCS_DIR" not in body or page.endswith("configuration"), f"{page} says the guides are missing"


def test_every_connector_download_is_the_checkouts(pair: tuple[Server, Server]) -> None:
    checkout, wheel = pair
    manifest = httpx.get(wheel.base_url + "/connectors/manifest.json", timeout=30).json()
    _same(checkout, wheel, "/connectors/manifest.json")
    downloads = 0
    for entry in manifest["connectors"]:
        for item in entry["downloads"].values():
            for url in (item["url"], item["latest"]):
                path = url.removeprefix(wheel.base_url)
                body = _same(checkout, wheel, path)
                assert hashlib.sha256(body).hexdigest() == item["sha256"], f"{path}: not the manifest's SHA-256"
                downloads += 1
    names = {entry["name"] for entry in manifest["connectors"]}
    assert {"browser-tag", "cloudflare", "cloudflare-failover", "node", "python", "wordpress"} <= names, names
    assert downloads >= 14, f"the manifest lists {downloads} downloads: {manifest}"
    for name in ("cloudflare", "cloudflare-failover", "node", "python", "wordpress"):
        _same(checkout, wheel, f"/connectors/{name}/README.md")
    _same(checkout, wheel, "/connectors/python/latest.tar.gz")  # the pip install of the Python connector
    _same(checkout, wheel, "/connectors/cloudflare/latest.js")
    _same(checkout, wheel, "/connectors/wordpress/update.json")


def test_the_pages_and_scripts_are_the_checkouts(pair: tuple[Server, Server]) -> None:
    checkout, wheel = pair
    for srv in pair:
        create_room(srv.admin(), "drop")
    for path in ("/", "/qm.js", "/w/drop", "/offline.html"):
        _same(checkout, wheel, path)
    _same(checkout, wheel, "/api/openapi.json", admin=True)
    # every asset the console and the waiting page link to (hashed names: the same bytes give the same names)
    for page in ("/", "/w/drop"):
        html = httpx.get(checkout.base_url + page, timeout=30).text
        for asset in sorted(set(re.findall(r'(?:src|href)="(/[^"]+\.(?:js|css|woff2|svg|png|ico))"', html))):
            _same(checkout, wheel, asset)
