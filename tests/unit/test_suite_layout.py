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


def test_every_test_module_lives_in_a_folder_of_its_kind_under_one_name() -> None:
    """A test module at the root of tests/ belongs to no part of the suite, and two modules of one name in two
    folders make ``-k``, ``--durations`` and a failure's first line ambiguous."""
    assert not list(TESTS.glob("test_*.py")), "a test module at the root of tests/: move it to its part's folder"
    every = [p for p in TESTS.rglob("test_*.py") if "vendor" not in p.parts]
    twice = sorted(name for name, n in Counter(p.name for p in every).items() if n > 1)
    assert not twice, f"test modules share a name: {twice}"
