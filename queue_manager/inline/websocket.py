"""WebSocket (and other upgrade) relay on an inline host.

Gated like a page, not like an asset: a visitor still waiting gets 503 on the upgrade (no page: there
is nothing to show it in). Once admitted, the handshake is made with the app over a connection that
passed the same SSRF rule, with the same forwarded headers as any request, and messages are relayed
both ways until either side closes. Upgrades under ``/__qm/`` are 501: the queue's own live updates
are Server-Sent Events.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from queue_manager.context import Context
from queue_manager.http import cookies
from queue_manager.http.wire import Receive, Request, Scope, Send
from queue_manager.inline import proxy
from queue_manager.inline.client import UpstreamError
from queue_manager.inline.component import Inline
from queue_manager.inline.forward import HOP_BY_HOP, upstream_headers
from queue_manager.inline.hosts import InlineRoom
from queue_manager.inline.surface import strip_prefix
from queue_manager.ssrf import OriginRefused
from queue_manager.store.base import StoreUnavailable

log = logging.getLogger("queue_manager.inline")

HANDSHAKE = frozenset(
    {b"sec-websocket-key", b"sec-websocket-version", b"sec-websocket-extensions", b"sec-websocket-protocol", b"host"}
)
# response headers the client library and the server set for themselves
OWN_RESPONSE = frozenset(
    {"upgrade", "connection", "sec-websocket-accept", "sec-websocket-extensions", "sec-websocket-protocol", "date"}
)


async def deny(
    send: Send,
    status: int,
    payload: dict[str, Any],
    headers: tuple[tuple[bytes, bytes], ...] | list[tuple[bytes, bytes]] = (),
) -> None:
    body = orjson.dumps(payload)
    await send(
        {
            "type": "websocket.http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"cache-control", b"no-store"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "websocket.http.response.body", "body": body})


async def handle(ctx: Context, inline: Inline, scope: Scope, receive: Receive, send: Send) -> None:
    # the visitor's hop described in http terms (the -Proto an app is told is http or https)
    http_scope = {**scope, "method": "GET", "scheme": "https" if scope.get("scheme") == "wss" else "http"}
    req = Request(http_scope, receive, scope["path"])
    if ctx.edge.enabled and not ctx.edge.passes(scope):  # refused before any socket to the origin is opened
        ctx.counters.edge_refused += 1
        await deny(send, 403, {"error": "edge_required", "code": "edge_required"})
        return
    room = inline.index.lookup(req.headers.get(b"host"))
    if (strip_prefix(scope["path"]) is not None and room is not None) or scope["path"].startswith("/__qm/"):
        await deny(
            send,
            501,
            {"error": "The queue's own live updates are Server-Sent Events, not WebSockets.", "code": "no_upgrade"},
        )
        return
    if room is None:
        await deny(send, 404, {"error": "No such route.", "code": "not_found"})
        return
    if inline.at_ceiling():
        ctx.counters.connections_shed += 1
        await deny(send, 503, {"error": "This server is at its connection ceiling.", "code": "over_capacity"})
        return
    ident = ctx.identity.resolve(req)
    ctx.counters.inline_gated += 1
    try:
        check, _ = proxy.admit(ctx, inline, req, ident, room)
        result = await check
        admitted = result.admit
        reason = result.reason or "waiting"
    except StoreUnavailable:
        mode = room.on_backend_down
        ctx.counters.backend_down[mode] = ctx.counters.backend_down.get(mode, 0) + 1
        proxy.log_backend_down(room, mode)
        if mode != "open":
            await deny(
                send,
                503,
                {
                    "error": "The waiting room cannot reach its storage.",
                    "code": "storage_unavailable",
                    "roomId": room.room_id,
                },
                [(b"retry-after", b"5")],
            )
            return
        admitted, reason = True, ""
    if not admitted:
        payload = {"error": "Still in the waiting room.", "code": "queued", "roomId": room.room_id, "reason": reason}
        await deny(send, 503, {**payload, "reload": True}, [(b"x-qm-queued", b"1"), (b"retry-after", b"5")])
        return
    inline.active_proxied += 1
    try:
        await _relay(ctx, inline, req, room, ident, receive, send)
    finally:
        inline.active_proxied -= 1


async def _relay(
    ctx: Context, inline: Inline, req: Request, room: InlineRoom, ident: Any, receive: Receive, send: Send
) -> None:
    scope = req.scope
    origin = room.origin
    headers = [
        (k.decode("latin-1"), v.decode("latin-1"))
        for k, v in upstream_headers(scope["headers"], ident, proxy.trusted_forwarder(ctx, ident))
        if k not in HANDSHAKE and k not in HOP_BY_HOP
    ]
    host = req.header(b"host") or origin.authority
    raw = scope.get("raw_path") or scope["path"].encode()
    qs = scope.get("query_string") or b""
    uri = f"{'wss' if origin.scheme == 'https' else 'ws'}://{host}{raw.decode('latin-1')}"
    if qs:
        uri += "?" + qs.decode("latin-1")
    try:
        sock = await inline.pool.connect_socket(origin)
    except (OriginRefused, UpstreamError) as err:
        phase = "refused" if isinstance(err, OriginRefused) else err.phase
        _count(ctx, room, phase)
        await deny(send, 504 if phase == "timeout" else 502, _down(room, phase), [(b"x-qm-origin", phase.encode())])
        return
    tls = inline.pool.tls_context() if origin.scheme == "https" else None
    try:
        upstream = await connect(
            uri,
            sock=sock,
            ssl=tls,
            server_hostname=origin.host if tls is not None else None,
            additional_headers=headers,
            subprotocols=scope.get("subprotocols") or None,
            user_agent_header=None,
            origin=None,
            compression=None,
            proxy=None,
            open_timeout=inline.timeout,
            ping_interval=None,
            max_size=None,
        )
    except InvalidStatus as err:  # the app refused the handshake: pass its answer on
        response = err.response
        body = response.body or b""
        await send(
            {
                "type": "websocket.http.response.start",
                "status": response.status_code,
                "headers": [
                    (k.lower().encode("latin-1"), v.encode("latin-1"))
                    for k, v in response.headers.raw_items()
                    if k.lower() not in ("content-length", "transfer-encoding", "connection")
                ]
                + [(b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "websocket.http.response.body", "body": body})
        return
    except (TimeoutError, OSError, InvalidHandshake) as err:
        sock.close()
        phase = "timeout" if isinstance(err, TimeoutError) else "response"
        _count(ctx, room, phase)
        await deny(send, 504 if phase == "timeout" else 502, _down(room, phase), [(b"x-qm-origin", phase.encode())])
        return
    assert upstream.response is not None
    accept_headers = [
        (k.lower().encode("latin-1"), v.encode("latin-1"))
        for k, v in upstream.response.headers.raw_items()
        if k.lower() not in OWN_RESPONSE
        and not (k.lower() == "set-cookie" and v.split("=", 1)[0].strip() == cookies.CONSOLE)
    ]
    await send({"type": "websocket.accept", "subprotocol": upstream.subprotocol, "headers": accept_headers})
    await _pipe(upstream, receive, send)


async def _pipe(upstream: ClientConnection, receive: Receive, send: Send) -> None:
    async def visitor_to_app() -> None:
        while True:
            message = await receive()
            kind = message["type"]
            if kind == "websocket.receive":
                data = message.get("bytes")
                await upstream.send(data if data is not None else message.get("text") or "")
            elif kind == "websocket.disconnect":
                await upstream.close(code=_close_code(message.get("code", 1000)))
                return

    async def app_to_visitor() -> None:
        try:
            async for data in upstream:
                if isinstance(data, bytes):
                    await send({"type": "websocket.send", "bytes": data})
                else:
                    await send({"type": "websocket.send", "text": data})
        except ConnectionClosed:
            pass
        code = upstream.close_code or 1000
        with contextlib.suppress(Exception):
            await send({"type": "websocket.close", "code": _close_code(code), "reason": upstream.close_reason or ""})

    tasks = [asyncio.create_task(visitor_to_app()), asyncio.create_task(app_to_visitor())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        with contextlib.suppress(Exception):
            await upstream.close()


def _close_code(code: int) -> int:
    # 1005/1006/1015 are never sent on the wire
    return 1000 if code in (1005, 1006, 1015) or not 1000 <= code < 5000 else code


def _down(room: InlineRoom, phase: str) -> dict[str, Any]:
    return {
        "error": "The site behind the queue is not answering.",
        "code": "origin_down",
        "roomId": room.room_id,
        "phase": phase,
    }


def _count(ctx: Context, room: InlineRoom, phase: str) -> None:
    key = (room.room_id, phase)
    ctx.counters.origin_errors[key] = ctx.counters.origin_errors.get(key, 0) + 1
