"""The hourly history in PostgreSQL (``sidestores/history/pg.py``): read-modify-write under a lock, a leader change
mid-hour, the boot's read, retention."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from queue_manager.journal.database import Database
from queue_manager.sidestores.history.base import WarehouseRefused
from queue_manager.sidestores.history.memory import MemoryRefusals
from queue_manager.sidestores.history.pg import PgWarehouse
from queue_manager.sidestores.history.rows import HOUR, HourRow
from queue_manager.sidestores.history.writer import HourlyHistory

H = 1_800_000 * 1000 // 3600 * 3600
T0 = H * 1000


def summary(joins: int, passes: int = 0) -> dict[str, Any]:
    return {"id": "shop", "generation": 1, "joinsTotal": joins, "passesTotal": passes, "waiting": joins - passes}


async def test_concurrent_writes_are_serialized_and_none_is_lost(db: Database) -> None:
    warehouse = PgWarehouse(db, lambda: T0 + 60_000)

    def bump(held: dict[str, HourRow]) -> list[HourRow]:
        row = held.get("shop") or HourRow("shop", H)
        row.samples += 1
        return [row]

    await asyncio.gather(*(warehouse.update(H, ["shop"], bump) for _ in range(8)))
    rows, first = await warehouse.read(H, H + HOUR, None)
    assert [r.samples for r in rows] == [8] and first == {"shop": H}


async def test_a_new_leader_continues_the_hour_without_losing_or_doubling(db: Database) -> None:
    now = [T0 + 600_000]
    leader = ["a"]

    def history(name: str) -> HourlyHistory:
        return HourlyHistory(
            PgWarehouse(db, lambda: now[0]),
            MemoryRefusals(),
            lambda: now[0],
            retain_days=30,
            leads=lambda: leader[0] == name,
        )

    a, b = history("a"), history("b")
    await a.warehouse.check()
    for joins in (10, 12, 15):  # both instances sample the fleet's counters; only the leader writes
        for h in (a, b):
            h.offer([summary(joins)], {}, now[0])
            await h.write()
        now[0] += 2000
    leader[0] = "b"  # a clean handover mid-hour
    for joins in (20, 21):
        for h in (a, b):
            h.offer([summary(joins)], {}, now[0])
            await h.write()
        now[0] += 2000
    rows = await b.report("hour", H, H + HOUR, "shop")
    assert rows[0]["joins"] == 11  # 10 -> 21, counted once across the two writers
    assert rows[0]["samples"] == 5


async def test_the_boot_read_refuses_a_broken_table_and_retention_deletes_old_rows(db: Database, pg: Any) -> None:
    warehouse = PgWarehouse(db, lambda: T0)
    await warehouse.check()
    await warehouse.update(H - 40 * 86400, ["old"], lambda held: [HourRow("old", H - 40 * 86400)])
    await warehouse.update(H, ["new"], lambda held: [HourRow("new", H)])
    assert await warehouse.prune(H - 30 * 86400) == 1
    rows, _ = await warehouse.read(0, H + HOUR, None)
    assert [r.room for r in rows] == ["new"]
    await pg.execute(f'ALTER TABLE "{db.schema}".history_hourly DROP COLUMN state')
    with pytest.raises(WarehouseRefused):
        await warehouse.check()
