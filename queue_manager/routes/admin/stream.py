"""GET /api/admin/events: the console's live stats stream.

A full frame on connect and again on the next 2 s tick; after that a delta
(``{"delta": true, "rooms": [changed], "removed": [ids], …totals}``), or a full frame whenever the
room order changed (a room deleted and created again). The credential that opened the stream is
re-checked every 2 s, and a revocation ends it at once with ``event: revoked``.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import orjson

from queue_manager.http.wire import NO_STORE
from queue_manager.routes.admin.rooms import TEAM_ONLY_FIELDS, with_auto
from queue_manager.routes.call import Call
from queue_manager.services.sse import SEND_TIMEOUT, AdminStreams, watch_disconnect

TICK_SEC = 2.0


def totals(rooms: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "roomCount": len(rooms),
        "waiting": sum(r["waiting"] for r in rooms),
        "preQueue": sum(r["preQueue"] for r in rooms),
        "activeSessions": sum(r["activeSessions"] for r in rooms),
        "passesOutstanding": sum(r["passesOutstanding"] for r in rooms),
        "joinsLastMinute": sum(r["joinsLastMinute"] for r in rooms),
        "passedLastMinute": sum(r["passedLastMinute"] for r in rooms),
    }


async def events(call: Call) -> None:
    ctx = call.ctx
    streams: AdminStreams = ctx.admin_streams
    stream = streams.add(call.who)
    send = call.send
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"text/event-stream; charset=utf-8"),
                NO_STORE,
                (b"x-accel-buffering", b"no"),
            ],
        }
    )
    gone = asyncio.Event()
    watcher = asyncio.create_task(watch_disconnect(call.receive, gone))
    last: dict[str, bytes] = {}
    order: list[str] = []
    fulls_left = 2  # on connect and on the next tick
    try:
        while not gone.is_set() and not ctx.run.shutting_down:
            if stream.revoked or not await ctx.access.still_valid(call.who):
                frame = b'event: revoked\ndata: {"error":"unauthorized"}\n\n'
                await asyncio.wait_for(
                    send({"type": "http.response.body", "body": frame, "more_body": True}), SEND_TIMEOUT
                )
                return
            rooms = with_auto(ctx, await ctx.store.list_rooms())
            if not call.who.may("team"):
                rooms = [{k: v for k, v in r.items() if k not in TEAM_ONLY_FIELDS} for r in rooms]
            ids = [r["id"] for r in rooms]
            encoded = {r["id"]: orjson.dumps(r) for r in rooms}
            kept = [i for i in order if i in encoded]
            reordered = kept != [i for i in ids if i in set(order)] or any(
                r["id"] in last and orjson.loads(last[r["id"]]).get("generation") != r.get("generation") for r in rooms
            )
            payload: dict[str, Any]
            if fulls_left > 0 or reordered:
                fulls_left = max(0, fulls_left - 1)
                payload = {"full": True, "rooms": rooms}
            else:
                changed = [r for r in rooms if last.get(r["id"]) != encoded[r["id"]]]
                payload = {"delta": True, "rooms": changed, "removed": [i for i in order if i not in encoded]}
            payload.update(totals(rooms))
            payload["now"] = ctx.clock.wall_ms()
            payload["startedAt"] = ctx.started_ms
            last, order = encoded, ids
            frame = b"data: " + orjson.dumps(payload) + b"\n\n"
            await asyncio.wait_for(send({"type": "http.response.body", "body": frame, "more_body": True}), SEND_TIMEOUT)
            stream.wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(_either(stream.wake, gone), TICK_SEC)
    except (TimeoutError, OSError):
        return
    finally:
        streams.remove(stream)
        watcher.cancel()
        with contextlib.suppress(BaseException):
            await watcher
        with contextlib.suppress(OSError, RuntimeError):
            await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _either(a: asyncio.Event, b: asyncio.Event) -> None:
    ta, tb = asyncio.create_task(a.wait()), asyncio.create_task(b.wait())
    try:
        await asyncio.wait({ta, tb}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        ta.cancel()
        tb.cancel()
