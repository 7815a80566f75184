"""Docs guarded by tests: every error code the server can answer and every metric it exposes is documented."""

from __future__ import annotations

import re
from pathlib import Path

from queue_manager.metrics import Counters, render

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "queue_manager"
DOCS = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "docs").rglob("*.md"))

CODE_PATTERNS = (
    re.compile(r"(?:HttpError|EngineError)\(\s*\d{3},\s*\"([a-z_]+)\""),
    re.compile(r"bad_field\([^()]*?\"([a-z_]+)\"\)\s*$", re.M),
    re.compile(r"\"code\":\s*\"([a-z_]+)\""),
)


def _sources() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py"))


def test_error_codes_are_collected() -> None:
    codes = {m for pattern in CODE_PATTERNS for m in pattern.findall(_sources())}
    # the guard must actually see the codes it guards
    assert {"unknown_field", "conflicting_field", "invalid_room_id", "queue_identity_limit", "no_room"} <= codes


def test_every_error_code_is_documented() -> None:
    codes = {m for pattern in CODE_PATTERNS for m in pattern.findall(_sources())}
    missing = sorted(code for code in codes if f"`{code}`" not in DOCS and f"{code}`" not in DOCS)
    assert not missing, f"error codes answered by the server but not documented in docs/: {missing}"


def test_every_metric_is_documented() -> None:
    counters = Counters()
    counters.refused_origin_checks[("shop", "https://x.example")] = 1
    counters.gate_checks["admit"] = 1
    text = render(
        [{"id": "shop", "effectiveState": "active", "maxConcurrent": None}],
        counters,
        uptime=1.0,
        start_time=1.0,
        sse_subscribers=0,
        shutting_down=False,
        instance=None,
    ).decode()
    exposed = {line.split()[0].split("{")[0] for line in text.splitlines() if line and not line.startswith("#")}
    assert "qm_room_waiting" in exposed and "qm_rejected_tokens_all_total" in exposed
    missing = sorted(n for n in exposed if f"`{n}" not in DOCS and not n.endswith("_created"))
    assert not missing, f"metrics exposed but not documented: {missing}"
