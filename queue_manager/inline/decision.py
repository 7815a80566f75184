"""Whose request this is: the inline front's one decision, made once per request after the screen.

:func:`decide` looks at the request's path, the inline room its Host fronts (looked up once by the
caller) and the connection ceiling, and answers with one of:

* :data:`Proxy` — the app's: relay it to the room's origin through the gate (the room itself is the
  answer, so the hot path allocates nothing);
* :class:`ServeQueue` — the queue's own surface under ``/__qm`` on an inline host: the path with the
  prefix stripped, and whether only the visitor paths answer there (ADMIN_HOST set and not this host);
* :data:`QUEUE` — the queue's app, the path as asked (every host that fronts no inline room, and an
  admin path on an address literal of an inline host: the console's, never the app's);
* :class:`Refuse` — an answer made of an error (a stale ``/__qm`` address, the console withheld);
* :data:`SHED` — past the connection ceiling: the plain 503.

The front (``front.py``) and the fast path (``fastpath.py``) both decide here and act on the answer; nothing
in the queue's routes calls back.
"""

from __future__ import annotations

from dataclasses import dataclass

from queue_manager.context import Context
from queue_manager.http.hostname import host_key, is_address_literal
from queue_manager.http.wire import HttpError, Request, api_path
from queue_manager.inline import surface
from queue_manager.inline.component import Inline
from queue_manager.inline.hosts import InlineRoom

HEALTH_PATHS = frozenset({"/healthz", "/__qm/healthz"})

#: The request is the app's: relay it to this room's origin, through the gate.
Proxy = InlineRoom


@dataclass(frozen=True, slots=True)
class ServeQueue:
    """The queue's own surface under ``/__qm`` on the host of ``room``."""

    path: str  # the path with /__qm stripped (and /api/v1 spelled /api)
    room: InlineRoom
    visitors_only: bool  # ADMIN_HOST is set and does not name this host: only the visitor paths answer


@dataclass(frozen=True, slots=True)
class Refuse:
    """Answered with ``error`` (by the queue's app, which maps every error to its JSON code)."""

    error: HttpError


class Queue:
    """The queue's app, at the path as asked."""

    __slots__ = ()


class Shed:
    """Past MAX_CONNECTIONS: the plain 503 (the health probes still answer)."""

    __slots__ = ()


QUEUE = Queue()
SHED = Shed()

Step = InlineRoom | ServeQueue | Queue | Refuse | Shed


def decide(ctx: Context, inline: Inline, req: Request, room: InlineRoom | None) -> Step:
    """The request's step; ``room`` is the inline room its Host fronts (None: none, or no inline room at all)."""
    path = req.path
    if inline.at_ceiling() and path not in HEALTH_PATHS:  # the probe still answers: ready is false there
        return SHED
    inner = surface.strip_prefix(path) if path.startswith(surface.PREFIX) else None
    if room is None:
        if inner is not None:  # a stale /__qm address: the host fronts no inline room (any more)
            return Refuse(surface.not_inline_host(ctx.settings))
        if inline.index and surface.is_console_path(path) and not _console_host(ctx, req):
            return Refuse(HttpError(404, "not_found", "No such route."))
        return QUEUE
    host = req.headers.get(b"host")
    if inner is None:
        # an admin path on an address literal is the console's: the queue answers it, never the app
        return QUEUE if _console_literal(ctx, host, path) else room
    allowed = surface.console_allowed(ctx.settings, inline.index, host, room)
    return ServeQueue(api_path(inner), room, not allowed)


def _console_host(ctx: Context, req: Request) -> bool:
    """May the console answer on this request's host, one that fronts no inline room, while rooms are inline?"""
    return surface.console_host(ctx.settings, req.headers.get(b"host"))


def _console_literal(ctx: Context, host: bytes | None, path: str) -> bool:
    """An admin path on an address-literal Host with no ADMIN_HOST: the queue's console, not the app."""
    if not path.startswith("/api/admin/") or ctx.settings.admin_hosts:
        return False
    name = host_key(host)
    return is_address_literal(name.rsplit(":", 1)[0] if name.count(":") == 1 else name)
