"""The spool against a PostgreSQL that goes away (a relay the test cuts): SPOOL_ON_FAILURE acknowledges
from the disk and drains by itself once PostgreSQL is back; a drain that meets a transient fault keeps
its file and retries."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from queue_manager.journal import PgJournal
from queue_manager.store.base import StoreUnavailable
from tests.conformance.relay import Relay, relayed
from tests.journal.conftest import PG_URL, pg_available
from tests.journal.test_spool import count, ev


@pytest.fixture
def relay() -> Iterator[tuple[Relay, str]]:
    with relayed(PG_URL, 5432) as pair:
        yield pair


async def started(schema: str, url: str, spool: Path, **kw: Any) -> PgJournal:
    await pg_available()
    j = PgJournal(url, schema=schema, instance_id="test-1", spool_dir=spool, timeout_sec=2.0, **kw)
    await j.start()
    return j


@pytest.fixture
async def failover(schema: str, tmp_path: Path, relay: tuple[Relay, str]) -> AsyncIterator[PgJournal]:
    j = await started(schema, relay[1], tmp_path / "spool", spool_on_failure=True)
    try:
        yield j
    finally:
        relay[0].restore()
        await j.close()


async def until(what: str, check: Any, within_sec: float = 30.0) -> None:
    for _ in range(int(within_sec / 0.05)):
        if await check():
            return
        await asyncio.sleep(0.05)
    pytest.fail(f"never: {what}")


async def test_commits_are_acknowledged_from_the_disk_while_postgres_is_away(failover, relay, pg, schema):
    j = failover
    await j.commit([ev(1)])
    relay[0].cut()
    await asyncio.gather(*(j.commit([ev(seq)]) for seq in range(2, 202)))  # every one acknowledged
    buffers = j.maintenance_spool.buffers()
    assert buffers["spooling"] is True and buffers["spoolingReason"] == "failover"
    assert buffers["failover"]["pending"] == 200 and buffers["maintenanceMode"] is False
    assert j.write_errors == 0 and not j.db_healthy
    assert await count(pg, schema) == 1
    relay[0].restore()

    async def drained() -> bool:
        return await count(pg, schema) == 201 and not j.maintenance_spool.spooling and not j.spool.finalized()

    await until("the spool drained once PostgreSQL answered", drained)
    assert [e.seq for e in await j.read_events("r", 1)] == list(range(1, 202))
    before = j.transactions
    await j.commit([ev(202)])  # straight to PostgreSQL again
    assert j.transactions == before + 1 and await count(pg, schema) == 202
    assert j.maintenance_spool.failovers == 1 and j.db_healthy


async def test_without_spool_on_failure_a_commit_is_refused(schema, tmp_path, relay, pg):
    j = await started(schema, relay[1], tmp_path / "spool")
    try:
        await j.commit([ev(1)])
        relay[0].cut()
        with pytest.raises(StoreUnavailable):
            await j.commit([ev(2)])
        assert not list((tmp_path / "spool").glob("*"))
    finally:
        relay[0].restore()
        await j.close()


async def test_a_drain_that_meets_an_outage_keeps_its_file_and_retries(schema, tmp_path, relay, pg):
    j = await started(schema, relay[1], tmp_path / "spool", auto_drain=False)
    try:
        await j.set_maintenance(True)
        await j.commit([ev(1), ev(2)])
        relay[0].cut()
        await j.set_maintenance(False)  # the mirror cannot be written: best effort
        with pytest.raises(StoreUnavailable):
            await j.drain()
        assert len(j.spool.finalized()) == 1 and not (tmp_path / "spool" / "failed").exists()
        assert j.maintenance_spool.buffers()["lastError"]
        relay[0].restore()
        assert await j.drain() == 2
        assert await count(pg, schema) == 2 and not j.spool.finalized()
    finally:
        await j.close()
