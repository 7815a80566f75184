"""URL targeting: which pages a room protects.

A rule is ``{"pattern": "...", "action": "queue"|"skip"}``. A pattern starting with ``/`` is matched
against the path; otherwise against ``scheme://host/path``. ``*`` matches any run of characters.
The first rule that matches decides. A room with no rules protects every page; with rules, a URL
that matches none is not protected. A check with no page URL is protected (counted as unscoped).

Patterns are matched in linear time without backtracking (``glob_match``): a pattern and the page URL
both come from outside (an operator saves the one, any anonymous visitor sends the other), so a regex
with one ``.*`` per ``*`` could be made to run for minutes by a pattern like ``/*a*a*a*a*b``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from queue_manager.engine.errors import bad_field

MAX_RULES = 100


@dataclass(slots=True)
class TargetRule:
    id: str
    pattern: str
    action: str
    pieces: tuple[str, ...]
    matches: int = 0
    last_match_ms: int | None = None
    on_path: bool = field(default=False)

    def to_public(self) -> dict[str, Any]:
        return {"id": self.id, "pattern": self.pattern, "action": self.action}

    def stats(self) -> dict[str, Any]:
        return {**self.to_public(), "matchCount": self.matches, "lastMatchAt": self.last_match_ms}


def glob_match(pieces: tuple[str, ...], text: str) -> bool:
    """Whether ``text`` is the pattern whose literal pieces (the pattern split on ``*``) are ``pieces``.

    The whole of ``text`` must match (anchored at both ends); ``*`` matches any run of characters,
    the empty run included; everything else matches itself, case included. The first piece is a
    prefix, the last a suffix, and each piece between them is found left to right in what remains:
    taking the leftmost place for each middle piece never loses a match a later place would give,
    since it leaves the most text to the pieces after it. Each ``str.find`` scans a part of
    ``text`` once, so a rule costs at most O(len(text) * len(pattern)), and never backtracks.
    """
    first, last = pieces[0], pieces[-1]
    if len(pieces) == 1:
        return text == first
    end = len(text) - len(last)
    if end < len(first) or not text.startswith(first) or not text.endswith(last):
        return False
    at = len(first)
    for piece in pieces[1:-1]:
        found = text.find(piece, at, end)
        if found < 0:
            return False
        at = found + len(piece)
    return True


def parse_rules(value: Any) -> tuple[TargetRule, ...]:
    if not isinstance(value, list) or len(value) > MAX_RULES:
        raise bad_field("rules", f"rules must be a list of at most {MAX_RULES} rules.", "invalid_rules")
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, dict) or set(item) - {"id", "pattern", "action"}:
            raise bad_field(
                "rules", 'each rule is {"pattern": str, "action": "queue"|"skip", "id"?: str}.', "invalid_rules"
            )
        pattern = item.get("pattern")
        action = item.get("action", "queue")
        rid = item.get("id", f"r{i + 1}")
        if (
            not isinstance(pattern, str)
            or not 1 <= len(pattern) <= 500
            or action not in ("queue", "skip")
            or (not isinstance(rid, str) or not 1 <= len(rid) <= 40)
        ):
            raise bad_field(
                "rules", 'each rule is {"pattern": str, "action": "queue"|"skip", "id"?: str}.', "invalid_rules"
            )
        out.append(TargetRule(rid, pattern, action, tuple(pattern.split("*")), on_path=pattern.startswith("/")))
    return tuple(out)


def match(rules: tuple[TargetRule, ...], url: str) -> TargetRule | None:
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    path = parts.path or "/"
    full = f"{parts.scheme}://{parts.netloc.lower()}{path}"
    for rule in rules:
        if glob_match(rule.pieces, path if rule.on_path else full):
            return rule
    return None
