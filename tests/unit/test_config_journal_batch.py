"""JOURNAL_MAX_BATCH: events per group commit of the PostgreSQL journal (1 = one transaction per change)."""

from __future__ import annotations

import pytest

from queue_manager.config import load_settings

BASE = {"ADMIN_KEY": "k" * 40, "SECRET": "s" * 48, "PUBLIC_API_KEY": "p" * 40}


def test_default_is_512_events_per_transaction() -> None:
    s = load_settings(dict(BASE))
    assert s.journal_max_batch == 512
    assert [w for w in s.warnings if w.variable == "JOURNAL_MAX_BATCH"] == []


@pytest.mark.parametrize("value", ["1", "64", "10000"])
def test_a_whole_number_in_range_is_used_as_set(value: str) -> None:
    s = load_settings({**BASE, "JOURNAL_MAX_BATCH": value})
    assert s.journal_max_batch == int(value)
    assert [w for w in s.warnings if w.variable == "JOURNAL_MAX_BATCH"] == []


@pytest.mark.parametrize("value", ["0", "-1", "10001", "many", "1.5"])
def test_anything_else_warns_and_names_what_is_in_effect(value: str) -> None:
    s = load_settings({**BASE, "JOURNAL_MAX_BATCH": value})
    assert s.journal_max_batch == 512
    (warning,) = [w for w in s.warnings if w.variable == "JOURNAL_MAX_BATCH"]
    assert warning.effective == "512"
    assert value in warning.message and "JOURNAL_MAX_BATCH=512" in warning.message
