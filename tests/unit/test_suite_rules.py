"""The suite's own rule (tests/conftest.py): with CI=true a skip is a failure unless it is allowed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import conftest as rules

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = """
import pytest

def test_runs():
    pass

def test_skips_itself():
    pytest.skip("no service here")

@pytest.mark.skipif(True, reason="a guard")
def test_guarded():
    pass

@pytest.mark.xfail(strict=True, reason="known")
def test_expected_failure():
    assert False
"""


def _run(tmp_path: Path, ci: str | None) -> str:
    (tmp_path / "test_sample.py").write_text(SAMPLE, encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")}
    if ci is not None:
        env["CI"] = ci
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-q", "-rA"),
            *("-c", str(tmp_path / "pytest.ini"), str(tmp_path / "test_sample.py")),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.stdout + done.stderr


def test_outside_ci_a_skip_is_a_skip(tmp_path: Path) -> None:
    out = _run(tmp_path, None)
    assert "1 passed, 2 skipped, 1 xfailed" in out, out


def test_in_ci_every_skip_fails_with_its_reason(tmp_path: Path) -> None:
    out = _run(tmp_path, "true")
    assert "FAILED" in out and "test_skips_itself" in out and "no service here" in out, out
    assert "test_guarded" in out and "a guard" in out, out
    assert "skipped in CI" in out
    assert " skipped" not in out.splitlines()[-1], out  # nothing is left skipped
    assert "1 passed" in out and "1 xfailed" in out, out  # a strict xfail ran: it is no skip


def test_an_allowed_skip_stays_a_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    report = pytest.TestReport("tests/x.py::test_y", ("x", 1, "y"), {}, "skipped", ("x", 1, "Skipped: why"), "call")
    monkeypatch.setitem(rules.SKIP_ALLOWED, "tests/x.py::test_y", "documented reason")
    rules._refuse_skip(report)
    assert report.outcome == "skipped"
    other = pytest.TestReport("tests/x.py::test_z", ("x", 1, "z"), {}, "skipped", ("x", 1, "Skipped: why"), "call")
    rules._refuse_skip(other)
    assert other.outcome == "failed" and "Skipped: why" in str(other.longrepr)
