"""What a visitor on an inline host gets when the queue, not the app, answers."""

from __future__ import annotations

import html
from typing import Any

import orjson

from queue_manager.http.negotiate import VARY_JSON
from queue_manager.http.wire import NO_STORE, Send, send_response
from queue_manager.services import gated_wait
from queue_manager.web import asset

HTML_TYPE = (b"content-type", b"text/html; charset=utf-8")
JSON_TYPE = (b"content-type", b"application/json")
QUEUED_HEADER = b"x-qm-queued"
ORIGIN_HEADER = b"x-qm-origin"
CLOSED_HEADER = (b"x-qm-closed", b"1")  # a closed room's answer (queueing reject), as on its page
EXPOSE = (b"access-control-expose-headers", b"X-QM-Queued, X-QM-Origin, Retry-After")


def origin_down_page() -> bytes:
    """origin_down.html (one self-contained file, every page language, jittered retry), from the pages module."""
    return asset.origin_down_page()


async def origin_down(
    send: Send, *, page: bool, status: int, room_id: str, phase: str, head: bool, body: bytes | None = None
) -> None:
    """``body``: the room's own origin-down page (in its brand), when it has one."""
    headers = [NO_STORE, (ORIGIN_HEADER, phase.encode()), EXPOSE, (b"retry-after", b"15")]
    if page:
        await send_response(send, status, body or origin_down_page(), [HTML_TYPE, *headers], head)
        return
    payload: dict[str, Any] = {
        "error": "The site behind the queue is not answering; your place is kept.",
        "code": "origin_down",
        "roomId": room_id,
        "phase": phase,
    }
    await send_response(send, status, orjson.dumps(payload), [JSON_TYPE, *headers], head)


async def queued_json(send: Send, wait: dict[str, Any], head: bool) -> None:
    """The gated wait (services/gated_wait.py) for a request that is not shown as a page: 503, X-QM-Queued."""
    retry = str(wait["retryAfterSec"]).encode()
    headers = [JSON_TYPE, NO_STORE, VARY_JSON, (QUEUED_HEADER, b"1"), EXPOSE, (b"retry-after", retry)]
    await send_response(send, 503, orjson.dumps(wait), headers, head)


async def blocked(send: Send, room_id: str, page: bytes | None, head: bool) -> None:
    """A room's access rule refuses the request: ``page`` (the room's "not allowed" page) or 403 access_blocked."""
    if page is not None:
        await send_response(send, 403, page, [HTML_TYPE, NO_STORE, VARY_JSON], head)
        return
    refused = {
        "error": "This room's access rules do not allow this request.",
        "code": "access_blocked",
        "roomId": room_id,
    }
    await send_response(send, 403, orjson.dumps(refused), [JSON_TYPE, NO_STORE, VARY_JSON], head)


async def closed_json(send: Send, room_id: str, head: bool) -> None:
    """A closed room (queueing reject) to a request that is not shown as a page: 503 room_closed, X-QM-Closed
    (never X-QM-Queued: nobody is waiting)."""
    closed = {"error": "This waiting room is closed.", "code": "room_closed", "roomId": room_id, "reload": False}
    await send_response(send, 503, orjson.dumps(closed), [JSON_TYPE, NO_STORE, CLOSED_HEADER, EXPOSE], head)


def retry_page(seconds: int) -> bytes:
    s = html.escape(str(seconds))
    return (
        "<!doctype html><html lang=en><meta charset=utf-8><meta name=robots content=noindex>"
        f'<meta http-equiv=refresh content="{s}"><title>One moment</title>'
        '<body style="font:16px system-ui,sans-serif;margin:3rem auto;max-width:32rem;padding:0 1rem">'
        "<h1 style=font-size:1.3rem>One moment, please</h1>"
        f"<p>The waiting room cannot reach its records right now. This page tries again in {s} seconds.</p>"
        "</body></html>"
    ).encode()


async def backend_down(send: Send, *, page: bool, room_id: str, head: bool, waiting_url: str | None = None) -> None:
    headers = [NO_STORE, VARY_JSON, (b"retry-after", b"5"), EXPOSE]
    if page:
        await send_response(send, 503, retry_page(5), [HTML_TYPE, *headers], head)
        return
    payload = gated_wait.body(room_id, "backend_down", waiting_url, retry_after_sec=5)
    await send_response(send, 503, orjson.dumps(payload), [JSON_TYPE, *headers], head)


async def shed(send: Send, head: bool) -> None:
    """Past MAX_CONNECTIONS: a plain 503, deliberately without X-QM-Queued (a CDN failover should fire)."""
    payload = {"error": "This server is at its connection ceiling; try another instance.", "code": "over_capacity"}
    await send_response(
        send, 503, orjson.dumps(payload), [JSON_TYPE, NO_STORE, (b"retry-after", b"5"), (b"connection", b"close")], head
    )
