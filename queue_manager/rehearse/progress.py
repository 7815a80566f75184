"""A rehearsal's progress while it runs: a live panel (rich) on a terminal, a plain line every few seconds otherwise."""

from __future__ import annotations

import asyncio
from typing import TextIO

from rich.console import Console
from rich.live import Live
from rich.table import Table

from queue_manager.rehearse.drive import Plan, Tally
from queue_manager.rehearse.stats import percentile, seconds

PLAIN_EVERY_SEC = 5.0


def _figures(plan: Plan, tally: Tally) -> list[tuple[str, str]]:
    now = tally.now()
    recent = sum(1 for t in tally.joined[-5000:] if t > now - 1.0)
    waits = sorted(tally.waits)
    health = tally.health[-1] if tally.health else {}
    errors = sum(tally.errors.values())
    return [
        ("elapsed", seconds(now)),
        ("arrived", f"{tally.arrived} / {plan.visitors}"),
        ("joins", f"{len(tally.joined)} ok, {tally.join_failed} failed, {recent}/s now"),
        ("waiting", str(max(0, tally.waiting))),
        ("passes seen", str(len(tally.passes))),
        ("admitted", str(len(tally.admitted))),
        ("wait p50 / p90", f"{seconds(percentile(waits, 50))} / {seconds(percentile(waits, 90))}"),
        ("errors", str(errors) + ("" if not errors else f" (top: {tally.errors.most_common(1)[0][0]})")),
        ("health", f"{health.get('status', '-')}, ready {health.get('ready', '-')}"),
    ]


def _table(plan: Plan, tally: Tally) -> Table:
    table = Table(title=f"qm rehearse: room {plan.room}, {plan.ramp.spec}", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    for name, value in _figures(plan, tally):
        table.add_row(name, value)
    return table


def plain_line(plan: Plan, tally: Tally) -> str:
    return " · ".join(f"{name} {value}" for name, value in _figures(plan, tally))


async def show(plan: Plan, tally: Tally, out: TextIO) -> None:
    """Run until cancelled: the live panel when ``out`` is a terminal, else a plain line every 5 s."""
    if out.isatty():
        with Live(_table(plan, tally), console=Console(file=out), refresh_per_second=4, transient=False) as live:
            while True:
                await asyncio.sleep(0.5)
                live.update(_table(plan, tally))
    while True:
        await asyncio.sleep(PLAIN_EVERY_SEC)
        print(plain_line(plan, tally), file=out, flush=True)
