"""A small real web application for the inline proxy tests, run as its own process.

``python tests/inline/peer_app.py PORT [HOST]`` serves, on 127.0.0.1:PORT (or HOST, e.g. ``::1``; uvicorn, raw ASGI):

* ``/`` and ``/page/...``: HTML pages; ``/healthz``: the app's own path of that name;
* ``/api/echo``: JSON describing the request as the app received it (method, target, headers, body size);
* ``/api/stream?id=X``: a chunked response whose second half waits for ``/release?id=X``;
* ``/sse?id=X``: an event stream, same hand-off; ``/slow?id=X``: no answer until released;
* ``/upload``: a sink that reads any body as it arrives and answers its size and SHA-256;
* ``/big?mb=N``: N MiB streamed down;
* ``/static/app.js``, ``/static/logo.png``: assets; ``/cookies``: sets ``qm_console`` and ``app`` cookies;
* ``/broken``: promises 100 bytes, sends 10 and closes;
* ``/thanks``: an order's thank-you page, answered with ``X-QM-Command: revoke`` (the visitor is done);
* ``/ws``: WebSocket echo that first sends the handshake headers it saw.

It prints ``peer listening on http://127.0.0.1:PORT`` (``http://[::1]:PORT``) once it accepts connections.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from typing import Any
from urllib.parse import unquote

import uvicorn

RELEASES: dict[str, asyncio.Event] = {}
HITS: dict[str, int] = {}
HOST_HITS: dict[str, int] = {}
VISITOR_HITS: dict[str, int] = {}  # per Host, without Queue Manager's own origin probe (HEAD /, every 10 s)
SLOW_SEEN: set[str] = set()  # /slow ids that reached the app
HOST_CONNS: dict[str, set[tuple[Any, ...]]] = {}  # distinct client (address, port) pairs per Host


def _release(key: str) -> asyncio.Event:
    return RELEASES.setdefault(key, asyncio.Event())


def _query(scope: dict[str, Any]) -> dict[str, str]:
    out = {}
    for part in scope.get("query_string", b"").decode().split("&"):
        k, _, v = part.partition("=")
        if k:
            out[k] = unquote(v)
    return out


async def _respond(send: Any, status: int, body: bytes, ctype: bytes, extra: list[tuple[bytes, bytes]] = ()) -> None:  # type: ignore[assignment]
    headers = [(b"content-type", ctype), (b"content-length", str(len(body)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] == "websocket":
        await websocket(scope, receive, send)
        return
    path = scope["path"]
    q = _query(scope)
    HITS[path] = HITS.get(path, 0) + 1
    host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), "")
    HOST_HITS[host] = HOST_HITS.get(host, 0) + 1
    if not any(k == b"user-agent" and v == b"queue-manager-probe" for k, v in scope["headers"]):
        VISITOR_HITS[host] = VISITOR_HITS.get(host, 0) + 1
    HOST_CONNS.setdefault(host, set()).add(tuple(scope.get("client") or ()))
    if path == "/thanks":
        body = b"<!doctype html><title>Thanks</title><h1>Thank you for your order</h1>"
        await _respond(send, 200, body, b"text/html; charset=utf-8", [(b"x-qm-command", b"revoke")])
    elif path == "/" or path.startswith("/page/"):
        body = f"<!doctype html><title>Peer</title><h1 id=app>Peer app page {path}</h1>".encode()
        await _respond(send, 200, body, b"text/html; charset=utf-8")
    elif path == "/hits":
        if "slow" in q:
            count = int(q["slow"] in SLOW_SEEN)
        elif "visitors" in q:
            count = VISITOR_HITS.get(q["visitors"], 0)
        elif "conns" in q:
            count = len(HOST_CONNS.get(q["conns"], ()))
        else:
            count = HOST_HITS.get(q["host"], 0) if "host" in q else HITS.get(q.get("p", ""), 0)
        await _respond(send, 200, json.dumps({"count": count}).encode(), b"application/json")
    elif path == "/healthz":
        await _respond(send, 200, b"app-healthz", b"text/plain")
    elif path.startswith("/api/echo") or path == "/api/checkout" or path.startswith("/static/echo"):
        size = 0
        while True:
            message = await receive()
            size += len(message.get("body", b""))
            if not message.get("more_body"):
                break
        raw = scope.get("raw_path") or path.encode()
        qs = scope.get("query_string", b"")
        info = {
            "method": scope["method"],
            "target": (raw + (b"?" + qs if qs else b"")).decode("latin-1"),
            "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in scope["headers"]],
            "bodyBytes": size,
            "hits": HITS[path],
        }
        await _respond(send, 200, json.dumps(info).encode(), b"application/json", [(b"x-app", b"peer")])
    elif path == "/api/stream":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"first-part\n", "more_body": True})
        await _release(q.get("id", "")).wait()
        await send({"type": "http.response.body", "body": b"second-part\n", "more_body": False})
    elif path == "/sse":
        headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-store")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"data: one\n\n", "more_body": True})
        await _release(q.get("id", "")).wait()
        await send({"type": "http.response.body", "body": b"data: two\n\n", "more_body": False})
    elif path == "/slow":
        SLOW_SEEN.add(q.get("id", ""))
        await _release(q.get("id", "")).wait()
        await _respond(send, 200, b"slow-done", b"text/plain")
    elif path == "/release":
        _release(q.get("id", "")).set()
        await _respond(send, 200, b"released", b"text/plain")
    elif path == "/upload":
        digest = hashlib.sha256()
        size = 0
        while True:
            message = await receive()
            chunk = message.get("body", b"")
            digest.update(chunk)
            size += len(chunk)
            if not message.get("more_body"):
                break
        await _respond(
            send, 200, json.dumps({"bytes": size, "sha256": digest.hexdigest()}).encode(), b"application/json"
        )
    elif path == "/big":
        mb = int(q.get("mb", "1"))
        block = b"x" * (1 << 20)
        headers = [(b"content-type", b"application/octet-stream"), (b"content-length", str(mb << 20).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for _ in range(mb):
            await send({"type": "http.response.body", "body": block, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    elif path.startswith("/static/"):
        ctype = b"text/javascript" if path.endswith(".js") else b"image/png"
        await _respond(send, 200, b"/* asset " + path.encode() + b" */", ctype)
    elif path == "/cookies":
        extra = [(b"set-cookie", b"qm_console=from-the-app; Path=/"), (b"set-cookie", b"app=1; Path=/")]
        await _respond(send, 200, b"cookies", b"text/plain", extra)
    elif path == "/broken":
        headers = [(b"content-type", b"text/plain"), (b"content-length", b"100")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"0123456789", "more_body": True})
        raise RuntimeError("the peer breaks this response on purpose")
    else:
        await _respond(send, 404, b"peer: no such page", b"text/plain")


async def websocket(scope: dict[str, Any], receive: Any, send: Any) -> None:
    message = await receive()
    if message["type"] != "websocket.connect":
        return
    if scope["path"] == "/ws-refuse":
        await send({"type": "websocket.close", "code": 1008})
        return
    protos = scope.get("subprotocols") or []
    await send({"type": "websocket.accept", "subprotocol": protos[0] if protos else None})
    seen = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
    await send({"type": "websocket.send", "text": json.dumps({"headers": seen, "path": scope["path"]})})
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return
        if message.get("text") == "close-please":
            await send({"type": "websocket.close", "code": 4001, "reason": "asked"})
            return
        if message.get("bytes") is not None:
            await send({"type": "websocket.send", "bytes": message["bytes"]})
        else:
            await send({"type": "websocket.send", "text": "echo:" + (message.get("text") or "")})


class _Server(uvicorn.Server):
    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)
        host = self.config.host
        shown = f"[{host}]" if ":" in host else host
        print(f"peer listening on http://{shown}:{self.config.port}", flush=True)


def main() -> None:
    port = int(sys.argv[1])
    host = sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1"
    config = uvicorn.Config(app, host=host, port=port, log_level="error", lifespan="on", ws="websockets-sansio")
    _Server(config).run()


if __name__ == "__main__":
    main()
