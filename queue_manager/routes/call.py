"""One admin request: who is calling, from where, and the audit helper that names them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from queue_manager.access.principal import Grant, Principal
from queue_manager.context import Context
from queue_manager.http.wire import Receive, Request, Send
from queue_manager.routes.authn import require
from queue_manager.services.identity import Identity


@dataclass(slots=True)
class Call:
    ctx: Context
    req: Request
    send: Send
    receive: Receive
    ident: Identity
    who: Principal

    def need(self, grant: Grant) -> None:
        require(self.who, grant)

    async def audit(
        self, action: str, *, target: str | None = None, room_id: str | None = None, ok: bool = True, **detail: Any
    ) -> None:
        await self.ctx.access.audit(self.who, action, target=target, room_id=room_id, ip=self.ident.ip, ok=ok, **detail)
