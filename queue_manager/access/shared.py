"""The access records on STORE=valkey + SIDESTORE=pg, shared by every instance.

Operators, monitor links and audit rows are rows in PostgreSQL (the journal's schema), read on
every use so a revocation on one instance holds on all of them at the next request. Console
sign-outs and single-use stream tickets live in Valkey with their lifetimes as expiry (a ticket is
taken with GETDEL, so it is spent exactly once fleet-wide).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from redis.asyncio import Redis

from queue_manager.access.records import AuditRow, MonitorLink, OperatorRecord
from queue_manager.journal.pg import PgJournal
from queue_manager.store.base import StoreUnavailable


def _ts(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=UTC)


def _ms(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)


class SharedAccessStore:
    def __init__(self, journal: PgJournal, redis: Redis, prefix: str) -> None:
        self.journal = journal
        self.redis = redis
        self.prefix = prefix
        self._s = journal.sql_schema  # the quoted schema name the journal migrated
        self._ready = False

    async def _pool(self) -> Any:
        pool = self.journal.pool
        if pool is None:
            raise StoreUnavailable("the shared records (PostgreSQL) are not reachable")
        if not self._ready:
            await pool.execute(f"ALTER TABLE {self._s}.monitor_links ADD COLUMN IF NOT EXISTS token text")
            self._ready = True
        return pool

    async def _fetch(self, sql: str, *args: Any) -> list[Any]:
        try:
            pool = await self._pool()
            return list(await pool.fetch(sql.format(s=self._s), *args))
        except StoreUnavailable:
            raise
        except Exception as exc:
            raise StoreUnavailable(f"shared records unavailable: {type(exc).__name__}") from exc

    async def _execute(self, sql: str, *args: Any) -> None:
        await self._fetch(sql, *args)

    # operators ------------------------------------------------------------------------------

    @staticmethod
    def _op(row: Any) -> OperatorRecord:
        return OperatorRecord(
            id=row["id"],
            name=row["name"],
            role=row["role"],
            verifier=json.loads(row["verifier"]),
            created_at=_ms(row["created_at"]) or 0,
            created_by=row["created_by"] or "",
            revoked_at=_ms(row["disabled_at"]),
        )

    async def put_operator(self, op: OperatorRecord) -> None:
        await self._execute(
            "INSERT INTO {s}.operators (id, name, role, verifier, kid, created_at, created_by, disabled_at) "
            "VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, "
            "role = EXCLUDED.role, verifier = EXCLUDED.verifier, kid = EXCLUDED.kid, "
            "disabled_at = EXCLUDED.disabled_at, updated_at = now()",
            op.id,
            op.name,
            op.role,
            json.dumps(op.verifier),
            op.verifier.get("kid"),
            _ts(op.created_at),
            op.created_by,
            _ts(op.revoked_at),
        )

    async def get_operator(self, op_id: str) -> OperatorRecord | None:
        rows = await self._fetch("SELECT * FROM {s}.operators WHERE id = $1", op_id)
        return self._op(rows[0]) if rows else None

    async def list_operators(self) -> list[OperatorRecord]:
        return [self._op(r) for r in await self._fetch("SELECT * FROM {s}.operators ORDER BY created_at")]

    async def delete_operator(self, op_id: str) -> bool:
        rows = await self._fetch("DELETE FROM {s}.operators WHERE id = $1 RETURNING id", op_id)
        return bool(rows)

    # monitor links --------------------------------------------------------------------------

    @staticmethod
    def _link(row: Any) -> MonitorLink:
        return MonitorLink(
            id=row["id"],
            token=row["token"] or "",
            created_at=_ms(row["created_at"]) or 0,
            expires_at=_ms(row["expires_at"]) or 0,
            created_by=row["created_by_name"] or "",
            created_by_id=row["created_by_id"],
            revoked_at=_ms(row["revoked_at"]),
        )

    async def put_link(self, link: MonitorLink) -> None:
        await self._execute(
            "INSERT INTO {s}.monitor_links (id, token, created_by_id, created_by_name, created_at, expires_at, "
            "revoked_at) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO UPDATE SET "
            "revoked_at = EXCLUDED.revoked_at",
            link.id,
            link.token,
            link.created_by_id,
            link.created_by,
            _ts(link.created_at),
            _ts(link.expires_at),
            _ts(link.revoked_at),
        )

    async def get_link(self, link_id: str) -> MonitorLink | None:
        rows = await self._fetch("SELECT * FROM {s}.monitor_links WHERE id = $1", link_id)
        return self._link(rows[0]) if rows else None

    async def list_links(self) -> list[MonitorLink]:
        return [self._link(r) for r in await self._fetch("SELECT * FROM {s}.monitor_links ORDER BY created_at")]

    # console sign-outs and stream tickets (Valkey) ------------------------------------------

    async def revoke_session(self, session_id: str, until_ms: int) -> None:
        ttl = max(1000, until_ms - int(datetime.now(tz=UTC).timestamp() * 1000))
        try:
            await self.redis.set(f"{self.prefix}ses:rev:{session_id}", b"1", px=ttl)
        except Exception as exc:
            raise StoreUnavailable("Valkey unavailable: the sign-out could not be recorded") from exc

    async def session_revoked(self, session_id: str) -> bool:
        try:
            return bool(await self.redis.exists(f"{self.prefix}ses:rev:{session_id}"))
        except Exception as exc:
            raise StoreUnavailable("Valkey unavailable: the session cannot be confirmed") from exc

    async def put_ticket(self, ticket: str, data: dict[str, Any], expires_ms: int) -> None:
        ttl = max(1, expires_ms - int(datetime.now(tz=UTC).timestamp() * 1000))
        try:
            await self.redis.set(f"{self.prefix}sse:{ticket}", json.dumps(data).encode(), px=ttl)
        except Exception as exc:
            raise StoreUnavailable("Valkey unavailable: no stream ticket") from exc

    async def take_ticket(self, ticket: str, now_ms: int) -> dict[str, Any] | None:
        try:
            raw = await self.redis.getdel(f"{self.prefix}sse:{ticket}")
        except Exception as exc:
            raise StoreUnavailable("Valkey unavailable: the stream ticket cannot be checked") from exc
        return None if raw is None else dict(json.loads(raw))

    # audit ----------------------------------------------------------------------------------

    async def append_audit(self, row: AuditRow) -> None:
        await self._execute(
            "INSERT INTO {s}.audit (at, actor_id, actor_name, action, target, room, ok, ip, detail, instance) "
            "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10)",
            _ts(row.ts),
            row.actor_id,
            row.actor,
            row.action,
            row.target,
            row.room_id,
            row.ok,
            row.ip,
            json.dumps({**row.detail, **({"role": row.role} if row.role else {})}),
            self.journal.instance_id,
        )

    async def list_audit(self, room_id: str | None, limit: int) -> list[AuditRow]:
        if room_id is None:
            rows = await self._fetch("SELECT * FROM {s}.audit ORDER BY id DESC LIMIT $1", limit)
        else:
            rows = await self._fetch(
                "SELECT * FROM {s}.audit WHERE room = $1 ORDER BY id DESC LIMIT $2", room_id, limit
            )
        out = []
        for r in rows:
            detail = dict(json.loads(r["detail"])) if isinstance(r["detail"], str) else dict(r["detail"] or {})
            role = detail.pop("role", None)
            out.append(
                AuditRow(
                    ts=_ms(r["at"]) or 0,
                    actor=r["actor_name"],
                    actor_id=r["actor_id"],
                    role=role,
                    action=r["action"],
                    target=r["target"],
                    room_id=r["room"],
                    ip=r["ip"],
                    ok=r["ok"],
                    detail=detail,
                )
            )
        return out
