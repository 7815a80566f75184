"""PgJournal against a real PostgreSQL: migrations, group commit, acknowledgement, dedupe, read-back,
checkpoints, and the end-to-end rebuild of a live engine room from what it journaled."""

from __future__ import annotations

import asyncio
import copy
import random
import socket
import zlib
from typing import Any

import orjson
import pytest

from queue_manager.clock import FakeClock
from queue_manager.engine.events import EVENT_LOG_VERSION, Event
from queue_manager.engine.replay import ReplayFenced, replay
from queue_manager.engine.snapshot import dump
from queue_manager.journal import PgJournal, migrate
from queue_manager.journal import reader as reader_module
from queue_manager.journal.migrations import LATEST
from queue_manager.store.base import StoreUnavailable
from tests.journal.conftest import make_journal
from tests.journal.engine_run import Run, align, clock_copy, deterministic, diff, future, observe

TABLES = {
    "events",
    "room_snapshots",
    "rooms",
    "system_state",
    "operators",
    "monitor_links",
    "timeline_notes",
    "audit",
    "history_hourly",
    "instance_runs",
    "entry_keys",
    "entry_codes",
    "entry_code_salts",
    "schema_migrations",
}


def ev(seq: int, type_: str = "join", room: str = "r", gen: int = 1, **data: Any) -> Event:
    if type_ == "join" and not data:
        data = {"n": seq, "ident": f"203.0.113.{seq % 250}", "fp": "ab", "fp2": None, "ck": None, "joined": 1}
    return Event(type_, room, gen, 1_767_225_600_000 + seq, data, seq=seq)


async def count(pg: Any, schema: str, table: str = "events") -> int:
    return int(await pg.fetchval(f'SELECT count(*) FROM "{schema}".{table}'))


# ------------------------------------------------------------------------------------ migrations


async def test_migrations_create_every_table_and_are_idempotent(pg, schema):
    assert await migrate(pg, schema) == list(range(1, LATEST + 1))
    assert await migrate(pg, schema) == []  # a second boot applies nothing
    tables = {
        r["table_name"]
        for r in await pg.fetch("SELECT table_name FROM information_schema.tables WHERE table_schema = $1", schema)
    }
    assert tables == TABLES
    versions = [r["version"] for r in await pg.fetch(f'SELECT version FROM "{schema}".schema_migrations')]
    assert sorted(versions) == list(range(1, LATEST + 1))


async def test_two_instances_booting_at_once_migrate_once(schema, tmp_path):
    a, b = make_journal(schema, tmp_path / "a", "a"), make_journal(schema, tmp_path / "b", "b")
    await asyncio.gather(a.start(), b.start())
    try:
        await a.commit([ev(1)])
        assert [e.seq for e in await b.read_events("r", 1)] == [1]
    finally:
        await asyncio.gather(a.close(), b.close())


# ------------------------------------------------------------------------------------ group commit


async def test_concurrent_commits_share_transactions(journal, pg, schema):
    callers = 400
    await asyncio.gather(*(journal.commit([ev(seq)]) for seq in range(1, callers + 1)))
    assert await count(pg, schema) == callers
    stats = journal.batch_stats()
    print(f"\ngroup commit, {callers} concurrent single-event commits: {stats}")
    assert stats["callers"] == callers
    # one writer, whole callers per batch, at most max_batch (512) events: a handful of transactions
    assert journal.transactions <= callers // 20
    assert stats["maxCallers"] > 50


async def test_a_steady_stream_of_callers_is_batched(journal, pg, schema):
    # 50 clients, each committing 20 times in a row (a join waits for its commit, then the next comes)
    seqs = iter(range(1, 1001))

    async def client() -> None:
        for _ in range(20):
            await journal.commit([ev(next(seqs))])

    await asyncio.gather(*(client() for _ in range(50)))
    assert await count(pg, schema) == 1000
    stats = journal.batch_stats()
    print(f"\ngroup commit, 50 clients x 20 sequential commits: {stats}")
    assert journal.transactions <= 1000 // 10


async def test_a_batch_never_exceeds_max_batch_and_a_caller_is_never_split(schema, tmp_path, pg):
    j = make_journal(schema, tmp_path / "spool", max_batch=32)
    await j.start()
    try:
        big = [ev(seq) for seq in range(1, 101)]  # one caller of 100 events goes alone, whole
        smalls = [[ev(seq)] for seq in range(101, 301)]
        await asyncio.gather(j.commit(big), *(j.commit(s) for s in smalls))
    finally:
        await j.close()
    assert await count(pg, schema) == 300
    sizes = j.batch_events
    assert sizes[100] == 1 and max(s for s in sizes if s != 100) <= 32
    assert j.transactions >= 1 + 200 // 32


async def test_a_commit_is_acknowledged_only_after_the_transaction_committed(journal, pg, schema):
    await journal.commit([ev(1)])  # the writer's connection exists
    async with pg.transaction():
        await pg.execute(f'LOCK TABLE "{schema}".events IN ACCESS EXCLUSIVE MODE')
        task = asyncio.create_task(journal.commit([ev(2)]))
        # wait (for a condition the database reports, not for a time) until the insert blocks on our lock
        for _ in range(3000):
            blocked = await pg.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND application_name LIKE $1",
                "qm-journal-writer%",
            )
            if blocked:
                break
            await asyncio.sleep(0.01)
        else:
            pytest.fail("the journal's insert never reached the database")
        assert not task.done()  # blocked in the database: not acknowledged
    await task  # our lock is gone: it commits, then acknowledges
    assert [e.seq for e in await journal.read_events("r", 1)] == [1, 2]


async def test_a_failed_batch_fails_every_caller_in_it_and_the_writer_goes_on(journal, pg, schema):
    await journal.commit([ev(1)])
    await pg.execute(f'ALTER TABLE "{schema}".events ADD CONSTRAINT qm_fail CHECK (seq < 0) NOT VALID')
    results = await asyncio.gather(*(journal.commit([ev(seq)]) for seq in (2, 3, 4)), return_exceptions=True)
    assert all(isinstance(r, StoreUnavailable) for r in results), results
    assert journal.write_errors == 3 and journal.failed_batches >= 1
    assert "qm_fail" in (journal.last_error or "") and journal.last_error_at is not None
    assert not journal.db_healthy and journal.health()["unjournaled"] == 3
    assert await count(pg, schema) == 1  # nothing of a failed batch is there
    failed_at = journal.last_error_at
    assert not journal.storage_ok(failed_at + 10**9, 30_000)  # nothing landed since
    await pg.execute(f'ALTER TABLE "{schema}".events DROP CONSTRAINT qm_fail')
    await journal.commit([ev(5)])  # the writer kept working; the failed events are written first
    assert [e.seq for e in await journal.read_events("r", 1)] == [1, 2, 3, 4, 5]
    assert journal.db_healthy and journal.health()["unjournaled"] == 0
    assert journal.storage_ok(failed_at + 30_000, 30_000) and not journal.storage_ok(failed_at + 29_999, 30_000)


async def test_a_failed_join_and_its_revoke_leave_no_gap_and_no_ticket(journal, pg, schema):
    run = Run()
    with deterministic():
        run.apply(("join", 0, None))
        run.apply(("join", 1, None))
    create, first, second = run.events
    await journal.commit([create, first])
    await pg.execute(f'ALTER TABLE "{schema}".events ADD CONSTRAINT qm_fail CHECK (seq < 3) NOT VALID')
    with pytest.raises(StoreUnavailable):
        await journal.commit([second])  # the store answers 503 and takes ticket 2 back:
    await pg.execute(f'ALTER TABLE "{schema}".events DROP CONSTRAINT qm_fail')
    await journal.commit([Event("join.revoke", "r", 1, second.ts, {"n": 2}, seq=4)])
    events = await journal.read_events("r", 1)
    assert [e.type for e in events] == ["room.create", "join", "join", "join.revoke"]
    room = replay(events, clock_copy(run.clock))
    assert list(room.line) == [1] and room.next_n == 3 and 2 not in room.finished


async def test_without_the_backlog_a_failed_commit_is_a_gap_and_the_rebuild_fences(schema, tmp_path, pg):
    j = make_journal(schema, tmp_path / "spool", keep_failed=False)
    await j.start()
    try:
        await j.commit([ev(1, "room.create", config={"id": "r", "targetUrl": "https://shop.example"}, fields=[])])
        await pg.execute(f'ALTER TABLE "{schema}".events ADD CONSTRAINT qm_fail CHECK (seq < 2) NOT VALID')
        with pytest.raises(StoreUnavailable):
            await j.commit([ev(2)])
        await pg.execute(f'ALTER TABLE "{schema}".events DROP CONSTRAINT qm_fail')
        await j.commit([ev(3, "join.revoke", n=2)])
        with pytest.raises(ReplayFenced) as err:
            replay(await j.read_events("r", 1), FakeClock())
        assert err.value.kind == "gap"
    finally:
        await j.close()


async def test_a_journal_on_a_closed_port_answers_store_unavailable(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once the socket is closed
    dsn = f"postgresql://postgres@127.0.0.1:{port}/qm_test"
    j = PgJournal(dsn, schema="qm_x", instance_id="t", spool_dir=tmp_path / "spool", timeout_sec=2)
    with pytest.raises(StoreUnavailable):
        await j.start()
    j = PgJournal(dsn, schema="qm_x", instance_id="t", spool_dir=tmp_path / "spool", timeout_sec=2)
    await j.start(require=False)  # boots degraded
    try:
        with pytest.raises(StoreUnavailable):
            await j.commit([ev(1)])
        with pytest.raises(StoreUnavailable):
            await j.commit([ev(2)])
        assert j.write_errors == 2 and j.last_error is not None and not j.db_healthy
        with pytest.raises(StoreUnavailable):
            await j.probe()
        assert j.probe_errors == 1
    finally:
        await j.close()
    with pytest.raises(StoreUnavailable):
        await j.commit([ev(3)])  # closed


async def test_the_probe_inserts_nothing(journal, pg, schema):
    await journal.probe()
    assert await count(pg, schema) == 0 and journal.last_ok_at is not None


# ------------------------------------------------------------------------------------ dedupe, reading


async def test_an_event_is_stored_once_by_room_gen_seq(journal, pg, schema):
    await journal.commit([ev(1), ev(2)])
    await journal.commit([ev(1), ev(2), ev(3)])  # a replayed batch
    await asyncio.gather(journal.commit([ev(4)]), journal.commit([ev(4)]))  # twice in one batch
    assert await count(pg, schema) == 4
    got = await journal.read_events("r", 1)
    assert [e.seq for e in got] == [1, 2, 3, 4] and got[1].data["n"] == 2


async def test_an_event_whose_seq_the_journal_holds_for_another_event_is_refused_and_reported(journal, pg, schema):
    """Valkey rolled back behind the journal: the event reusing seq 2 was not journaled, so its caller must
    not be acknowledged; the rooms it came from are reported (the backend fences and rebuilds them) first."""
    await journal.commit([ev(1), ev(2)])
    told: list[set[tuple[str, int]]] = []

    async def on_conflict(rooms: set[tuple[str, int]]) -> None:
        told.append(rooms)

    journal.on_conflict = on_conflict
    other = Event("join", "r", 1, 5, {"n": 99}, seq=2)  # same identity, other content
    fine = ev(1, room="s")  # in the same batch, from another room: journaled and acknowledged
    results = await asyncio.gather(journal.commit([other]), journal.commit([fine]), return_exceptions=True)
    assert isinstance(results[0], StoreUnavailable) and results[1] is None
    assert told == [{("r", 1)}] and journal.conflicts == 1
    assert await count(pg, schema) == 3
    assert (await journal.read_events("r", 1))[1].data["n"] == 2  # the journaled event stays
    await journal.commit([ev(2)])  # the same event again (a re-sent batch) is no conflict
    assert journal.conflicts == 1


async def test_read_events_is_one_generation_in_seq_order_after_a_seq(journal):
    events = [ev(seq) for seq in range(1, 41)]
    random.Random(7).shuffle(events)
    others = [ev(1, gen=2), ev(1, room="s"), ev(41, room="s")]
    await asyncio.gather(*(journal.commit([e]) for e in [*events, *others]))
    got = await journal.read_events("r", 1)
    assert [e.seq for e in got] == list(range(1, 41))
    original = {e.seq: e for e in events}
    assert all(e == original[e.seq] for e in got)  # type, room, gen, seq, ts, lv and data round-trip
    assert [e.seq for e in await journal.read_events("r", 1, after_seq=37)] == [38, 39, 40]
    assert [e.seq for e in await journal.read_events("r", 2)] == [1]
    assert await journal.head("r", 1) == 40 and await journal.head("nobody", 1) == 0


async def test_a_long_tail_is_read_in_pages_each_within_the_timeout(journal, monkeypatch):
    """A room's tail after a large drop (its sign-ups, the draw) is read a page a statement, so no single
    statement outgrows the read timeout; the pages join up in seq order, holes and all."""
    monkeypatch.setattr(reader_module, "PAGE", 7)
    await journal.commit([ev(seq) for seq in range(1, 31) if seq != 14])  # 14: a seq not (yet) journaled
    statements: list[str] = []
    fetch = journal.reader.fetch

    async def counting(sql: str, *args: Any) -> list[Any]:
        statements.append(sql)
        return await fetch(sql, *args)

    monkeypatch.setattr(journal.reader, "fetch", counting)
    assert [e.seq for e in await journal.read_events("r", 1)] == [s for s in range(1, 31) if s != 14]
    assert len(statements) == 5  # 29 events, 7 a page: four full pages and one short
    assert [e.seq for e in await journal.read_events("r", 1, after_seq=27)] == [28, 29, 30]


async def test_the_rooms_table_follows_room_events_and_never_goes_back(journal, pg, schema):
    cfg = {"id": "shop", "targetUrl": "https://shop.example", "state": "active"}
    await journal.commit([ev(1, "room.create", room="shop", config=cfg, fields=["targetUrl"])])
    await journal.commit([ev(1, "room.create", room="gone", config={**cfg, "id": "gone"}, fields=[])])
    newer = ev(3, "room.update", room="shop", config={**cfg, "state": "paused"}, fields=["state"])
    older = ev(2, "room.update", room="shop", config={**cfg, "state": "bypass"}, fields=["state"])
    await journal.commit([newer])
    await journal.commit([older])  # late (a drained spool): must not overwrite the newer definition
    await journal.commit([ev(2, "room.delete", room="gone")])
    assert await journal.rooms() == [("shop", 1, {**cfg, "state": "paused"})]
    row = await pg.fetchrow(f'SELECT gen, seq, deleted, config FROM "{schema}".rooms WHERE id = $1', "gone")
    assert row["deleted"] and row["seq"] == 2 and row["config"] is not None  # the last config is kept
    await journal.commit([ev(1, "room.create", room="gone", gen=2, config={**cfg, "id": "gone"}, fields=[])])
    assert [r[:2] for r in await journal.rooms()] == [("gone", 2), ("shop", 1)]


async def test_the_client_address_of_a_join_is_recorded(journal, pg, schema):
    await journal.commit([ev(1), ev(2, "purge", count=1)])
    rows = await pg.fetch(f'SELECT seq, ident, instance FROM "{schema}".events ORDER BY seq')
    assert [(r["seq"], r["ident"], r["instance"]) for r in rows] == [(1, "203.0.113.1", "test-1"), (2, None, "test-1")]


# ------------------------------------------------------------------------------------ checkpoints


async def test_snapshots_save_and_load(journal, pg, schema):
    run = Run()
    with deterministic():
        for op in [("join", 0, None), ("join", 1, None), ("wait", 1000), ("check", 0, 0, 0)]:
            run.apply(op)
    first = dump(run.room)
    assert await journal.save_snapshot(first)
    assert not await journal.save_snapshot(first)  # once per (room, gen, seq)
    assert await journal.latest_snapshot("r") == first
    with deterministic():
        run.apply(("join", 2, None))
    second = dump(run.room)
    with deterministic():
        run.apply(("join", 3, None))
    third = dump(run.room)
    await journal.save_snapshot(second)
    await journal.save_snapshot(third)
    assert await journal.latest_snapshot("r", 1) == third
    assert await journal.latest_snapshot("r", 2) is None and await journal.latest_snapshot("x") is None
    kept = [r["seq"] for r in await pg.fetch(f'SELECT seq FROM "{schema}".room_snapshots ORDER BY seq')]
    assert kept == [second["seq"], third["seq"]]  # the newest two of a generation are kept


async def test_a_checkpoint_is_stored_compressed_and_one_stored_as_jsonb_before_still_loads(journal, pg, schema):
    """Checkpoints are kept as zlib-compressed JSON (``packed``): jsonb refuses a document over 256 MB, which a
    room of a million waiting tickets is. One written before, in the jsonb column, loads as it did."""
    run = Run()
    with deterministic():
        for i in range(4):
            run.apply(("join", i, None))
    doc = dump(run.room)
    assert await journal.save_snapshot(doc)
    row = await pg.fetchrow(f'SELECT snapshot, packed FROM "{schema}".room_snapshots WHERE seq = $1', doc["seq"])
    assert row["snapshot"] is None and zlib.decompress(row["packed"]) == orjson.dumps(doc)
    assert len(row["packed"]) < len(orjson.dumps(doc))
    assert await journal.latest_snapshot("r", 1) == doc
    with deterministic():
        run.apply(("purge",))
    older = dump(run.room)  # as a build before packed checkpoints stored it
    await pg.execute(
        f'INSERT INTO "{schema}".room_snapshots (room, gen, seq, snapshot) VALUES ($1, $2, $3, $4::text::jsonb)',
        "r",
        1,
        older["seq"],
        orjson.dumps(older).decode(),
    )
    assert await journal.latest_snapshot("r", 1) == older


async def test_busy_rooms_are_checkpointed_by_one_instance_at_a_time(journal, schema, tmp_path):
    run = Run()
    with deterministic():
        for i in range(30):
            run.apply(("join", i % 7, None))
            run.apply(("wait", 1000))
    await journal.commit(run.events)
    assert [r[0] for r in await journal.busy_rooms(threshold=10)] == ["r"]
    other = make_journal(schema, tmp_path / "other", "other")
    await other.start()
    try:
        async with journal.checkpoint_lease() as held:
            assert held
            assert await other.checkpoint_busy_rooms(threshold=10) == []  # the lease is taken
        assert await other.checkpoint_busy_rooms(threshold=10) == [("r", run.events[-1].seq)]
    finally:
        await other.close()
    assert await journal.busy_rooms(threshold=10) == []
    snap = await journal.latest_snapshot("r")
    assert snap is not None and snap["seq"] == run.events[-1].seq


async def test_checkpoints_are_due_after_many_events_or_once_the_oldest_uncheckpointed_one_is_old(journal, pg, schema):
    run = Run()
    with deterministic():
        for i in range(12):
            run.apply(("join", i % 7, None))
    await journal.commit(run.events)
    head = run.events[-1].seq
    assert await journal.heads() == {"r": (1, head)}
    assert await journal.checkpoint_due(every_events=100, every_ms=3_600_000) == []  # neither yet
    assert head >= 5
    assert await journal.checkpoint_due(every_events=5, every_ms=3_600_000) == [("r", head)]  # by count
    with deterministic():
        run.apply(("purge",))  # one more event
    assert run.events[-1].seq == head + 1
    await journal.commit(run.events[-1:])
    assert await journal.checkpoint_due(every_events=100, every_ms=3_600_000) == []
    await pg.execute(f"UPDATE \"{schema}\".events SET committed_at = now() - interval '2 hours' WHERE seq > $1", head)
    assert await journal.quiet_rooms(3_600_000) == ["r"]
    assert await journal.checkpoint_due(every_events=100, every_ms=3_600_000) == [("r", head + 1)]  # by age
    assert await journal.quiet_rooms(3_600_000) == [] and await journal.heads() == {"r": (1, head + 1)}


async def test_a_large_room_is_checkpointed_after_a_quarter_of_its_entries_in_events(journal, pg, schema):
    """A checkpoint costs in proportion to the room it holds: a room whose newest checkpoint holds E
    entries (tickets, pre-queue entries, finished records) is due again after max(CHECKPOINT_EVERY_EVENTS,
    E / 4) events, so a room of a million is not folded anew every 10,000."""
    run = Run()
    with deterministic():
        for i in range(4):
            run.apply(("join", i, None))
    await journal.commit(run.events)
    assert await journal.checkpoint_due(every_events=1, every_ms=3_600_000) == [("r", run.events[-1].seq)]
    row = await pg.fetchrow(f'SELECT entries FROM "{schema}".room_snapshots')
    assert row["entries"] == 4  # the four tickets
    head = run.events[-1].seq
    with deterministic():
        for i in range(4, 7):
            run.apply(("join", i, None))
    await journal.commit(run.events[-3:])
    await pg.execute(f'UPDATE "{schema}".room_snapshots SET entries = 400')  # as if it held 400
    assert await journal.checkpoint_due(every_events=1, every_ms=3_600_000) == []  # 3 events: not 100
    await pg.execute(f'UPDATE "{schema}".room_snapshots SET entries = 12')
    assert await journal.checkpoint_due(every_events=1, every_ms=3_600_000) == [("r", head + 3)]  # 3 of 12 / 4


# ------------------------------------------------------------------------------------ end to end


def _script(seed: int, length: int) -> list[tuple[Any, ...]]:
    rnd = random.Random(seed)
    kinds = ["join"] * 6 + ["check"] * 6 + ["status"] * 3 + ["wait"] * 6 + ["update", "eject", "steal", "advance"]
    out: list[tuple[Any, ...]] = []
    for _ in range(length):
        kind = rnd.choice(kinds)
        b = rnd.randrange(7)
        if kind == "join":
            out.append(("join", b, rnd.choice([None, None, "https://shop.example/a"])))
        elif kind == "check":
            out.append(("check", b, rnd.randrange(4), rnd.choice([0, 0, 0, 1, 2])))
        elif kind == "status":
            out.append(("status", b))
        elif kind == "wait":
            out.append(("wait", rnd.choice([250, 1000, 1000, 3000, 15000, 61000])))
        elif kind == "advance":
            out.append(("advance", rnd.choice([333, 999, 5000])))
        elif kind == "update":
            out.append(("update", rnd.randrange(26)))
        elif kind == "eject":
            out.append(("eject", rnd.randrange(1, 40)))
        else:
            out.append(("steal", b, rnd.randrange(7)))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_a_live_room_is_rebuilt_from_postgres_with_and_without_a_checkpoint(journal, seed):
    run = Run(maxConcurrent=2, presenceSec=30, sessionTtlSec=90, passedTtlSec=150)
    script = _script(seed, 400)
    half = len(script) // 2
    commits: list[asyncio.Task[None]] = []
    with deterministic():
        for i, op in enumerate(script):
            start = len(run.events)
            run.apply(op)
            if len(run.events) > start:  # each operation's events committed as the store would, concurrently
                commits.append(asyncio.create_task(journal.commit(run.events[start:])))
            if i == half:
                await asyncio.gather(*commits)
                mid = await journal.checkpoint("r")  # read from PostgreSQL only
                assert mid is not None and mid["seq"] == run.events[-1].seq
        run.room.advance()
        start = len(run.events)
        run.drain()
        commits.append(asyncio.create_task(journal.commit(run.events[start:])))
        await asyncio.gather(*commits)

        events = await journal.read_events("r", 1)
        print(f"\nend to end, seed {seed}: {len(events)} events, {len(commits)} commits: {journal.batch_stats()}")
        assert [e.seq for e in events] == list(range(1, len(run.events) + 1))
        assert [e.as_dict() for e in events] == [e.as_dict() for e in run.events]

        here = clock_copy(run.clock)
        rebuilt = replay(events, here, room_events=[])
        _same(rebuilt, run, here, windows=True)

        base = await journal.latest_snapshot("r", 1)
        assert base is not None and base["seq"] == mid["seq"]
        later = await journal.read_events("r", 1, after_seq=base["seq"])
        here = clock_copy(run.clock)
        _same(replay(later, here, base=base, room_events=[]), run, here, windows=False)


async def test_a_room_with_lanes_is_rebuilt_from_postgres(journal):
    """Joins a grant puts in a lane, releases by share then by priority, a lane removed live: the journal
    alone rebuilds every lane's line and the share counters, with and without a checkpoint."""
    run = Run(maxConcurrent=3, ratePerMinute=60, lanes=[{"id": "public", "share": 40}, {"id": "members", "share": 60}])
    rnd = random.Random(7)
    script = _script(7, 300)
    for i in range(0, len(script), 3):  # a third of the joins name a lane
        if script[i][0] == "join":
            script[i] = ("lane", script[i][1], rnd.choice(["members", "public"]))
    script.insert(150, ("update", 27))  # by priority
    script.insert(220, ("update", 28))  # members removed: its people join public
    half = 160
    with deterministic():
        for op in script[:half]:
            run.apply(op)
        await journal.commit(run.events)
        committed = len(run.events)
        mid = await journal.checkpoint("r")
        assert mid is not None and mid["seq"] == run.events[-1].seq
        for op in script[half:]:
            run.apply(op)
        run.room.advance()
        run.drain()
        await journal.commit(run.events[committed:])
        events = await journal.read_events("r", 1)
        assert any(e.type == "promote" and "lc" in e.data for e in events)
        assert any(e.type == "join" and e.data.get("ln") == "members" for e in events)
        here = clock_copy(run.clock)
        _same(replay(events, here, room_events=[]), run, here, windows=True)
        base = await journal.latest_snapshot("r", 1)
        assert base is not None
        later = await journal.read_events("r", 1, after_seq=base["seq"])
        here = clock_copy(run.clock)
        _same(replay(later, here, base=base, room_events=[]), run, here, windows=False)


def _same(rebuilt: Any, run: Run, here: Any, *, windows: bool) -> None:
    align(rebuilt, run.room, pacing=True)  # operations between ticks: the credit is aligned (see test_replay)
    mine, theirs = observe(rebuilt, run.browsers, windows=windows), observe(run.room, run.browsers, windows=windows)
    assert mine == theirs, diff(mine, theirs)
    assert dump(rebuilt) == dump(run.room), diff(dump(rebuilt), dump(run.room))
    twin = copy.deepcopy(run.room)
    mine_f, theirs_f = future(rebuilt, here, run.browsers), future(twin, twin.clock, run.browsers)
    assert mine_f == theirs_f, diff(mine_f, theirs_f)


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        (Event("room.teleport", "r", 1, 5, {}, seq=3), "unknown event type"),
        (Event("purge", "r", 1, 5, {"count": 1}, seq=3, lv=EVENT_LOG_VERSION + 1), "newer"),
    ],
)
async def test_a_journal_this_build_cannot_read_fences_the_room(journal, bad, why):
    run = Run()
    with deterministic():
        run.apply(("join", 0, None))
    await journal.commit([*run.events, bad])
    events = await journal.read_events("r", 1)
    assert events[-1].type == bad.type and events[-1].lv == bad.lv
    with pytest.raises(ReplayFenced) as err:
        replay(events, clock_copy(run.clock))
    assert why in err.value.reason and err.value.seq == 3


async def test_a_checkpoint_folds_only_the_gap_free_prefix(journal):
    run = Run()
    with deterministic():
        for b in range(5):
            run.apply(("join", b, None))
    events = run.events  # seq 1..6
    await journal.commit([e for e in events if e.seq != 4])  # 4 still in flight on another instance
    snap = await journal.checkpoint("r")
    assert snap is not None and snap["seq"] == 3
    await journal.commit([events[3]])
    snap = await journal.checkpoint("r")
    assert snap is not None and snap["seq"] == 6 and snap["line"] == [1, 2, 3, 4, 5]
