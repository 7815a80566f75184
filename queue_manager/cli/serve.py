"""`qm serve` (and `qm` alone): read the environment, refuse or warn, serve.

With WORKERS=1 (the default) this process serves. With WORKERS=N it is the supervisor of N worker
processes (queue_manager/workers.py), each of which is this same command run with the hidden
``--worker-index``/``--listen-fd``/``--ready-fd``/``--parent-pid``/``--peer-dir``/``--worker-count``
options (main.py declares them): it serves on the inherited socket and tells the supervisor it is
ready instead of printing the listening lines.
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import socket
import sys
from collections.abc import Mapping
from types import FrameType
from typing import Any

import uvicorn

from queue_manager import __version__
from queue_manager.config import (
    DEFAULT_ADMIN_KEY,
    DEFAULT_PUBLIC_API_KEY,
    HARDENING_EDGE_SECRET,
    ConfigRefusal,
    Settings,
    load_settings,
)
from queue_manager.inline.fastpath import InlineProtocol
from queue_manager.inline.heads import waiting_for
from queue_manager.server import Server
from queue_manager.services.peers import Peers
from queue_manager.workers import STOPPED_UNCLEAN, WorkerRole, die_with_parent, supervise, worker_instance_id


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, app: Server, settings: Settings, role: WorkerRole | None) -> None:
        super().__init__(config)
        self.qm_app = app
        self.qm_settings = settings
        self.qm_role = role

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """SIGTERM or SIGINT: the graceful stop (a second SIGINT: at once, without waiting for the open
        connections). Unlike uvicorn's own handler this one does not keep the signal to raise it again
        once stopped, which would end the process as killed by it: ``run`` returns, and the exit status
        says how the stop went (0 when clean)."""
        if sig == signal.SIGINT and self.should_exit:
            self.force_exit = True
        self.should_exit = True

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.should_exit:
            return
        gc.freeze()  # what start-up built lives for the whole run: keep it out of every collection
        if self.qm_role is not None:  # a worker: the supervisor prints the lines once all are ready
            os.write(self.qm_role.ready_fd, b"ready\n")
            os.close(self.qm_role.ready_fd)
            return
        port = self.qm_settings.port
        for server in getattr(self, "servers", []):
            for sock in server.sockets:
                port = sock.getsockname()[1]
                break
        announce(self.qm_settings, port)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.qm_app.begin_stop()
        # streams were just told to end; what is still open is proxied responses finishing on their own,
        # bounded by SHUTDOWN_DRAIN_MS (15 s floor when unset and an inline room exists)
        drain_ms = self.qm_settings.effective_shutdown_drain_ms(bool(self.qm_app.inline.index))
        self.config.timeout_graceful_shutdown = max(1, -(-drain_ms // 1000))
        await super().shutdown(sockets)


def announce(s: Settings, port: int) -> None:
    """The lines that say the server is up: the one with ``listening`` and the URL, then the hints."""
    host = s.host
    shown = f"[{host}]" if ":" in host else host
    workers = f", WORKERS={s.workers}" if s.workers > 1 else ""
    print(f"Queue Manager {__version__} listening on http://{shown}:{port} (STORE={s.store}{workers})", flush=True)
    key_hint = f"the default key {DEFAULT_ADMIN_KEY}" if s.admin_key_is_default else "your ADMIN_KEY"
    if s.public_api_key_is_default:
        connectors = (
            f"Public API key {DEFAULT_PUBLIC_API_KEY} (the development key; set PUBLIC_API_KEY before going live)"
        )
    elif s.public_api_key:
        connectors = "Public API key: your PUBLIC_API_KEY"
    else:  # ADMIN_KEY set, PUBLIC_API_KEY not: a connector given no key lets every request through
        connectors = "PUBLIC_API_KEY is not set: set it (and restart) before creating rooms for a connector"
    print(
        f"  console:   http://{shown}:{port}/ (sign in with {key_hint}); guides at http://{shown}:{port}/docs\n"
        f"  admin API: curl -H 'Authorization: Bearer <ADMIN_KEY>' http://{shown}:{port}/api/admin/rooms\n"
        f"  connectors: {connectors}",
        flush=True,
    )


def startup_notices(s: Settings) -> list[str]:
    """The hardening items the guide has the server print at start as well as list on /api/admin/health:
    a missing EDGE_SECRET with STORE=valkey or NODE_ENV=production (printed once, by the process that reads
    the settings: with WORKERS>1 the supervisor, never each worker)."""
    return [item for item in s.hardening if item == HARDENING_EDGE_SECRET]


def _peers(role: WorkerRole | None, settings: Settings) -> Peers | None:
    """A worker's siblings (WORKERS>1), where they serve their own metrics; None for a single process."""
    if role is None or role.peer_dir is None or role.count < 2:
        return None
    group = settings.instance_id.removesuffix(worker_instance_id("", role.index))
    return Peers(role.peer_dir, role.index, role.count, group)


def run(args: argparse.Namespace) -> int:
    """Serve until stopped; the exit code (2: the settings refuse start)."""
    role: WorkerRole | None = None
    if args.worker_index is not None:
        role = WorkerRole(
            args.worker_index, args.listen_fd, args.ready_fd, args.parent_pid, args.peer_dir, args.worker_count or 1
        )
        die_with_parent(role.parent_pid)
    environ: Mapping[str, str] = os.environ
    if args.workers is not None:
        environ = {**os.environ, "WORKERS": args.workers}
    try:
        settings = load_settings(environ)
    except ConfigRefusal as refusal:
        return _refused(refusal)
    if role is None:  # a worker's warnings were printed by its supervisor
        for warning in settings.warnings:
            print(warning.line, file=sys.stderr, flush=True)
        for line in startup_notices(settings):
            print(line, file=sys.stderr, flush=True)
    if role is None and settings.workers > 1:
        return supervise(settings, settings.workers, lambda port: announce(settings, port))
    # Large lines are hundreds of thousands of long-lived objects: collect the young generation less often,
    # so full collections (which walk every ticket) are rare pauses rather than frequent ones.
    gc.set_threshold(50_000, 50, 100)
    try:
        app = Server(settings, peers=_peers(role, settings))
    except ConfigRefusal as refusal:
        return _refused(refusal)
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
        # in services/identity.py — never by the server's own loopback-trusting default
        proxy_headers=False,
        timeout_graceful_shutdown=max(1, settings.shutdown_grace_ms // 1000),
        # past MAX_CONNECTIONS the app answers a plain 503 itself (inline/front.py); the reserve above it is
        # what keeps that answer possible instead of the socket being dropped
        limit_concurrency=(
            settings.max_connections + settings.connection_reserve if settings.max_connections else None
        ),
        **kwargs,
    )
    server = _Server(config, app, settings, role)
    app.ctx.run.stop_through(lambda: setattr(server, "should_exit", True))
    app.inline.connection_count = lambda: len(server.server_state.connections)
    # past the ceiling, connections only waiting for a request head make room before anything is shed
    app.inline.make_room = waiting_for(server.server_state, settings, app.ctx.counters).make_room
    sockets = None if role is None else [socket.socket(fileno=role.listen_fd)]
    try:
        server.run(sockets=sockets)
    except KeyboardInterrupt:  # Ctrl-C before the server's own handlers were in place: no stop was made
        pass
    return stop_status(app, role)


def stop_status(app: Server, role: WorkerRole | None) -> int:
    """The exit status of a server that ran and stopped: 0 when the stop was clean (its stop line says
    ``"clean": true``); STOPPED_UNCLEAN when it stopped WITH STORAGE FAILING (the events journal's last
    commit did not land) or the stop was cut short (a second Ctrl-C) before that line."""
    clean = app.stopped_clean is True
    if role is None:  # a worker's supervisor says it once for all
        print("Queue Manager stopped." if clean else "Queue Manager stopped, not cleanly.", file=sys.stderr, flush=True)
    return 0 if clean else STOPPED_UNCLEAN


def _refused(refusal: ConfigRefusal) -> int:
    print(refusal.line, file=sys.stderr, flush=True)
    return 2
