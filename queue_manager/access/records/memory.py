"""STORE=memory: the access records in this process (the interface: ``base.AccessStore``), gone on restart.

Sign-outs, stream tickets and audit rows are bounded (the oldest go first).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Any

from queue_manager.access.records.base import AuditRow, MonitorLink, OperatorRecord

AUDIT_KEEP = 100_000
TICKETS_KEEP = 50_000
REVOCATIONS_KEEP = 100_000


class MemoryAccessStore:
    """Operators, monitor links, sign-outs, stream tickets and audit rows, in this process."""

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
