"""Figures both commands report the same way: percentiles, and how far the ETA a visitor was shown was off (pure)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """The nearest-rank ``q`` percentile (0-100) of values already sorted; None for none."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def spread(values: Sequence[float], digits: int = 1) -> dict[str, float | None]:
    """p50, p90 and max of ``values`` (seconds, rounded to ``digits`` decimals)."""
    ordered = sorted(values)
    return {
        "p50": _round(percentile(ordered, 50), digits),
        "p90": _round(percentile(ordered, 90), digits),
        "max": _round(ordered[-1] if ordered else None, digits),
        "count": len(ordered),
    }


def eta_error(pairs: Sequence[tuple[float, float]]) -> dict[str, Any]:
    """How the ETA shown at join compared with the wait measured, over (measured, eta) pairs in seconds.

    ``medianSec``: the median of measured − ETA (positive: visitors waited longer than they were told);
    ``medianAbsSec``/``p90AbsSec``: the size of the miss; ``medianRatio``: measured ÷ ETA.
    """
    if not pairs:
        return {"count": 0, "medianSec": None, "medianAbsSec": None, "p90AbsSec": None, "medianRatio": None}
    errors = sorted(m - e for m, e in pairs)
    absolute = sorted(abs(x) for x in errors)
    ratios = sorted(m / e for m, e in pairs if e > 0)
    return {
        "count": len(pairs),
        "medianSec": _round(percentile(errors, 50)),
        "medianAbsSec": _round(percentile(absolute, 50)),
        "p90AbsSec": _round(percentile(absolute, 90)),
        "medianRatio": None if not ratios else round(percentile(ratios, 50) or 0.0, 2),
    }


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def seconds(value: float | None) -> str:
    """A duration for a table: ``12.3 s``, ``4 min 05 s``, or ``-``."""
    if value is None:
        return "-"
    if value < 0:
        return "-" + seconds(-value)
    if value < 120:
        return f"{value:.1f} s"
    minutes, sec = divmod(round(value), 60)
    return f"{minutes} min {sec:02d} s"
