"""Admin routes the operator console needs beyond the core admin API: the chart's series and reports.

``GET /api/admin/series/<room>?res=10s|1m[&format=csv]`` (read): the room's recorded buckets, oldest
first, with the marks of what changed it (with SIDESTORE=pg the marks of the tier's whole span, kept in
PostgreSQL by every instance; otherwise this process's since its first bucket).
``GET /api/admin/reports?bucket=hour|day[&roomId=…][&format=csv]``
(read): one row per room per bucket, rolled up from the same recorder (this process, the last 24 hours).
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from typing import Any

from queue_manager.http.call import Call
from queue_manager.http.wire import HttpError, send_json, send_response
from queue_manager.ops.series import TIERS, block_note, weighted_percentile

SERIES_COLUMNS = (
    "t",
    "depth",
    "depthMax",
    "joinsPerMin",
    "passesPerMin",
    "estWaitSec",
    "waitP50Sec",
    "waitP90Sec",
    "waitMaxSec",
    "measuredWaits",
    "rate",
    "state",
)
REPORT_COLUMNS = (
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
    "samples",
    "partial",
    "coveredSec",
    "missingSec",
)


async def series(call: Call) -> None:
    room_id = call.req.params["room"]
    q = call.req.query
    res = q.get("res", "10s")
    if res not in TIERS:
        raise HttpError(400, "bad_request", "res is 10s or 1m.", field="res")
    fmt = q.get("format", "json")
    if fmt not in ("json", "csv"):
        raise HttpError(400, "bad_request", "format is json or csv.", field="format")
    if not room_id or "/" in room_id or not await call.ctx.store.room_exists(room_id):
        raise HttpError(404, "no_room", f"No room with id {room_id[:80]!r}.", roomId=room_id[:80])
    recorder = call.ctx.series
    rows = recorder.rows(room_id, res, call.ctx.clock.wall_ms()) or []
    head = call.req.method == "HEAD"
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=("time", *SERIES_COLUMNS), extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({**row, "time": _iso(row["t"] * 1000)})
        await _send_csv(call, buf.getvalue(), f"{room_id}-{res}.csv", head)
        return
    now_s = call.ctx.clock.wall_ms() // 1000
    if call.ctx.timeline is not None:  # the marks outlive this process: the tier's whole span
        since = now_s - TIERS[res][0] * TIERS[res][1]
    else:
        since = rows[0]["t"] if rows else now_s
    await send_json(
        call.send,
        200,
        {
            "roomId": room_id,
            "res": res,
            "stepSec": TIERS[res][0],
            "retainSec": TIERS[res][0] * TIERS[res][1],
            "rows": rows,
            "marks": await _marks(call, room_id, since),
            "recordingSince": recorder.started_ms,
            "now": call.ctx.clock.wall_ms(),
        },
        head=head,
    )


# Room changes the recorder cannot see in its samples, taken from the audit trail. Rate moves, state flips and
# purges are already marks of the recorder's own (one per change it saw), so they are not repeated here.
AUDIT_MARKS = {
    "visitor.eject": ("eject", "visitor ejected"),
    "room.update": ("edit", "room settings edited"),
    "room.schedule": ("schedule", "schedule changed"),
    "room.inline": ("edit", "inline settings changed"),
    "room.threshold": ("threshold", "threshold activation"),
    "room.autotune": ("autotune", "autotune"),
}


async def _marks(call: Call, room_id: str, since: int) -> list[dict[str, Any]]:
    """The recorder's marks (the fleet's, kept in PostgreSQL, when there is a timeline) plus the room's
    audited changes since `since` (s), oldest first.

    A monitor-link or viewer caller may read the chart but not the audit trail, so an audit mark carries only
    what happened: never who did it or from where; the ejected ticket number only for a caller with the
    "team" grant (the drill-down's readers).
    """
    marks = await _recorded(call, room_id, since)
    try:
        rows = await call.ctx.access.store.list_audit(room_id, 500)
    except Exception:  # the chart still answers with the recorder's marks when the trail cannot be read
        rows = []
    named = call.who.may("team")
    for row in rows:
        kind_note = AUDIT_MARKS.get(row.action)
        if kind_note is None or not row.ok or row.room_id != room_id or row.ts // 1000 < since:
            continue
        kind, note = kind_note
        if row.action == "visitor.eject" and named and row.target:
            note = f"visitor #{row.target} ejected"
        elif row.action == "room.update":
            fields = row.detail.get("fields")
            if not fields:
                continue  # saved with nothing changed
            note = "room edited: " + ", ".join(str(f) for f in fields)
        elif row.action == "room.threshold":
            note = f"threshold activation: {row.detail.get('change')} at {row.detail.get('joinsPerMin')} joins/min"
        elif row.action == "room.autotune":
            note = f"autotune: rate {row.detail.get('from')} → {row.detail.get('to')}/min ({row.detail.get('reason')})"
        marks.append({"t": row.ts // 1000, "kind": kind, "note": note})
    marks.sort(key=lambda m: m["t"])
    return marks


async def _recorded(call: Call, room_id: str, since: int) -> list[dict[str, Any]]:
    """The recorder's marks: the fleet's from the timeline, or this process's when there is none or it
    cannot be read. A block mark's note says how many joins it stands for."""
    timeline = call.ctx.timeline
    marks: list[dict[str, Any]] | None = None
    if timeline is not None:
        try:
            marks = await timeline.read(room_id, since)
        except Exception:
            marks = None
    if marks is None:
        marks = [dict(m) for m in call.ctx.series.marks(room_id, since)]
    for mark in marks:
        if mark["kind"] == "block":
            mark["note"] = block_note(int(mark.get("count") or 0))
    return marks


async def reports(call: Call) -> None:
    q = call.req.query
    bucket = q.get("bucket", "hour")
    if bucket not in ("hour", "day"):
        raise HttpError(400, "bad_request", "bucket is hour or day.", field="bucket")
    fmt = q.get("format", "json")
    if fmt not in ("json", "csv"):
        raise HttpError(400, "bad_request", "format is json or csv.", field="format")
    only = q.get("roomId") or None
    if only is not None and not await call.ctx.store.room_exists(only):
        raise HttpError(404, "no_room", f"No room with id {only[:80]!r}.", roomId=only[:80])
    recorder = call.ctx.series
    size = 3600 if bucket == "hour" else 86400
    out: list[dict[str, Any]] = []
    for room_id in sorted(recorder.rooms):
        if only is not None and room_id != only:
            continue
        series = recorder.rooms[room_id].tiers["1m"]
        minutes = list(series.closed) + ([series.open] if series.open is not None else [])
        groups: dict[int, list[Any]] = {}
        for m in minutes:
            groups.setdefault(m.start_ms // 1000 // size * size, []).append(m)
        for start, ms in sorted(groups.items()):
            out.append(_report_row(room_id, bucket, start, size, ms, call.ctx.clock.wall_ms() // 1000))
    head = call.req.method == "HEAD"
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=REPORT_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for row in out:
            writer.writerow(row)
        await _send_csv(call, buf.getvalue(), f"report-{bucket}.csv", head)
        return
    await send_json(
        call.send,
        200,
        {
            "bucket": bucket,
            "rows": out,
            "retention": "process",
            "retainSec": TIERS["1m"][0] * TIERS["1m"][1],
            "store": call.ctx.store.kind,
            "recordingSince": recorder.started_ms,
            "labels": {
                "waitP50Sec": "estimate: a uniform sample of up to 64 waits per minute, weighted by the waits measured",
                "measuredWaits": "people who finished waiting (were let through), not people who entered the site",
                "netUnserved": "joins minus passes, not observed abandonment; null when the row is partial",
                "partial": "the recorder was not running for part of the period: counters are lower bounds",
                "blocked": "not recorded per room (null); the Security panel has the process-wide counts",
            },
        },
        head=head,
    )


def _report_row(room_id: str, bucket: str, start: int, size: int, minutes: list[Any], now_s: int) -> dict[str, Any]:
    # each kept wait stands for waits_seen / kept of its minute, so busy minutes weigh what they measured
    waits = [(w, m.waits_seen / len(m.waits)) for m in minutes if m.waits for w in m.waits]
    measured = sum(m.waits_seen for m in minutes)
    wait_sum = sum(m.wait_sum for m in minutes)
    samples = sum(m.samples for m in minutes)
    joins = sum(m.joins for m in minutes)
    passes = sum(m.passes for m in minutes)
    span = max(60, min(size, now_s - start))  # the open bucket is judged on the time that has passed
    covered = min(span, len(minutes) * 60)
    partial = covered + 60 < span
    return {
        "roomId": room_id,
        "bucket": bucket,
        "start": start * 1000,
        "startIso": _iso(start * 1000),
        "joins": joins,
        "passes": passes,
        "netUnserved": None if partial else joins - passes,
        "peakDepth": max((m.depth_max for m in minutes), default=0),
        "avgDepth": round(sum(m.depth_sum for m in minutes) / samples, 2) if samples else 0,
        "peakActive": max((m.active_max for m in minutes), default=0),
        "waitP50Sec": _round1(weighted_percentile(waits, 0.5)),
        "waitP90Sec": _round1(weighted_percentile(waits, 0.9)),
        "waitMaxSec": max((m.wait_max for m in minutes if m.waits_seen), default=None),
        "waitAvgSec": round(wait_sum / measured, 1) if measured else None,
        "measuredWaits": measured,
        "blocked": None,  # bot protection counts per process, not per room: not recorded here
        "warned": None,
        "samples": samples,
        "partial": partial,
        "coveredSec": covered,
        "missingSec": max(0, span - covered),
    }


def _round1(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def _send_csv(call: Call, text: str, filename: str, head: bool) -> None:
    safe = "".join(c for c in filename if c.isalnum() or c in "-_.") or "export.csv"
    await send_response(
        call.send,
        200,
        text.encode(),
        [
            (b"content-type", b"text/csv; charset=utf-8"),
            (b"content-disposition", f'attachment; filename="{safe}"'.encode()),
            (b"cache-control", b"no-store"),
        ],
        head,
    )
