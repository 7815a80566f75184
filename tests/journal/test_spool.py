"""Maintenance mode: batches go to an append-only disk spool (fsynced before the ack) and drain into
PostgreSQL oldest first, deduplicated by (room, gen, seq) — including after a crash."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import orjson
import pytest

from queue_manager.engine.events import Event
from queue_manager.journal import MAINTENANCE_KEY, PgJournal, Spool, SpoolCorrupt
from tests.journal.conftest import make_journal

CFG = {"id": "shop", "targetUrl": "https://shop.example", "state": "active"}


def ev(seq: int, type_: str = "join", room: str = "r", **data: Any) -> Event:
    if type_ == "join" and not data:
        data = {"n": seq, "ident": "198.51.100.7", "fp": "ab", "fp2": None, "ck": None, "joined": 1}
    return Event(type_, room, 1, 1_767_225_600_000 + seq, data, seq=seq)


async def count(pg: Any, schema: str, table: str = "events") -> int:
    return int(await pg.fetchval(f'SELECT count(*) FROM "{schema}".{table}'))


async def flag(pg: Any, schema: str) -> Any:
    raw = await pg.fetchval(f'SELECT value FROM "{schema}".system_state WHERE key = $1', MAINTENANCE_KEY)
    return None if raw is None else orjson.loads(raw)


async def die(j: PgJournal) -> None:
    """What a kill -9 leaves: no flush, no finalize, connections gone, the spool file closed by the OS."""
    for task in (j.writer.job.task, j.maintenance_spool.drainer.task):
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    j.spool.abandon()
    if j.writer.conn is not None:
        j.writer.conn.terminate()
    if j.database.pool is not None:
        j.database.pool.terminate()


# ------------------------------------------------------------------------------------ with PostgreSQL


async def test_maintenance_spools_every_batch_then_drains_it(journal, pg, schema):
    await journal.commit([ev(1)])
    await journal.set_maintenance(True)
    assert await flag(pg, schema) == {"enabled": True}
    await asyncio.gather(*(journal.commit([ev(seq)]) for seq in range(2, 52)))
    await journal.commit([ev(52, "room.create", room="shop", config=CFG, fields=[])])
    assert await count(pg, schema) == 1  # PostgreSQL untouched
    stats = journal.maintenance_stats()
    assert stats["pendingCount"] == 51 and stats["failedFiles"]["count"] == 0
    assert journal.spooled_batches >= 2 and journal.transactions == 1
    status = await journal.maintenance_status()
    assert status["maintenanceMode"] is True and status["bufferedMessages"] == 51 and status["bufferHealthy"]

    await journal.set_maintenance(False)
    assert await flag(pg, schema) == {"enabled": False}
    assert journal.maintenance_stats()["failedFiles"]["count"] == 1  # finalized, waiting to drain
    assert journal.maintenance_stats()["failedCount"] == 51
    await journal.drain()
    assert await count(pg, schema) == 52
    assert [e.seq for e in await journal.read_events("r", 1)] == list(range(1, 52))
    assert await journal.rooms() == [("shop", 1, CFG)]
    assert journal.maintenance_stats() == {
        "pendingCount": 0,
        "failedCount": 0,
        "dbHealthy": True,
        "failedFiles": {"count": 0, "totalBytes": 0, "totalMB": 0.0, "failoverCount": 0, "qos0Count": 0},
    }
    await journal.commit([ev(53)])  # straight to PostgreSQL again
    assert await count(pg, schema) == 53


async def test_the_drain_is_oldest_first_and_deduplicated(journal, pg, schema):
    await journal.commit([ev(1), ev(2)])
    await journal.set_maintenance(True)
    await journal.commit([ev(2), ev(3)])  # 2 is already in PostgreSQL
    await journal.commit([ev(4, "room.create", room="shop", config=CFG, fields=[])])
    await journal.set_maintenance(True)  # (idempotent)
    await journal.set_maintenance(False)
    await journal.set_maintenance(True)  # a second file, younger than the first
    await journal.commit([ev(5, "room.update", room="shop", config={**CFG, "state": "paused"}, fields=["state"])])
    await journal.commit([ev(3)])  # spooled twice
    await journal.set_maintenance(False)
    assert len(journal.spool.finalized()) == 2
    assert await journal.drain() == 5  # 2, 3, 4 then 5, 3: sent again, stored once
    assert await journal.drain() == 0
    assert [e.seq for e in await journal.read_events("r", 1)] == [1, 2, 3]
    assert await journal.rooms() == [("shop", 1, {**CFG, "state": "paused"})]  # the younger file won
    assert await count(pg, schema) == 5


async def test_audit_rows_spooled_beside_the_events_land_once_even_drained_twice(journal, pg, schema):
    spool = journal.maintenance_spool
    record = {
        "ts": 1_767_225_600_000,
        "actor": "ops",
        "action": "room.rate",
        "roomId": "r",
        "uid": "u-1",
        "detail": {"ratePerMinute": 5},
        "instance": "test-1",
        "ok": True,
    }
    assert await spool.take_audit(record, None) is False  # not spooling: PostgreSQL takes it as usual
    await journal.set_maintenance(True)
    await journal.commit([ev(1)])
    assert await spool.take_audit(record, None) is True
    await journal.set_maintenance(False)
    [path] = journal.spool.finalized()
    copy = path.read_bytes()
    assert journal.maintenance_stats()["failedCount"] == 2  # the event and the audit row
    assert await journal.drain() == 1
    path.write_bytes(copy)  # drained a second time
    await journal.drain()
    rows = await pg.fetch(f'SELECT action, room, detail::text FROM "{schema}".audit')
    assert [(r["action"], r["room"]) for r in rows] == [("room.rate", "r")]
    assert await count(pg, schema) == 1


async def test_a_room_change_committed_before_the_drain_is_not_overwritten_by_it(journal):
    await journal.set_maintenance(True)
    await journal.commit([ev(1, "room.create", room="shop", config=CFG, fields=[])])
    await journal.commit([ev(2, "room.update", room="shop", config={**CFG, "state": "bypass"}, fields=["state"])])
    async with journal.maintenance_spool.drain_lock:  # hold the drain back while a newer change commits directly
        await journal.set_maintenance(False)
        await journal.commit([ev(3, "room.update", room="shop", config={**CFG, "state": "paused"}, fields=["state"])])
    await journal.drain()
    assert await journal.rooms() == [("shop", 1, {**CFG, "state": "paused"})]


async def test_a_crash_during_maintenance_loses_no_acknowledged_batch(schema, tmp_path, pg):
    spool_dir = tmp_path / "spool"
    first = make_journal(schema, spool_dir, "first", auto_drain=False)
    await first.start()
    await first.commit([ev(1)])
    await first.set_maintenance(True)
    await asyncio.gather(*(first.commit([ev(seq)]) for seq in range(2, 12)))
    await first.commit([ev(12), ev(13)])
    open_files = list(spool_dir.glob("*.open"))
    assert len(open_files) == 1
    await die(first)
    with open_files[0].open("ab") as f:  # the torn start of a batch that was never acknowledged
        f.write(b'{"v":1,"events":[{"type":"join","room":"r","gen":1,"seq":14')

    second = make_journal(schema, spool_dir, "second", auto_drain=False)
    await second.start()
    try:
        assert second.maintenance  # the flag survived the crash in system_state
        assert second.maintenance_stats()["failedFiles"]["count"] == 1  # the dead writer's file adopted
        assert second.maintenance_stats()["failedCount"] == 12
        await second.commit([ev(14)])  # still spooling (a file of its own)
        assert await count(pg, schema) == 1
        await second.set_maintenance(False)
        assert await second.drain() == 13
        assert [e.seq for e in await second.read_events("r", 1)] == list(range(1, 15))
        assert not list(spool_dir.iterdir())
    finally:
        await second.close()


async def test_a_journal_that_starts_with_leftover_files_drains_them_by_itself(schema, tmp_path, pg):
    spool_dir = tmp_path / "spool"
    spool = Spool(spool_dir, "ghost")
    spool.append([ev(1).as_dict(), ev(2).as_dict()], 1_767_225_600_000)
    spool.abandon()  # died mid-maintenance, and somebody turned maintenance off meanwhile
    j = make_journal(schema, spool_dir)  # with the background drainer
    await j.start()
    try:
        for _ in range(3000):  # wait for the condition, not for a time
            if await count(pg, schema) == 2 and not list(spool_dir.iterdir()):
                break
            await asyncio.sleep(0.01)
        else:
            pytest.fail("the background drainer never drained the leftover file")
    finally:
        await j.close()


async def test_a_corrupt_file_is_quarantined_and_reported(journal, pg, schema, tmp_path):
    await journal.set_maintenance(True)
    await journal.commit([ev(1)])
    await journal.commit([ev(2)])
    await journal.set_maintenance(False)
    [path] = journal.spool.finalized()
    lines = path.read_bytes().split(b"\n")
    path.write_bytes(b"\n".join([b"garbage", *lines[1:]]))
    assert await journal.drain() == 0
    assert not path.exists() and (path.parent / "failed" / path.name).exists()
    why = (path.parent / "failed" / f"{path.name}.why").read_text()
    assert "cannot be read" in why and "line 1" in why
    status = await journal.maintenance_status()
    assert status["bufferHealthy"] is False and status["bufferStats"]["failedFiles"]["count"] == 0
    buffers = journal.maintenance_spool.buffers()
    assert buffers["quarantine"]["count"] == 1 and buffers["quarantine"]["files"][0]["name"] == path.name
    assert buffers["healthy"] is False
    assert await count(pg, schema) == 0


async def test_a_file_postgres_refuses_for_good_is_quarantined_and_the_next_drains(journal, pg, schema):
    await journal.set_maintenance(True)
    await journal.commit([ev(1)])
    await journal.commit([Event("join", "r", 1, 1_767_225_600_002, {"n": 2, "ident": "x", "note": "\u0000"}, seq=2)])
    await journal.set_maintenance(False)
    await journal.set_maintenance(True)
    await journal.commit([ev(1, room="other")])
    await journal.set_maintenance(False)
    poisoned, _good = journal.spool.finalized()
    assert await journal.drain() == 1  # the good file; the poisoned one is moved aside
    assert [p.name for p in (poisoned.parent / "failed").glob("*.buf")] == [poisoned.name]
    assert "PostgreSQL refuses its events" in (poisoned.parent / "failed" / f"{poisoned.name}.why").read_text()
    assert journal.db_healthy  # the probe proved PostgreSQL takes rows: the file was at fault
    assert [e.seq for e in await journal.read_events("other", 1)] == [1]
    # an operator mends the file and moves it back: it drains, deduplicated as ever
    quarantined = poisoned.parent / "failed" / poisoned.name
    poisoned.write_bytes(quarantined.read_bytes().replace(b"\\u0000", b"nul"))
    quarantined.unlink()
    assert await journal.drain() == 2
    assert [e.seq for e in await journal.read_events("r", 1)] == [1, 2]
    assert journal.maintenance_spool.buffers()["quarantine"]["count"] == 0


async def test_a_spool_that_cannot_write_fails_the_commit(journal, tmp_path):
    await journal.set_maintenance(True)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    journal.spool.dir = blocker / "spool"  # cannot be created
    with pytest.raises(Exception) as err:
        await journal.commit([ev(1)])
    assert "spool" in str(err.value) and journal.write_errors == 1
    assert journal.db_healthy  # a disk problem says nothing about PostgreSQL


# ------------------------------------------------------------------------------------ the file alone


def test_spool_lines_torn_tails_and_adoption(tmp_path: Path):
    a = Spool(tmp_path, "a/b c")  # the instance id is made safe for a file name
    a.append([{"seq": 1}], 1_767_225_600_000)
    a.append([{"seq": 2}, {"seq": 3}], 1_767_225_600_001)
    [open_file] = tmp_path.glob("*.open")
    assert open_file.name.startswith("qm-spool-1767225600000-a_b_c-")
    b = Spool(tmp_path, "b")
    assert b.adopt_orphans() == []  # a live writer holds it
    final = a.finalize()
    assert final is not None and final.suffix == ".buf"
    assert [len(batch) for batch in Spool.batches(final)] == [1, 2]
    with final.open("ab") as f:
        f.write(b'{"v":1,"ev')  # torn
    assert [len(batch) for batch in Spool.batches(final)] == [1, 2]
    final.write_bytes(final.read_bytes().replace(b'{"seq":1}', b"{nope"))
    with pytest.raises(SpoolCorrupt):
        list(Spool.batches(final))
    assert a.finalize() is None  # nothing open
    c = Spool(tmp_path, "c")
    c.append([{"seq": 9}], 1_767_225_600_002)
    c.abandon()
    assert [p.suffix for p in b.adopt_orphans()] == [".buf"]
    assert len(b.finalized()) == 2
