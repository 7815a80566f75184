"""STORE=valkey: the entry keys in PostgreSQL (the interface: ``base.EntryKeys``), shared by every instance
and durable: ``entry_keys`` (room, kid, sealed, created_at, valid_until; NULL for the current key).

A rotation is one transaction under an advisory lock per room: the current key gets its end, older keys
keep the earlier of theirs and that end, keys past their end are deleted, the new key is inserted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from queue_manager.sidestores.entrykeys.base import SealedKey

if TYPE_CHECKING:
    from queue_manager.clock import Clock
    from queue_manager.journal.database import Database


class PgEntryKeys:
    """Every room's sealed keys, in PostgreSQL."""

    def __init__(self, db: Database, clock: Clock) -> None:
        self.db = db
        self.clock = clock

    async def rotate(self, room_id: str, key: SealedKey, overlap_ms: int) -> SealedKey | None:
        now = self.clock.wall_ms()
        end = now + overlap_ms
        s = self.db.sql_schema
        await self.db.ensure_migrated()
        async with self.db.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", f"qm.entry_keys:{room_id}")
            await conn.execute(
                f"DELETE FROM {s}.entry_keys WHERE room = $1 AND valid_until IS NOT NULL AND valid_until <= $2",
                room_id,
                now,
            )
            row = await conn.fetchrow(
                f"""UPDATE {s}.entry_keys SET valid_until = $2 WHERE room = $1 AND valid_until IS NULL
                    RETURNING kid, sealed, created_at""",
                room_id,
                end,
            )
            await conn.execute(
                f"UPDATE {s}.entry_keys SET valid_until = LEAST(valid_until, $2) WHERE room = $1",
                room_id,
                end,
            )
            await conn.execute(
                f"INSERT INTO {s}.entry_keys (room, kid, sealed, created_at) VALUES ($1, $2, $3, $4)",
                room_id,
                key.kid,
                key.sealed,
                key.created_ms,
            )
        if row is None:
            return None
        return SealedKey(str(row["kid"]), bytes(row["sealed"]), int(row["created_at"]), end)

    async def keys(self, room_id: str) -> list[SealedKey]:
        await self.db.ensure_migrated()
        async with self.db.acquire() as conn:
            rows = await conn.fetch(
                f"""SELECT kid, sealed, created_at, valid_until FROM {self.db.sql_schema}.entry_keys
                    WHERE room = $1 AND (valid_until IS NULL OR valid_until > $2)
                    ORDER BY valid_until DESC NULLS FIRST""",
                room_id,
                self.clock.wall_ms(),
            )
        return [
            SealedKey(
                str(r["kid"]),
                bytes(r["sealed"]),
                int(r["created_at"]),
                None if r["valid_until"] is None else int(r["valid_until"]),
            )
            for r in rows
        ]

    async def drop(self, room_id: str) -> None:
        await self.db.ensure_migrated()
        async with self.db.acquire() as conn:
            await conn.execute(f"DELETE FROM {self.db.sql_schema}.entry_keys WHERE room = $1", room_id)
