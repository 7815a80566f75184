"""Browser tests: Debian's Chromium driven by Playwright's Python package (never `playwright install`)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: tests.inline.peer

from harness import Server, start_server

from tests.inline.peer import Peer

CHROMIUM = os.environ.get("QM_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "browser"
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Module-scoped: Playwright's sync API runs an event loop, which must be gone before async tests run."""
    if not (os.path.exists(CHROMIUM) or shutil.which("chromium")):
        if os.environ.get("CI"):
            pytest.fail(f"Chromium is required in CI and is not at {CHROMIUM} (apt-get install chromium)")
        pytest.skip(f"no Chromium at {CHROMIUM}: apt-get install chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="module")
def peer() -> Iterator[Peer]:
    """The app behind an inline room: a real peer process, one per module."""
    p = Peer()
    try:
        yield p
    finally:
        p.stop()


@pytest.fixture(scope="module")
def qm() -> Iterator[Server]:
    """One server with the default settings per test module (a module that needs others defines its own)."""
    srv = start_server()
    try:
        yield srv
    finally:
        srv.stop()
