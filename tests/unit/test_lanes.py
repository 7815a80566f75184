"""Priority lanes' rules (engine/lanes.py): the field's checks, which lane each release comes from
(share: smooth and exact over a round, work-conserving; priority: strict), who is ahead in effect, and
a lane's ETA."""

from __future__ import annotations

import pytest

from queue_manager.engine.errors import EngineError
from queue_manager.engine.lanes import (
    Lane,
    ahead_lanes,
    decode_counters,
    encode_counters,
    encode_lanes,
    lane_eta_sec,
    lane_for,
    parse_lanes,
    pick_lane,
)

SHARES = parse_lanes([{"id": "members", "share": 70}, {"id": "public", "share": 30}])
THIRDS = parse_lanes([{"id": "a", "share": 50}, {"id": "b", "share": 30}, {"id": "c", "share": 20}])
PRIORITY = parse_lanes(
    [{"id": "public", "priority": 10}, {"id": "vip", "priority": 90}, {"id": "staff", "priority": 90}]
)


def picks(lanes: tuple[Lane, ...], ready: list[str], count: int, counters: dict[str, int] | None = None) -> list[str]:
    counters = {} if counters is None else counters
    out = []
    for _ in range(count):
        lane = pick_lane(lanes, ready, counters)
        assert lane is not None
        out.append(lane)
    return out


def test_parse_and_the_public_form() -> None:
    assert parse_lanes(None) == () and parse_lanes([]) == ()
    assert [lane.to_public() for lane in SHARES] == [{"id": "members", "share": 70}, {"id": "public", "share": 30}]
    assert PRIORITY[1] == Lane("vip", priority=90)
    assert encode_lanes(SHARES) == "s|members:70|public:30"
    assert encode_lanes(()) == ""


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ({"id": "a"}, "must be a list"),
        ([{"id": "a", "share": 40}], "add up to 100; these add up to 40"),
        ([{"id": "a", "share": 50}, {"id": "b", "priority": 5}], "not mixed"),
        ([{"id": "-a", "priority": 5}], "lowercase letters"),
        ([{"id": "a", "priority": 5}, {"id": "a", "priority": 6}], "listed twice"),
        ([{"id": "a", "priority": 5, "share": 5}], "exactly one of priority or share"),
        ([{"id": "a", "priority": 2.5}], "whole number from 1 to 100"),
        ([{"id": f"l{i}", "priority": 1} for i in range(9)], "at most 8 lanes"),
    ],
)
def test_bad_lanes_say_what_is_wrong(value: object, words: str) -> None:
    with pytest.raises(EngineError) as info:
        parse_lanes(value)
    assert (info.value.status, info.value.code, info.value.extra["field"]) == (400, "invalid_lanes", "lanes")
    assert words in info.value.message


def test_a_join_lane_defaults_to_the_first_lane_and_refuses_an_unknown_one() -> None:
    assert lane_for(SHARES, None) == "members"
    assert lane_for(SHARES, "public") == "public"
    assert lane_for((), None) is None
    for lanes, asked in ((SHARES, "staff"), ((), "members")):
        with pytest.raises(EngineError) as info:
            lane_for(lanes, asked)
        assert (info.value.status, info.value.code) == (400, "unknown_lane")


def test_shares_are_exact_over_a_round_and_smooth_within_it() -> None:
    order = picks(SHARES, ["members", "public"], 10)
    assert order.count("members") == 7 and order.count("public") == 3
    assert "members,members,members,members" not in ",".join(order)  # never four in a row
    order = picks(THIRDS, ["a", "b", "c"], 100)
    assert [order.count(x) for x in "abc"] == [50, 30, 20]


def test_an_empty_lane_gives_its_share_away_and_builds_no_debt() -> None:
    counters: dict[str, int] = {}
    assert picks(SHARES, ["members"], 20, counters) == ["members"] * 20  # work-conserving
    assert "public" not in counters
    # the public lane fills again: it gets its share from now on, not a burst for the time it was empty
    order = picks(SHARES, ["members", "public"], 10, counters)
    assert order.count("public") == 3
    assert pick_lane(SHARES, [], counters) is None


def test_priority_is_strict_and_ties_go_to_the_lane_listed_first() -> None:
    assert picks(PRIORITY, ["public", "vip", "staff"], 3) == ["vip"] * 3
    assert pick_lane(PRIORITY, ["public", "staff"], {}) == "staff"
    assert pick_lane(PRIORITY, ["public"], {}) == "public"


def test_who_is_ahead_in_effect() -> None:
    assert ahead_lanes(PRIORITY, "public") == ["vip", "staff"]
    assert ahead_lanes(PRIORITY, "vip") == []
    assert ahead_lanes(PRIORITY, "staff") == ["vip"]  # equal priority, listed earlier
    assert ahead_lanes(SHARES, "public") == []  # shares run side by side


def test_a_lane_eta_uses_its_share_of_the_rate() -> None:
    assert lane_eta_sec(SHARES, "members", 7, True, 60) == 10  # 42 a minute
    assert lane_eta_sec(SHARES, "public", 3, True, 60) == 10  # 18 a minute
    assert lane_eta_sec(PRIORITY, "public", 60, True, 60) == 60  # the room's rate, places counted ahead
    assert lane_eta_sec(SHARES, "public", 3, False, 60) is None
    assert lane_eta_sec(SHARES, "public", 0, True, 60) is None


def test_counters_round_trip_in_the_valkey_form() -> None:
    counters = {"members": -30, "public": 30, "gone": 0}
    assert encode_counters(counters) == "members=-30,public=30"
    assert decode_counters(encode_counters(counters)) == {"members": -30, "public": 30}
    assert decode_counters(None) == {}
