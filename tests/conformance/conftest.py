"""Fixtures for the black-box HTTP conformance suite (see harness.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

import httpx
import pytest
from harness import START_TIMEOUT_SEC, Server, start_server

ServerFactory = Callable[..., Server]


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    """One default server shared by a module's tests (each test makes its own room)."""
    srv = start_server()
    try:
        yield srv
    finally:
        srv.stop()


def _factory() -> tuple[ServerFactory, list[Server]]:
    started: list[Server] = []

    def make(
        env: Mapping[str, str | None] | None = None, *, cmd: list[str] | None = None, timeout: float = START_TIMEOUT_SEC
    ) -> Server:
        srv = start_server(env, cmd=cmd, timeout=timeout)
        started.append(srv)
        return srv

    return make, started


@pytest.fixture
def make_server() -> Iterator[ServerFactory]:
    """``make_server(env)`` starts a server with extra environment; every one is stopped after the test."""
    make, started = _factory()
    try:
        yield make
    finally:
        for srv in reversed(started):
            srv.stop()


@pytest.fixture(scope="module")
def make_module_server() -> Iterator[ServerFactory]:
    """Like ``make_server`` but the servers live for the whole module."""
    make, started = _factory()
    try:
        yield make
    finally:
        for srv in reversed(started):
            srv.stop()


@pytest.fixture
def admin(server: Server) -> Iterator[httpx.Client]:
    """An admin client (Bearer ADMIN_KEY) on the module's server."""
    with server.admin() as client:
        yield client
