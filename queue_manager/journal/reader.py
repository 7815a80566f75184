"""Reading the journal back: a room generation's events, the rooms it knows, their heads and checkpoints.

Every read goes through the shared pool (``Database``); any failure is ``StoreUnavailable``.

Example::

    reader = JournalReader(db)
    base = await reader.latest_snapshot("shop", 3)
    events = await reader.read_events("shop", 3, after_seq=int(base["seq"]) if base else 0)
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Mapping
from typing import Any, cast

import orjson

from queue_manager.engine.events import Event
from queue_manager.journal.database import Database
from queue_manager.journal.describe import describe
from queue_manager.store.base import StoreUnavailable

PAGE = 10_000  # events one statement of read_events reads
# a checkpoint's read or write: a room of a million is a 16 MB row (packed), never a request's wait
SNAPSHOT_TIMEOUT_SEC = 120.0
PACK_LEVEL = 1  # zlib: a million waiting tickets' 319 MB of JSON in 0.65 s to 16 MB


async def pack_snapshot(doc: Mapping[str, Any]) -> bytes:
    """A checkpoint as its stored bytes (JSON, zlib-compressed), made off the event loop: a large room's
    takes a second or more."""
    return await asyncio.to_thread(lambda: zlib.compress(orjson.dumps(doc), PACK_LEVEL))


async def unpack_snapshot(packed: bytes | None, legacy: str | None) -> dict[str, Any]:
    """A stored checkpoint read back: ``packed`` (zlib JSON), or the jsonb text of one written before."""
    if packed is None:
        return cast(dict[str, Any], orjson.loads(legacy or "null"))
    return cast(dict[str, Any], await asyncio.to_thread(lambda: orjson.loads(zlib.decompress(packed))))


class JournalReader:
    """The journal's read side (see the module docstring)."""

    def __init__(self, db: Database, *, timeout_sec: float = 5.0) -> None:
        self.db = db
        self.timeout = timeout_sec
        self._s = db.sql_schema

    async def fetch(self, sql: str, *args: Any, within_sec: float | None = None) -> list[Any]:
        """Rows of one statement (PostgreSQL given ``within_sec`` seconds, the reader's timeout unless given);
        StoreUnavailable when PostgreSQL fails."""
        try:
            async with self.db.acquire() as conn:
                return list(await conn.fetch(sql, *args, timeout=within_sec or self.timeout))
        except StoreUnavailable:
            raise
        except Exception as err:
            raise StoreUnavailable(f"events journal read failed: {describe(err)}") from err

    async def read_events(self, room: str, gen: int, after_seq: int = 0) -> list[Event]:
        """The journal of one room generation after ``after_seq``, in seq order, read ``PAGE`` events a
        statement: each statement has the read timeout, so a long tail (a large drop's sign-ups and its
        draw) is read in full instead of timing out as one statement, whatever its length."""
        out: list[Event] = []
        while True:
            rows = await self.fetch(
                f"SELECT type, room, gen, seq, ts, lv, data FROM {self._s}.events"
                " WHERE room = $1 AND gen = $2 AND seq > $3 ORDER BY seq LIMIT $4",
                room,
                gen,
                after_seq,
                PAGE,
            )
            out.extend(
                Event(r["type"], r["room"], r["gen"], r["ts"], orjson.loads(r["data"]), seq=r["seq"], lv=r["lv"])
                for r in rows
            )
            if len(rows) < PAGE:
                return out
            after_seq = int(rows[-1]["seq"])

    async def rooms(self) -> list[tuple[str, int, dict[str, Any]]]:
        """Every room that is not deleted: (id, gen, config) — for the inline host index. A drop's pre-queue
        shard (its id holds ``~``: store/valkey/shards.py) carries its room's config and is part of it: left out."""
        rows = await self.fetch(
            f"SELECT id, gen, config FROM {self._s}.rooms WHERE NOT deleted AND strpos(id, '~') = 0 ORDER BY id"
        )
        return [(r["id"], r["gen"], orjson.loads(r["config"]) if r["config"] else {}) for r in rows]

    async def heads(self) -> dict[str, tuple[int, int]]:
        """Every room that is not deleted: room -> (gen, newest seq journaled for that generation)."""
        rows = await self.fetch(
            f"""SELECT r.id, r.gen, coalesce(e.head, 0) AS head FROM {self._s}.rooms r
                LEFT JOIN LATERAL (SELECT max(seq) AS head FROM {self._s}.events
                                   WHERE room = r.id AND gen = r.gen) e ON true
                WHERE NOT r.deleted"""
        )
        return {r["id"]: (int(r["gen"]), int(r["head"])) for r in rows}

    async def positions(self) -> dict[str, tuple[int, int, bool]]:
        """Every room the journal knows, deleted ones included: room -> (gen, newest seq journaled for that
        generation, deleted). Only ever grows in (gen, seq) while the database is not restored."""
        rows = await self.fetch(
            f"""SELECT r.id, r.gen, r.deleted, coalesce(e.head, 0) AS head FROM {self._s}.rooms r
                LEFT JOIN LATERAL (SELECT max(seq) AS head FROM {self._s}.events
                                   WHERE room = r.id AND gen = r.gen) e ON true"""
        )
        return {r["id"]: (int(r["gen"]), int(r["head"]), bool(r["deleted"])) for r in rows}

    async def head(self, room: str, gen: int) -> int:
        """The newest seq journaled for a room generation (0: none)."""
        rows = await self.fetch(
            f"SELECT coalesce(max(seq), 0) AS head FROM {self._s}.events WHERE room = $1 AND gen = $2", room, gen
        )
        return int(rows[0]["head"])

    async def latest_snapshot(self, room: str, gen: int | None = None) -> dict[str, Any] | None:
        """The newest checkpoint of ``room`` (of generation ``gen`` when given)."""
        if gen is None:
            rows = await self.fetch(
                f"SELECT snapshot, packed FROM {self._s}.room_snapshots WHERE room = $1"
                " ORDER BY gen DESC, seq DESC LIMIT 1",
                room,
                within_sec=SNAPSHOT_TIMEOUT_SEC,
            )
        else:
            rows = await self.fetch(
                f"SELECT snapshot, packed FROM {self._s}.room_snapshots WHERE room = $1 AND gen = $2"
                " ORDER BY seq DESC LIMIT 1",
                room,
                gen,
                within_sec=SNAPSHOT_TIMEOUT_SEC,
            )
        if not rows:
            return None
        return await unpack_snapshot(rows[0]["packed"], rows[0]["snapshot"])
