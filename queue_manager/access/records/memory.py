"""Shared access records (operators, monitor links, revocations, stream tickets, audit rows).

``AccessStore`` is the contract; ``MemoryAccessStore`` keeps them in this process (STORE=memory:
gone on restart). The Valkey/PostgreSQL store implements the same coroutines so every instance
sees one team.
"""

from __future__ import annotations

from collections import OrderedDict, deque
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


AUDIT_KEEP = 100_000
TICKETS_KEEP = 50_000
REVOCATIONS_KEEP = 100_000


class MemoryAccessStore:
    def __init__(self) -> None:
        self._operators: dict[str, OperatorRecord] = {}
        self._links: dict[str, MonitorLink] = {}
        self._revoked: OrderedDict[str, int] = OrderedDict()
        self._tickets: OrderedDict[str, tuple[dict[str, Any], int]] = OrderedDict()
        self._audit: deque[AuditRow] = deque(maxlen=AUDIT_KEEP)

    async def put_operator(self, op: OperatorRecord) -> None:
        self._operators[op.id] = op

    async def get_operator(self, op_id: str) -> OperatorRecord | None:
        return self._operators.get(op_id)

    async def list_operators(self) -> list[OperatorRecord]:
        return list(self._operators.values())

    async def delete_operator(self, op_id: str) -> bool:
        return self._operators.pop(op_id, None) is not None

    async def put_link(self, link: MonitorLink) -> None:
        self._links[link.id] = link

    async def get_link(self, link_id: str) -> MonitorLink | None:
        return self._links.get(link_id)

    async def list_links(self) -> list[MonitorLink]:
        return list(self._links.values())

    async def revoke_session(self, session_id: str, until_ms: int) -> None:
        self._revoked[session_id] = until_ms
        while len(self._revoked) > REVOCATIONS_KEEP:
            self._revoked.popitem(last=False)

    async def session_revoked(self, session_id: str) -> bool:
        return session_id in self._revoked

    async def put_ticket(self, ticket: str, data: dict[str, Any], expires_ms: int) -> None:
        self._tickets[ticket] = (data, expires_ms)
        while len(self._tickets) > TICKETS_KEEP:
            self._tickets.popitem(last=False)

    async def take_ticket(self, ticket: str, now_ms: int) -> dict[str, Any] | None:
        entry = self._tickets.pop(ticket, None)  # single use: destroyed on the first attempt
        if entry is None or now_ms >= entry[1]:
            return None
        return entry[0]

    async def append_audit(self, row: AuditRow) -> None:
        self._audit.append(row)

    async def list_audit(self, room_id: str | None, limit: int) -> list[AuditRow]:
        rows = [r for r in reversed(self._audit) if room_id is None or r.room_id == room_id]
        return rows[:limit]
