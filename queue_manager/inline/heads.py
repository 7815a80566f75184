"""Request heads: how large, how many fields, how long; and which connections make room at the ceiling.

Every connection the server accepts is read by :class:`~.fastpath.InlineProtocol` (the server's ``http=``
class), so these rules hold on the ASGI path, on the inline fast path and for WebSocket handshakes alike.
The protocol applies them; this module holds what one server's connections share:

* :class:`HeadLimits`: ``MAX_HEADER_BYTES``, ``MAX_HEADER_COUNT``, ``HEADER_TIMEOUT_MS`` and the
  ``MAX_CONNECTIONS`` ceiling, as the protocol uses them;
* :class:`Waiting`: every open connection in the order it came, and :meth:`Waiting.make_room`, which
  closes connections that have waited at least :data:`GRACE_SEC` for a request head (a new connection
  that sent nothing, a head still trickling in, a kept-alive connection between requests) while the
  server holds more than ``MAX_CONNECTIONS``. Only connections with a request being answered (a
  response, a stream, a relay, a WebSocket) are never closed for room, so sockets that say nothing
  cannot hold the ceiling against requests.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Protocol
from weakref import WeakKeyDictionary

from uvicorn.server import ServerState

from queue_manager.config import Settings, load_settings
from queue_manager.metrics import Counters

#: How long a connection must have waited for a head before it may be closed to make room: what a client
#: that connected a moment ago is given to send its request (a burst of new visitors is answered, 503
#: at worst, rather than dropped by one another).
GRACE_SEC = 1.0
#: After a 431 the server stops sending (FIN) and reads and drops what the client still sends for this
#: long, so a client still writing its head reads the answer instead of a reset.
LINGER_SEC = 2.0
#: Connections one :meth:`Waiting.make_room` looks at, at most; those it passes over go to the back.
SCAN = 512
#: After a look that freed too little, the next is not before this (every request past the ceiling asks).
RETRY_SEC = 0.1


@dataclass(frozen=True, slots=True)
class HeadLimits:
    max_bytes: int
    max_fields: int
    timeout: float  # seconds
    ceiling: int  # MAX_CONNECTIONS; 0 = none

    @classmethod
    def of(cls, settings: Settings) -> HeadLimits:
        return cls(
            max_bytes=settings.max_header_bytes,
            max_fields=settings.max_header_count,
            timeout=settings.header_timeout_ms / 1000.0,
            ceiling=settings.max_connections,
        )


class Waiter(Protocol):
    """What :class:`Waiting` needs of a connection."""

    def waiting_for_head(self) -> float | None:
        """Loop time since when it has been waiting for a request head; None while a request is being answered."""

    def close_waiting(self, reason: str) -> None: ...


class Waiting:
    """One server's connections, oldest first, and the limits and counters their heads are held to."""

    def __init__(self, limits: HeadLimits, counters: Counters, connections: set[Any]) -> None:
        self.limits = limits
        self.counters = counters
        self.connections = connections  # uvicorn's: every open connection, WebSockets included
        self.order: OrderedDict[Waiter, None] = OrderedDict()
        self.loop_time: Any = None  # the event loop's clock, from the first connection
        self.retry_at = 0.0

    def add(self, conn: Waiter, loop_time: Any) -> None:
        self.order[conn] = None
        self.loop_time = loop_time
        ceiling = self.limits.ceiling
        if ceiling and len(self.connections) > ceiling:
            self.make_room()

    def remove(self, conn: Waiter) -> None:
        self.order.pop(conn, None)

    def make_room(self) -> None:
        """Past the ceiling: close connections that have waited for a head for :data:`GRACE_SEC` or more
        (those first in line first) until the server is back at the ceiling, or none is left to close."""
        ceiling = self.limits.ceiling
        excess = len(self.connections) - ceiling
        if not ceiling or excess <= 0 or self.loop_time is None:
            return
        now = self.loop_time()
        if now < self.retry_at:
            return
        oldest = now - min(GRACE_SEC, self.limits.timeout)
        order = self.order
        for conn in list(itertools.islice(order, SCAN)):
            since = conn.waiting_for_head()
            if since is not None and since <= oldest:
                conn.close_waiting("ceiling")  # leaves self.connections and self.order
                excess -= 1
                if excess <= 0:
                    return
            else:
                order.move_to_end(conn)
        self.retry_at = now + RETRY_SEC

    def count(self, table: dict[str, int], reason: str) -> None:
        table[reason] = table.get(reason, 0) + 1


_SERVERS: WeakKeyDictionary[ServerState, Waiting] = WeakKeyDictionary()


def waiting_for(state: ServerState, settings: Settings | None, counters: Counters | None) -> Waiting:
    """The :class:`Waiting` of the server whose state is ``state`` (made by the first to ask)."""
    found = _SERVERS.get(state)
    if found is None:
        found = Waiting(
            HeadLimits.of(settings if settings is not None else load_settings({})),
            counters if counters is not None else Counters(),
            state.connections,
        )
        _SERVERS[state] = found
    return found
