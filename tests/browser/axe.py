"""axe-core (vendored from npm under vendor/axe-core, MPL-2.0) injected into a page: WCAG 2.1 AA violations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

AXE_JS = Path(__file__).resolve().parent / "vendor" / "axe-core" / "axe.min.js"
WCAG_21_AA = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]


def violations(page: Any, context: str | None = None) -> list[dict[str, Any]]:
    """Run axe on the page as it is now; the violations of WCAG 2.0/2.1 A and AA (empty when clean)."""
    page.add_script_tag(content=AXE_JS.read_text(encoding="utf-8"))
    result: dict[str, Any] = page.evaluate(
        """async ([ctx, tags]) => await axe.run(ctx || document, {runOnly: {type: 'tag', values: tags}})""",
        [context, WCAG_21_AA],
    )
    return list(result["violations"])


def describe(found: list[dict[str, Any]]) -> str:
    """A readable list for an assertion message."""
    lines = []
    for v in found:
        targets = [", ".join(n["target"]) for n in v["nodes"][:5]]
        lines.append(f"{v['id']} ({v['impact']}): {v['help']} -> {targets}")
    return "\n".join(lines)
