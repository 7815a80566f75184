"""The journal's side of closing seq gaps: where each room's journal stops being contiguous, which seqs
it holds above that, and the insert that completes it.

A room's events are minted in Valkey and committed here by the instance that minted them. An instance
killed between the two leaves seqs the journal never gets: ``spans`` finds them cheaply (a count and a
maximum above a watermark, one statement for every room), ``present`` lists a range when a count says
something is missing, and ``complete`` writes the missing events with the same statement a commit uses
(``ON CONFLICT DO NOTHING``), reporting the rows the journal already holds for a *different* event.
``void`` writes a ``seq.void`` event for a seq nobody can recover (an operator's decision).

Example::

    gaps = JournalGaps(db)
    spans = await gaps.spans([("shop", 1, 0)])        # {("shop", 1): (count, top)}
    held = await gaps.present("shop", 1, 0, 300)       # the seqs 1..300 the journal holds
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import orjson

from queue_manager.engine.events import VOID_TYPE
from queue_manager.journal.rows import Row, insert_args, insert_sql, taken_args, taken_sql

if TYPE_CHECKING:
    from queue_manager.journal.database import Database


class JournalGaps:
    def __init__(self, db: Database, *, timeout_sec: float = 5.0) -> None:
        self.db = db
        self.timeout = timeout_sec

    @property
    def _s(self) -> str:
        return self.db.sql_schema

    async def spans(self, rooms: Iterable[tuple[str, int, int]]) -> dict[tuple[str, int], tuple[int, int]]:
        """For each (room, gen, low): how many events the journal holds above ``low`` and the highest seq
        among them (``low`` when none). Contiguous above ``low`` exactly when count == top - low."""
        wanted = list(rooms)
        if not wanted:
            return {}
        async with self.db.acquire() as conn:
            rows = await conn.fetch(
                f"""SELECT w.room, w.gen, count(e.seq) AS n, coalesce(max(e.seq), w.low) AS top
                    FROM unnest($1::text[], $2::int[], $3::bigint[]) AS w(room, gen, low)
                    LEFT JOIN {self._s}.events e ON e.room = w.room AND e.gen = w.gen AND e.seq > w.low
                    GROUP BY w.room, w.gen, w.low""",
                [r[0] for r in wanted],
                [r[1] for r in wanted],
                [r[2] for r in wanted],
                timeout=self.timeout,
            )
        return {(r["room"], int(r["gen"])): (int(r["n"]), int(r["top"])) for r in rows}

    async def present(self, room: str, gen: int, low: int, high: int) -> set[int]:
        """The seqs in (low, high] the journal holds for one room generation."""
        async with self.db.acquire() as conn:
            rows = await conn.fetch(
                f"SELECT seq FROM {self._s}.events WHERE room = $1 AND gen = $2 AND seq > $3 AND seq <= $4",
                room,
                gen,
                low,
                high,
                timeout=self.timeout,
            )
        return {int(r["seq"]) for r in rows}

    async def complete(self, rows: list[Row]) -> tuple[int, set[tuple[str, int, int]]]:
        """Insert ``rows`` (one statement); returns how many were new and the (room, gen, seq) of those the
        journal already holds for a different event (an identical row is one its writer committed meanwhile)."""
        if not rows:
            return 0, set()
        async with self.db.acquire() as conn:
            if not self.db.migrated:
                await self.db.ensure_migrated()
            row = await conn.fetchrow(insert_sql(self._s), *insert_args(rows), timeout=self.timeout)
            inserted = len(rows) if row is None else int(row["inserted"])
            taken: set[tuple[str, int, int]] = set()
            if inserted < len(rows):
                found = await conn.fetch(taken_sql(self._s), *taken_args(rows), timeout=self.timeout)
                taken = {(r["room"], int(r["gen"]), int(r["seq"])) for r in found}
        return inserted, taken

    @staticmethod
    def void_row(room: str, gen: int, seq: int, ts: int, instance: str, data: dict[str, Any]) -> Row:
        """The ``seq.void`` event that stands for an event nobody can recover (replay skips it)."""
        return (room, gen, seq, VOID_TYPE, 1, ts, orjson.dumps(data).decode(), instance, None)
