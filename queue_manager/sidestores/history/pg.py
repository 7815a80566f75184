"""The hourly history in PostgreSQL (``history_hourly``): the rows the leader writes and every instance reads.

:class:`PgWarehouse` is the :class:`~queue_manager.sidestores.history.base.Warehouse` of ``SIDESTORE=pg``. A write
is one transaction: a transaction-scoped advisory lock per schema, then ``SELECT … FOR UPDATE`` of the rows it
changes, the fold (``rows.fold``) on what was read, and an upsert of the result. Two writers (a
leader and the one that lost the lease late) are therefore serialized, and neither ever writes a row it
did not read first.

Besides the report columns a row keeps ``depth_sum`` (for the average over merged hours), the wait
``reservoir`` (jsonb, at most 256 values) and ``state`` (jsonb: the counter baselines, the covered
milliseconds and the last sample's instant), which is what lets any leader continue the hour exactly;
``tallies`` (jsonb) holds the hour's counts of the room's other counters (``rows.TALLIES``) by column name.

:meth:`check` reads the table once at boot. PostgreSQL unreachable is not a refusal (the instance boots
degraded, as the journal does, and nothing is written over a row that was not read); PostgreSQL answering
that the table cannot be read (a permission, a missing column) raises :class:`WarehouseRefused`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from collections.abc import Callable
from typing import Any

import asyncpg  # type: ignore[import-untyped]

from queue_manager.journal.database import Database
from queue_manager.sidestores.history.base import WarehouseRefused
from queue_manager.sidestores.history.rows import HOUR, TALLIES, TOLERANCE_SEC, HourRow, Tally
from queue_manager.sidestores.timeline.series import percentile

# every column the writer and the reader name: a boot whose table lacks one refuses
_COLUMNS = (
    "room, extract(epoch FROM hour)::bigint AS hour_s, joins, passes, peak_depth, avg_depth, peak_active, "
    "wait_max_sec, measured_waits, wait_sum_sec, reservoir, blocked, warned, samples, covered_sec, "
    "missing_sec, partial, depth_sum, state, tallies"
)


def _row(record: Any) -> HourRow:
    row = HourRow(str(record["room"]), int(record["hour_s"]))
    row.peak_depth = int(record["peak_depth"])
    row.peak_active = int(record["peak_active"])
    row.depth_sum = float(record["depth_sum"])
    row.samples = int(record["samples"])
    row.measured = int(record["measured_waits"])
    row.wait_sum = float(record["wait_sum_sec"])
    row.wait_max = float(record["wait_max_sec"] or 0.0)
    reservoir = record["reservoir"]
    row.reservoir = [float(w) for w in (json.loads(reservoir) if isinstance(reservoir, str) else reservoir)]
    row.blocked = int(record["blocked"])
    row.warned = int(record["warned"])
    raw = record["state"]
    state = json.loads(raw) if isinstance(raw, str) else raw
    row.load_state(state)
    if not state:  # a row written without state (by hand, or by an earlier release): its columns
        row.covered_ms = int(record["covered_sec"]) * 1000
        row.done_joins, row.done_passes = int(record["joins"]), int(record["passes"])
        raw_tallies = record["tallies"]
        counted = json.loads(raw_tallies) if isinstance(raw_tallies, str) else raw_tallies
        for name in TALLIES:
            if isinstance(counted, dict) and name in counted:
                row.tallies[name] = Tally(done=int(counted[name] or 0))
    return row


def _values(row: HourRow, now_ms: int) -> tuple[Any, ...]:
    span = max(0, min(HOUR, now_ms // 1000 - row.hour))
    covered = min(span, row.covered_ms // 1000)
    missing = 0 if span - covered <= TOLERANCE_SEC else span - covered
    return (
        row.room,
        dt.datetime.fromtimestamp(row.hour, dt.UTC),
        row.joins,
        row.passes,
        row.peak_depth,
        round(row.depth_sum / row.samples, 2) if row.samples else 0.0,
        row.peak_active,
        percentile(row.reservoir, 0.5),
        percentile(row.reservoir, 0.9),
        row.wait_max if row.measured else None,
        round(row.wait_sum / row.measured, 1) if row.measured else None,
        row.measured,
        row.wait_sum,
        json.dumps(row.reservoir),
        row.blocked,
        row.warned,
        row.samples,
        covered if missing else span,
        missing,
        missing > 0,
        row.depth_sum,
        json.dumps(row.state()),
        json.dumps(row.counted()),
    )


class PgWarehouse:
    """SIDESTORE=pg: the rows in ``history_hourly``, read and written by every instance."""

    kind = "pg"

    def __init__(self, db: Database, wall_ms: Callable[[], int]) -> None:
        self.db = db
        self.wall_ms = wall_ms

    async def check(self) -> None:
        """One read of the table, as the writer and the reports read it."""
        with contextlib.suppress(Exception):  # the migrations' own failure is the journal's to report
            await self.db.ensure_migrated()
        try:
            async with self.db.acquire() as conn:
                await conn.fetch(f"SELECT {_COLUMNS} FROM {self.db.sql_schema}.history_hourly LIMIT 1")
        except (asyncpg.exceptions.SyntaxOrAccessError, asyncpg.exceptions.DataError) as exc:
            raise WarehouseRefused(f"{type(exc).__name__}: {exc}") from exc

    async def update(self, hour: int, rooms: list[str], change: Callable[[dict[str, HourRow]], list[HourRow]]) -> None:
        await self.db.ensure_migrated()
        s = self.db.sql_schema
        async with self.db.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", f"qm.history:{self.db.schema}")
            records = await conn.fetch(
                f"""SELECT {_COLUMNS} FROM {s}.history_hourly
                    WHERE hour = to_timestamp($1::float8) AND room = ANY($2::text[]) FOR UPDATE""",
                float(hour),
                rooms,
            )
            rows = change({str(r["room"]): _row(r) for r in records})
            if not rows:
                return
            now_ms = self.wall_ms()
            await conn.executemany(
                f"""INSERT INTO {s}.history_hourly AS h (room, hour, joins, passes, peak_depth, avg_depth,
                        peak_active, wait_p50_sec, wait_p90_sec, wait_max_sec, wait_avg_sec, measured_waits,
                        wait_sum_sec, reservoir, blocked, warned, samples, covered_sec, missing_sec, partial,
                        depth_sum, state, tallies, updated_at)
                    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14::jsonb, $15, $16, $17,
                        $18, $19, $20, $21, $22::jsonb, $23::jsonb, now())
                    ON CONFLICT (room, hour) DO UPDATE SET joins = EXCLUDED.joins, passes = EXCLUDED.passes,
                        peak_depth = EXCLUDED.peak_depth, avg_depth = EXCLUDED.avg_depth,
                        peak_active = EXCLUDED.peak_active, wait_p50_sec = EXCLUDED.wait_p50_sec,
                        wait_p90_sec = EXCLUDED.wait_p90_sec, wait_max_sec = EXCLUDED.wait_max_sec,
                        wait_avg_sec = EXCLUDED.wait_avg_sec, measured_waits = EXCLUDED.measured_waits,
                        wait_sum_sec = EXCLUDED.wait_sum_sec, reservoir = EXCLUDED.reservoir,
                        blocked = EXCLUDED.blocked, warned = EXCLUDED.warned, samples = EXCLUDED.samples,
                        covered_sec = EXCLUDED.covered_sec, missing_sec = EXCLUDED.missing_sec,
                        partial = EXCLUDED.partial, depth_sum = EXCLUDED.depth_sum, state = EXCLUDED.state,
                        tallies = EXCLUDED.tallies, updated_at = now()""",
                [_values(row, now_ms) for row in rows],
            )

    async def read(self, since: int, until: int, room: str | None) -> tuple[list[HourRow], dict[str, int]]:
        await self.db.ensure_migrated()
        s = self.db.sql_schema
        async with self.db.acquire() as conn:
            records = await conn.fetch(
                f"""SELECT {_COLUMNS} FROM {s}.history_hourly
                    WHERE hour >= to_timestamp($1::float8) AND hour < to_timestamp($2::float8)
                      AND ($3::text IS NULL OR room = $3)
                    ORDER BY room, hour""",
                float(since),
                float(until),
                room,
            )
            firsts = await conn.fetch(
                f"""SELECT room, extract(epoch FROM min(hour))::bigint AS first FROM {s}.history_hourly
                    WHERE ($1::text IS NULL OR room = $1) GROUP BY room""",
                room,
            )
        return [_row(r) for r in records], {str(f["room"]): int(f["first"]) for f in firsts}

    async def prune(self, before: int) -> int:
        await self.db.ensure_migrated()
        async with self.db.acquire() as conn:
            status = await conn.execute(
                f"DELETE FROM {self.db.sql_schema}.history_hourly WHERE hour < to_timestamp($1::float8)",
                float(before),
            )
        return int(str(status).rsplit(" ", 1)[-1]) if str(status).startswith("DELETE") else 0
