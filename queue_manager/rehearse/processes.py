"""``qm rehearse --processes N``: one crowd driven from N processes, one report.

One process's event loop tops out at a few thousand requests a second (the driver's own cost per
request), so a larger surge needs more processes (and the cores to run them). Each of the N processes
drives every N-th visitor of the same crowd: the same curve, and the same no-shows and streams one
process would draw from the seed. They start the curve at one wall-clock instant, once all of them are
ready, so their times share one axis; what they saw is added up into one tally and reported as one run.
The room is read before and after by the parent; the first process samples the server's health.
"""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import queue
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from multiprocessing.context import SpawnProcess
from typing import Any, TypeVar

from queue_manager.rehearse.drive import Outcome, Plan, RehearseError, Tally, read_room, rehearse

T = TypeVar("T")

READY_TIMEOUT_SEC = 60.0  # a process that has not imported and connected by then stops the run
LEAD_SEC = 0.3  # from the last process ready to the first arrival


def run_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on uvloop where it is installed: the driver's own cost per request is what limits it."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - Windows
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


def merge(tallies: list[Tally]) -> Tally:
    """The processes' tallies as one: counts added, lists joined, counters summed (times share one axis)."""
    out = Tally()
    for f in dataclasses.fields(Tally):
        if f.name == "start":
            continue
        values = [getattr(t, f.name) for t in tallies]
        first = getattr(out, f.name)
        if isinstance(first, Counter):
            total: Counter[str] = Counter()
            for c in values:
                total.update(c)
            setattr(out, f.name, total)
        elif isinstance(first, list):
            setattr(out, f.name, [x for v in values for x in v])
        else:
            setattr(out, f.name, sum(values))
    return out


def _child(plan: Plan, ready: Any, go: Any, start_at: Any, results: Any) -> None:
    """One process: say it is ready, wait for the common start, drive its share, send back what it saw."""
    ready.put(plan.share[0])
    if not go.wait(READY_TIMEOUT_SEC * 2):
        results.put((plan.share[0], "the run was not started"))
        return
    try:
        outcome = run_loop(rehearse(dataclasses.replace(plan, start_at=start_at.value), Tally()))
    except RehearseError as exc:
        results.put((plan.share[0], str(exc)))
        return
    results.put((plan.share[0], (outcome.tally, outcome.elapsed, outcome.finished)))


def rehearse_from(plan: Plan, processes: int, *, on_start: Callable[[dict[str, Any]], None] | None = None) -> Outcome:
    """Drive ``plan`` from ``processes`` processes and merge what they saw into one outcome."""
    before = run_loop(read_room(plan))
    if on_start is not None:
        on_start(before)
    ctx = multiprocessing.get_context("spawn")
    ready, results = ctx.Queue(), ctx.Queue()
    go = ctx.Event()
    start_at = ctx.Value("d", 0.0)
    children: list[SpawnProcess] = []
    for i in range(processes):
        share = dataclasses.replace(plan, share=(i, processes))
        children.append(ctx.Process(target=_child, args=(share, ready, go, start_at, results), daemon=True))
    for child in children:
        child.start()
    try:
        for _ in children:
            try:
                ready.get(timeout=READY_TIMEOUT_SEC)
            except queue.Empty:
                raise RehearseError(f"the driving processes were not ready within {READY_TIMEOUT_SEC:g} s") from None
        start_at.value = time.time() + LEAD_SEC
        go.set()
        got: dict[int, Any] = {}
        while len(got) < processes:
            try:
                i, answer = results.get(timeout=1.0)
            except queue.Empty:
                gone = [i for i, c in enumerate(children) if i not in got and not c.is_alive()]
                if gone and results.empty():
                    code = children[gone[0]].exitcode
                    raise RehearseError(f"driving process {gone[0]} ended without a report (exit {code})") from None
                continue
            got[i] = answer
    finally:
        for child in children:
            child.join(timeout=5)
            if child.is_alive():
                child.terminate()
    failed = [answer for answer in got.values() if isinstance(answer, str)]
    if failed:
        raise RehearseError(failed[0])
    tallies = [got[i][0] for i in range(processes)]
    tally = merge(tallies)
    after = run_loop(read_room(plan))
    elapsed = max(got[i][1] for i in range(processes))
    finished = all(got[i][2] for i in range(processes))
    return Outcome(plan, tally, before, after, elapsed, finished)
