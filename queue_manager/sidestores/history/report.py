"""The hourly history's report: the rows of ``GET /api/admin/reports``, hours merged into hour or day buckets.

A report judges a row on the hour's length, or the time elapsed so far for the open hour; a shortfall
of at most ``TOLERANCE_SEC`` (one missed sample around the hour's turn) is not a hole. A row with a
hole is ``partial``: its counters are lower bounds and its ``netUnserved`` is null. Within a room's
recorded life an hour nobody recorded is a hole too.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from queue_manager.sidestores.history.rows import DAY, HOUR, TALLIES, TOLERANCE_SEC, HourRow
from queue_manager.sidestores.timeline.series import weighted_percentile

COLUMNS = (
    "roomId",
    "bucket",
    "start",
    "startIso",
    "joins",
    "passes",
    "netUnserved",
    "peakDepth",
    "avgDepth",
    "peakActive",
    "waitP50Sec",
    "waitP90Sec",
    "waitMaxSec",
    "waitAvgSec",
    "measuredWaits",
    "blocked",
    "warned",
    *TALLIES,
    "samples",
    "partial",
    "coveredSec",
    "missingSec",
)


def iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _r1(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _covered(row: HourRow, now_ms: int) -> int:
    """The row's covered seconds, a shortfall within the tolerance counted as covered."""
    span = max(0, min(HOUR, now_ms // 1000 - row.hour))
    covered = min(span, row.covered_ms // 1000)
    return span if span - covered <= TOLERANCE_SEC else covered


def report(
    room: str,
    bucket: str,
    start: int,
    rows: list[HourRow],
    now_ms: int,
    *,
    since: int | None = None,
    until: int | None = None,
) -> dict[str, Any]:
    """One report row: the hours ``rows`` of ``room`` merged into the bucket starting at ``start`` (s).

    The bucket's span runs to its end, or to now for the open one, or to ``until`` (the end of the room's
    last stored hour: a room deleted since) if earlier, and from its start, or from ``since`` (the start of
    the room's first stored hour) if later: hours within it the room had no row in are a hole.
    Percentiles merge the hours' reservoirs, each kept wait weighing what its hour measured per kept wait."""
    size = HOUR if bucket == "hour" else DAY
    begin = max(start, since) if since is not None else start
    end = min(start + size, now_ms // 1000, until if until is not None else start + size)
    span = max(0, end - begin)
    covered = min(span, sum(_covered(r, now_ms) for r in rows))
    missing = span - covered
    partial = missing > 0
    joins = sum(r.joins for r in rows)
    passes = sum(r.passes for r in rows)
    samples = sum(r.samples for r in rows)
    measured = sum(r.measured for r in rows)
    pairs = [(w, r.measured / len(r.reservoir)) for r in rows if r.reservoir for w in r.reservoir]
    return {
        "roomId": room,
        "bucket": bucket,
        "start": start * 1000,
        "startIso": iso(start * 1000),
        "joins": joins,
        "passes": passes,
        "netUnserved": None if partial else joins - passes,
        "peakDepth": max((r.peak_depth for r in rows), default=0),
        "avgDepth": round(sum(r.depth_sum for r in rows) / samples, 2) if samples else 0,
        "peakActive": max((r.peak_active for r in rows), default=0),
        "waitP50Sec": _r1(weighted_percentile(pairs, 0.5)),
        "waitP90Sec": _r1(weighted_percentile(pairs, 0.9)),
        "waitMaxSec": _r1(max(r.wait_max for r in rows if r.measured)) if measured else None,
        "waitAvgSec": round(sum(r.wait_sum for r in rows) / measured, 1) if measured else None,
        "measuredWaits": measured,
        "blocked": sum(r.blocked for r in rows),
        "warned": sum(r.warned for r in rows),
        **{name: sum(r.tally(name) for r in rows) for name in TALLIES},
        "samples": samples,
        "partial": partial,
        "coveredSec": covered,
        "missingSec": missing,
    }


def bucket_start(s: int, bucket: str) -> int:
    size = HOUR if bucket == "hour" else DAY
    return s - s % size


def build_report(
    rows: Iterable[HourRow],
    bucket: str,
    from_s: int,
    to_s: int,
    now_ms: int,
    first_hours: Mapping[str, int],
) -> list[dict[str, Any]]:
    """Report rows for the buckets starting in [from_s floored to the bucket, to_s), room by room, oldest
    first. Within a room's recorded life (from ``first_hours[room]``) an hour nobody recorded is reported
    as a hole (hour buckets) or counted missing (day buckets)."""
    by_room: dict[str, dict[int, HourRow]] = {}
    for row in rows:
        by_room.setdefault(row.room, {})[row.hour] = row
    out: list[dict[str, Any]] = []
    size = HOUR if bucket == "hour" else DAY
    lo = bucket_start(from_s, bucket)
    now_s = now_ms // 1000
    for room in sorted(by_room):
        hours = by_room[room]
        first = first_hours.get(room, min(hours))
        last = max(hours)
        groups: dict[int, list[HourRow]] = {}
        for hour in range(max(lo, first - first % HOUR), min(last, now_s, to_s - 1) + 1, HOUR):
            start = bucket_start(hour, bucket)
            if start < lo or start >= to_s:
                continue
            group = groups.setdefault(start, [])
            if hour in hours:
                group.append(hours[hour])
        for start in sorted(groups):
            group = groups[start]
            if bucket == "hour" and not group:
                # an hour inside the room's recorded life with no row: nobody was sampling
                out.append(report(room, bucket, start, [], min(now_ms, (start + size) * 1000), since=None))
                continue
            out.append(report(room, bucket, start, group, now_ms, since=first, until=last + HOUR))
    return out
