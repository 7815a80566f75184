"""What one /api/check costs inside the app, measured in-process (no sockets, no uvicorn, no noise).

    python bench/check_breakdown.py [--n 20000] [--cprofile]
    python bench/check_breakdown.py --instructions [--tree DIR] [--bypass | --join]   # instructions per call

Builds the real server (memory store) from the environment, creates room ``bench``, admits one visitor
through the ASGI interface (join, tick, first check), then:

* times the whole ASGI call for the door-key replay (the hot path) and for a raw-ASGI hello-world;
* times each step ``queue_manager.routes.visitor.api.check`` performs, one at a time, on the same inputs;
* with ``--cprofile``, profiles the ASGI loop and prints the top functions by own time;
* with ``--instructions``, counts the CPU instructions of one door-key replay through the whole ASGI app
  under ``valgrind --tool=callgrind`` (N and 2N calls, differenced: a number that repeats exactly). With
  ``--tree DIR`` the app is another checkout's (e.g. the commit before a change), run by this script;
  with ``--join`` the call counted is a new visitor's ``POST /api/join`` instead.

Prints one JSON object. The steps follow visitor.check as of this writing; a step whose internals
moved is reported as an error rather than failing the whole run.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import hashlib
import io
import os
import pstats
import secrets
import shutil
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote, urlsplit

import orjson

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hello
from callgrind import instructions_per_call

ENV = {
    "ADMIN_KEY": "bench-admin-key-0123456789abcdef0123456789",
    "SECRET": "bench-secret-0123456789abcdef0123456789abcdef",
    "JOIN_LIMIT_PER_MIN": "0",
    "CHECK_LIMIT_PER_MIN": "0",
    "WAITING_LIMIT_PER_MIN": "0",
    "SSE_PER_IP": "0",
    "SSE_MAX_TOTAL": "0",
}
TARGET = "https://shop.example"
UA = "qm-bench/1.0"


def scope_for(
    method: str, path: str, query: str = "", headers: list[tuple[bytes, bytes]] | None = None
) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1:8000"), (b"user-agent", UA.encode()), *(headers or [])],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }


class Sink:
    def __init__(self) -> None:
        self.status = 0
        self.body = b""

    async def __call__(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        elif message["type"] == "http.response.body":
            self.body += message.get("body", b"")


async def discard(message: dict[str, Any]) -> None:
    return None


def receiver(body: bytes = b"") -> Callable[[], Awaitable[dict[str, Any]]]:
    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


async def call(app: Any, scope: dict[str, Any], body: bytes = b"") -> tuple[int, Any]:
    sink = Sink()
    await app(scope, receiver(body), sink)
    return sink.status, (orjson.loads(sink.body) if sink.body else None)


async def per_call_us(fn: Callable[[], Awaitable[Any]], n: int, repeat: int = 5) -> float:
    """Best of ``repeat`` timings of ``n // repeat`` calls (like timeit: the least-disturbed run)."""
    for _ in range(min(1000, n)):
        await fn()
    per = max(1, n // repeat)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(per):
            await fn()
        best = min(best, (time.perf_counter() - t0) / per)
    return round(best * 1e6, 2)


async def main_async(
    n: int,
    profile: bool,
    asgi_only: bool = False,
    loop: int | None = None,
    bypass: bool = False,
    join: bool = False,
) -> dict[str, Any]:
    os.environ.update(ENV)
    from queue_manager.config import load_settings
    from queue_manager.http.wire import Request

    try:
        from queue_manager.routes.visitor import api as visitor
    except ImportError:  # a checkout from before the routes had a package of their own (--tree)
        from queue_manager.http import visitor  # type: ignore[no-redef]

    try:
        from queue_manager.server import Server as Build
    except ImportError:  # a checkout from before the composition root (--tree)
        from queue_manager.routes.app import App as Build  # type: ignore[no-redef]

    built = Build(load_settings())
    ctx = built.ctx
    app = getattr(built, "asgi", built)  # what uvicorn runs (the inline front, on a composed server)
    await ctx.store.start()
    if hasattr(ctx, "run"):
        ctx.run.started()
    else:  # a checkout from before the run state (--tree)
        ctx.ready = True
    admin = [(b"authorization", f"Bearer {ENV['ADMIN_KEY']}".encode()), (b"content-type", b"application/json")]
    room = {"id": "bench", "targetUrl": TARGET, "ratePerMinute": 600000, "queueMaxPerIp": None, "presenceSec": None}
    status, _ = await call(app, scope_for("POST", "/api/admin/rooms", headers=admin), orjson.dumps(room))
    assert status in (200, 201), status
    status, view = await call(
        app, scope_for("POST", "/api/join", headers=[(b"content-type", b"application/json")]), b'{"roomId":"bench"}'
    )
    token = view["token"]
    await asyncio.sleep(0.05)
    await ctx.store.tick()
    url = TARGET + "/"
    q0 = f"roomId=bench&url={quote(url, safe='')}&qm_token={token}"
    status, first = await call(app, scope_for("GET", "/api/check", q0))
    assert status == 200 and first["admit"], first
    dk = first["doorKey"]
    query = f"{q0}&dk={dk}"
    origin = [(b"origin", TARGET.encode())]
    scope = scope_for("GET", "/api/check", query, origin)
    status, replay = await call(app, scope)
    assert status == 200 and replay["admit"], replay
    if bypass:  # a page view in a bypass room: no ticket, no door key (every one an arrival)
        open_room = {**room, "id": "open", "state": "bypass"}
        status, _ = await call(app, scope_for("POST", "/api/admin/rooms", headers=admin), orjson.dumps(open_room))
        assert status in (200, 201), status
        scope = scope_for("GET", "/api/check", f"roomId=open&url={quote(url, safe='')}", origin)
        status, through = await call(app, scope)
        assert status == 200 and through["admit"] and through["state"] == "bypass", through

    out: dict[str, Any] = {"n": n}
    noop = discard
    recv = receiver()

    async def check_call() -> None:
        await app(dict(scope), recv, noop)

    async def hello_call() -> None:
        await hello.app(dict(scope), recv, noop)

    join_scope = scope_for("POST", "/api/join", headers=[(b"content-type", b"application/json")])
    join_body = receiver(b'{"roomId":"bench"}')

    async def join_call() -> None:
        await app(dict(join_scope), join_body, noop)

    if loop is not None:  # under callgrind: exactly ``loop`` calls, nothing else
        for _ in range(loop):
            await (join_call() if join else check_call())
        return out

    out["asgiUs"] = {"check": await per_call_us(check_call, n), "hello": await per_call_us(hello_call, n)}
    if asgi_only:
        await ctx.store.close()
        return out

    # ---- the steps of visitor.check, one by one, on the same inputs
    req = Request(scope, recv, "/api/check")
    ident = ctx.identity.resolve(req)
    presented, _ = ctx.read_ticket("bench", token)
    door_hash = hashlib.sha256(dk.encode()).digest()[:16]
    raw = secrets.token_urlsafe(18)
    new_door = (raw, hashlib.sha256(raw.encode()).digest()[:16])
    client = ident.client(None)

    async def s_request() -> None:
        Request(scope, recv, "/api/check")

    async def s_query() -> None:
        Request(scope, recv, "/api/check").query  # noqa: B018 - the parse is the point

    async def s_room_param() -> None:
        visitor.room_param(req)

    async def s_identity() -> None:
        ctx.identity.resolve(Request(scope, recv, "/api/check"))  # a fresh request: resolve caches on it

    vouched = getattr(visitor, "_vouched_key", None)

    async def s_vouched() -> None:
        assert vouched is not None
        vouched(ctx, req, ident)

    async def s_limit() -> None:
        visitor._limit(ctx, "check", ident)

    async def s_room_exists() -> None:
        await ctx.store.room_exists("bench")

    async def s_urlsplit() -> None:
        urlsplit(url)

    async def s_door_cors() -> None:
        await visitor._door_cors(ctx, req, "bench")

    async def s_read_ticket() -> None:
        ctx.read_ticket("bench", token)

    async def s_dk_hash() -> None:
        hashlib.sha256(dk.encode()).digest()[:16]

    async def s_new_door() -> None:
        r = secrets.token_urlsafe(18)
        hashlib.sha256(r.encode()).digest()[:16]

    async def s_client() -> None:
        ident.client(req.cookies.get("qms_bench"))

    async def s_store_check() -> None:
        await ctx.store.check("bench", client, presented, door_hash, url, new_door)

    result = await ctx.store.check("bench", client, presented, door_hash, url, new_door)

    async def s_respond() -> None:
        from queue_manager.http.wire import send_json

        payload = {
            "admit": True,
            "roomId": "bench",
            "state": result.state,
            "doorKey": result.door_key,
            "sessionExpiresAt": result.session_expires_ms,
        }
        await send_json(
            noop,
            200,
            payload,
            [
                (b"access-control-allow-origin", TARGET.encode()),
                (b"access-control-allow-credentials", b"true"),
                (b"vary", b"Origin"),
            ],
        )

    steps = {
        "Request() + header dict": s_request,
        "Request.query (parse_qsl of 4 params)": s_query,
        "room_param": s_room_param,
        "identity.resolve on a fresh Request (incl. Request())": s_identity,
        "_vouched_key (is this a server-side vouched check?)": s_vouched,
        "_limit (rate limit off)": s_limit,
        "store.room_exists": s_room_exists,
        "urlsplit(url)": s_urlsplit,
        "_door_cors (room_policy dict + origin_allowed)": s_door_cors,
        "read_ticket (b64 + HMAC + JSON + checks)": s_read_ticket,
        "sha256(dk)": s_dk_hash,
        "new door key (token_urlsafe + sha256), unused on replay": s_new_door,
        "ident.client (2x blake2b fingerprints)": s_client,
        "store.check (engine: advance/sweep, resolve, session slide)": s_store_check,
        "response (payload + orjson + headers + 2 sends)": s_respond,
    }
    timings: dict[str, Any] = {}
    for name, fn in steps.items():
        try:
            timings[name] = await per_call_us(fn, n)
        except Exception as exc:  # the internals moved: say so, keep going
            timings[name] = f"error: {type(exc).__name__}: {exc}"
    out["stepsUs"] = timings
    out["stepsSumUs"] = round(sum(v for v in timings.values() if isinstance(v, float)), 2)

    if profile:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(n):
            await check_call()
        prof.disable()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(20)
        out["cprofile"] = buf.getvalue()
    await ctx.store.close()
    return out


def _instructions(n: int, tree: str | None, bypass: bool = False, join: bool = False) -> float:
    """Instructions per /api/check (or /api/join) (callgrind, n and 2n calls differenced); ``tree``: another
    checkout's app."""
    env = {"PYTHONPATH": os.path.abspath(tree)} if tree else {}
    extra = (["--bypass"] if bypass else []) + (["--join"] if join else [])
    return instructions_per_call(lambda count: ([sys.executable, __file__, "--loop", str(count), *extra], env), n)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--cprofile", action="store_true")
    ap.add_argument("--asgi-only", action="store_true", help="only the whole-call timings (for a sampler)")
    ap.add_argument("--instructions", action="store_true", help="instructions per /api/check (callgrind)")
    ap.add_argument("--tree", help="with --instructions: the checkout whose app is measured (default: this one)")
    ap.add_argument("--bypass", action="store_true", help="with --instructions: a page view in a bypass room")
    ap.add_argument("--join", action="store_true", help="with --instructions: a new visitor's POST /api/join")
    ap.add_argument("--loop", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.instructions:
        if not shutil.which("valgrind"):
            sys.exit("bench: valgrind is needed for --instructions (apt-get install -y valgrind)")
        what = "/api/check (bypass page view)" if args.bypass else "/api/check (door-key replay)"
        what = "/api/join (a new visitor)" if args.join else what
        print(f"{what}\t{_instructions(2000, args.tree, args.bypass, args.join):,.0f} instructions per call")
        return
    if args.loop is not None:
        asyncio.run(main_async(0, False, loop=args.loop, bypass=args.bypass, join=args.join))
        os._exit(0)  # the app's background tasks are not this bench's business
    out = asyncio.run(main_async(args.n, args.cprofile, args.asgi_only))
    cprof = out.pop("cprofile", None)
    print(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode())
    if cprof:
        print(cprof, file=sys.stderr)


if __name__ == "__main__":
    main()
