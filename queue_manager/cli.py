"""`qm` / `python -m queue_manager`: read the environment, refuse or warn, serve."""

from __future__ import annotations

import gc
import socket
import sys
from typing import Any

import uvicorn

from queue_manager import __version__
from queue_manager.config import ConfigRefusal, Settings, load_settings
from queue_manager.inline.fastpath import InlineProtocol
from queue_manager.server import Server


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, app: Server, settings: Settings) -> None:
        super().__init__(config)
        self.qm_app = app
        self.qm_settings = settings

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.should_exit:
            return
        gc.freeze()  # what start-up built lives for the whole run: keep it out of every collection
        port = self.qm_settings.port
        for server in getattr(self, "servers", []):
            for sock in server.sockets:
                port = sock.getsockname()[1]
                break
        host = self.qm_settings.host
        shown = f"[{host}]" if ":" in host else host
        s = self.qm_settings
        print(f"Queue Manager {__version__} listening on http://{shown}:{port} (STORE={s.store})", flush=True)
        key_hint = "the default key qm-dev-admin-key" if s.admin_key_is_default else "your ADMIN_KEY"
        print(
            f"  console:   http://{shown}:{port}/ (sign in with {key_hint}); guides at http://{shown}:{port}/docs\n"
            f"  admin API: curl -H 'Authorization: Bearer <ADMIN_KEY>' http://{shown}:{port}/api/admin/rooms",
            flush=True,
        )

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.qm_app.begin_stop()
        # streams were just told to end; what is still open is proxied responses finishing on their own,
        # bounded by SHUTDOWN_DRAIN_MS (15 s floor when unset and an inline room exists)
        drain_ms = self.qm_settings.effective_shutdown_drain_ms(bool(self.qm_app.inline.index))
        self.config.timeout_graceful_shutdown = max(1, -(-drain_ms // 1000))
        await super().shutdown(sockets)


def main(argv: list[str] | None = None) -> None:
    try:
        settings = load_settings()
    except ConfigRefusal as refusal:
        print(f"queue-manager: refusing to start: {refusal.message}", file=sys.stderr, flush=True)
        sys.exit(2)
    for warning in settings.warnings:
        print(f"WARNING {warning.variable}: {warning.message}", file=sys.stderr, flush=True)
    # Large lines are hundreds of thousands of long-lived objects: collect the young generation less often,
    # so full collections (which walk every ticket) are rare pauses rather than frequent ones.
    gc.set_threshold(50_000, 50, 100)
    try:
        app = Server(settings)
    except ConfigRefusal as refusal:
        print(f"queue-manager: refusing to start: {refusal.message}", file=sys.stderr, flush=True)
        sys.exit(2)
    kwargs: dict[str, Any] = {}
    try:
        import uvloop  # noqa: F401

        kwargs["loop"] = "uvloop"
    except ImportError:  # pragma: no cover - Windows
        kwargs["loop"] = "asyncio"
    config = uvicorn.Config(
        app.asgi,
        host=settings.host,
        port=settings.port,
        http=InlineProtocol,
        lifespan="on",
        log_level="warning",
        access_log=False,
        server_header=False,
        # who the client is, and whether forwarded headers count, is decided by TRUST_PROXY/TRUST_PROXY_IPS
        # in http/identity.py — never by the server's own loopback-trusting default
        proxy_headers=False,
        timeout_graceful_shutdown=max(1, settings.shutdown_grace_ms // 1000),
        # past MAX_CONNECTIONS the app answers a plain 503 itself (inline/front.py); the reserve above it is
        # what keeps that answer possible instead of the socket being dropped
        limit_concurrency=(
            settings.max_connections + settings.connection_reserve if settings.max_connections else None
        ),
        **kwargs,
    )
    server = _Server(config, app, settings)
    app.ctx.request_stop = lambda: setattr(server, "should_exit", True)
    app.inline.connection_count = lambda: len(server.server_state.connections)
    try:
        server.run()
    except KeyboardInterrupt:  # Ctrl-C: uvicorn has already stopped gracefully and re-raises the signal
        print("Queue Manager stopped.", file=sys.stderr, flush=True)
