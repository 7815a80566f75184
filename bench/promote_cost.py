"""What the tick's promotion costs on the memory engine, in CPU instructions per promoted visitor.

    .venv/bin/python bench/promote_cost.py [--tree DIR] [--n 2000]

Each run creates room ``bench`` (rate 1,000,000/min, no concurrency ceiling), lets N visitors join and
ticks once a second of the fake clock until the line is empty; the count is one join plus one promotion
per visitor, counted under ``valgrind --tool=callgrind`` for N and 2N visitors and differenced (start-up
excluded: a number that repeats exactly). With ``--tree DIR`` the engine is another checkout's (e.g. the
commit before a change), so a change to the promotion path is compared before and after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from callgrind import instructions_per_call


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
        room.join(client, None, None)
    engine.drain_events()
    while len(room.line):
        clock.advance(1.0)
        room.tick()
        engine.drain_events()
    assert room.passes_total == n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--tree", help="the checkout whose engine is measured (default: this one)")
    ap.add_argument("--loop", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.loop is not None:
        _loop(args.loop)
        return
    if not shutil.which("valgrind"):
        sys.exit("bench: valgrind is needed (apt-get install -y valgrind)")
    env = {"PYTHONPATH": os.path.abspath(args.tree)} if args.tree else {}
    per = instructions_per_call(lambda count: ([sys.executable, __file__, "--loop", str(count)], env), args.n)
    print(f"join + promotion (memory engine)\t{per:,.0f} instructions per visitor")


if __name__ == "__main__":
    main()
