"""The room table of docs/OPERATIONS.md (and its Thai translation) states each field's allowed range:
the ranges here are read from the table and held to the bounds the validation enforces."""

from __future__ import annotations

from pathlib import Path

import pytest

from queue_manager.engine.errors import EngineError
from queue_manager.engine.model import (
    AUTO_ACTIVATE_MAX,
    AUTOTUNE_RANGES,
    INT_FIELDS,
    NAME_MAX,
    ORIGINS_MAX,
)
from queue_manager.engine.targeting import MAX_RULES

from .conftest import TARGET

DOCS = Path(__file__).resolve().parents[2] / "docs"
GUIDES = {"en": DOCS / "OPERATIONS.md", "th": DOCS / "th" / "OPERATIONS.md"}


def _ranges(path: Path) -> dict[str, str]:
    """{field: range cell} of the room table: the first table whose first column lists `id` and `name`."""
    rows: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")] if line.startswith("| `") else []
        if len(cells) >= 4:
            for name in cells[0].split(" / "):
                rows.setdefault(name.strip("`"), cells[2])
        elif rows and not line.startswith("|"):
            break
    assert {"id", "name", "presenceSec"} <= set(rows), f"no room table with a range column in {path}"
    return rows


@pytest.mark.parametrize("lang", sorted(GUIDES))
def test_every_whole_number_field_states_the_range_validation_enforces(lang: str) -> None:
    table = _ranges(GUIDES[lang])
    for key, (lo, hi, nullable) in INT_FIELDS.items():
        cell = table[key]
        assert cell.startswith(f"{lo}–{hi}"), (lang, key, cell)
        assert ("null" in cell) == nullable, (lang, key, cell)


@pytest.mark.parametrize("lang", sorted(GUIDES))
def test_the_other_fields_state_their_limits(lang: str) -> None:
    table = _ranges(GUIDES[lang])
    assert str(NAME_MAX) in table["name"]
    assert str(ORIGINS_MAX) in table["returnOrigins"] and "null" not in table["returnOrigins"]
    assert str(ORIGINS_MAX) in table["tagOrigins"] and "null" in table["tagOrigins"]
    assert str(MAX_RULES) in table["rules"]
    assert f"0–{AUTO_ACTIVATE_MAX}" in table["autoActivate"]
    for knob, (lo, hi) in AUTOTUNE_RANGES.items():
        assert f"{lo}–{hi}" in table["autotune"], (lang, knob)
    assert "2000-01-01" in table["opensAt"] and "2100-01-01" in table["opensAt"]
    for state in ("active", "paused", "bypass"):
        assert f"`{state}`" in table["state"]


@pytest.mark.parametrize("key", sorted(INT_FIELDS))
def test_the_declared_bounds_are_the_ones_enforced(engine, key: str) -> None:
    lo, hi, nullable = INT_FIELDS[key]
    engine.upsert({"id": "r", "targetUrl": TARGET})
    for ok in (lo, hi, *((None,) if nullable else ())):
        engine.upsert({"id": "r", key: ok})
    for bad in (lo - 1, hi + 1, *(() if nullable else (None,))):
        with pytest.raises(EngineError) as info:
            engine.upsert({"id": "r", key: bad})
        assert info.value.status == 400 and info.value.extra.get("field") == key
