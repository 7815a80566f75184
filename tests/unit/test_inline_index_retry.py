"""The inline host index while Valkey and Postgres are both unreachable at boot: the Postgres read of the
room configs is retried after 1 s, the wait doubling after each failure up to 30 s, on the injected clock."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from queue_manager.clock import FakeClock
from queue_manager.config import load_settings
from queue_manager.inline.component import PG_RETRY_MAX_SEC, Inline, QueueSide, pg_retry_delay
from queue_manager.services.room_changes import RoomChanges
from queue_manager.store.base import StoreUnavailable


def test_the_schedule_doubles_from_one_second_to_thirty() -> None:
    assert [pg_retry_delay(n) for n in range(1, 9)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert pg_retry_delay(10_000) == PG_RETRY_MAX_SEC  # never more, however long the outage
    assert pg_retry_delay(0) == 0.0  # nothing failed yet: read at once


class _Valkey:
    kind = "valkey"

    async def list_rooms(self) -> list[dict[str, Any]]:
        raise StoreUnavailable("valkey down")


class _Journal:
    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.reads: list[float] = []
        self.up = False

    async def rooms(self) -> list[tuple[str, int, dict[str, Any]]]:
        self.reads.append(self.clock.mono())
        if not self.up:
            raise OSError("connection refused")
        return [("shop", 1, {"targetUrl": "https://shop.example", "proxyOrigin": "http://10.0.0.5:3000"})]


def _inline(clock: FakeClock, journal: _Journal) -> Inline:
    fleet = SimpleNamespace(journal=journal, recovery=SimpleNamespace(recovering_rooms=set))
    ctx = SimpleNamespace(
        settings=load_settings({}), store=_Valkey(), fleet=fleet, clock=clock, room_changes=RoomChanges()
    )

    async def unused(*args: Any) -> Any:
        raise AssertionError("not called")

    return Inline(ctx, QueueSide(door_check=unused, waiting_page=unused))  # type: ignore[arg-type]


async def test_the_postgres_read_backs_off_while_both_stores_are_down_and_resets_once_it_lands() -> None:
    clock = FakeClock()
    journal = _Journal(clock)
    inline = _inline(clock, journal)
    start = clock.mono()
    for _ in range(200):  # the refresher's rounds, one a second, for 200 s
        await inline.refresh()
        clock.advance(1.0)
    gaps = [round(b - a, 3) for a, b in zip(journal.reads, journal.reads[1:], strict=False)]
    assert journal.reads[0] == start  # the first round reads at once
    assert gaps[:6] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0]
    assert set(gaps[5:]) == {30.0}  # and stays at 30 s
    assert inline.index.source == "none"  # nothing gated meanwhile

    journal.up = True  # Postgres answers at the next due read: the index is built from it
    reads = len(journal.reads)
    for _ in range(31):
        await inline.refresh()
        clock.advance(1.0)
    assert len(journal.reads) == reads + 1 and inline.index.source == "postgres"
    assert sorted(inline.index.by_room) == ["shop"]
    assert inline._pg_failures == 0  # the next outage starts again at 1 s
