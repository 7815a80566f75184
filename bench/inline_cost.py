"""The interpreter's share of one proxied request on the inline fast path, without sockets.

``bench/proxy_bench.py`` measures the whole server (kernel, event loop, sockets) against nginx; on this
shared VM that varies ±30 % from run to run. This measures only the Python a proxied request costs: a
real :class:`~queue_manager.inline.fastpath.InlineProtocol` and a real upstream connection
(:class:`~queue_manager.inline.client.Upstream`) on in-memory transports, a browser's request fed in,
the app's answer fed back, the visitor's answer checked. Targets:

* ``floor``: the same loop through ``bench/proxy_floor.py`` (a relay that applies no rule), what any
  Python proxy on this stack costs;
* ``static``: a script (skips the gate);
* ``gated``: a page from an admitted visitor whose browser keeps the door key the first page set (the
  door check's replay path: what an admitted visitor's every later page costs);
* ``gated-first``: the same page with no door key, so every request is a first door check (a client
  with no cookie jar).

    .venv/bin/python bench/inline_cost.py                 # µs per request, best of 5 rounds
    .venv/bin/python bench/inline_cost.py --instructions  # CPU instructions per request (callgrind)

``--instructions`` runs each target twice under ``valgrind --tool=callgrind`` (N and 2N requests) and
reports the difference ÷ N: a count that repeats exactly whatever else the machine is doing, which is
what a change is judged by here. ``--profile TARGET`` prints cProfile's top functions.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ADMIN_KEY = "bench-admin-key-0123456789"
os.environ.update(
    {
        "STORE": "memory",
        "ADMIN_KEY": ADMIN_KEY,
        "SECRET": "bench-secret-" + "x" * 40,
        "PROXY_ALLOW_PRIVATE": "1",
        "JOIN_LIMIT_PER_MIN": "0",
        "CHECK_LIMIT_PER_MIN": "0",
        "WAITING_LIMIT_PER_MIN": "0",
        "LOG_LEVEL": "warning",
    }
)

TARGETS = ("floor", "static", "gated", "gated-first")
# what a browser sends for a script and for a page (Chromium's headers, in its order)
BROWSER = (
    b"User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/156.0 Safari/537.36\r\n"
    b"Accept: %(accept)s\r\n"
    b"Accept-Language: en-US,en;q=0.9\r\n"
    b"Accept-Encoding: gzip, deflate, br, zstd\r\n"
    b"Referer: http://bench.local/page\r\n"
    b"Sec-Fetch-Site: same-origin\r\n"
    b"Sec-Fetch-Mode: %(mode)s\r\n"
    b"Sec-Fetch-Dest: %(dest)s\r\n"
    b"Connection: keep-alive\r\n"
)
ANSWER = (
    b"HTTP/1.1 200 OK\r\nServer: nginx\r\nDate: Mon, 30 Nov 2026 03:00:00 GMT\r\nContent-Type: text/plain\r\n"
    b"Content-Length: 19\r\nConnection: keep-alive\r\n\r\nhello from the app\n"
)


class Transport(asyncio.Transport):
    """An in-memory transport: keeps what is written."""

    def __init__(self, peer: tuple[str, int]) -> None:
        super().__init__()
        self.peer = peer
        self.out: list[bytes] = []
        self.closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": self.peer, "sockname": ("127.0.0.1", 8080)}.get(name, default)

    def write(self, data: Any) -> None:
        self.out.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


def request(target: str, cookie: str) -> bytes:
    if target.startswith("gated"):
        head = b"GET /page HTTP/1.1\r\nHost: bench.local\r\n" + BROWSER % {
            b"accept": b"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
            b"mode": b"navigate",
            b"dest": b"document",
        }
        return head + b"Cookie: " + cookie.encode() + b"\r\n\r\n"
    return (
        b"GET /assets/app.js HTTP/1.1\r\nHost: bench.local\r\n"
        + BROWSER % {b"accept": b"*/*", b"mode": b"no-cors", b"dest": b"script"}
        + b"\r\n"
    )


async def _admitted_cookie(app: Any) -> str:
    import httpx

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8080") as c:
        room: dict[str, object] = {"id": "bench", "targetUrl": "http://bench.local", "ratePerMinute": 6000}
        room["proxyOrigin"] = "http://127.0.0.1:9"  # never connected to: the pool is given a connection
        got = await c.post("/api/admin/rooms", json=room, headers={"Authorization": f"Bearer {ADMIN_KEY}"})
        got.raise_for_status()
        host = {"Host": "bench.local"}
        (await c.post("/__qm/api/join", json={"roomId": "bench"}, headers=host)).raise_for_status()
        for _ in range(400):
            status = await c.get("/__qm/api/status", params={"roomId": "bench"}, headers=host)
            if status.json()["state"] == "passed":
                return "; ".join(f"{k}={v}" for k, v in c.cookies.items())
            await asyncio.sleep(0.05)
    raise SystemExit("bench: the visitor was never admitted")


async def _qm(target: str) -> Callable[[], None]:
    import uvicorn
    from uvicorn.server import ServerState

    from queue_manager.config import load_settings
    from queue_manager.inline.client import Upstream
    from queue_manager.inline.fastpath import InlineProtocol
    from queue_manager.server import Server

    app = Server(load_settings())
    await app.startup()
    cookie = await _admitted_cookie(app.asgi)
    config = uvicorn.Config(app.asgi, http=InlineProtocol, lifespan="off", log_level="warning", access_log=False)
    config.load()
    proto = InlineProtocol(config, ServerState(), {}, asyncio.get_running_loop())
    visitor = Transport(("127.0.0.1", 50000))
    proto.connection_made(visitor)
    room = app.inline.index.lookup(b"bench.local")
    assert room is not None
    conn = Upstream(room.origin)
    upstream = Transport(("127.0.0.1", 9))
    conn.connection_made(upstream)
    conn.complete = conn.keep_alive = True  # as if it had served one exchange: the pool keeps it
    app.inline.pool.put_back(conn)
    if target == "gated":  # a browser keeps the door key its first page set: later pages replay it
        # ("gated-first" never sends one: every page is a first door check, as from a client with no cookie jar)
        first: list[bytes] = []
        _loop(request(target, cookie), proto.data_received, upstream, conn.data_received, visitor, first)()
        door_key = re.search(rb"set-cookie: (qm_dk_bench=[^;]+)", b"".join(first))
        if door_key is None:
            raise SystemExit("bench: the first page set no door key")
        cookie += "; " + door_key.group(1).decode()
    return _loop(request(target, cookie), proto.data_received, upstream, conn.data_received, visitor)


async def _floor() -> Callable[[], None]:
    sys.argv[1:] = ["0", "9"]
    sys.path.insert(0, str(ROOT / "bench"))
    import proxy_floor
    import uvicorn
    from uvicorn.server import ServerState

    config = uvicorn.Config(proxy_floor._app, http=proxy_floor.FloorProtocol, lifespan="off", log_level="warning")
    config.load()
    proto = proxy_floor.FloorProtocol(config, ServerState(), {}, asyncio.get_running_loop())
    visitor = Transport(("127.0.0.1", 50000))
    proto.connection_made(visitor)
    conn = proxy_floor.Upstream()
    upstream = Transport(("127.0.0.1", 9))
    conn.transport = upstream
    proxy_floor.IDLE.append(conn)
    return _loop(request("static", ""), proto.data_received, upstream, conn.data_received, visitor)


def _loop(
    req: bytes,
    feed: Callable[[bytes], None],
    upstream: Transport,
    answer: Callable[[bytes], None],
    visitor: Transport,
    keep: list[bytes] | None = None,
) -> Callable[[], None]:
    def once() -> None:
        feed(req)
        if not upstream.out:
            raise SystemExit(f"bench: the request did not reach the app: {b''.join(visitor.out)[:300]!r}")
        upstream.out.clear()
        answer(ANSWER)
        if not visitor.out or not visitor.out[-1].endswith(b"hello from the app\n"):
            raise SystemExit(f"bench: no answer from the app: {visitor.out[:2]!r}")
        if keep is not None:
            keep[:] = visitor.out
        visitor.out.clear()

    return once


async def _prepare(target: str) -> Callable[[], None]:
    once = await (_floor() if target == "floor" else _qm(target))
    for _ in range(2000):  # warm every cache on the way
        once()
    return once


def _run(target: str, requests: int, profile: bool) -> None:
    import uvloop

    async def main() -> None:
        once = await _prepare(target)
        if profile:
            import cProfile
            import pstats

            prof = cProfile.Profile()
            prof.enable()
            for _ in range(requests):
                once()
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(30)
        elif requests:
            best = float("inf")
            for _ in range(5):
                start = time.perf_counter()
                for _ in range(requests):
                    once()
                best = min(best, (time.perf_counter() - start) / requests)
            print(f"{target}\t{best * 1e6:.1f}", flush=True)
        else:
            for _ in range(int(os.environ.get("QM_BENCH_N", "0"))):
                once()
        sys.stdout.flush()
        os._exit(0)  # the app's background tasks are not this bench's business

    uvloop.run(main())


def _instructions(target: str, n: int) -> float:
    """Instructions per request of ``target`` (callgrind, n and 2n requests differenced)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from callgrind import instructions_per_call

    return instructions_per_call(
        lambda count: ([sys.executable, __file__, "--child", target], {"QM_BENCH_N": str(count)}), n
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("targets", nargs="*", default=list(TARGETS), help=f"{', '.join(TARGETS)} (default: all)")
    ap.add_argument("--requests", type=int, default=20000, help="requests per timed round")
    ap.add_argument("--instructions", action="store_true", help="count instructions under callgrind")
    ap.add_argument("--profile", action="store_true", help="cProfile the first target")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    for target in [*args.targets, *([args.child] if args.child else [])]:
        if target not in TARGETS:
            ap.error(f"unknown target {target!r} ({', '.join(TARGETS)})")
    if args.child:
        _run(args.child, 0 if "QM_BENCH_N" in os.environ else args.requests, False)
        return
    if args.profile:
        _run(args.targets[0], args.requests, True)
        return
    if args.instructions:
        if not shutil.which("valgrind"):
            sys.exit("bench: valgrind is needed for --instructions (apt-get install -y valgrind)")
        print("target\tinstructions per request (callgrind)")
        for target in args.targets:
            print(f"{target}\t{_instructions(target, 2000):,.0f}", flush=True)
        return
    print("target\tµs per request (best of 5)")
    for target in args.targets:
        subprocess.run([sys.executable, __file__, "--requests", str(args.requests), "--child", target], check=True)


if __name__ == "__main__":
    main()
