"""The queue's own surface on an inline host (``/__qm/*``) and where the console may answer.

* On an inline host everything under ``/__qm/`` is the queue's (the prefix is stripped and the
  request routed as usual); every other path belongs to the app.
* While any inline room exists the console (``/``, ``/progress``, ``/public/admin.html``,
  ``/api/admin/*``) answers only on an address literal, ``localhost`` or the PUBLIC_URL host, plus the
  names in ADMIN_HOST; on an inline host only under ``/__qm/`` and only while ADMIN_HOST is unset.
  Anywhere else it is a bare 404.
* ``/__qm/*`` on a host that fronts no inline room is ``404 not_inline_host`` naming PUBLIC_URL
  (a bare 404 with ADMIN_HOST set: there the console never lived on the customer's domain).
"""

from __future__ import annotations

from urllib.parse import urlsplit

import orjson

from queue_manager.config import Settings
from queue_manager.http.wire import HttpError, Message, Request
from queue_manager.inline.hosts import HostIndex, InlineRoom, is_address_literal, request_host_key

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


def _name(host: bytes | None) -> str:
    if not host:
        return ""
    key = request_host_key(host.decode("latin-1"))
    return key.rsplit(":", 1)[0] if key.count(":") == 1 else key


def console_host(settings: Settings, host: bytes | None) -> bool:
    """May the console answer on this (non-inline) host while inline rooms exist?"""
    name = _name(host)
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
        return not settings.admin_hosts or _name(host) in {h.lower() for h in settings.admin_hosts}
    return console_host(settings, host)


def not_inline_host(settings: Settings) -> HttpError:
    if settings.admin_hosts:
        return HttpError(404, "not_found", "No such route.")
    where = settings.public_url.rstrip("/") + "/" if settings.public_url else None
    message = "This host no longer fronts an inline room, so the queue's /__qm/ pages are not here."
    if where:
        message += f" The console is at {where}."
    return HttpError(404, "not_inline_host", message, consoleUrl=where)


def withheld_warning(settings: Settings, index: HostIndex, host: bytes | None) -> dict[str, str] | None:
    """The warning a room save carries when, with inline rooms, this host's console now answers 404."""
    if not index or settings.admin_hosts or settings.public_url:
        return None
    if console_host(settings, host) or index.lookup(host) is not None:
        return None
    name = _name(host)
    return {
        "code": "console_host_withheld",
        "host": name,
        "message": (
            f"With an inline room and neither ADMIN_HOST nor PUBLIC_URL set, the console on {name} answers 404 "
            f"from the next request on. Set ADMIN_HOST={name} (or PUBLIC_URL) and restart."
        ),
    }


def with_return_url(req: Request) -> None:
    """The waiting page's join on an inline host names the URL the visitor asked for as its return URL.

    The page persists nothing and has no ``qm_return`` on an inline host (it is served at the visitor's
    own URL), so without this the pass would send them to the room's target instead of their page.
    """
    referer = req.header(b"referer")
    host = req.header(b"host") or ""
    if not referer or urlsplit(referer).netloc.lower() != host.lower():
        return
    original = req.receive
    state: dict[str, bool] = {"done": False}

    async def receive() -> Message:
        if state["done"]:
            return await original()
        state["done"] = True
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await original()
            if message["type"] != "http.request":
                return message
            chunk = message.get("body", b"")
            chunks.append(chunk)
            size += len(chunk)
            if not message.get("more_body", False) or size > 16 * 1024:
                more = message.get("more_body", False)
                break
        body = b"".join(chunks)
        if not more:
            try:
                data = orjson.loads(body)
            except orjson.JSONDecodeError:
                data = None
            if isinstance(data, dict) and "returnUrl" not in data:
                data["returnUrl"] = referer
                body = orjson.dumps(data)
        return {"type": "http.request", "body": body, "more_body": more}

    req.receive = receive
