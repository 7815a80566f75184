"""Rules for the whole suite.

No silent skips in CI: with ``CI=true`` a skipped test (or a skipped module) is reported as a failure,
unless its node id is on ``SKIP_ALLOWED`` below with the reason it may skip. The list is empty: every
test runs in CI. docs/testing.md says how to add to it (rarely, and with a reason a reviewer accepts).
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

# node id (as pytest prints it, parameters included) -> why it may skip in CI
SKIP_ALLOWED: dict[str, str] = {}


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _refuse_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    if not report.skipped or report.nodeid in SKIP_ALLOWED:
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = (
        f"skipped in CI ({reason}). CI=true makes every skip a failure: make the test runnable here, or put "
        f"its node id on tests/conftest.py SKIP_ALLOWED with the reason (see docs/testing.md)"
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, None, None]:
    outcome = yield
    if not _in_ci():
        return
    report: pytest.TestReport = outcome.get_result()
    if report.skipped and hasattr(report, "wasxfail"):
        return  # an expected failure that failed (strict xfail): the test ran
    _refuse_skip(report)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, None, None]:
    outcome = yield
    if _in_ci():
        _refuse_skip(outcome.get_result())


def _shares_a_module_fixture(item: pytest.Item, root: str) -> bool:
    """Does the test use a module-, class- or package-scoped fixture written in this suite?"""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    for defs in info.name2fixturedefs.values():
        for d in defs:
            if d.scope not in ("module", "class", "package"):
                continue
            source = getattr(getattr(d.func, "__code__", None), "co_filename", "")
            if source.startswith(root):
                return True
    return False


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``--dist loadgroup`` (make test), a module whose tests share a module-scoped fixture of this
    suite (a server, a proxy, a workerd) runs on one worker, so the fixture is set up once per parameter
    instead of once on every worker that happens to take one of its tests. Runs before xdist reads the
    groups; a test already in a group keeps it."""
    if config.getoption("dist", "no") != "loadgroup":
        return
    root = str(config.rootpath / "tests")
    for item in items:
        if item.get_closest_marker("xdist_group") is None and _shares_a_module_fixture(item, root):
            item.add_marker(pytest.mark.xdist_group(f"module:{item.nodeid.split('::', 1)[0]}"))
