"""Admin routes the operator console needs beyond the core admin API: the chart's series and reports.

``GET /api/admin/series/<room>?res=10s|1m[&format=csv]`` (read): the room's recorded buckets, oldest
first, with the marks of what changed it (with SIDESTORE=pg the marks of the tier's whole span, kept in
PostgreSQL by every instance; otherwise this process's since its first bucket).
``GET /api/admin/reports?bucket=hour|day[&from=…][&to=…][&roomId=…][&format=csv]`` (read): one row per
room per bucket from the hourly history (``sidestores/history/``: PostgreSQL with SIDESTORE=pg, this process
otherwise), the open hour as last sampled; ``from`` is floored to its bucket, ``to`` is exclusive.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from queue_manager.http.wire import HttpError, send_json
from queue_manager.routes import csvout
from queue_manager.routes.call import Call
from queue_manager.sidestores.history.base import HistoryUnavailable
from queue_manager.sidestores.history.report import COLUMNS as REPORT_COLUMNS
from queue_manager.sidestores.history.report import bucket_start
from queue_manager.sidestores.history.rows import RESERVOIR
from queue_manager.sidestores.timeline.series import TIERS, block_note

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
        timed = [{**row, "time": _iso(row["t"] * 1000)} for row in rows]
        await csvout.send(call, csvout.render(("time", *SERIES_COLUMNS), timed), f"{room_id}-{res}.csv")
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


# Room changes the recorder cannot see in its samples, taken from the audit trail (ejects, flushes, edits, …).
# Rate moves, state flips and purges are already marks of the recorder's own (one per change it saw), so they
# are not repeated here.
AUDIT_MARKS = {
    "visitor.eject": ("eject", "visitor ejected"),
    "room.flush": ("flush", "site flushed"),
    "room.update": ("edit", "room settings edited"),
    "room.schedule": ("schedule", "schedule changed"),
    "room.inline": ("edit", "inline settings changed"),
    "room.threshold": ("threshold", "threshold activation"),
    "room.autotune": ("autotune", "autotune"),
    "room.event": ("event", "scheduled event"),
    "room.events": ("edit", "events edited"),
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
        elif row.action == "room.flush":
            flushed = row.detail.get("flushed")
            note = f"site flushed: {flushed} passes and sessions released" if isinstance(flushed, int) else note
        elif row.action == "room.update":
            fields = row.detail.get("fields")
            if not fields:
                continue  # saved with nothing changed
            note = "room edited: " + ", ".join(str(f) for f in fields)
        elif row.action == "room.threshold":
            note = f"threshold activation: {row.detail.get('change')} at {row.detail.get('joinsPerMin')} joins/min"
        elif row.action == "room.event":
            note = _event_note(row.detail)
        elif row.action == "room.events":
            note = f"event {row.detail.get('event')}: {row.detail.get('op')}d"
        elif row.action == "room.autotune":
            note = f"autotune: rate {row.detail.get('from')} → {row.detail.get('to')}/min ({row.detail.get('reason')})"
        marks.append({"t": row.ts // 1000, "kind": kind, "note": note})
    marks.sort(key=lambda m: m["t"])
    return marks


def _event_note(detail: dict[str, Any]) -> str:
    what = {"prequeue": "pre-queue opens", "start": "starts", "end": "ends", "edited": "edited while in force"}
    note = f"event {detail.get('event')} {what.get(str(detail.get('change')), detail.get('change'))}"
    fields = detail.get("fields")
    return f"{note}: {', '.join(str(f) for f in fields)}" if fields else note


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
    history = call.ctx.history
    now_s = call.ctx.clock.wall_ms() // 1000
    default_from = now_s - (24 * 3600 if bucket == "hour" else history.retain_days * 86400)
    from_s = _instant(q.get("from"), "from", default_from)
    to_s = _instant(q.get("to"), "to", now_s + 1)
    only = q.get("roomId") or None
    try:
        rows = await history.report(bucket, from_s, to_s, only)
    except HistoryUnavailable:
        raise HttpError(
            503, "storage_unavailable", "The stored history cannot be read right now; retry.", headers=_RETRY
        ) from None
    if only is not None and not rows and not await call.ctx.store.room_exists(only):
        raise HttpError(404, "no_room", f"No room with id {only[:80]!r}.", roomId=only[:80])
    head = call.req.method == "HEAD"
    if fmt == "csv":
        await csvout.send(call, csvout.render(REPORT_COLUMNS, rows), f"report-{bucket}.csv")
        return
    await send_json(
        call.send,
        200,
        {
            "bucket": bucket,
            "from": bucket_start(from_s, bucket) * 1000,
            "to": to_s * 1000,
            "rows": rows,
            "retention": "process" if history.warehouse.kind == "memory" else "stored",
            "retainDays": history.retain_days,
            "retainSec": history.retain_days * 86400,
            "store": call.ctx.store.kind,
            "recordingSince": call.ctx.series.started_ms,
            "labels": {
                "waitP50Sec": f"estimate: each hour keeps a uniform sample of up to {RESERVOIR} waits; "
                "measuredWaits, waitAvgSec and waitMaxSec are exact",
                "measuredWaits": "people who finished waiting in the period (the weight under the percentiles), "
                "not people who entered the site: peakActive counts sessions on the site",
                "netUnserved": "joins minus passes, not observed abandonment; inside one hour it also counts "
                "everyone still waiting at its end; null when the row is partial",
                "partial": "the server was not running for part of the period: joins, passes, measuredWaits, "
                "blocked, warned and sessionsRevoked are lower bounds; coveredSec and missingSec say how much "
                "was counted",
                "sessionsRevoked": "live sessions the site ended (X-QM-Command: revoke, POST /api/sessions/revoke)",
                "tokensAccepted": "invitation tokens accepted by the room's entry (rooms whose entry is token or "
                "code); tokensRefused: those refused, every code together",
                "codesIssued": "entry codes generated or uploaded; codesRedeemed: uses spent at a join; "
                "codesRefused: joins refused by code (a wrong or spent code, none given, too many tries)",
            },
        },
        head=head,
    )


_RETRY = [("retry-after", "5")]


LAST_INSTANT_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z, the last instant a datetime holds


def _instant(raw: str | None, name: str, default: int) -> int:
    """``from``/``to``: a UTC date (YYYY-MM-DD), an ISO 8601 instant (no zone: UTC), or epoch ms; epoch s."""
    if raw is None or raw == "":
        return default
    text = raw.strip()
    try:
        if text.isdigit():
            ms = int(text)
            if ms > LAST_INSTANT_MS:  # past any date a calendar holds: the report's dates could not be written
                raise ValueError(name)
            return ms // 1000
        if len(text) == 10:
            day = dt.date.fromisoformat(text)
            return int(dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp())
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        return int(when.timestamp())
    except (ValueError, OverflowError, OSError):
        raise HttpError(
            400,
            "bad_request",
            f"{name} is a date (YYYY-MM-DD), an ISO 8601 instant or epoch milliseconds.",
            field=name,
        ) from None


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
