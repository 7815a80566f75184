"""The access records (operators, monitor links, revocations, stream tickets, audit rows) and their interface.

``AccessStore`` is what ``access/service.py`` keeps them through; ``memory.MemoryAccessStore`` keeps them in
this process (STORE=memory: gone on restart), ``pg.SharedAccessStore`` in PostgreSQL with Valkey beside it
(STORE=valkey + SIDESTORE=pg), so every instance sees one team.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(slots=True)
class OperatorRecord:
    id: str
    name: str
    role: str  # owner | operator | viewer
    verifier: dict[str, Any]  # {"form": "legacy"|"v2", "kid": str|None, "mac": hex}; never the key
    created_at: int
    created_by: str
    revoked_at: int | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    def public(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "role": self.role,
            "createdAt": self.created_at,
            "createdBy": self.created_by,
            "revokedAt": self.revoked_at,
            "active": self.active,
        }


@dataclass(slots=True)
class MonitorLink:
    id: str
    token: str
    created_at: int
    expires_at: int
    created_by: str
    created_by_id: str | None
    revoked_at: int | None = None

    def live(self, now_ms: int) -> bool:
        return self.revoked_at is None and now_ms < self.expires_at

    def public(self, now_ms: int) -> dict[str, Any]:
        return {
            "id": self.id,
            "createdAt": self.created_at,
            "expiresAt": self.expires_at,
            "createdBy": self.created_by,
            "createdById": self.created_by_id,
            "revokedAt": self.revoked_at,
            "live": self.live(now_ms),
        }


@dataclass(slots=True)
class AuditRow:
    ts: int
    actor: str
    actor_id: str | None
    role: str | None
    action: str
    target: str | None
    room_id: str | None
    ip: str | None
    ok: bool = True
    detail: dict[str, Any] = field(default_factory=dict)

    def public(self) -> dict[str, Any]:
        return {
            "ts": self.ts,
            "actor": self.actor,
            "actorId": self.actor_id,
            "role": self.role,
            "action": self.action,
            "target": self.target,
            "roomId": self.room_id,
            "ip": self.ip,
            "ok": self.ok,
            "detail": self.detail,
        }


class AccessStore(Protocol):
    """The records ``Access`` (``service.py``) reads and writes (``Context.access.store``)."""

    async def put_operator(self, op: OperatorRecord) -> None: ...
    async def get_operator(self, op_id: str) -> OperatorRecord | None: ...
    async def list_operators(self) -> list[OperatorRecord]: ...
    async def delete_operator(self, op_id: str) -> bool: ...
    async def put_link(self, link: MonitorLink) -> None: ...
    async def get_link(self, link_id: str) -> MonitorLink | None: ...
    async def list_links(self) -> list[MonitorLink]: ...
    async def revoke_session(self, session_id: str, until_ms: int) -> None: ...
    async def session_revoked(self, session_id: str) -> bool: ...
    async def put_ticket(self, ticket: str, data: dict[str, Any], expires_ms: int) -> None: ...
    async def take_ticket(self, ticket: str, now_ms: int) -> dict[str, Any] | None: ...
    async def append_audit(self, row: AuditRow) -> None: ...
    async def list_audit(self, room_id: str | None, limit: int) -> list[AuditRow]: ...
