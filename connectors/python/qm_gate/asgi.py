"""The gate as ASGI middleware (FastAPI, Starlette, Django's ASGI application, any ASGI 3 app).

The door check runs in a worker thread (the standard library's HTTP client is blocking), awaited with the
gate's timeout, so the event loop never waits on the queue::

    app = QueueGateASGI(app, queue_url="https://QUEUE_HOST", room="shop", key=os.environ["QM_PUBLIC_API_KEY"])
    app.add_middleware(QueueGateASGI, queue_url=..., room=..., key=...)   # FastAPI / Starlette
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from qm_gate import _rules
from qm_gate._fetch import Unanswered
from qm_gate._gate import Answer, Check, Continue, Gate, log

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _visit(scope: Scope) -> _rules.Visit:
    pairs = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope.get("headers", [])]
    headers = _rules.join_headers(pairs)
    raw = scope.get("raw_path")
    path = raw.decode("latin-1") if isinstance(raw, bytes) and raw else scope.get("root_path", "") + scope["path"]
    client = scope.get("client")
    return _rules.Visit(
        method=str(scope.get("method", "GET")).upper(),
        path=path.split("?", 1)[0],
        query=bytes(scope.get("query_string", b"")).decode("latin-1"),
        scheme=str(scope.get("scheme", "http")),
        headers=headers,
        peer=str(client[0]) if client else "",
        cookies=_rules.parse_cookies(headers.get("cookie")),
    )


def _encoded(headers: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers]


class QueueGateASGI:
    """Queue Manager in front of an ASGI app (see the package README for every option)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        queue_url: str,
        room: str,
        key: str,
        timeout: float = 2.0,
        trust_proxy: int | bool = 0,
        on_fail_open: Callable[[str, str], object] | None = None,
        revoked_refresh: float = 5.0,
    ) -> None:
        self.app = app
        self.gate = Gate(
            queue_url=queue_url,
            room=room,
            key=key,
            timeout=timeout,
            trust_proxy=trust_proxy,
            on_fail_open=on_fail_open,
            revoked_refresh=revoked_refresh,
        )

    @property
    def stats(self) -> dict[str, Any]:
        return self.gate.stats

    async def _ask(self, check: Check) -> Any:
        try:
            return await asyncio.wait_for(asyncio.to_thread(self.gate.ask, check), self.gate.timeout + 0.5)
        except TimeoutError:
            return Unanswered("timeout")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        try:
            visit = _visit(scope)
            outcome = self.gate.begin(visit)
            if isinstance(outcome, Check):
                outcome = self.gate.conclude(visit, outcome, await self._ask(outcome))
        except Exception:  # the gate never stands between a visitor and the app by accident
            log.exception("[qm] gate error, continuing to the app")
            outcome = Continue()
        if isinstance(outcome, Answer):
            await send({"type": "http.response.start", "status": outcome.status, "headers": _encoded(outcome.headers)})
            await send({"type": "http.response.body", "body": outcome.body})
            return
        scope = dict(scope)
        scope["qm_gate"] = self  # the app's way to this gate: request.scope["qm_gate"].revoke_session(request)
        if outcome.strip_token:
            scope["query_string"] = _rules.strip_token(bytes(scope.get("query_string", b"")).decode("latin-1")).encode(
                "latin-1"
            )
        if not outcome.headers:
            await self.app(scope, receive, send)
            return
        extra = _encoded(outcome.headers)

        async def decorated(message: Message) -> None:
            if message.get("type") == "http.response.start":
                message = dict(message)
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, decorated)

    async def revoke_session(self, request: Any) -> bool:
        """End the visitor's session at the queue (their order is complete): the slot goes to the next in line.

        ``request`` is the ASGI scope or anything with a ``.scope`` (a Starlette/FastAPI request, Django's
        ASGIRequest). True when a live session ended; never raises. The app reaches the gate in front of it
        as ``request.scope["qm_gate"]``.
        """
        scope = getattr(request, "scope", request)
        return await asyncio.to_thread(self.gate.revoke, _visit(scope).cookies)

    def close(self) -> None:
        self.gate.close()
