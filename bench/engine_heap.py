"""The engine's own heap for N waiting tickets in one room (part of ``make bench``'s memory phase).

Counts the Python heap the engine grows by while N visitors join one room (``tracemalloc``, the cyclic
collector off during the fill), then checks the line still answers positions and the head at that
size. Prints one JSON object; ``bench.py`` reports it against the 200 MB target.

    .venv/bin/python bench/engine_heap.py [--tickets 100000]
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import tracemalloc

import orjson

from queue_manager.clock import FakeClock
from queue_manager.engine import visitor
from queue_manager.engine.engine import Engine
from queue_manager.engine.model import ClientId

TARGET_MB = 200


def measure(tickets: int) -> dict[str, object]:
    clock = FakeClock()
    gc.collect()
    gc.disable()  # the cyclic collector walking a growing heap under tracemalloc only costs time
    tracemalloc.start()
    started = time.perf_counter()
    try:
        before, _ = tracemalloc.get_traced_memory()
        engine = Engine(clock)
        room, _, _ = engine.upsert({"id": "big", "targetUrl": "https://shop.example", "queueMaxPerIp": None})
        for i in range(tickets):
            client = ClientId(
                ident=f"10.{i >> 16}.{(i >> 8) & 255}.{i & 255}",
                fp=i.to_bytes(16, "big"),
                fp2=None,
                cookie=(i + 1).to_bytes(16, "big"),
            )
            visitor.join(room, client, None, None)
        engine.drain_events()  # the store drains events as it goes; keep only the live state
        gc.enable()
        gc.collect()
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        gc.enable()
    seconds = time.perf_counter() - started
    growth = after - before
    answers = (
        len(room.line) == tickets
        and room.position(room.tickets[tickets]) == tickets
        and room.position(room.tickets[tickets // 2]) == tickets // 2
        and room.line.head() == (room.tickets[1].line_seq, 1)
    )
    mb = growth / 2**20
    return {
        "tickets": tickets,
        "heapMb": round(mb, 1),
        "bytesPerTicket": round(growth / tickets),
        "fillSeconds": round(seconds, 2),
        "answersCorrect": answers,
        "target": f"engine heap <= {TARGET_MB} MB with {tickets} waiting",
        "pass": answers and mb <= TARGET_MB,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tickets", type=int, default=100_000)
    args = parser.parse_args()
    sys.stdout.write(orjson.dumps(measure(args.tickets)).decode() + "\n")


if __name__ == "__main__":
    main()
