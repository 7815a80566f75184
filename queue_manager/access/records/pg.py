"""The access records on STORE=valkey + SIDESTORE=pg, shared by every instance.

Operators, monitor links and audit rows are rows in PostgreSQL (the journal's schema). Each
instance keeps a copy of the operators and monitor links, read whole from PostgreSQL:

* a change made here updates the copy and publishes an ``access`` hint on ``<prefix>ctl``; every
  other instance drops its copy at the hint and reads again on next use (a revocation holds
  fleet-wide at once);
* pub/sub is lossy, so a copy older than ``RESYNC_MS`` is read again anyway, and a (re)subscription
  drops it too (what was published meanwhile is lost);
* a copy that is due and cannot be read again is not used: the request answers 503
  storage_unavailable (a key is never let through on a stale copy).

Console sign-outs and single-use stream tickets live in Valkey with their lifetimes as expiry and
are read there on every use (a ticket is taken with GETDEL, so it is spent exactly once fleet-wide).
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from queue_manager.access.records.base import AuditRow, MonitorLink, OperatorRecord
from queue_manager.fleet.hints import Hints
from queue_manager.journal.database import Database
from queue_manager.journal.rows import audit_args, audit_insert_sql
from queue_manager.store.base import StoreUnavailable
from queue_manager.store.valkey.keys import session_revoked_key, stream_ticket_key

if TYPE_CHECKING:
    from redis.asyncio import Redis


class _OnDatabase(Protocol):
    """Something built on the instance's ``Database`` (the events journal)."""

    @property
    def database(self) -> Database: ...

    @property
    def instance_id(self) -> str: ...


def _ts(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=UTC)


def _ms(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)


class SharedAccessStore:
    """STORE=valkey + SIDESTORE=pg: the records every instance shares (the interface: ``base.AccessStore``)."""

    def __init__(
        self,
        database: Database | _OnDatabase,
        redis: Redis,
        prefix: str,
        *,
        hints: Hints | None = None,
        resync_ms: int = 5000,
    ) -> None:
        # the instance's one PostgreSQL pool (given directly, or the journal's); its owner opens and closes it
        self.db = database if isinstance(database, Database) else database.database
        self.instance_id = database.instance_id  # recorded with each audit row
        self.redis = redis
        self.prefix = prefix
        self._s = self.db.sql_schema  # the quoted schema name the migrations created
        self.hints = hints
        self.resync_sec = max(0.001, resync_ms / 1000)
        # the copy of the operators and monitor links (None: not read yet)
        self._ops: dict[str, OperatorRecord] | None = None
        self._links: dict[str, MonitorLink] | None = None
        self._read_at = 0.0  # time.monotonic() when the copy's read began
        self._version = 0  # bumped by every hint: a read that a hint overtook is read again
        self._read_version = -1
        self._lock = asyncio.Lock()
        #: the journal's disk spool for audit rows (``MaintenanceSpool.take_audit``): True when it took the row
        self.spool_audit: Callable[[dict[str, Any], BaseException | None], Awaitable[bool]] | None = None
        self.reads = 0  # full reads of the copy (for tests and health)
        if hints is not None:
            hints.on("access", self.invalidate)
            hints.on("resync", self.invalidate)

    def invalidate(self, _hint: dict[str, Any] | None = None) -> None:
        """Drop the copy: the next use reads the records again."""
        self._version += 1

    def _fresh(self) -> bool:
        return (
            self._ops is not None
            and self._read_version == self._version
            and time.monotonic() - self._read_at < self.resync_sec
        )

    async def _records(self) -> tuple[dict[str, OperatorRecord], dict[str, MonitorLink]]:
        if not self._fresh():
            async with self._lock:
                if not self._fresh():
                    version, started = self._version, time.monotonic()
                    ops = await self._fetch("SELECT * FROM {s}.operators ORDER BY created_at")
                    links = await self._fetch("SELECT * FROM {s}.monitor_links ORDER BY created_at")
                    self._ops = {r["id"]: self._op(r) for r in ops}
                    self._links = {r["id"]: self._link(r) for r in links}
                    self._read_at, self._read_version = started, version
                    self.reads += 1
        assert self._ops is not None and self._links is not None
        return self._ops, self._links

    async def _changed(self) -> None:
        """A record changed here: read the copy again on next use (an upsert keeps some stored fields),
        and tell the other instances."""
        self.invalidate()
        if self.hints is not None:
            await self.hints.publish("access")

    async def _pool(self) -> Any:
        pool = self.db.pool
        if pool is None:
            raise StoreUnavailable("the shared records (PostgreSQL) are not reachable")
        await self.db.ensure_migrated()  # at once when the journal's start migrated already
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
        await self._changed()

    async def get_operator(self, op_id: str) -> OperatorRecord | None:
        ops, _ = await self._records()
        found = ops.get(op_id)
        return None if found is None else copy.deepcopy(found)

    async def list_operators(self) -> list[OperatorRecord]:
        ops, _ = await self._records()
        return [copy.deepcopy(op) for op in ops.values()]

    async def delete_operator(self, op_id: str) -> bool:
        rows = await self._fetch("DELETE FROM {s}.operators WHERE id = $1 RETURNING id", op_id)
        await self._changed()
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
        await self._changed()

    async def get_link(self, link_id: str) -> MonitorLink | None:
        _, links = await self._records()
        found = links.get(link_id)
        return None if found is None else copy.deepcopy(found)

    async def list_links(self) -> list[MonitorLink]:
        _, links = await self._records()
        return [copy.deepcopy(link) for link in links.values()]

    # console sign-outs and stream tickets (Valkey) ------------------------------------------

    async def revoke_session(self, session_id: str, until_ms: int) -> None:
        ttl = max(1000, until_ms - int(datetime.now(tz=UTC).timestamp() * 1000))
        try:
            await self.redis.set(session_revoked_key(self.prefix, session_id), b"1", px=ttl)
        except Exception as exc:
            raise StoreUnavailable("Valkey unavailable: the sign-out could not be recorded") from exc

    async def session_revoked(self, session_id: str) -> bool:
        try:
            return bool(await self.redis.exists(session_revoked_key(self.prefix, session_id)))
        except Exception as exc:
            raise StoreUnavailable("Valkey unavailable: the session cannot be confirmed") from exc

    async def put_ticket(self, ticket: str, data: dict[str, Any], expires_ms: int) -> None:
        ttl = max(1, expires_ms - int(datetime.now(tz=UTC).timestamp() * 1000))
        try:
            await self.redis.set(stream_ticket_key(self.prefix, ticket), json.dumps(data).encode(), px=ttl)
        except Exception as exc:
            raise StoreUnavailable("Valkey unavailable: no stream ticket") from exc

    async def take_ticket(self, ticket: str, now_ms: int) -> dict[str, Any] | None:
        try:
            raw = await self.redis.getdel(stream_ticket_key(self.prefix, ticket))
        except Exception as exc:
            raise StoreUnavailable("Valkey unavailable: the stream ticket cannot be checked") from exc
        return None if raw is None else dict(json.loads(raw))

    # audit ----------------------------------------------------------------------------------

    async def append_audit(self, row: AuditRow) -> None:
        """One audit row in PostgreSQL; while the journal spools (or, with SPOOL_ON_FAILURE, when the
        insert fails transiently) in the disk spool instead, drained with the journal's events."""
        detail = {**row.detail, **({"role": row.role} if row.role else {})}
        record = {
            "ts": row.ts,
            "actorId": row.actor_id,
            "actor": row.actor,
            "action": row.action,
            "target": row.target,
            "roomId": row.room_id,
            "ok": row.ok,
            "ip": row.ip,
            "detail": detail,
            "instance": self.instance_id,
            "uid": uuid.uuid4().hex,
        }
        spool = self.spool_audit
        if spool is not None and await spool(record, None):
            return
        try:
            await self._execute(audit_insert_sql("{s}"), *audit_args(record))
        except StoreUnavailable as exc:
            if spool is not None and await spool(record, exc):
                return
            raise

    async def list_audit(self, room_id: str | None, limit: int) -> list[AuditRow]:
        if room_id is None:
            rows = await self._fetch("SELECT * FROM {s}.audit ORDER BY at DESC, id DESC LIMIT $1", limit)
        else:
            rows = await self._fetch(
                "SELECT * FROM {s}.audit WHERE room = $1 ORDER BY at DESC, id DESC LIMIT $2", room_id, limit
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
