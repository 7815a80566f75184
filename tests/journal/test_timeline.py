"""The chart's timeline in PostgreSQL: one row per mark for the whole fleet, blocks summed, 24 h kept."""

from __future__ import annotations

from typing import Any

import pytest

from queue_manager.clock import FakeClock
from queue_manager.journal.database import Database
from queue_manager.sidestores.timeline.pg import BLOCK_NOTE, KEEP_SEC, READ_BACKOFF_SEC, TimelineNotes
from queue_manager.store.base import StoreUnavailable

T = FakeClock().wall_ms() // 1000


async def rows(pg: Any, schema: str) -> list[tuple[str, int, str, str, int]]:
    got = await pg.fetch(
        "SELECT room, extract(epoch FROM at)::bigint AS t, kind, note, count"
        f' FROM "{schema}".timeline_notes ORDER BY at'
    )
    return [(r["room"], int(r["t"]), r["kind"], r["note"], r["count"]) for r in got]


async def test_a_mark_is_written_once_though_every_instance_saw_it(db: Database, pg: Any, schema: str) -> None:
    clock = FakeClock()
    a, b = TimelineNotes(db, clock), TimelineNotes(db, clock)
    a.mark("shop", T, "pause", "state active → paused")
    # held until the flush, and already in the read
    assert [m["kind"] for m in await a.read("shop", T - 60)] == ["pause"]
    assert await b.read("shop", T - 60) == []
    assert await a.flush() == 1
    # the other instance saw the same flip one sample later: it is the same mark
    b.mark("shop", T + 2, "pause", "state active → paused")
    b.mark("shop", T + 2, "rate", "rate 60 → 30/min")
    assert [(m["t"], m["kind"]) for m in await b.read("shop", T - 60)] == [(T, "pause"), (T + 2, "rate")]
    await b.flush()
    await a.flush()  # nothing held: nothing written
    assert await rows(pg, schema) == [
        ("shop", T, "pause", "state active → paused", 1),
        ("shop", T + 2, "rate", "rate 60 → 30/min", 1),
    ]
    # the same change made again later is a mark of its own; other rooms are apart
    a.mark("shop", T + 30, "pause", "state active → paused")
    a.mark("cafe", T + 30, "pause", "state active → paused")
    await a.flush()
    assert [m["t"] for m in await b.read("shop", T - 60)] == [T, T + 2, T + 30]
    assert [m["room"] for m in await pg.fetch(f'SELECT room FROM "{schema}".timeline_notes')].count("cafe") == 1


async def test_blocks_are_one_row_per_room_and_minute_summed_over_the_fleet(db: Database, pg: Any, schema: str) -> None:
    clock = FakeClock()
    a, b = TimelineNotes(db, clock), TimelineNotes(db, clock)
    minute = T - T % 60
    for _ in range(700):
        a.block("shop", minute)
    b.block("shop", minute, 300)
    await a.flush()
    await b.flush()
    a.block("shop", minute, 5)  # held, not written yet: counted in the read
    assert await rows(pg, schema) == [("shop", minute, "block", BLOCK_NOTE, 1000)]
    assert [(m["kind"], m["count"]) for m in await b.read("shop", minute)] == [("block", 1000)]
    assert [(m["kind"], m["count"]) for m in await a.read("shop", minute)] == [("block", 1005)]
    await a.flush()
    assert (await rows(pg, schema))[0][4] == 1005


async def test_marks_older_than_a_day_are_pruned_and_never_read(db: Database, pg: Any, schema: str) -> None:
    clock = FakeClock()
    notes = TimelineNotes(db, clock)
    notes.mark("shop", T - KEEP_SEC - 600, "rate", "rate 1 → 2/min")
    notes.mark("shop", T - KEEP_SEC + 600, "rate", "rate 2 → 3/min")
    notes.mark("shop", T, "rate", "rate 3 → 4/min")
    await notes.flush()
    assert [m["note"] for m in await notes.read("shop", 0)] == ["rate 2 → 3/min", "rate 3 → 4/min"]
    assert await notes.prune() == 1
    assert [r[3] for r in await rows(pg, schema)] == ["rate 2 → 3/min", "rate 3 → 4/min"]
    clock.advance(1200)  # twenty minutes on, the second is a day old too
    assert await notes.prune() == 1
    assert [r[3] for r in await rows(pg, schema)] == ["rate 3 → 4/min"]


async def test_a_failed_flush_keeps_the_marks_for_the_next(db: Database, pg: Any, schema: str) -> None:
    notes = TimelineNotes(db, FakeClock())
    notes.mark("shop", T, "purge", "3 left the line unserved")
    notes.block("shop", T - T % 60, 2)
    await db.close()
    with pytest.raises(Exception):  # noqa: B017 - whatever the pool's absence raises
        await notes.flush()
    assert notes.pending() == 2 and notes.write_errors == 1
    await db.open()
    await notes.stop()  # a clean stop writes what is held
    assert notes.pending() == 0
    assert {r[2] for r in await rows(pg, schema)} == {"purge", "block"}


async def test_a_failed_read_is_not_retried_on_every_chart_request(db: Database) -> None:
    clock = FakeClock()
    notes = TimelineNotes(db, clock)
    await db.close()
    with pytest.raises(StoreUnavailable):
        await notes.read("shop", T - 60)
    await db.open()
    with pytest.raises(StoreUnavailable):  # at once: the chart shows this process's marks meanwhile
        await notes.read("shop", T - 60)
    clock.advance(READ_BACKOFF_SEC)
    assert await notes.read("shop", T - 60) == []
