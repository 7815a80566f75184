"""Entry codes: what a visitor types to take a place in a room whose ``entry`` is ``code``.

A generated code is 10 characters of Crockford's base32 (50 random bits) shown as two groups of five,
``7KQ2M-X9D4B``. What a visitor types is read the forgiving way Crockford's alphabet allows: case, dashes
and spaces do not matter, ``O`` is ``0``, ``I`` and ``L`` are ``1``. An uploaded code (4 to 64 letters,
digits and dashes) is read the same way, so it is redeemed however it is typed.

A code is kept only as ``SHA-256(room salt || normalised code)``: see docs/decisions.md for why a fast hash.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Final

__all__ = [
    "CSV_BODY_MAX",
    "MAX_COUNT",
    "MAX_USES",
    "CodeRow",
    "generate",
    "hashed",
    "normalise",
    "parse_rows",
]

ALPHABET: Final = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # Crockford's base32: no I, L, O, U
MAX_COUNT: Final = 100_000
MAX_USES: Final = 1_000_000
MAX_CSV_ROWS: Final = 100_000
CSV_BODY_MAX: Final = 8 * 1024 * 1024  # an upload: 100,000 rows of a 64-character code, a lane and uses fit
_LENGTH: Final = 10
_TYPED: Final = str.maketrans({"O": "0", "I": "1", "L": "1", "-": None, " ": None})
_UPLOADED_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9 -]{2,62}[A-Za-z0-9]\Z")
_LANE_RE: Final = re.compile(r"[a-z0-9][a-z0-9-]{0,31}\Z")


@dataclass(frozen=True, slots=True)
class CodeRow:
    code: str  # normalised
    lane: str | None
    uses: int


def generate(count: int) -> list[str]:
    """``count`` fresh codes, ``XXXXX-XXXXX``."""
    out = []
    for _ in range(count):
        text = "".join(secrets.choice(ALPHABET) for _ in range(_LENGTH))
        out.append(f"{text[:5]}-{text[5:]}")
    return out


def normalise(typed: str) -> str | None:
    """The code as it is kept (upper case, no dashes or spaces, Crockford's look-alikes folded); None when
    it cannot be a code."""
    if not isinstance(typed, str) or not _UPLOADED_RE.match(typed.strip()):
        return None
    return typed.strip().upper().translate(_TYPED)


def hashed(salt: bytes, code: str) -> bytes:
    """What the store keeps of a normalised code."""
    return hashlib.sha256(salt + code.encode()).digest()


def valid_lane(lane: object) -> bool:
    return isinstance(lane, str) and _LANE_RE.match(lane) is not None


def parse_rows(
    fields: list[str], reader: Iterable[dict[str, str]], default_uses: int = 1, lanes: Collection[str] | None = None
) -> tuple[list[CodeRow], list[dict[str, object]]]:
    """An uploaded CSV's columns and rows: a ``code`` column, optional ``lane`` and ``uses``. The rows read,
    and the rows refused (``{"line", "reason"}``, the header being line 1). With ``lanes`` (the room's lane
    ids), a row naming another lane is refused: its code could never be redeemed."""
    if "code" not in fields:
        return [], [{"line": 1, "reason": "no code column"}]
    rows: list[CodeRow] = []
    rejected: list[dict[str, object]] = []
    for index, row in enumerate(reader, start=2):
        if len(rows) + len(rejected) >= MAX_CSV_ROWS:
            rejected.append({"line": index, "reason": f"over {MAX_CSV_ROWS} rows"})
            break
        code = normalise((row.get("code") or "").strip())
        lane = (row.get("lane") or "").strip() or None
        uses_text = (row.get("uses") or "").strip()
        if code is None:
            rejected.append({"line": index, "reason": "code must be 4 to 64 letters, digits or dashes"})
        elif lane is not None and not valid_lane(lane):
            rejected.append({"line": index, "reason": "lane must match [a-z0-9][a-z0-9-]{0,31}"})
        elif lane is not None and lanes is not None and lane not in lanes:
            rejected.append({"line": index, "reason": f"the room has no lane {lane!r}"})
        elif uses_text and (not uses_text.isdigit() or not 1 <= int(uses_text) <= MAX_USES):
            rejected.append({"line": index, "reason": f"uses must be a whole number from 1 to {MAX_USES}"})
        else:
            rows.append(CodeRow(code, lane, int(uses_text) if uses_text else default_uses))
    return rows, rejected
