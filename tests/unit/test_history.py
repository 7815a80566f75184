"""The hourly history's pure fold and merge (``sidestores/history/``): counters from baselines, coverage, the
reservoir, partial rows, day buckets, and a writer that takes over mid-hour."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from queue_manager.sidestores.history.memory import MemoryRefusals, MemoryWarehouse
from queue_manager.sidestores.history.report import COLUMNS, build_report, report
from queue_manager.sidestores.history.rows import GAP_MS, HOUR, RESERVOIR, HourRow, Reading, fold
from queue_manager.sidestores.history.writer import HELD_WAITS, HourlyHistory
from queue_manager.sidestores.timeline.series import WaitLump

H = 1_800_000 * 1000 // 3600 * 3600  # an hour's start, epoch s (a whole hour)
T0 = H * 1000  # ... in ms


def reading(joins: int, passes: int, *, gen: int = 1, depth: int = 0, waits: list[float] | None = None) -> Reading:
    return Reading("r", gen, joins, passes, depth, 0, list(enumerate(waits or [], start=1)))


def run(samples: list[tuple[int, Reading]], row: HourRow | None = None, since: int = T0) -> HourRow:
    rng = random.Random(1)
    prev = None
    for t, r in samples:
        row = fold(row, r, t, covered_since_ms=since, previous=prev, rng=rng)
        prev = r
    assert row is not None
    return row


def test_a_full_hour_counts_joins_from_the_baseline_and_is_not_partial() -> None:
    samples = [(T0 + i * 2000, reading(100 + i, 90 + i // 2, depth=i % 7)) for i in range(1800)]
    row = run(samples)
    assert row.joins == 1799 and row.passes == 899  # counted from the first sample's counters
    out = report("r", "hour", H, [row], T0 + HOUR * 1000 + 5000)
    assert out["partial"] is False and out["missingSec"] == 0 and out["coveredSec"] == 3600
    assert out["netUnserved"] == 1799 - 899
    assert out["samples"] == 1800 and out["peakDepth"] == 6
    assert list(out) == list(COLUMNS)


def test_a_hole_makes_the_row_partial_with_null_net_unserved() -> None:
    before = [(T0 + i * 2000, reading(i, 0)) for i in range(300)]  # the first ten minutes
    after = [(T0 + 1_800_000 + i * 2000, reading(1000 + i, 5)) for i in range(900)]  # the second half
    row = run(before + after)
    out = report("r", "hour", H, [row], T0 + HOUR * 1000)
    assert out["partial"] is True and out["netUnserved"] is None
    assert 1190 <= out["missingSec"] <= 1210 and out["coveredSec"] + out["missingSec"] == 3600
    assert out["joins"] == 1000 + 899  # a lower bound: the joins during the hole are in, nothing is doubled


def test_a_server_started_mid_hour_is_partial_for_the_open_hour() -> None:
    start = T0 + 20 * 60_000
    row = run([(start + i * 2000, reading(5, 0)) for i in range(10)], since=start)
    out = report("r", "hour", H, [row], start + 20_000)
    assert out["partial"] is True and out["missingSec"] >= 1200 - 1
    assert out["coveredSec"] <= 20


def test_a_room_created_mid_hour_on_a_running_server_is_not_partial() -> None:
    row = run([(T0 + 1_200_000 + i * 2000, reading(i, 0)) for i in range(5)], since=T0 - 60_000)
    out = report("r", "hour", H, [row], T0 + 1_200_000 + 10_000)
    assert out["partial"] is False


def test_a_new_writer_continues_the_hour_exactly() -> None:
    a = run([(T0 + i * 2000, reading(10 + i, i)) for i in range(100)])
    # the stored row goes to another writer, which never saw the counters before it took over
    copy = HourRow(a.room, a.hour)
    copy.load_state(a.state())
    for name in ("peak_depth", "depth_sum", "samples", "reservoir", "measured", "wait_sum", "wait_max"):
        setattr(copy, name, getattr(a, name))
    b = run([(T0 + 200_000 + i * 2000, reading(110 + i, 100 + i)) for i in range(10)], row=copy, since=T0 + 200_000)
    assert b.joins == 109 and b.passes == 109  # 10 -> 119 and 0 -> 109, once each
    assert b.covered_ms == a.covered_ms + 2000 + 9 * 2000  # the handover gap was short: covered


def test_a_room_born_this_hour_counts_from_zero_whoever_writes_its_first_row() -> None:
    """Joins made before any writer's first sample of a room created this hour are this hour's joins."""
    born = Reading("r", 1, 3, 2, 1, 0, [], T0 + 60_000)
    previous = Reading("r", 1, 2, 0, 2, 0, [], T0 + 60_000)  # the new leader read it as a follower
    row = fold(None, born, T0 + 70_000, covered_since_ms=T0 + 70_000, previous=previous, rng=random.Random())
    assert row.joins == 3 and row.passes == 2
    # a room of an earlier hour is still counted from the writer's baseline, never from zero
    older = Reading("r", 1, 3, 2, 1, 0, [], T0 - 60_000)
    row = fold(None, older, T0 + 70_000, covered_since_ms=T0 + 70_000, previous=None, rng=random.Random())
    assert row.joins == 0 and row.passes == 0
    unknown = Reading("r", 1, 3, 2, 1, 0, [], 0)  # restored from a checkpoint that did not keep it
    row = fold(None, unknown, T0 + 70_000, covered_since_ms=T0 + 70_000, previous=None, rng=random.Random())
    assert row.joins == 0


def test_a_late_reading_changes_no_sum_and_a_long_gap_is_not_covered() -> None:
    row = run([(T0 + 10_000, reading(1, 0)), (T0 + 12_000, reading(2, 0))], since=T0)
    samples, covered = row.samples, row.covered_ms
    fold(row, reading(2, 0, depth=50), T0 + 11_000, covered_since_ms=T0, rng=random.Random())
    assert row.samples == samples and row.covered_ms == covered and row.peak_depth == 50
    fold(row, reading(3, 0), T0 + 12_000 + GAP_MS + 1, covered_since_ms=T0, rng=random.Random())
    assert row.covered_ms == covered and row.joins == 2
    # a late reading's waits: those the row holds already are not added again, the others are
    fold(row, reading(2, 2, waits=[5.0, 7.0]), T0 + 11_000, covered_since_ms=T0, rng=random.Random())
    fold(row, reading(2, 2, waits=[5.0, 7.0, 9.0]), T0 + 11_500, covered_since_ms=T0, rng=random.Random())
    assert row.measured == 3 and row.wait_sum == 21.0 and row.joins == 2


def test_a_new_generation_keeps_what_was_counted() -> None:
    row = run(
        [(T0 + i * 2000, reading(i, 0)) for i in range(10)]
        + [(T0 + 20_000 + i * 2000, reading(i, 0, gen=2)) for i in range(5)]
    )
    assert row.joins == 9 + 4


def tallied(joins: int, refused: int, *, gen: int = 1, created_ms: int = 0) -> Reading:
    return Reading("r", gen, joins, 0, 0, 0, [], created_ms, tallies={"refusedFull": refused})


def test_full_line_refusals_are_counted_from_their_own_baseline() -> None:
    row = run([(T0 + i * 2000, tallied(i, 40 + i // 3)) for i in range(30)])
    assert row.tally("refusedFull") == 9  # 40 -> 49, counted from the hour's first sample
    out = report("r", "hour", H, [row], T0 + 60_000)
    assert out["refusedFull"] == 9 and list(out) == list(COLUMNS)
    assert list(COLUMNS).index("refusedFull") == list(COLUMNS).index("warned") + 1
    # a new generation keeps what was counted and counts its own from zero
    row = run(
        [(T0 + i * 2000, tallied(0, 5 + i)) for i in range(5)]
        + [(T0 + 20_000 + i * 2000, tallied(0, i, gen=2)) for i in range(3)],
    )
    assert row.tally("refusedFull") == 4 + 2
    # the counter went back (a rebuild that lost it): what was counted stays, counting goes on
    row = run(
        [(T0, tallied(0, 10)), (T0 + 2000, tallied(0, 13)), (T0 + 4000, tallied(0, 1)), (T0 + 6000, tallied(0, 2))]
    )
    assert row.tally("refusedFull") == 3 + 1


def test_a_writer_continues_the_tallies_from_the_stored_state() -> None:
    a = run([(T0 + i * 2000, tallied(0, i)) for i in range(10)])
    copy = HourRow(a.room, a.hour)
    copy.load_state(a.state())
    b = run([(T0 + 30_000 + i * 2000, tallied(0, 20 + i)) for i in range(3)], row=copy, since=T0 + 30_000)
    assert b.tally("refusedFull") == 22  # 0 -> 22, whoever wrote
    # a row written before the tallies were kept counts from its first sample on, never the room's whole past
    old = HourRow(a.room, a.hour)
    old.load_state({k: v for k, v in a.state().items() if k != "tallies"})
    c = run([(T0 + 30_000, tallied(0, 500)), (T0 + 32_000, tallied(0, 503))], row=old, since=T0 + 30_000)
    assert c.tally("refusedFull") == 3
    # a room born this hour counts from zero
    born = fold(None, tallied(0, 4, created_ms=T0 + 1000), T0 + 5000, covered_since_ms=T0, rng=random.Random())
    assert born.tally("refusedFull") == 4


def test_the_reservoir_is_bounded_and_the_exact_figures_are_exact() -> None:
    waits = [float(i % 600) for i in range(5000)]
    row = run([(T0 + 2000, reading(0, 0, waits=waits))])
    assert len(row.reservoir) == RESERVOIR and row.measured == 5000
    out = report("r", "hour", H, [row], T0 + 4000)
    assert out["measuredWaits"] == 5000 and out["waitMaxSec"] == 599
    assert out["waitAvgSec"] == round(sum(waits) / 5000, 1)
    assert 200 <= out["waitP50Sec"] <= 400 and 450 <= out["waitP90Sec"] <= 599


def test_day_buckets_weigh_each_hour_by_what_it_measured() -> None:
    busy = run([(T0 + 2000, reading(0, 0, waits=[100.0] * 900))])
    quiet = HourRow("r", H + HOUR)
    fold(quiet, reading(0, 0, waits=[10.0] * 100), T0 + HOUR * 1000 + 2000, covered_since_ms=0, rng=random.Random())
    quiet.samples = 1
    out = report("r", "day", H - H % 86400, [busy, quiet], T0 + 2 * HOUR * 1000)
    assert out["measuredWaits"] == 1000 and out["waitP50Sec"] == 100 and out["waitP90Sec"] == 100
    assert out["waitAvgSec"] == 91.0


def test_an_hour_nobody_recorded_is_reported_as_a_hole() -> None:
    first = run([(T0 + i * 2000, reading(i, 0)) for i in range(1800)])
    third = run([(T0 + 2 * HOUR * 1000 + i * 2000, reading(5000 + i, 0)) for i in range(1800)], since=0)
    rows = build_report([first, third], "hour", H, H + 3 * HOUR, T0 + 3 * HOUR * 1000, {"r": H})
    assert [r["start"] // 1000 for r in rows] == [H, H + HOUR, H + 2 * HOUR]
    assert rows[1]["partial"] is True and rows[1]["missingSec"] == 3600 and rows[1]["joins"] == 0
    assert rows[0]["partial"] is False and rows[2]["partial"] is False


def test_the_writer_folds_refusals_writes_only_while_leading_and_prunes() -> None:
    async def go() -> None:
        now = [T0 + 60_000]
        leading = [True]
        warehouse = MemoryWarehouse()
        history = HourlyHistory(
            warehouse, MemoryRefusals(), lambda: now[0], retain_days=1, leads=lambda: leading[0], seed=1
        )
        old = HourRow("gone", H - 3 * 86400)
        warehouse.rows[("gone", old.hour)] = old
        await history.start()
        summary = {"id": "r", "generation": 1, "joinsTotal": 3, "passesTotal": 1, "waiting": 2}
        history.note("r", "blocked")
        history.note("r", "warned")
        history.note("r", "warned")
        history.offer([summary], {"r": [(1, 4.0)]}, now[0])
        assert await history.write() == 1
        await history.prune()
        assert ("gone", old.hour) not in warehouse.rows
        leading[0] = False
        now[0] += 2000
        history.offer([{**summary, "joinsTotal": 9}], {}, now[0])
        assert await history.write() == 0  # a follower writes nothing
        rows = await history.fold_open_hour()
        assert rows[0]["blocked"] == 1 and rows[0]["warned"] == 2 and rows[0]["measuredWaits"] == 1
        await history.stop()

    asyncio.run(go())


def test_a_follower_that_takes_the_lead_folds_the_waits_the_row_does_not_hold_yet() -> None:
    """The leader wrote the first two waits and was killed; the follower measured all four meanwhile and
    held them: when it leads, the row gets the other two, none twice."""

    async def go() -> None:
        now = [T0 + 60_000]
        warehouse = MemoryWarehouse()
        leading_b = [False]
        a = HourlyHistory(warehouse, MemoryRefusals(), lambda: now[0], retain_days=1, seed=1)
        b = HourlyHistory(warehouse, MemoryRefusals(), lambda: now[0], retain_days=1, leads=lambda: leading_b[0])
        summary = {"id": "r", "generation": 1, "joinsTotal": 4, "passesTotal": 2, "waiting": 2}
        a.offer([summary], {"r": [(1, 3.0), (2, 4.0)]}, now[0])
        b.offer([summary], {"r": [(1, 3.0), (2, 4.0)]}, now[0])
        assert await a.write() == 1 and await b.write() == 0
        now[0] += 2000
        b.offer([{**summary, "passesTotal": 4, "waiting": 0}], {"r": [(3, 5.0), (4, 6.0)]}, now[0])
        assert await b.write() == 0  # still a follower: the waits stay held
        now[0] += 2000
        leading_b[0] = True
        b.offer([{**summary, "passesTotal": 4, "waiting": 0}], {}, now[0])
        assert await b.write() == 1
        row = warehouse.rows[("r", H)]
        assert row.measured == 4 and row.wait_sum == 18.0 and row.wait_max == 6.0 and row.wait_ord == 4
        now[0] += 2000
        b.offer([{**summary, "passesTotal": 4, "waiting": 0}], {"r": [(4, 6.0)]}, now[0])  # handed over again
        await b.write()
        assert warehouse.rows[("r", H)].measured == 4

    asyncio.run(go())


def test_waits_known_by_their_sum_count_exactly_once_each() -> None:
    """A lump (waits a reader missed one by one: their count and sum) adds to measuredWaits and the average,
    not to the maximum; passes a row holds already are not added again, also when part of a lump."""
    row = run(
        [(T0 + 2000, Reading("r", 1, 10, 10, 0, 0, [(8, 5.0), (9, 6.0), (10, 7.0)], 0, [WaitLump(1, 7, 7, 21.0)]))]
    )
    assert (row.measured, row.wait_sum, row.wait_max, row.wait_ord) == (10, 39.0, 7.0, 10)
    assert len(row.reservoir) == 3
    out = report("r", "hour", H, [row], T0 + 4000)
    assert out["measuredWaits"] == 10 and out["waitAvgSec"] == 3.9 and out["waitMaxSec"] == 7.0
    # another writer read passes 1 … 4 one by one; a lump of passes 1 … 8 adds the other four, pro rata
    other = run([(T0 + 2000, reading(4, 4, waits=[1.0, 1.0, 1.0, 1.0]))])
    fold(other, Reading("r", 1, 8, 8, 0, 0, [], 0, [WaitLump(1, 8, 8, 16.0)]), T0 + 4000, covered_since_ms=T0,
         rng=random.Random())  # fmt: skip
    assert (other.measured, other.wait_sum, other.wait_ord) == (8, 12.0, 8)


def test_a_follower_holds_its_oldest_waits_as_a_count_and_a_sum() -> None:
    """Held waits beyond HELD_WAITS become one lump: the row still counts each wait and their exact sum."""

    async def go() -> None:
        now = [T0 + 60_000]
        warehouse = MemoryWarehouse()
        leading = [False]
        history = HourlyHistory(warehouse, MemoryRefusals(), lambda: now[0], retain_days=1, leads=lambda: leading[0])
        total, k = HELD_WAITS + 100, 0
        summary = {"id": "r", "generation": 1, "joinsTotal": total, "passesTotal": 0, "waiting": 0}
        for chunk in (1000, 2000, HELD_WAITS + 100 - 3000):
            waits = [(k + i + 1, float((k + i) % 10)) for i in range(chunk)]
            k += chunk
            history.offer([{**summary, "passesTotal": k}], {"r": waits}, now[0])
            assert await history.write() == 0
            now[0] += 2000
        held = history._pending["r"]
        assert len(held.waits) == HELD_WAITS and len(held.lumps) == 1 and held.lumps[0].count == 100
        leading[0] = True
        history.offer([{**summary, "passesTotal": k}], {}, now[0])
        assert await history.write() == 1
        row = warehouse.rows[("r", H)]
        assert row.measured == total and row.wait_sum == sum(float(i % 10) for i in range(total))
        assert row.wait_ord == total and row.wait_max == 9.0

    asyncio.run(go())


def test_a_day_of_a_room_deleted_mid_day_ends_with_its_last_hour() -> None:
    day = H - H % 86400
    full = [
        run([(day * 1000 + h * HOUR * 1000 + i * 2000, reading(i, 0)) for i in range(1801)], since=0) for h in range(3)
    ]
    rows = build_report(full, "day", day, day + 86400, (day + 20 * HOUR) * 1000, {"r": day})
    assert len(rows) == 1 and rows[0]["partial"] is False and rows[0]["coveredSec"] == 3 * HOUR


def test_waits_of_a_failed_write_are_written_once_with_the_next() -> None:
    class Flaky(MemoryWarehouse):
        fail = True

        async def update(self, hour: int, rooms: list[str], change: Any) -> None:
            if self.fail:
                self.fail = False
                raise OSError("unreachable")
            await super().update(hour, rooms, change)

    async def go() -> None:
        now = [T0 + 60_000]
        warehouse = Flaky()
        history = HourlyHistory(warehouse, MemoryRefusals(), lambda: now[0], retain_days=1, seed=1)
        summary = {"id": "r", "generation": 1, "joinsTotal": 3, "passesTotal": 1, "waiting": 2}
        history.offer([summary], {"r": [(1, 1.0), (2, 2.0)]}, now[0])
        try:
            await history.write()
        except OSError:
            pass
        now[0] += 2000
        history.offer([summary], {"r": [(3, 3.0)]}, now[0])
        assert await history.write() == 1
        row = warehouse.rows[("r", H)]
        assert row.measured == 3 and row.wait_sum == 6.0

    asyncio.run(go())


def test_a_stop_ends_the_writer_even_when_a_write_swallows_the_cancellation() -> None:
    """A database driver may take a cancel that reaches it mid-write for its own and return: the writer's
    loop still ends, so the server's stop does not wait on it for ever."""

    class Swallowing(MemoryWarehouse):
        def __init__(self) -> None:
            super().__init__()
            self.entered = asyncio.Event()

        async def update(self, hour: int, rooms: list[str], change: Any) -> None:
            self.entered.set()
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                return  # the cancel taken for the write's own, as some drivers do

    async def go() -> None:
        now = [T0 + 60_000]
        warehouse = Swallowing()
        history = HourlyHistory(warehouse, MemoryRefusals(), lambda: now[0], retain_days=1, seed=1)
        await history.start()
        history.offer([{"id": "r", "generation": 1, "joinsTotal": 1, "passesTotal": 0, "waiting": 1}], {}, now[0])
        await warehouse.entered.wait()
        stop = asyncio.ensure_future(history.stop())
        done, _ = await asyncio.wait({stop}, timeout=30)  # a bound for the test itself; the stop takes no time
        assert done, "the writer's loop went on waiting after the stop cancelled it"
        stop.result()

    asyncio.run(go())


def test_an_hour_row_holds_each_pass_exact_wait_from_the_store() -> None:
    """The whole chain on the memory store and a fake clock: the store measures each wait, the recorder
    reads it every 2 s, the history folds it: measuredWaits, waitMaxSec and waitAvgSec are the waits the
    test's own clock gives, to the report's rounding, however they fall between the samples."""
    from queue_manager.clock import FakeClock
    from queue_manager.engine.model import ClientId
    from queue_manager.sidestores.timeline.series import SeriesRecorder
    from queue_manager.store.memory import MemoryStore

    async def go() -> None:
        clock = FakeClock()
        store = MemoryStore(clock)
        warehouse = MemoryWarehouse()
        history = HourlyHistory(warehouse, MemoryRefusals(), clock.wall_ms, retain_days=1, seed=1)
        rec = SeriesRecorder()
        rec.watching_since_ms = clock.wall_ms()  # the process began watching before the room was created
        await store.upsert_room({"id": "r", "targetUrl": "https://shop.example", "ratePerMinute": 60})
        joined: dict[int, int] = {}
        waits: dict[int, int] = {}
        for step in range(1, 200):  # 0.1 s steps: joins at 0.3, 0.7 and 1.9 s; a tick every 0.5 s
            clock.advance(0.1)
            if step in (3, 7, 19):
                i = len(joined)
                view = await store.join("r", ClientId(ident=f"10.0.0.{i}", fp=bytes([i])), None, None)
                assert view.ticket is not None
                joined[view.ticket] = clock.wall_ms()
            if step % 5 == 0:
                await store.tick()
                for n in joined:
                    if n not in waits and (await store.lookup("r", str(n)))["state"] == "passed":
                        waits[n] = clock.wall_ms() - joined[n]
            if step % 20 == 0:  # the recorder's sample, every 2 s
                sampled = await rec.feed(store, clock.wall_ms())
                assert sampled is not None
                history.offer(sampled, rec.last_waits, clock.wall_ms(), rec.last_lumps)
                await history.write()
        assert len(waits) == 3 and len({ms % 2000 for ms in waits.values()}) > 1
        hour = clock.wall_ms() // 1000 - clock.wall_ms() // 1000 % HOUR
        row = warehouse.rows[("r", hour)]
        assert row.measured == 3 and row.wait_max == max(waits.values()) / 1000.0
        assert abs(row.wait_sum - sum(waits.values()) / 1000.0) < 1e-9
        out = report("r", "hour", hour, [row], clock.wall_ms())
        assert out["measuredWaits"] == 3 and out["passes"] == 3
        assert out["waitMaxSec"] == round(max(waits.values()) / 1000.0, 1)
        assert out["waitAvgSec"] == round(sum(waits.values()) / 3000.0, 1)

    asyncio.run(go())


def _revoking(joins: int, revoked: int, *, gen: int = 1) -> Reading:
    return Reading("r", gen, joins, 0, 0, 0, tallies={"sessionsRevoked": revoked})


def test_sessions_revoked_are_a_tally_counted_through_a_new_generation_and_a_reload() -> None:
    samples = [(T0 + i * 2000, _revoking(10 + i, 4 + i // 3)) for i in range(30)]
    row = run(samples)
    assert row.tally("sessionsRevoked") == 9  # 4 at the hour's first sample, 13 at its last
    samples = [(T0 + 60_000 + i * 2000, _revoking(i, i, gen=2)) for i in range(1, 6)]
    row = run(samples, row)  # deleted and created again: what was counted stays, the new one counts on
    assert row.tally("sessionsRevoked") == 9 + 5
    again = HourRow("r", H)
    again.load_state(row.state())  # what the warehouse keeps for the next writer
    assert again.tally("sessionsRevoked") == row.tally("sessionsRevoked")
    out = report("r", "hour", H, [row, again], T0 + HOUR * 1000)
    assert out["sessionsRevoked"] == 2 * 14 and list(out).index("sessionsRevoked") == list(out).index("refusedFull") + 1
    assert Reading.of({"id": "r", "generation": 1, "sessionsRevoked": 3}).tallies["sessionsRevoked"] == 3
