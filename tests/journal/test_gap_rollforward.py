"""No gap outlives a crash (fleet/gapwatch.py), against a real Valkey and PostgreSQL.

An instance that dies between minting events in Valkey and committing them leaves seqs the journal never
gets. Here the "dead" writer is a journal that silently drops what it is given (no commit, no take-back:
the process is gone). The leader's round commits those events from the room's outbox, byte for byte the
rows the writer would have written, and after it the journal is contiguous, replays to the same line as
Valkey's, and a late commit of the writer (or a spool drained later) is a harmless re-send.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from queue_manager.clock import FakeClock
from queue_manager.engine.events import Event
from queue_manager.engine.model import ClientId
from queue_manager.engine.replay import replay
from queue_manager.fleet.gapwatch import GapWatch
from queue_manager.journal import PgJournal
from queue_manager.journal.database import Database
from queue_manager.journal.gaps import JournalGaps
from queue_manager.store.valkey import ValkeyStore
from queue_manager.store.valkey.client import open_client
from queue_manager.store.valkey.heads import live_heads
from queue_manager.store.valkey.keys import room_key
from tests.journal.conftest import PG_URL, make_journal

VALKEY_URL = os.environ.get("TEST_VALKEY_URL", "redis://127.0.0.1:6379/15")
DEADLINE_MS = 1_000


class Writer:
    """The instance's journal: commits through a real PgJournal until it 'dies' (then drops everything)."""

    def __init__(self, journal: PgJournal) -> None:
        self.journal = journal
        self.dead = False
        self.dropped: list[Event] = []

    async def commit(self, events: list[Event]) -> None:
        if self.dead:
            self.dropped.extend(events)  # minted in Valkey, never committed, never taken back
            return
        await self.journal.commit(events)


@pytest.fixture
async def redis() -> AsyncIterator[tuple[Redis, str]]:
    client = open_client(VALKEY_URL)
    prefix = f"qmtest:gap:{uuid.uuid4().hex[:10]}:"
    try:
        await client.ping()
    except Exception as exc:  # the journal tests' rule: unreachable fails in CI, skips elsewhere
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"Valkey at {VALKEY_URL} unreachable: {exc}")
        pytest.skip(f"Valkey at {VALKEY_URL} unreachable")
    try:
        yield client, prefix
    finally:
        keys = [k async for k in client.scan_iter(match=f"{prefix}*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


@pytest.fixture
async def rig(redis: tuple[Redis, str], schema: str, tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    client, prefix = redis
    journal = make_journal(schema, tmp_path / "spool", instance="inst-a", auto_drain=False)
    await journal.start()
    writer = Writer(journal)
    clock = FakeClock()
    store = ValkeyStore(client, prefix=prefix, clock=clock, journal=writer, writer="inst-a")
    await store.start()
    db = Database(PG_URL, schema)
    await db.open()
    watch = GapWatch(client, prefix, prefix, JournalGaps(db), clock, deadline_ms=DEADLINE_MS, publish_ms=60_000)
    try:
        yield {"store": store, "writer": writer, "journal": journal, "watch": watch, "clock": clock, "redis": client}
    finally:
        await db.close()
        await journal.close()


async def _join(store: ValkeyStore, i: int) -> int:
    client = ClientId(ident=f"10.1.0.{i}", fp=f"fp{i}".encode(), cookie=f"c{i}".encode())
    view = await store.join("r", client, None, None)
    assert view.ticket is not None
    return view.ticket


async def _round(rig: dict[str, Any]) -> None:
    journal: PgJournal = rig["journal"]
    heads = await journal.heads()
    live = await live_heads(rig["redis"], rig["store"].prefix, heads)
    await rig["watch"].round(heads, live, maintenance=False)


async def _seqs(journal: PgJournal) -> list[int]:
    return [e.seq for e in await journal.read_events("r", 1)]


async def test_seqs_a_dead_writer_minted_are_committed_from_the_outbox(rig: dict[str, Any]) -> None:
    store, writer, journal, watch = rig["store"], rig["writer"], rig["journal"], rig["watch"]
    await store.upsert_room({"id": "r", "targetUrl": "https://shop.example/", "ratePerMinute": 0})
    before = [await _join(store, i) for i in range(3)]
    writer.dead = True  # killed between mint and commit: two joins minted, never committed
    ghosts = [await _join(store, i) for i in range(3, 5)]
    writer.dead = False  # another instance goes on committing
    after = [await _join(store, i) for i in range(5, 7)]
    assert [e.seq for e in writer.dropped] == [5, 6]
    assert await _seqs(journal) == [1, 2, 3, 4, 7, 8]

    await _round(rig)  # seen missing: not yet due (a live writer may be about to commit them)
    assert await _seqs(journal) == [1, 2, 3, 4, 7, 8] and watch.open == {}
    rig["clock"].advance(DEADLINE_MS / 1000 + 0.1)
    await _round(rig)
    assert await _seqs(journal) == list(range(1, 9)), "the gap is closed from the outbox"
    assert watch.rolled_forward_total == 2 and watch.open == {}

    # the rows are the ones the dead writer would have written (its instance, its instant, its data)
    rows = await journal.reader.fetch(
        f"SELECT seq, type, ts, instance, data FROM {journal.database.sql_schema}.events WHERE seq IN (5, 6)"
    )
    for row, event in zip(sorted(rows, key=lambda r: r["seq"]), writer.dropped, strict=True):
        assert (row["type"], row["ts"], row["instance"]) == (event.type, event.ts, "inst-a")
        assert orjson.loads(row["data"]) == event.data

    # the journal replays to Valkey's line, ticket for ticket: the unacknowledged joins are ordinary tickets
    room = replay(await journal.read_events("r", 1), FakeClock())
    assert list(room.line) == before + ghosts + after

    # the writer's late commit (or a spool drained later) is a re-send, not a conflict
    await journal.commit(writer.dropped)
    assert journal.conflicts == 0 and await _seqs(journal) == list(range(1, 9))

    # the outbox keeps nothing the journal holds
    await _round(rig)
    assert await rig["redis"].zcard(room_key(store.prefix, "r", "ob")) == 0


async def test_a_seq_held_nowhere_is_reported_with_the_way_out(rig: dict[str, Any]) -> None:
    store, writer, journal, watch = rig["store"], rig["writer"], rig["journal"], rig["watch"]
    await store.upsert_room({"id": "r", "targetUrl": "https://shop.example/", "ratePerMinute": 0})
    await _join(store, 1)
    writer.dead = True
    await _join(store, 2)  # seq 3, then lost with Valkey's copy too (an outbox from before, or flushed)
    writer.dead = False
    await _join(store, 3)
    await rig["redis"].zremrangebyscore(room_key(store.prefix, "r", "ob"), 3, 3)
    await _round(rig)
    rig["clock"].advance(DEADLINE_MS / 1000 + 0.1)
    await _round(rig)
    gap = watch.open["r"]
    assert gap.missing == [3] and gap.unrecoverable == [3]
    published = await rig["redis"].get(watch.key)
    assert orjson.loads(published)["r"]["unrecoverable"] == [3]
    text = " ".join(watch.incidents(full=True))
    assert "room r generation 1 is missing seqs 3" in text and "/api/admin/rooms/r/journal/void" in text
    assert await _seqs(journal) == [1, 2, 4]


async def test_nothing_is_rolled_forward_or_reported_during_journal_maintenance(rig: dict[str, Any]) -> None:
    store, writer, journal, watch = rig["store"], rig["writer"], rig["journal"], rig["watch"]
    await store.upsert_room({"id": "r", "targetUrl": "https://shop.example/", "ratePerMinute": 0})
    writer.dead = True
    await _join(store, 1)
    heads = await journal.heads()
    live = await live_heads(rig["redis"], store.prefix, heads)
    for _ in range(2):
        await watch.round(heads, live, maintenance=True)
        rig["clock"].advance(DEADLINE_MS / 1000 + 0.1)
    assert watch.open == {} and await _seqs(journal) == [1]


async def test_holes_filled_between_the_count_and_the_read_are_no_gap(rig: dict[str, Any]) -> None:
    """The round counts the journal's events, then reads which seqs it holds: a writer's commit landing
    between the two fills the holes the count saw. The round takes the journal as contiguous then."""
    store, writer, journal, watch = rig["store"], rig["writer"], rig["journal"], rig["watch"]
    await store.upsert_room({"id": "r", "targetUrl": "https://shop.example/", "ratePerMinute": 0})
    await _join(store, 0)
    writer.dead = True  # a commit still on its way
    await _join(store, 1)
    writer.dead = False
    await _join(store, 2)
    assert await _seqs(journal) == [1, 2, 4]
    gaps = watch.gaps
    counted = gaps.spans

    async def spans_then_commit(rooms: Any) -> Any:
        seen = await counted(rooms)  # the count sees the hole at 3 ...
        await journal.commit(writer.dropped)  # ... and the late commit fills it before the read
        return seen

    gaps.spans = spans_then_commit
    await _round(rig)
    assert watch.open == {} and watch.low[("r", 1)] == 4
    assert await rig["redis"].zcard(room_key(store.prefix, "r", "ob")) == 0
