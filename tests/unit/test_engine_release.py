"""The random release's pure parts: the unbiased draw, the wait range and the odds a random line shows,
and the line's k-th place."""

from __future__ import annotations

from collections import Counter

from queue_manager.engine.line import Line
from queue_manager.engine.release import draw_index, next_minute_odds, wait_range


def test_draw_index_is_in_range_repeatable_and_spread() -> None:
    seen: Counter[int] = Counter()
    thrown = 0
    for k in range(3000):
        index = draw_index("5eed", k, 0, 3)
        assert index == draw_index("5eed", k, 0, 3)  # a function of its inputs only
        if index is None:
            thrown += 1
            continue
        assert 0 <= index < 3
        seen[index] += 1
    assert thrown == 0  # 3 divides 2^32 nearly: a throw is a chance of about 1 in 1.4e9
    assert min(seen.values()) > 900  # about 1000 each (a fair draw falls below 900 with p < 1e-3)
    assert draw_index("5eed", 1, 0, 1) == 0
    ours = [draw_index("5eed", k, 0, 1000) for k in range(50)]
    assert ours != [draw_index("other", k, 0, 1000) for k in range(50)]  # another salt, another draw
    assert ours != [draw_index("5eed", k, 1, 1000) for k in range(50)]  # another try, another draw


def test_a_draw_past_the_unbiased_cut_is_thrown_away() -> None:
    # with a line of 2^31 + 1 almost half of all u fall past the cut: some tries must be thrown away
    size = (1 << 31) + 1
    assert any(draw_index("cut", k, 0, size) is None for k in range(64))


def test_wait_range_and_odds() -> None:
    assert wait_range(8, "active", 2) == (60, 180)  # turns 2 and 6 of 8 at 30 s each
    assert wait_range(8, "active", 4) == (30, 90)
    assert wait_range(1, "active", 600) == (1, 1)  # at least a second
    assert wait_range(5, "active", 60) == (2, 4)  # ⌈5/4⌉ = 2, ⌈15/4⌉ = 4
    for waiting, state, rate in ((0, "active", 60), (None, "active", 60), (8, "paused", 60), (8, "active", 0)):
        assert wait_range(waiting, state, rate) is None
        assert next_minute_odds(waiting, state, rate) is None
    assert next_minute_odds(8, "active", 4) == 50
    assert next_minute_odds(8, "active", 60) == 100
    assert next_minute_odds(1000, "active", 1) == 0


def test_line_nth_finds_each_place_after_removals() -> None:
    line = Line()
    seqs = [line.push(100 + i) for i in range(3000)]  # past the first tree size: it grows
    for s in seqs[::3]:
        line.remove(s)
    order = list(line)
    assert [line.nth(k) for k in range(1, len(order) + 1)] == order
