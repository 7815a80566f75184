"""Every CSV this server writes (the audit trail, a room's series, the reports), through one writer; and the
one reader of a CSV an operator uploads (a room's entry codes, :func:`read`).

A spreadsheet that opens a CSV takes a cell beginning with ``=``, ``+``, ``-``, ``@``, a tab or a carriage
return for a formula, and an operator's name such as ``=cmd|' /C calc'!A0`` would run on the machine of
whoever opens the export (CSV injection). So a text cell that begins with one of those is written with a
single quote in front, between double quotes: ``"'=cmd|' /C calc'!A0"``, which a spreadsheet shows as text.

Only text is escaped. A number the server itself writes (an ``int`` or a ``float``: a count, an instant, a
difference that can be negative) is written as it is, so ``-3`` still reads as minus three; no caller can
choose what such a cell begins with. Text that merely looks like a number (``"-3"`` as a string) is text
and is escaped. ``True``/``False`` are ``true``/``false``, None is an empty cell, anything else its ``str``.
Quoting is otherwise what the ``csv`` module's minimal quoting does (a comma, a double quote or a line
break), and lines end in CRLF (RFC 4180).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator, Mapping, Sequence

from queue_manager.http.wire import send_response
from queue_manager.routes.call import Call

#: What makes a spreadsheet read a cell as a formula (OWASP, "CSV Injection").
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_NEEDS_QUOTES = frozenset(',"\r\n')


def read(text: str) -> tuple[list[str], Iterator[dict[str, str]]]:
    """An uploaded CSV: its column names (trimmed, lower case) and its rows by those names."""
    reader = csv.DictReader(io.StringIO(text))
    names = [name.strip().lower() for name in reader.fieldnames or []]
    reader.fieldnames = names
    return names, ({k: v if isinstance(v, str) else "" for k, v in row.items() if k is not None} for row in reader)


def _quoted(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def cell(value: object) -> str:
    """One cell as it is written in the file (escaped and quoted where needed)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)  # the server's own number: never escaped, "-3" stays a number
    text = value if isinstance(value, str) else str(value)
    if text.startswith(FORMULA_STARTS):
        return _quoted("'" + text)
    if any(c in _NEEDS_QUOTES for c in text):
        return _quoted(text)
    return text


def render(columns: Sequence[str], rows: Iterable[Mapping[str, object]]) -> str:
    """A header of ``columns``, then one line per row (a column a row lacks is an empty cell)."""
    lines = [",".join(cell(name) for name in columns)]
    lines.extend(",".join(cell(row.get(name)) for name in columns) for row in rows)
    return "\r\n".join(lines) + "\r\n"


async def send(call: Call, text: str, filename: str) -> None:
    """The CSV as a download (``text/csv``, ``no-store``); a HEAD gets the headers alone."""
    safe = "".join(c for c in filename if c.isalnum() or c in "-_.") or "export.csv"
    await send_response(
        call.send,
        200,
        text.encode(),
        [
            (b"content-type", b"text/csv; charset=utf-8"),
            (b"content-disposition", f'attachment; filename="{safe}"'.encode()),
            (b"cache-control", b"no-store"),
        ],
        call.req.method == "HEAD",
    )
