"""Fixtures for the black-box HTTP conformance suite (see harness.py).

Every test here runs once per store the suite is asked for (``QM_TEST_STORES=memory,valkey``; the
default is ``memory``, or ``valkey`` with ``STORE=valkey``): its id ends in ``[memory]`` or
``[valkey]`` and every server it starts, through these fixtures or ``start_server``, runs on that
store. A module marked ``pytest.mark.stores("valkey")`` runs on the stores it names only; when none of
them is asked for its tests are skipped, which ``CI=true`` turns into failures (tests/conftest.py). A test
marked ``all_stores_at_once`` starts a server on every store itself and runs once; one marked
``store_independent`` checks what no store takes part in (the guides, the wheel's files) and runs once,
on the first store asked for.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping

import httpx
import pytest
from harness import (
    START_TIMEOUT_SEC,
    Server,
    free_port,
    start_server,
    stores_under_test,
    use_store,
    valkey_cluster,
)
from receiver import Receiver

ServerFactory = Callable[..., Server]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "store" not in metafunc.fixturenames:
        return
    asked = stores_under_test()
    marker = metafunc.definition.get_closest_marker("stores")
    kinds: list[object] = [k for k in asked if marker is None or k in marker.args]
    if not kinds and marker is not None and os.environ.get("QM_REQUIRE_VALKEY") == "1":
        kinds = list(marker.args)  # required: they run, and fail if the services are not named
    elif not kinds and marker is not None:  # a store-only module on a run without that store: said, not hidden
        reason = (
            f"{'/'.join(marker.args)}-only (its point is state that only that store keeps): run with "
            f"QM_TEST_STORES={','.join(marker.args)}, TEST_VALKEY_URL and TEST_DATABASE_URL (make test)"
        )
        kinds = [pytest.param(k, marks=pytest.mark.skip(reason=reason)) for k in marker.args]
    if metafunc.definition.get_closest_marker("all_stores_at_once") is not None:
        kinds = kinds[:1]  # it covers every store itself
    elif metafunc.definition.get_closest_marker("store_independent") is not None:
        kinds = kinds[:1]  # the same bytes on every store
    # session scope: pytest orders a worker's tests store by store, so shared servers are started once each
    metafunc.parametrize("store", kinds, scope="session")


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A webhook receiver process (``receiver.py``) that records every page sent to it."""
    r = Receiver(free_port())
    r.start()
    try:
        yield r
    finally:
        r.close()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a Valkey cluster the tests marked ``single_valkey`` (they cut, relay or count one Valkey server)
    and the memory-only ones (the cluster run is a Valkey run) are deselected: not skipped, since CI turns
    every skip into a failure."""
    if not valkey_cluster():
        return

    def off_cluster(item: pytest.Item) -> bool:
        stores = item.get_closest_marker("stores")
        return item.get_closest_marker("single_valkey") is not None or (
            stores is not None and "valkey" not in stores.args
        )

    drop = [i for i in items if off_cluster(i)]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [i for i in items if not off_cluster(i)]


@pytest.fixture(autouse=True)
def _servers_on_the_test_store(store: str) -> Iterator[None]:
    """``start_server`` inside a test starts its servers on the test's store."""
    use_store(store)
    try:
        yield
    finally:
        use_store(None)


@pytest.fixture(scope="module")
def server(store: str) -> Iterator[Server]:
    """One default server shared by a module's tests (each test makes its own room)."""
    srv = start_server(store=store)
    try:
        yield srv
    finally:
        srv.stop()


def _factory(store: str) -> tuple[ServerFactory, list[Server]]:
    started: list[Server] = []

    def make(
        env: Mapping[str, str | None] | None = None, *, cmd: list[str] | None = None, timeout: float = START_TIMEOUT_SEC
    ) -> Server:
        srv = start_server(env, cmd=cmd, timeout=timeout, store=store)
        started.append(srv)
        return srv

    return make, started


@pytest.fixture
def make_server(store: str) -> Iterator[ServerFactory]:
    """``make_server(env)`` starts a server with extra environment; every one is stopped after the test."""
    make, started = _factory(store)
    try:
        yield make
    finally:
        for srv in reversed(started):
            srv.stop()


@pytest.fixture(scope="module")
def make_module_server(store: str) -> Iterator[ServerFactory]:
    """Like ``make_server`` but the servers live for the whole module."""
    make, started = _factory(store)
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
