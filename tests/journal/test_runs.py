"""instance_runs: how the previous run of an instance id ended (the start line's previousRunClean)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from queue_manager.journal.database import Database
from queue_manager.journal.runs import InstanceRuns
from tests.journal.conftest import PG_URL

T0 = 1_767_225_600_000


@pytest.fixture
async def runs(schema: str) -> AsyncIterator[InstanceRuns]:
    db = Database(PG_URL, schema, instance_id="qm-1")
    await db.open()
    try:
        yield InstanceRuns(db)
    finally:
        await db.close()


async def test_a_first_run_has_no_previous_one(runs: InstanceRuns) -> None:
    assert await runs.begin("qm-1", T0) is None


async def test_a_clean_stop_is_true_for_the_next_start_only(runs: InstanceRuns) -> None:
    await runs.begin("qm-1", T0)
    await runs.end("qm-1", T0, T0 + 1000, clean=True)
    assert await runs.begin("qm-1", T0 + 2000) is True
    assert await runs.begin("qm-1", T0 + 3000) is False  # that run was never stopped: a kill


async def test_a_stop_with_storage_failing_is_false(runs: InstanceRuns) -> None:
    await runs.begin("qm-1", T0)
    await runs.end("qm-1", T0, T0 + 1000, clean=False)
    assert await runs.begin("qm-1", T0 + 2000) is False


async def test_each_instance_id_has_its_own_row(runs: InstanceRuns) -> None:
    await runs.begin("qm-1", T0)
    await runs.end("qm-1", T0, T0 + 1000, clean=True)
    assert await runs.begin("qm-2", T0 + 2000) is None
    assert await runs.begin("qm-1", T0 + 3000) is True


async def test_a_stop_whose_start_was_not_recorded_is_recorded(runs: InstanceRuns) -> None:
    await runs.end("qm-1", T0, T0 + 1000, clean=True)  # PostgreSQL was unreachable at start
    assert await runs.begin("qm-1", T0 + 2000) is True


async def test_a_run_recorded_late_is_a_run_with_no_stop(runs: InstanceRuns) -> None:
    await runs.begin("qm-1", T0)
    await runs.end("qm-1", T0, T0 + 1000, clean=True)
    await runs.mark_started("qm-1", T0 + 2000)  # a start that reached PostgreSQL only later, then a kill
    assert await runs.begin("qm-1", T0 + 3000) is False
