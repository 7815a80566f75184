"""The baseline: a raw-ASGI hello-world served by uvicorn with exactly the Queue Manager's settings.

    python bench/hello.py   (env HOST, PORT; PORT=0 picks a free port)

Prints ``hello listening on http://HOST:PORT`` once ready, like ``python -m queue_manager``.
The uvicorn.Config below mirrors queue_manager/cli/serve.py: httptools, uvloop, lifespan on, log level
warning, no access log, no Server header, no proxy-headers middleware.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import uvicorn

Message = MutableMapping[str, Any]

BODY = b'{"hello":"world"}'
HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]


async def app(
    scope: Message, receive: Callable[[], Awaitable[Message]], send: Callable[[Message], Awaitable[None]]
) -> None:
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
        await send({"type": "http.response.body", "body": BODY})
    elif scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return


class _Server(uvicorn.Server):
    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        for server in getattr(self, "servers", []):
            for sock in server.sockets:
                host, port = sock.getsockname()[:2]
                print(f"hello listening on http://{host}:{port}", flush=True)
                return


def main() -> None:
    config = uvicorn.Config(
        app,
        host=os.environ.get("HOST", "127.0.0.1"),
        port=int(os.environ.get("PORT", "0")),
        http="httptools",
        loop="uvloop",
        lifespan="on",
        log_level="warning",
        access_log=False,
        server_header=False,
        proxy_headers=False,  # as queue_manager/cli/serve.py: no ProxyHeadersMiddleware in front of the app
        timeout_graceful_shutdown=2,
    )
    _Server(config).run()


if __name__ == "__main__":
    main()
