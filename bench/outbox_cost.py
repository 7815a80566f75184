"""What the journal outbox costs a join on Valkey: the join script as shipped against the same script
with the outbox write taken out, side by side on a private Valkey server (``make bench`` phase-free:
run it alone).

Each side joins ``JOINS`` new visitors into a room of its own, one script call each (no journal: the
outbox is never trimmed, so its memory per event can be read too). Valkey's own CPU per call is read
from ``INFO commandstats`` (``usec_per_call`` of ``evalsha``), reset before each batch; the sides run
``ROUNDS`` times, interleaved, and the medians and their ratio are printed.

    .venv/bin/python bench/outbox_cost.py                 # JOINS=2000 ROUNDS=5
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from queue_manager.clock import FakeClock
from queue_manager.engine.model import ClientId
from queue_manager.store.valkey import ValkeyStore
from queue_manager.store.valkey.client import open_client
from queue_manager.store.valkey.keys import room_key
from queue_manager.store.valkey.scripts import Script, build

JOINS = int(os.environ.get("JOINS", "2000"))
ROUNDS = int(os.environ.get("ROUNDS", "5"))
OUTBOX_CALL = "  outbox(tonumber(S_raw.gen) or 0)\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _without_outbox() -> Script:
    import hashlib

    shipped = build("join")
    assert OUTBOX_CALL in shipped.source, "the join script no longer writes the outbox where this bench expects"
    source = shipped.source.replace(OUTBOX_CALL, "")
    return Script("join", source, hashlib.sha1(source.encode()).hexdigest())


async def _batch(store: ValkeyStore, room: str, start: int) -> float:
    redis = store.redis
    await redis.config_resetstat()
    for i in range(start, start + JOINS):
        client = ClientId(ident=f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}", fp=f"f{i}".encode(), cookie=None)
        await store.join(room, client, None, None)
    stats = await redis.info("commandstats")
    return float(stats["cmdstat_evalsha"]["usec_per_call"])


def main() -> None:
    port = _free_port()
    workdir = tempfile.mkdtemp(prefix="qm-outbox-bench-")
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=workdir,
        stdout=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        asyncio.run(_measure(f"redis://127.0.0.1:{port}/0"))
    finally:
        server.terminate()
        server.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


async def _measure(url: str) -> None:
    client = open_client(url)
    shipped = ValkeyStore(client, prefix="a:", clock=FakeClock(), writer="bench")
    plain = ValkeyStore(client, prefix="b:", clock=FakeClock(), writer="bench")
    await shipped.start()
    await plain.start()
    plain._calls.scripts["join"] = _without_outbox()
    await client.script_load(plain._calls.scripts["join"].source)
    for store in (shipped, plain):
        await store.upsert_room(
            {"id": "r", "targetUrl": "https://shop.example/", "ratePerMinute": 0, "queueMaxPerIp": None}
        )
    with_box: list[float] = []
    without: list[float] = []
    for r in range(ROUNDS):
        with_box.append(await _batch(shipped, "r", r * JOINS))
        without.append(await _batch(plain, "r", r * JOINS))
    entries = await client.zcard(room_key("a:", "r", "ob"))
    used = await client.memory_usage(room_key("a:", "r", "ob")) or 0
    a, b = statistics.median(with_box), statistics.median(without)
    print(f"join script, Valkey CPU per call (usec, median of {ROUNDS} x {JOINS} joins, interleaved)")
    print(f"  with the outbox     {a:8.2f}   (runs: {', '.join(f'{x:.2f}' for x in with_box)})")
    print(f"  without the outbox  {b:8.2f}   (runs: {', '.join(f'{x:.2f}' for x in without)})")
    print(f"  ratio               {a / b:8.3f}x")
    print(f"outbox memory: {entries} entries, {used} bytes, {used / max(1, entries):.0f} bytes per event")
    await client.aclose()


if __name__ == "__main__":
    main()
