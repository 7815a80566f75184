"""The chart's legend names every kind of mark the server draws, in the words the guide uses for them."""

from __future__ import annotations

import re
from pathlib import Path

from queue_manager.routes.admin.reports import AUDIT_MARKS
from queue_manager.sidestores.timeline.series import STATE_MARKS

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "queue_manager" / "web" / "console" / "chart.js"
OPERATIONS = ROOT / "docs" / "OPERATIONS.md"

# what each kind of mark is called in the legend's tooltip (the guide's words where it has them)
NAMES = {
    "rate": "rate moves",
    "threshold": "threshold activation",
    "autotune": "autotune",
    "flush": "flushes",
    "purge": "purges",
    "eject": "ejects",
    "edit": "edits",
    "schedule": "schedule changes",
    "event": "scheduled events",
    "room": "the room re-created",
    "block": "protection blocks",
}
STATE = "state flips"


def _events_title() -> str:
    match = re.search(r'key: "marks",.*?title: "([^"]+)"', CHART.read_text(encoding="utf-8"), re.S)
    assert match, "the events entry of the chart's legend has no title"
    return match.group(1)


def test_the_legend_names_every_kind_of_mark_the_server_makes() -> None:
    title = _events_title()
    kinds = {kind for kind, _ in AUDIT_MARKS.values()} | {"rate", "purge", "room", "block"}
    assert kinds <= set(NAMES), sorted(kinds - set(NAMES))
    for kind in kinds:
        assert NAMES[kind] in title, (kind, title)
    assert STATE_MARKS and STATE in title


def test_the_legend_lists_the_guides_marks_in_the_guides_order() -> None:
    # the Operations Guide: "rate moves, state flips, threshold activation, autotune, flushes, purges, ejects and
    # protection blocks"
    guide = [
        "rate moves",
        STATE,
        "threshold activation",
        "autotune",
        "flushes",
        "purges",
        "ejects",
        "protection blocks",
    ]
    title = _events_title()
    at = [title.index(name) for name in guide]
    assert at == sorted(at), title


def test_the_operations_doc_names_flushes_among_the_marks() -> None:
    text = OPERATIONS.read_text(encoding="utf-8")
    chart = text[text.index("- **Chart** (per room") :]
    chart = chart[: chart.index("\n- **Editor**")]
    for name in ("ejects", "flushes", "threshold activation", "autotune", "purge", "protection"):
        assert name in chart, name
    assert "`events` entry's tooltip lists what its marks" in chart
