"""Python bytecodes one request runs, function by function: an exact count to compare two trees by.

``bench/inline_cost.py --instructions`` counts CPU instructions, which move by about 0.5 % between runs of
one tree (allocation addresses, dict layouts). This traces opcodes instead (``sys.settrace`` with
``f_trace_opcodes``) over a few requests after a warm-up, so two trees' counts differ only where their code
does. Targets: ``static`` and ``gated`` (a proxied request on the inline fast path, as ``inline_cost.py``
builds them) and ``healthz`` (``GET /healthz`` through the server's protocol and the ASGI app).

    .venv/bin/python bench/bytecodes.py static --json /tmp/after.json
    cd /tmp/base && PYTHONPATH=/tmp/base $OLDPWD/.venv/bin/python $OLDPWD/bench/bytecodes.py static \
        --json /tmp/before.json
    .venv/bin/python bench/bytecodes.py --diff /tmp/before.json /tmp/after.json

(The second line runs this script on another checkout's code: ``PYTHONPATH`` and the working directory
pick the package.)
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import FrameType
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
import inline_cost  # noqa: E402  (it sets the server's environment)

TARGETS = ("static", "gated", "healthz")
TRACED = 20


def _where(code: Any) -> str:
    name: str = code.co_filename
    for mark in ("site-packages/", "queue_manager/", "bench/"):
        if mark in name:
            name = (mark if mark != "site-packages/" else "") + name.split(mark, 1)[1]
            break
    return f"{name}:{code.co_name}"


async def _healthz() -> Callable[[], Awaitable[None]]:
    import uvicorn
    from uvicorn.server import ServerState

    from queue_manager.config import load_settings
    from queue_manager.inline.fastpath import InlineProtocol
    from queue_manager.server import Server

    app = Server(load_settings())
    await app.startup()
    config = uvicorn.Config(app.asgi, http=InlineProtocol, lifespan="off", log_level="warning", access_log=False)
    config.load()
    proto = InlineProtocol(config, ServerState(), {}, asyncio.get_running_loop())
    visitor = inline_cost.Transport(("127.0.0.1", 50000))
    proto.connection_made(visitor)
    req = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n"

    async def once() -> None:
        proto.data_received(req)
        for _ in range(1000):  # the app's task answers within a few turns of the loop
            if visitor.out and visitor.out[-1].endswith(b"}"):
                visitor.out.clear()
                return
            await asyncio.sleep(0)
        raise SystemExit(f"bench: no answer to GET /healthz: {visitor.out[:2]!r}")

    return once


async def _count(target: str) -> dict[str, float]:
    if target == "healthz":
        run = await _healthz()
    else:
        sync = await inline_cost._prepare(target)

        async def run() -> None:
            sync()

    for _ in range(200):
        await run()
    counts: collections.Counter[str] = collections.Counter()

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        if event == "opcode":
            counts[_where(frame.f_code)] += 1
        return tracer

    for _ in range(TRACED):
        sys.settrace(tracer)
        await run()
        sys.settrace(None)
    return {k: v / TRACED for k, v in counts.items()}


def _write(path: str, counts: dict[str, float]) -> None:
    Path(path).write_text(json.dumps(counts, indent=1, sort_keys=True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("target", nargs="?", choices=TARGETS)
    ap.add_argument("--json", help="write the per-function counts here")
    ap.add_argument("--diff", nargs=2, metavar=("BEFORE", "AFTER"), help="compare two --json files")
    args = ap.parse_args()
    if args.diff:
        before, after = (json.loads(Path(p).read_text()) for p in args.diff)
        for name in sorted(set(before) | set(after), key=lambda n: after.get(n, 0) - before.get(n, 0)):
            change = after.get(name, 0) - before.get(name, 0)
            if change:
                print(f"{change:+8.1f}  {name}")
        print(f"{sum(after.values()) - sum(before.values()):+8.1f}  in all ({sum(before.values()):.0f} before)")
        return
    if args.target is None:
        ap.error("name a target, or --diff BEFORE AFTER")
    import uvloop

    async def run() -> None:
        counts = await _count(args.target)
        print(f"{args.target}\t{sum(counts.values()):.0f} bytecodes per request")
        if args.json:
            _write(args.json, counts)
        sys.stdout.flush()
        os._exit(0)  # the app's background tasks are not this bench's business

    uvloop.run(run())


if __name__ == "__main__":
    main()
