"""What the tick's promotion costs, in CPU instructions per promoted visitor: on the memory engine, or
inside Valkey (the tick script).

    .venv/bin/python bench/promote_cost.py [--tree DIR] [--n 2000]
    .venv/bin/python bench/promote_cost.py --valkey [--tree DIR] [--n 2000]

Memory engine: each run creates room ``bench`` (rate 1,000,000/min, no concurrency ceiling), lets N
visitors join and ticks once a second of the fake clock until the line is empty; the count is one join
plus one promotion per visitor, counted under ``valgrind --tool=callgrind`` for N and 2N visitors and
differenced (start-up excluded: a number that repeats exactly).

``--valkey``: a ``redis-server`` (or ``valkey-server``) of its own runs under callgrind on a free port
(``hz 1``); N visitors join a fresh room, the counters are zeroed, and the ticks that promote them all are
counted inside the server; then again with 2N, differenced. The server's background work makes this
repeat to within about 0.5 %, not exactly.

With ``--tree DIR`` the code is another checkout's (e.g. the commit before a change), so a change to the
promotion path is compared before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from callgrind import instructions_per_call

from queue_manager.engine import outflow, visitor


def _loop(n: int) -> None:
    from queue_manager.clock import FakeClock
    from queue_manager.engine.engine import Engine
    from queue_manager.engine.model import ClientId

    clock = FakeClock()
    engine = Engine(clock)
    room, _, _ = engine.upsert(
        {"id": "bench", "targetUrl": "https://shop.example", "queueMaxPerIp": None, "ratePerMinute": 1_000_000}
    )
    for i in range(n):
        client = ClientId(
            ident=f"10.{i >> 16}.{(i >> 8) & 255}.{i & 255}",
            fp=i.to_bytes(16, "big"),
            fp2=None,
            cookie=(i + 1).to_bytes(16, "big"),
        )
        visitor.join(room, client, None, None)
    engine.drain_events()
    while len(room.line):
        clock.advance(1.0)
        outflow.tick(room)
        engine.drain_events()
    assert room.passes_total == n


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _callgrind(pid: int, out_dir: str, action: str) -> int:
    """``-z``: zero the server's counters; ``-d``: dump them and return the instructions counted since."""
    for f in glob.glob(os.path.join(out_dir, "cg.*")):
        os.remove(f)
    subprocess.run(["callgrind_control", action, str(pid)], check=True, capture_output=True)
    total = 0
    for f in glob.glob(os.path.join(out_dir, "cg.*")):
        with open(f, "rb") as fh:
            found = re.search(rb"^(?:totals|summary):\s+(\d+)", fh.read(), re.M)
        total += int(found.group(1)) if found else 0
    return total


async def _valkey_ticks(port: int, pid: int, out_dir: str, n: int) -> int:
    """Instructions the server spends on the ticks that promote ``n`` visitors who joined a fresh room."""
    import uuid

    from redis.asyncio import Redis

    from queue_manager.clock import FakeClock
    from queue_manager.engine.model import ClientId
    from queue_manager.store.valkey import ValkeyStore
    from queue_manager.store.valkey.keys import room_key

    r = Redis.from_url(f"redis://127.0.0.1:{port}/0", socket_timeout=600)  # the server runs under callgrind
    clock = FakeClock()
    prefix = f"b{uuid.uuid4().hex[:8]}:"
    store = ValkeyStore(r, prefix=prefix, clock=clock)
    await store.start()
    await store.upsert_room(
        {"id": "bench", "targetUrl": "https://shop.example", "queueMaxPerIp": None, "ratePerMinute": 1_000_000}
    )
    for i in range(n):
        client = ClientId(ident=f"10.{i >> 16}.{(i >> 8) & 255}.{i & 255}", fp=i.to_bytes(16, "big"))
        await store.join("bench", client, None, None)
    clock.advance(1.0)
    await asyncio.to_thread(_callgrind, pid, out_dir, "-z")
    await store.tick()
    while await r.zcard(room_key(prefix, "bench", "line")):
        await store.tick()
    total = await asyncio.to_thread(_callgrind, pid, out_dir, "-d")
    await store.close()
    await r.flushall()
    await r.aclose()
    return total


def _valkey(n: int, tree: str | None) -> float:
    server = shutil.which("valkey-server") or shutil.which("redis-server")
    if server is None:
        sys.exit("bench: --valkey needs valkey-server or redis-server on PATH")
    if tree:
        sys.path.insert(0, os.path.abspath(tree))
    port = _free_port()
    with tempfile.TemporaryDirectory() as out_dir:
        argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_dir}/cg.%p", server]
        argv += ["--port", str(port), "--save", "", "--appendonly", "no", "--hz", "1"]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=out_dir)
        try:
            for _ in range(300):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.1)
            once = asyncio.run(_valkey_ticks(port, proc.pid, out_dir, n))
            twice = asyncio.run(_valkey_ticks(port, proc.pid, out_dir, 2 * n))
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    return (twice - once) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--tree", help="the checkout whose engine is measured (default: this one)")
    ap.add_argument("--valkey", action="store_true", help="the tick script inside Valkey instead")
    ap.add_argument("--loop", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.loop is not None:
        _loop(args.loop)
        return
    if not shutil.which("valgrind"):
        sys.exit("bench: valgrind is needed (apt-get install -y valgrind)")
    if args.valkey:
        per_tick = _valkey(args.n, args.tree)
        print(f"promotion (Valkey tick script)\t{per_tick:,.0f} instructions per visitor, inside the server")
        return
    env = {"PYTHONPATH": os.path.abspath(args.tree)} if args.tree else {}
    per = instructions_per_call(lambda count: ([sys.executable, __file__, "--loop", str(count)], env), args.n)
    print(f"join + promotion (memory engine)\t{per:,.0f} instructions per visitor")


if __name__ == "__main__":
    main()
