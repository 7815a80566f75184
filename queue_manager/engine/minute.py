"""The last minute's arrivals and passes, counted over a sliding minute of the monotonic clock.

Two shapes of window, both pruned as they are read so they stay bounded:

* instants (monotonic ms) in a deque, oldest first: the places minted (``Room.join_times``) and the
  passes minted (``Room.pass_times``); one counts while it is later than ``now - 60_000``;
* bypass arrivals per second (``Room.arrival_buckets``: ``[second, count]``, oldest first), so a busy
  room in bypass costs a bounded amount of memory and O(1) per arrival; a bucket of second ``s``
  counts while ``s * 1000 > now - 60_000``, as one place minted at the first millisecond of that
  second would.
"""

from __future__ import annotations

from collections import deque

MINUTE_MS = 60_000


def last_minute(times: deque[int], now_ms: int) -> int:
    """How many of ``times`` fall in the minute before ``now_ms``; older ones are dropped."""
    cutoff = now_ms - MINUTE_MS
    while times and times[0] <= cutoff:
        times.popleft()
    return len(times)


def count_arrival(buckets: deque[list[int]], now_ms: int) -> None:
    """One bypass arrival at ``now_ms``. The first arrival of a second opens its bucket and drops the
    buckets that left the window, so at most a minute's worth is ever kept."""
    second = now_ms // 1000
    if buckets and buckets[-1][0] >= second:
        buckets[-1][1] += 1
        return
    buckets.append([second, 1])
    arrivals_last_minute(buckets, now_ms)


def arrivals_last_minute(buckets: deque[list[int]], now_ms: int) -> int:
    """The bypass arrivals of the minute before ``now_ms`` (``last_minute``'s rule, per bucket); the
    buckets that left the window are dropped."""
    cutoff = now_ms - MINUTE_MS
    while buckets and buckets[0][0] * 1000 <= cutoff:
        buckets.popleft()
    return sum(count for _, count in buckets)
