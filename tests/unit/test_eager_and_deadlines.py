"""Unit tests for two pieces under the inline fast path: ``http.eager.run_now`` and ``inline.deadlines.Deadlines``."""

from __future__ import annotations

import asyncio
import gc
import inspect
import warnings
from collections.abc import Generator
from typing import Any

import pytest

from queue_manager.http.eager import Suspended, run_now
from queue_manager.inline.deadlines import Deadlines

# ---------------------------------------------------------------------- run_now


class _Yield:
    """An awaitable that suspends once (what a real wait on the network does)."""

    def __await__(self) -> Generator[None, None, None]:
        yield


async def _value(x: int) -> int:
    return x


async def _nested() -> int:
    return await _value(20) + await _value(22)  # awaiting coroutines that never suspend is no suspension


async def _raises() -> None:
    await _value(1)
    raise ValueError("from the coroutine")


def test_run_now_returns_the_coroutines_value() -> None:
    assert run_now(_value(7)) == 7
    assert run_now(_nested()) == 42
    assert run_now(_value(0)) == 0


def test_run_now_returns_none_from_a_coroutine_that_returns_nothing() -> None:
    seen: list[str] = []

    async def effect() -> None:
        seen.append("ran")

    assert run_now(effect()) is None
    assert seen == ["ran"]  # run in place, before run_now returned


def test_run_now_raises_the_coroutines_exception() -> None:
    with pytest.raises(ValueError, match="from the coroutine"):
        run_now(_raises())


def test_run_now_raises_suspended_and_closes_a_coroutine_that_would_wait() -> None:
    cleanup: list[str] = []

    async def waits() -> int:
        try:
            await _Yield()
            return 1  # pragma: no cover - never resumed
        finally:
            cleanup.append("closed")

    coro = waits()
    with pytest.raises(Suspended) as err:
        run_now(coro)
    assert isinstance(err.value, RuntimeError)
    assert "waits" in str(err.value)
    assert inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED
    assert cleanup == ["closed"]  # the coroutine's finally ran: closed, not left suspended


def test_run_now_on_asyncio_sleep_zero_is_a_suspension() -> None:
    async def yields_to_the_loop() -> None:
        await asyncio.sleep(0)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(Suspended):
            run_now(yields_to_the_loop())
        gc.collect()
    assert not [w for w in caught if "never awaited" in str(w.message)]


def test_run_now_inside_a_running_loop_needs_no_task() -> None:
    async def main() -> tuple[int, int]:
        before = len(asyncio.all_tasks())
        value = run_now(_nested())
        return value, len(asyncio.all_tasks()) - before

    assert asyncio.run(main()) == (42, 0)


# ---------------------------------------------------------------------- Deadlines


class _Entry:
    def __init__(self, name: str = "") -> None:
        self.name = name
        self.calls = 0

    def timed_out(self) -> None:
        self.calls += 1


async def _until(check: Any, limit: float = 3.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + limit
    while not check():
        if loop.time() > end:
            raise AssertionError("timed out waiting")
        await asyncio.sleep(0.005)


def test_the_sweep_interval_is_a_tenth_of_the_timeout_within_bounds() -> None:
    assert Deadlines(1.0).every == pytest.approx(0.1)
    assert Deadlines(30.0).every == 0.25  # at most every 250 ms
    assert Deadlines(0.001).every == 0.005  # at least 5 ms apart


async def test_an_entry_past_its_deadline_is_timed_out_once() -> None:
    d = Deadlines(0.05)
    entry = _Entry()
    loop = asyncio.get_running_loop()
    added = loop.time()
    d.add(entry)
    assert d.timer is not None  # the first entry starts the timer
    await _until(lambda: entry.calls > 0)
    assert loop.time() - added >= 0.05  # not before its deadline
    assert entry not in d.waiting
    await asyncio.sleep(0.1)  # more sweeps would have passed: still once
    assert entry.calls == 1


async def test_an_entry_is_not_timed_out_before_its_deadline() -> None:
    d = Deadlines(0.5)
    entry = _Entry()
    d.add(entry)
    await asyncio.sleep(0.15)  # a few sweeps (every 50 ms), all before the deadline
    assert entry.calls == 0 and entry in d.waiting
    d.discard(entry)


async def test_an_entry_discarded_before_its_deadline_is_never_timed_out() -> None:
    d = Deadlines(0.05)
    gone, stays = _Entry("gone"), _Entry("stays")
    d.add(gone)
    d.add(stays)
    d.discard(gone)
    await _until(lambda: stays.calls > 0)
    await asyncio.sleep(0.1)
    assert gone.calls == 0 and stays.calls == 1
    d.discard(gone)  # discarding twice, or after the timeout, is harmless
    d.discard(stays)


async def test_the_timer_stops_when_empty_and_starts_again_on_the_next_add() -> None:
    d = Deadlines(0.05)
    first = _Entry()
    d.add(first)
    d.discard(first)
    assert d.timer is not None  # the sweep already scheduled finds nothing and stops
    await _until(lambda: d.timer is None, 1.0)
    assert not d.waiting and first.calls == 0
    second = _Entry()
    d.add(second)
    assert d.timer is not None
    await _until(lambda: second.calls == 1)
    await _until(lambda: d.timer is None, 1.0)  # emptied by the timeout: stopped again
    assert not d.waiting


async def test_one_timer_for_many_entries() -> None:
    d = Deadlines(0.05)
    entries = [_Entry(str(i)) for i in range(50)]
    d.add(entries[0])
    timer = d.timer
    for e in entries[1:]:
        d.add(e)
        assert d.timer is timer  # adding while it runs schedules nothing new
    await _until(lambda: all(e.calls for e in entries))
    assert [e.calls for e in entries] == [1] * len(entries)


async def test_an_entry_added_again_gets_a_fresh_deadline() -> None:
    d = Deadlines(0.2)
    entry = _Entry()
    d.add(entry)
    await asyncio.sleep(0.15)
    d.discard(entry)
    d.add(entry)  # e.g. a relay retried on a fresh connection
    await asyncio.sleep(0.1)  # 0.25 s after the first add, 0.1 s after the second
    assert entry.calls == 0
    await _until(lambda: entry.calls == 1)


async def test_a_timed_out_entry_may_discard_and_add_others() -> None:
    d = Deadlines(0.05)
    later = _Entry("later")

    class Chains(_Entry):
        def timed_out(self) -> None:
            super().timed_out()
            d.discard(self)  # already gone: harmless
            d.add(later)

    first = Chains()
    d.add(first)
    await _until(lambda: later.calls == 1)
    assert first.calls == 1
    await _until(lambda: d.timer is None, 1.0)
