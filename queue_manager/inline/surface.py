"""The queue's own surface on an inline host (``/__qm/*``) and where the console may answer.

* On an inline host everything under ``/__qm/`` is the queue's (the prefix is stripped and the
  request routed as usual); every other path belongs to the app.
* While any inline room exists the console (``/``, ``/progress``, ``/public/admin.html``,
  ``/api/admin/*``) answers only on an address literal, ``localhost`` or the PUBLIC_URL host, plus the
  names in ADMIN_HOST; on an inline host only under ``/__qm/`` and only while ADMIN_HOST is unset.
  Anywhere else it is a bare 404.
* With ADMIN_HOST set, an inline host it does not name keeps only the visitor paths under ``/__qm/``:
  the front marks the request ``visitors_only`` and the queue's router answers every route of its table
  that is not a visitor path (``Route.visitor_path``) 404, the admin API and ``/metrics`` included.
* ``/__qm/*`` on a host that fronts no inline room is ``404 not_inline_host`` naming PUBLIC_URL
  (a bare 404 with ADMIN_HOST set: there the console never lived on the customer's domain).
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

import orjson

from queue_manager.config import Settings
from queue_manager.http import cookies
from queue_manager.http.hostname import host_name, is_address_literal
from queue_manager.http.wire import HttpError, Message, Request
from queue_manager.inline.hosts import HostIndex, InlineRoom

PREFIX = "/__qm"
CONSOLE_PAGES = frozenset({"/", "/index.html", "/progress", "/public/admin.html"})


def strip_prefix(path: str) -> str | None:
    """``/__qm/api/join`` → ``/api/join``; None when the path is not under the prefix."""
    if path == PREFIX:
        return "/"
    if path.startswith(PREFIX + "/"):
        return path[len(PREFIX) :]
    return None


def is_console_path(path: str) -> bool:
    return path in CONSOLE_PAGES or path.startswith("/api/admin/") or path == "/api/admin"


def console_host(settings: Settings, host: bytes | None) -> bool:
    """May the console answer on this (non-inline) host while inline rooms exist?"""
    name = host_name(host)
    if not name or name == "localhost" or is_address_literal(name):
        return True
    if settings.public_url:
        public = urlsplit(settings.public_url).hostname
        if public and public.lower() == name:
            return True
    return name in {h.lower() for h in settings.admin_hosts}


def console_allowed(settings: Settings, index: HostIndex, host: bytes | None, room: InlineRoom | None) -> bool:
    if not index:
        return True  # no inline room: nothing changes from a snippet-only install
    if room is not None:
        return not settings.admin_hosts or host_name(host) in {h.lower() for h in settings.admin_hosts}
    return console_host(settings, host)


def console_url(settings: Settings) -> str | None:
    """Where the console lives off the customer's hosts: the PUBLIC_URL address, None when it is unset."""
    return settings.public_url.rstrip("/") + "/" if settings.public_url else None


def not_inline_host(settings: Settings) -> HttpError:
    if settings.admin_hosts:
        return HttpError(404, "not_found", "No such route.")
    where = console_url(settings)
    message = "This host no longer fronts an inline room, so the queue's /__qm/ pages are not here."
    if where:
        message += f" The console is at {where}."
    return HttpError(404, "not_inline_host", message, consoleUrl=where)


def with_return_url(req: Request, room_id: str, scheme: str) -> None:
    """The waiting page's join on an inline host names the URL the visitor asked for as its return URL.

    The page is served at the visitor's own URL and keeps nothing, so the gate left that URL's path in
    the ``qmr_<room>`` cookie (scoped to ``/__qm/api/``); a join without ``returnUrl`` gets it from there.
    """
    kept = req.cookies.get(cookies.RETURN_TO + room_id)
    host = req.header(b"host")
    if not kept or not host:
        return
    path = unquote(kept)
    if not path.startswith("/") or path.startswith("//") or len(path) > 4000:
        return
    back = f"{scheme}://{host}{path}"
    original = req.receive
    state = {"done": False}

    async def receive() -> Message:
        if state["done"]:
            return await original()
        state["done"] = True
        chunks: list[bytes] = []
        size = 0
        more = False
        while True:
            message = await original()
            if message["type"] != "http.request":
                return message
            chunk = message.get("body", b"")
            chunks.append(chunk)
            size += len(chunk)
            more = bool(message.get("more_body", False))
            if not more or size > 16 * 1024:
                break
        body = b"".join(chunks)
        if not more:
            try:
                data = orjson.loads(body)
            except orjson.JSONDecodeError:
                data = None
            if isinstance(data, dict) and data.get("returnUrl") is None and data.get("roomId") == room_id:
                data["returnUrl"] = back
                body = orjson.dumps(data)
        return {"type": "http.request", "body": body, "more_body": more}

    req.receive = receive
