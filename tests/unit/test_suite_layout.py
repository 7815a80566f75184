"""Test modules in folders without an ``__init__.py`` are imported by their bare name (pytest's rootdir
import), so two of them with one name stop the whole run at collection: ``import file mismatch``."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_top_level_test_modules_share_a_name() -> None:
    bare = [p for d in TESTS.iterdir() if d.is_dir() and not (d / "__init__.py").exists() for p in d.glob("test_*.py")]
    assert bare, "the scan found no test module in a folder without __init__.py"
    twice = sorted(name for name, n in Counter(p.name for p in bare).items() if n > 1)
    assert not twice, f"test modules imported by their bare name share it: {twice}; rename one"
