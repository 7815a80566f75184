"""STORE=valkey: the entry codes in PostgreSQL (the interface: ``base.EntryCodes``), shared by every instance
and durable: ``entry_codes`` (room, hash, lane, uses, spent) and ``entry_code_salts`` (room, salt).

Storing a batch is one statement over arrays (``ON CONFLICT DO NOTHING``: a code the room holds already is
not stored twice); a redemption is one ``UPDATE … WHERE spent < uses RETURNING``, so two instances racing
for a code's last use cannot both spend it.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING

from queue_manager.sidestores.entrycodes.base import NO_LANE, Redemption, StoredCode

if TYPE_CHECKING:
    from queue_manager.journal.database import Database


class PgEntryCodes:
    """Every room's codes, in PostgreSQL."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def salt(self, room_id: str) -> bytes:
        s = self.db.sql_schema
        await self.db.ensure_migrated()
        async with self.db.acquire() as conn:
            await conn.execute(
                f"INSERT INTO {s}.entry_code_salts (room, salt) VALUES ($1, $2) ON CONFLICT (room) DO NOTHING",
                room_id,
                secrets.token_bytes(16),
            )
            salt = await conn.fetchval(f"SELECT salt FROM {s}.entry_code_salts WHERE room = $1", room_id)
        return bytes(salt)

    async def add(self, room_id: str, codes: Sequence[StoredCode]) -> int:
        if not codes:
            return 0
        await self.db.ensure_migrated()
        async with self.db.acquire() as conn:
            status = await conn.execute(
                f"""INSERT INTO {self.db.sql_schema}.entry_codes (room, hash, lane, uses)
                    SELECT $1, h, l, u FROM unnest($2::bytea[], $3::text[], $4::integer[]) AS t(h, l, u)
                    ON CONFLICT (room, hash) DO NOTHING""",
                room_id,
                [c.hash for c in codes],
                [c.lane for c in codes],
                [c.uses for c in codes],
            )
        return int(str(status).rsplit(" ", 1)[-1])

    async def redeem(self, room_id: str, code_hash: bytes) -> Redemption:
        s = self.db.sql_schema
        await self.db.ensure_migrated()
        async with self.db.acquire() as conn:
            row = await conn.fetchrow(
                f"""UPDATE {s}.entry_codes SET spent = spent + 1
                    WHERE room = $1 AND hash = $2 AND spent < uses RETURNING lane""",
                room_id,
                code_hash,
            )
            if row is not None:
                return Redemption("ok", row["lane"])
            held = await conn.fetchval(
                f"SELECT 1 FROM {s}.entry_codes WHERE room = $1 AND hash = $2", room_id, code_hash
            )
        return Redemption("invalid" if held is None else "used_up")

    async def give_back(self, room_id: str, code_hash: bytes) -> None:
        await self.db.ensure_migrated()
        async with self.db.acquire() as conn:
            await conn.execute(
                f"""UPDATE {self.db.sql_schema}.entry_codes SET spent = spent - 1
                    WHERE room = $1 AND hash = $2 AND spent > 0""",
                room_id,
                code_hash,
            )

    async def counts(self, room_id: str) -> dict[str, dict[str, int]]:
        await self.db.ensure_migrated()
        async with self.db.acquire() as conn:
            rows = await conn.fetch(
                f"""SELECT coalesce(lane, '') AS lane, count(*) AS codes, sum(uses) AS uses, sum(spent) AS redeemed
                    FROM {self.db.sql_schema}.entry_codes WHERE room = $1 GROUP BY 1""",
                room_id,
            )
        return {
            str(r["lane"]) or NO_LANE: {
                "codes": int(r["codes"]),
                "uses": int(r["uses"]),
                "redeemed": int(r["redeemed"]),
            }
            for r in rows
        }

    async def drop(self, room_id: str) -> int:
        s = self.db.sql_schema
        await self.db.ensure_migrated()
        async with self.db.acquire() as conn, conn.transaction():
            status = await conn.execute(f"DELETE FROM {s}.entry_codes WHERE room = $1", room_id)
            await conn.execute(f"DELETE FROM {s}.entry_code_salts WHERE room = $1", room_id)
        return int(str(status).rsplit(" ", 1)[-1])
