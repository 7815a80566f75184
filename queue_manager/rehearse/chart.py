"""A simulation's chart: one self-contained HTML file with two inline SVG panels (pure text, no library).

The top panel is the line's depth over time, the bottom one the p50 and p90 wait of the visitors who
had seen their pass by then. No script, no external file: it opens anywhere, offline, and can be
attached to a ticket or a mail as it is.
"""

from __future__ import annotations

from html import escape
from typing import Any

WIDTH, HEIGHT, PAD_LEFT, PAD_RIGHT, PAD_Y = 760, 220, 64, 16, 24


def _nice(top: float) -> float:
    """A round axis maximum at or above ``top``."""
    if top <= 0:
        return 1.0
    step = 10.0 ** (len(str(int(top))) - 1)
    for m in (1.0, 2.0, 2.5, 5.0, 10.0):
        if m * step >= top:
            return m * step
    return 10.0 * step


def _panel(title: str, times: list[float], series: list[tuple[str, str, list[float | None]]], unit: str) -> str:
    t_max = _nice(max(times) if times else 1.0)
    values = [v for _, _, vs in series for v in vs if v is not None]
    y_max = _nice(max(values) if values else 1.0)
    inner_w, inner_h = WIDTH - PAD_LEFT - PAD_RIGHT, HEIGHT - 2 * PAD_Y

    def x(t: float) -> float:
        return PAD_LEFT + inner_w * t / t_max

    def y(v: float) -> float:
        return PAD_Y + inner_h * (1 - v / y_max)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" role="img" '
        f'aria-label="{escape(title)}">',
        f'<text x="{PAD_LEFT}" y="16" font-size="13" font-weight="bold">{escape(title)}</text>',
    ]
    for i in range(5):
        v = y_max * i / 4
        parts.append(
            f'<line x1="{PAD_LEFT}" x2="{WIDTH - PAD_RIGHT}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/>'
            f'<text x="{PAD_LEFT - 6}" y="{y(v) + 4:.1f}" font-size="11" text-anchor="end">{v:g}{unit}</text>'
        )
        t = t_max * i / 4
        parts.append(f'<text x="{x(t):.1f}" y="{HEIGHT - 6}" font-size="11" text-anchor="middle">{t:g} s</text>')
    for n, (name, colour, vs) in enumerate(series):
        points = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in zip(times, vs, strict=True) if v is not None)
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{points}"/>')
        lx = WIDTH - PAD_RIGHT - 150 + 75 * n
        parts.append(
            f'<rect x="{lx}" y="6" width="10" height="10" fill="{colour}"/>'
            f'<text x="{lx + 14}" y="15" font-size="11">{escape(name)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def chart_html(report: dict[str, Any]) -> str:
    """The HTML page for a simulation report (``simulate.Outcome.to_json()``)."""
    samples = report["samples"]
    times = [float(s["t"]) for s in samples]
    sc = report["scenario"]
    title = f"{sc['visitors']} visitors, {sc['arrival']}, rate {report['ratePerMinute']}/min"
    depth = _panel("Line depth (waiting visitors)", times, [("depth", "#2563eb", [s["depth"] for s in samples])], "")
    waits = _panel(
        "Wait from join to pass, visitors served so far",
        times,
        [("p50", "#16a34a", [s["waitP50"] for s in samples]), ("p90", "#dc2626", [s["waitP90"] for s in samples])],
        " s",
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>qm simulate: {escape(title)}</title></head>"
        '<body style="font-family:system-ui,sans-serif;margin:16px">'
        f'<h1 style="font-size:16px">qm simulate: {escape(title)}</h1>{depth}<br>{waits}</body></html>\n'
    )
