"""The Queue Manager server, in-process, for profiling: same App, same uvicorn settings as the CLI.

    python bench/profile_server.py [--cprofile OUT.prof] [--gc-log OUT.json]

Reads the same environment as ``python -m queue_manager`` and prints ``listening`` with its URL.
``--cprofile`` profiles the whole process (event loop included) until SIGTERM/SIGINT and writes a
pstats file. ``--gc-log`` records every garbage-collector pass (generation, duration, objects
collected) and writes a summary at exit. Used by bench/profile.sh; not part of the server.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import uvicorn

from queue_manager.config import load_settings
from queue_manager.server import Server


class GcLog:
    def __init__(self) -> None:
        self.start = 0.0
        self.passes: list[tuple[int, float, int]] = []  # (generation, seconds, collected)

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self.start = time.perf_counter()
        else:
            self.passes.append((info["generation"], time.perf_counter() - self.start, info["collected"]))

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"objectsTracked": len(gc.get_objects())}
        for gen in (0, 1, 2):
            durs = sorted(d for g, d, _ in self.passes if g == gen)
            if durs:
                out[f"gen{gen}"] = {
                    "count": len(durs),
                    "totalMs": round(sum(durs) * 1000, 2),
                    "maxMs": round(durs[-1] * 1000, 2),
                    "medianMs": round(durs[len(durs) // 2] * 1000, 3),
                    "collected": sum(c for g, _, c in self.passes if g == gen),
                }
        return out


class _Server(uvicorn.Server):
    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        for server in getattr(self, "servers", []):
            for sock in server.sockets:
                host, port = sock.getsockname()[:2]
                print(f"profile server listening on http://{host}:{port}", flush=True)
                return


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cprofile")
    ap.add_argument("--gc-log")
    args = ap.parse_args()
    settings = load_settings()
    app = Server(settings)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        http="httptools",
        loop="uvloop",
        lifespan="on",
        log_level="warning",
        access_log=False,
        server_header=False,
        timeout_graceful_shutdown=1,
    )
    gclog = GcLog() if args.gc_log else None
    if gclog is not None:
        gc.callbacks.append(gclog)
    prof = cProfile.Profile() if args.cprofile else None
    # uvicorn captures SIGTERM while it runs and re-raises it after its graceful shutdown: turn that
    # re-raised signal into KeyboardInterrupt so the profile and the GC log are still written.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        if prof is not None:
            prof.enable()
        _Server(config).run()
    except KeyboardInterrupt:
        pass
    finally:
        if prof is not None:
            prof.disable()
            prof.dump_stats(args.cprofile)
        if gclog is not None:
            Path(args.gc_log).write_bytes(orjson.dumps(gclog.summary(), option=orjson.OPT_INDENT_2))
        print("profile server stopped", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
