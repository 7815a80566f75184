"""JOURNAL_MAX_BATCH=1: every caller of ``commit`` is its own transaction (the benchmark's comparison)."""

from __future__ import annotations

import asyncio
from typing import Any

from queue_manager.engine.events import Event
from tests.journal.conftest import make_journal


def ev(seq: int) -> Event:
    data = {"n": seq, "ident": f"203.0.113.{seq % 250}", "fp": "ab", "fp2": None, "ck": None, "joined": 1}
    return Event("join", "r", 1, 1_767_225_600_000 + seq, data, seq=seq)


async def test_max_batch_one_commits_each_caller_alone_and_keeps_every_event(
    schema: str, tmp_path: Any, pg: Any
) -> None:
    j = make_journal(schema, tmp_path / "spool", max_batch=1)
    await j.start()
    try:
        # 60 concurrent single-event callers and one caller of 3 events (never split)
        singles = [j.commit([ev(seq)]) for seq in range(1, 61)]
        await asyncio.gather(*singles, j.commit([ev(61), ev(62), ev(63)]))
    finally:
        await j.close()
    assert int(await pg.fetchval(f'SELECT count(*) FROM "{schema}".events')) == 63
    assert j.transactions == 61
    assert j.batch_callers == {1: 61}
    assert j.batch_events == {1: 60, 3: 1}
