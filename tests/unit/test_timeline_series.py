"""The console's series recorder: the store's waits read once each, marks, bounded tiers."""

from __future__ import annotations

from typing import Any

from queue_manager.engine.view import MintedWaits
from queue_manager.sidestores.timeline.series import (
    TIERS,
    SeriesRecorder,
    WaitLump,
    block_note,
    percentile,
    weighted_percentile,
)

T0 = 1_800_000_000_000 - 1_800_000_000_000 % 3_600_000  # an hour boundary


def summary(joins: int, passes: int, waiting: int, **extra: Any) -> dict[str, Any]:
    base = {
        "id": "shop",
        "generation": 1,
        "state": "active",
        "effectiveState": "active",
        "ratePerMinute": 60,
        "joinsTotal": joins,
        "passesTotal": passes,
        "waiting": waiting,
        "preQueue": 0,
        "activeSessions": 0,
        "joinsLastMinute": 0,
        "passedLastMinute": 0,
    }
    base.update(extra)
    return base


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 0.5) is None
    assert percentile([5.0], 0.9) == 5.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.0
    assert percentile([float(i) for i in range(1, 11)], 0.9) == 9.0


def test_weighted_percentile_lets_a_busy_minute_weigh_what_it_measured() -> None:
    assert weighted_percentile([], 0.5) is None
    # one quiet minute (2 waits of 100 s, each standing for 1) and one busy one (2 kept of 1,000 waits of 5 s)
    pairs = [(100.0, 1.0), (100.0, 1.0), (5.0, 500.0), (5.0, 500.0)]
    assert weighted_percentile(pairs, 0.5) == 5.0
    assert weighted_percentile(pairs, 0.9) == 5.0
    assert weighted_percentile(pairs, 1.0) == 100.0


def minted(last: int, waits_ms: list[int], total_ms: int | None = None, gen: int = 1) -> dict[str, MintedWaits]:
    """What the store hands the recorder with a sample: the waits of passes last-len+1 … last."""
    return {"shop": MintedWaits(gen, last, sum(waits_ms) if total_ms is None else total_ms, waits_ms)}


def test_waits_are_the_stores_own_each_read_once() -> None:
    rec = SeriesRecorder()
    rec.sample([], T0)  # the recorder was running before the room existed
    rec.sample([summary(2, 0, 2)], T0 + 2_000, minted(0, []))
    rec.sample([summary(3, 0, 3)], T0 + 4_000, minted(0, []))
    rec.sample([summary(3, 1, 2)], T0 + 12_000, minted(1, [10_340]))  # the first pass: 10.34 s
    assert rec.last_waits == {"shop": [(1, 10.34)]}
    rec.sample([summary(3, 3, 0)], T0 + 20_000, minted(3, [10_340, 17_960, 16_080]))  # pass 1 again: not twice
    assert rec.last_waits == {"shop": [(2, 17.96), (3, 16.08)]}
    rec.sample([summary(3, 3, 0)], T0 + 30_000, minted(3, []))  # closes the bucket holding +20 s
    rows = rec.rows("shop", "10s") or []
    waits = {r["t"]: (r["measuredWaits"], r["waitMaxSec"]) for r in rows if r["measuredWaits"]}
    assert waits == {(T0 + 10_000) // 1000: (1, 10.3), (T0 + 20_000) // 1000: (2, 18.0)}
    minute = (rec.rows("shop", "1m", T0 + 30_000) or [])[-1]
    assert minute["joins"] == 3 and minute["passes"] == 3 and minute["measuredWaits"] == 3
    assert minute["waitAvgSec"] == round((10.34 + 17.96 + 16.08) / 3, 1)
    assert minute["waitP50Sec"] == 16.1 and minute["waitP90Sec"] == 18.0 and minute["partial"] is True


def test_a_recorder_that_fell_behind_counts_the_waits_it_missed_by_their_sum() -> None:
    rec = SeriesRecorder()
    rec.sample([], T0)
    rec.sample([summary(10, 2, 8)], T0 + 2_000, minted(2, [1_000, 3_000]))
    # passes 3 … 10 since, of which the room still keeps the last three (5, 6 and 7 s); all eight sum 40 s
    rec.sample([summary(10, 10, 0)], T0 + 4_000, minted(10, [5_000, 6_000, 7_000], total_ms=4_000 + 40_000))
    assert rec.last_waits == {"shop": [(8, 5.0), (9, 6.0), (10, 7.0)]}
    assert rec.last_lumps == {"shop": WaitLump(3, 7, 5, 22.0)}  # passes 3 … 7: 40 − 18 s
    minute = (rec.rows("shop", "1m", T0 + 4_000) or [])[-1]
    assert minute["passes"] == 10 and minute["measuredWaits"] == 10
    assert minute["waitAvgSec"] == 4.4 and minute["waitMaxSec"] == 7.0


def test_a_purge_is_exits_without_waits_and_a_mark() -> None:
    rec = SeriesRecorder()
    rec.sample([], T0)
    rec.sample([summary(5, 0, 5)], T0 + 2_000, minted(0, []))
    rec.sample([summary(5, 0, 0)], T0 + 4_000, minted(0, []))
    rec.sample([summary(6, 1, 0)], T0 + 6_000, minted(1, [0]))  # a new arrival goes straight through
    rows = rec.rows("shop", "1m", T0 + 6_000) or []
    assert rows[-1]["measuredWaits"] == 1 and rows[-1]["waitMaxSec"] == 0.0
    kinds = [m["kind"] for m in rec.marks("shop", 0)]
    assert kinds == ["purge"]


def test_state_and_rate_changes_are_marked_and_rooms_seen_at_start_are_not_back_dated() -> None:
    rec = SeriesRecorder()
    # counters and waits from before this process was watching
    rec.sample([summary(100, 40, 60)], T0, minted(40, [9_000] * 40))
    assert rec.last_waits == {}
    paused = summary(100, 41, 59, state="paused", effectiveState="paused", ratePerMinute=90)
    rec.sample([paused], T0 + 2_000, minted(41, [9_000] * 40 + [12_500]))
    notes = [m["note"] for m in rec.marks("shop", 0)]
    assert notes == ["state active → paused", "rate 60 → 90/min"]
    row = (rec.rows("shop", "10s", T0 + 2_000) or [])[-1]
    assert row["joins"] == 0 and row["passes"] == 1
    assert row["measuredWaits"] == 1 and row["waitMaxSec"] == 12.5  # the 41st pass: the store knows its wait


def test_a_room_born_since_the_process_began_watching_has_its_waits_measured_from_the_first_sample() -> None:
    """A room created before the recorder's first sample but after the process began watching: every pass
    it has minted is this process's to count, also those minted before that sample."""
    rec = SeriesRecorder()
    rec.watching_since_ms = T0 - 1_000
    born = {"createdAt": T0 - 500}
    rec.sample([summary(3, 1, 2, **born)], T0, minted(1, [120]))  # the process's first sample
    assert rec.last_waits == {"shop": [(1, 0.12)]}
    rec.sample([summary(3, 3, 0, **born)], T0 + 2_000, minted(3, [120, 2_400, 2_050]))
    assert rec.last_waits == {"shop": [(2, 2.4), (3, 2.05)]}
    minute = (rec.rows("shop", "1m", T0 + 2_000) or [])[-1]
    assert minute["passes"] == 1 + 2 and minute["measuredWaits"] == 3
    assert minute["waitMaxSec"] == 2.4 and minute["waitAvgSec"] == round((0.12 + 2.4 + 2.05) / 3, 1)
    # a room whose generation began before the process began watching is still not back-dated
    old = SeriesRecorder()
    old.watching_since_ms = T0 - 1_000
    old.sample([summary(3, 0, 3, createdAt=T0 - 60_000)], T0, minted(2, [5_000, 6_000]))
    old.sample([summary(3, 3, 0, createdAt=T0 - 60_000)], T0 + 2_000, minted(3, [5_000, 6_000, 7_000]))
    assert old.last_waits == {"shop": [(3, 7.0)]}


def test_a_room_recreated_keeps_its_history_and_a_deleted_one_is_forgotten() -> None:
    rec = SeriesRecorder()
    rec.sample([], T0)
    rec.sample([summary(4, 0, 4)], T0 + 2_000)
    rec.sample([summary(1, 0, 1, generation=2)], T0 + 4_000)
    assert any(m["kind"] == "room" for m in rec.marks("shop", 0))
    assert rec.rows("shop", "1m", T0 + 4_000)
    rec.sample([], T0 + 6_000)
    assert rec.rows("shop", "1m") is None


def test_tiers_are_bounded() -> None:
    rec = SeriesRecorder()
    seconds, keep = TIERS["10s"]
    for i in range(keep + 20):
        rec.sample([summary(i, 0, i)], T0 + i * seconds * 1000)
    assert len(rec.rows("shop", "10s") or []) == keep


class Sink:
    def __init__(self) -> None:
        self.marks: list[tuple[str, int, str, str]] = []
        self.blocks: list[tuple[str, int, int]] = []

    def mark(self, room_id: str, t: int, kind: str, note: str) -> None:
        self.marks.append((room_id, t, kind, note))

    def block(self, room_id: str, minute: int, n: int = 1) -> None:
        self.blocks.append((room_id, minute, n))


def test_every_mark_is_handed_to_the_sink_as_it_is_made() -> None:
    sink = Sink()
    rec = SeriesRecorder(sink)
    rec.sample([summary(0, 0, 0)], T0)  # the first sight of a room makes no mark
    rec.sample([summary(0, 0, 0, effectiveState="paused", ratePerMinute=30)], T0 + 2_000)
    t = (T0 + 2_000) // 1000
    assert sink.marks == [("shop", t, "pause", "state active → paused"), ("shop", t, "rate", "rate 60 → 30/min")]
    assert [(m["t"], m["kind"], m["note"]) for m in rec.marks("shop", 0)] == [(s[1], s[2], s[3]) for s in sink.marks]


def test_protection_blocks_are_one_mark_per_room_per_minute_with_a_count() -> None:
    sink = Sink()
    rec = SeriesRecorder(sink)
    rec.sample([summary(0, 0, 0)], T0)
    for i in range(1000):  # an attack inside one minute
        rec.block("shop", T0 + 5_000 + i * 10)
    rec.block("shop", T0 + 61_000)  # the next minute
    blocks = [m for m in rec.marks("shop", 0) if m["kind"] == "block"]
    assert [(m["t"], m["count"], m["note"]) for m in blocks] == [
        (T0 // 1000, 1000, block_note(1000)),
        (T0 // 1000 + 60, 1, "1 join refused by bot protection"),
    ]
    assert len(sink.blocks) == 1001 and {(r, m) for r, m, _ in sink.blocks} == {
        ("shop", T0 // 1000),
        ("shop", T0 // 1000 + 60),
    }
    rec.block("elsewhere", T0)  # a room the recorder has not sampled yet is still handed on
    assert sink.blocks[-1] == ("elsewhere", T0 // 1000, 1)


def test_counters_that_went_back_count_no_wait_twice() -> None:
    """A room restored from an older state (same generation, fewer joins): the recorder reads on from its
    cursor, so the waits it has read are not read again, also when the room's passes went back too."""
    rec = SeriesRecorder()
    rec.sample([], T0)
    rec.sample([summary(6, 4, 2)], T0 + 2_000, minted(4, [1_000, 2_000, 3_000, 4_000]))
    rec.sample([summary(5, 4, 1)], T0 + 4_000, minted(4, [1_000, 2_000, 3_000, 4_000]))  # joins went back
    assert rec.last_waits == {} and rec.last_lumps == {}
    rec.sample([summary(5, 3, 2)], T0 + 6_000, minted(3, [1_000, 2_000, 3_000]))  # passes went back
    assert rec.last_waits == {} and rec.last_lumps == {}
    rec.sample([summary(5, 5, 0)], T0 + 8_000, minted(5, [1_000, 2_000, 3_000, 5_500, 6_500]))
    assert rec.last_waits == {"shop": [(4, 5.5), (5, 6.5)]}
    minute = (rec.rows("shop", "1m", T0 + 8_000) or [])[-1]
    assert minute["measuredWaits"] == 6
