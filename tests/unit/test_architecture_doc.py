"""docs/architecture.md names every module of the package, and names no module that is gone."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "queue_manager"


def _doc() -> str:
    return (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


def test_every_module_is_on_the_map() -> None:
    doc = _doc()
    missing = sorted(
        str(path.relative_to(ROOT))
        for path in PACKAGE.rglob("*.py")
        if path.name not in ("__init__.py", "__main__.py") and not re.search(rf"\b{re.escape(path.name)}\b", doc)
    )
    assert not missing, f"docs/architecture.md does not name: {missing}"


def test_the_map_names_no_module_that_is_gone() -> None:
    names = {path.name for path in PACKAGE.rglob("*.py")}
    named = set(re.findall(r"\b([a-z_]+\.py)\b", _doc()))
    gone = sorted(named - names)
    assert not gone, f"docs/architecture.md names modules that do not exist: {gone}"
