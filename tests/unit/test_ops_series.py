"""The console's series recorder: waits measured from cumulative counts, marks, bounded tiers."""

from __future__ import annotations

from typing import Any

from queue_manager.ops.series import TIERS, SeriesRecorder, block_note, percentile, weighted_percentile

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


def test_waits_are_the_distance_between_the_kth_join_and_the_kth_exit() -> None:
    rec = SeriesRecorder()
    rec.sample([], T0)  # the recorder was running before the room existed
    rec.sample([summary(2, 0, 2)], T0 + 2_000)  # two join at +2 s
    rec.sample([summary(3, 0, 3)], T0 + 4_000)  # a third at +4 s
    rec.sample([summary(3, 1, 2)], T0 + 12_000)  # the first leaves at +12 s: waited 10 s
    rec.sample([summary(3, 3, 0)], T0 + 20_000)  # the other two at +20 s: 18 s and 16 s
    rec.sample([summary(3, 3, 0)], T0 + 30_000)  # closes the bucket holding +20 s
    rows = rec.rows("shop", "10s") or []
    waits = {r["t"]: (r["measuredWaits"], r["waitMaxSec"]) for r in rows if r["measuredWaits"]}
    assert waits == {(T0 + 10_000) // 1000: (1, 10.0), (T0 + 20_000) // 1000: (2, 18.0)}
    minute = (rec.rows("shop", "1m", T0 + 30_000) or [])[-1]
    assert minute["joins"] == 3 and minute["passes"] == 3 and minute["measuredWaits"] == 3
    assert minute["waitP50Sec"] == 16.0 and minute["waitP90Sec"] == 18.0 and minute["partial"] is True


def test_a_purge_is_exits_without_waits_and_a_mark() -> None:
    rec = SeriesRecorder()
    rec.sample([], T0)
    rec.sample([summary(5, 0, 5)], T0 + 2_000)
    rec.sample([summary(5, 0, 0)], T0 + 4_000)
    rec.sample([summary(6, 1, 0)], T0 + 6_000)  # a new arrival goes straight through: the 6th exit
    rows = rec.rows("shop", "1m", T0 + 6_000) or []
    assert rows[-1]["measuredWaits"] == 1 and rows[-1]["waitMaxSec"] == 0.0
    kinds = [m["kind"] for m in rec.marks("shop", 0)]
    assert kinds == ["purge"]


def test_state_and_rate_changes_are_marked_and_rooms_seen_at_start_are_not_back_dated() -> None:
    rec = SeriesRecorder()
    rec.sample([summary(100, 40, 60)], T0)  # counters from before this process was watching
    rec.sample([summary(100, 41, 59, state="paused", effectiveState="paused", ratePerMinute=90)], T0 + 2_000)
    notes = [m["note"] for m in rec.marks("shop", 0)]
    assert notes == ["state active → paused", "rate 60 → 90/min"]
    row = (rec.rows("shop", "10s", T0 + 2_000) or [])[-1]
    assert row["joins"] == 0 and row["passes"] == 1
    assert row["measuredWaits"] == 0  # the 41st joiner's join time is unknown: no wait is invented


def test_a_room_born_since_the_process_began_watching_has_its_waits_measured_from_the_first_sample() -> None:
    """A room created and joined before the recorder's first sample: its joins were all made while this
    process ran, so they are stamped at that sample like any sample's new joins, and their waits count."""
    rec = SeriesRecorder()
    rec.watching_since_ms = T0 - 1_000
    born = {"createdAt": T0 - 500}
    rec.sample([summary(3, 0, 3, **born)], T0)  # the process's first sample: three already in line
    rec.sample([summary(3, 1, 2, **born)], T0 + 2_000)
    rec.sample([summary(3, 3, 0, **born)], T0 + 4_000)
    assert rec.last_waits == {"shop": [(2, 4.0), (3, 4.0)]}  # the 2nd and 3rd exits, both 4 s
    minute = (rec.rows("shop", "1m", T0 + 4_000) or [])[-1]
    assert minute["joins"] == 3 and minute["passes"] == 3 and minute["measuredWaits"] == 3
    assert minute["waitMaxSec"] == 4.0 and minute["waitAvgSec"] is not None
    # a room whose generation began before the process began watching is still not back-dated
    old = SeriesRecorder()
    old.watching_since_ms = T0 - 1_000
    old.sample([summary(3, 0, 3, createdAt=T0 - 60_000)], T0)
    old.sample([summary(3, 3, 0, createdAt=T0 - 60_000)], T0 + 2_000)
    assert old.last_waits == {}


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
