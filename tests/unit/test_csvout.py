"""The one CSV writer: a text cell a spreadsheet would run as a formula is written as text; numbers stay numbers."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pytest

from queue_manager.routes.csvout import FORMULA_STARTS, cell, render

PACKAGE = Path(__file__).resolve().parents[2] / "queue_manager"


@pytest.mark.parametrize(
    ("text", "written"),
    [
        ("=cmd|' /C calc'!A0", "\"'=cmd|' /C calc'!A0\""),
        ("+SUM(1+1)", '"\'+SUM(1+1)"'),
        ("@SUM(1)", '"\'@SUM(1)"'),
        ("-2+3", '"\'-2+3"'),
        ("\tTAB", '"\'\tTAB"'),
        ("\r=1", '"\'\r=1"'),
        ('=HYPERLINK("http://x.example","y")', '"\'=HYPERLINK(""http://x.example"",""y"")"'),
        ("-3", '"\'-3"'),  # text that looks like a number is still text
    ],
)
def test_a_text_cell_that_starts_a_formula_is_quoted_text(text: str, written: str) -> None:
    assert cell(text) == written
    assert next(csv.reader(io.StringIO(written + "\r\n"))) == ["'" + text]


@pytest.mark.parametrize(
    ("value", "written"),
    [
        (-3, "-3"),
        (-0.5, "-0.5"),
        (0, "0"),
        (1_700_000_000_000, "1700000000000"),
        (2.25, "2.25"),
        (True, "true"),
        (False, "false"),
        (None, ""),
    ],
)
def test_the_servers_own_numbers_are_written_as_they_are(value: object, written: str) -> None:
    assert cell(value) == written


@pytest.mark.parametrize(
    ("text", "written"),
    [
        ("plain", "plain"),
        ("room.pause", "room.pause"),
        ("a, b", '"a, b"'),
        ('say "hi"', '"say ""hi"""'),
        ("two\nlines", '"two\nlines"'),
        ("x=1; y=2", "x=1; y=2"),  # a formula character later in the cell is harmless
        ("", ""),
        ("::1", "::1"),
    ],
)
def test_other_text_is_quoted_only_where_csv_needs_it(text: str, written: str) -> None:
    assert cell(text) == written


def test_render_writes_a_header_and_the_rows_in_column_order() -> None:
    rows = [
        {"actor": "=cmd|' /C calc'!A0", "ts": 5, "ok": True, "extra": "ignored"},
        {"actor": "Night ops", "ts": -1},
    ]
    text = render(("ts", "actor", "ok"), rows)
    assert text == "ts,actor,ok\r\n5,\"'=cmd|' /C calc'!A0\",true\r\n-1,Night ops,\r\n"
    assert list(csv.reader(io.StringIO(text))) == [
        ["ts", "actor", "ok"],
        ["5", "'=cmd|' /C calc'!A0", "true"],
        ["-1", "Night ops", ""],
    ]
    for row in list(csv.reader(io.StringIO(text)))[1:]:
        assert not [c for c in row if c.startswith(FORMULA_STARTS) and not re.fullmatch(r"-?[0-9.]+", c)]


def test_no_other_module_writes_csv() -> None:
    """Every CSV goes through csvout: nothing else imports the csv module or answers text/csv."""
    offenders = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path.name != "csvout.py"
        and (re.search(r"^\s*(import csv|from csv import)", (src := path.read_text()), re.M) or "text/csv;" in src)
    )
    assert offenders == [], offenders
