"""Driver errors mapped once, at the boundary (the httpx ``_exceptions.py`` way).

::

    redis-py / Valkey                                   ->  what the store raises
    ──────────────────────────────────────────────────────────────────────────────────
    ConnectionError (refused, reset, auth, loading)     ->  ValkeyUnreachable (a StoreUnavailable)
    TimeoutError (redis-py's and asyncio's), OSError    ->  ValkeyUnreachable (trips the breaker: breaker.py)
    ResponseError LOADING / MASTERDOWN / TRYAGAIN /     ->  StoreUnavailable
      CLUSTERDOWN / READONLY / BUSY / OOM ("command
      not allowed when used memory > 'maxmemory'")
    ResponseError "QM fenced" (a script's refusal)      ->  RoomFenced (a StoreUnavailable: being rebuilt)
    ResponseError "QM no_room"                          ->  EngineError 404 no_room
    ResponseError "QM drawing" (export mid-draw)        ->  StoreUnavailable (ask again later)
    ClusterError (redirections or TRYAGAIN past the     ->  StoreUnavailable
      cluster client's attempts, slots not covered)
    anything else                                       ->  raised unchanged (a bug, not an outage)

Refusals that happen after a script already changed the room (an identity ceiling after the
sweep, an unknown ticket after the draw) come back in band (``{"k": "err"}``) with the events the
script produced, and the store raises the engine's error after committing those events.
"""

from __future__ import annotations

from redis import exceptions as rx

from queue_manager.engine.errors import no_room
from queue_manager.store.base import StoreUnavailable
from queue_manager.store.valkey.breaker import Breaker, ValkeyUnreachable


class RoomFenced(StoreUnavailable):
    """The room is being rebuilt from the journal (its ``fence`` key is set): 503, never no_room."""


_UNAVAILABLE = ("LOADING", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "READONLY", "BUSY", "OOM ")
_OOM = "command not allowed when used memory"
# redis-py turns these error prefixes into classes (and strips the prefix from the message)
_UNAVAILABLE_CLASSES = (rx.OutOfMemoryError, rx.ReadOnlyError, rx.TryAgainError, rx.ClusterDownError)


def is_unavailable_reply(message: str) -> bool:
    """A Valkey error reply that means "not now" rather than "wrong"."""
    head = message.lstrip()
    return head.startswith(_UNAVAILABLE) or _OOM in message or "-OOM" in message


class translate:  # lower case: used as ``with translate(...)``, like the function it replaced
    """Map driver errors (table above). With ``breaker``: answer at once while Valkey is held as
    unreachable, and tell the breaker whether Valkey answered (``probe``: this call is the probe its
    caller claimed, sent whatever the hold).

    A class rather than a generator context manager: it wraps every per-request Valkey command, and
    ``__exit__`` costs a fraction of a generator's two resumptions (nested, as this was, four).
    """

    __slots__ = ("breaker", "probe", "room_id")

    def __init__(self, room_id: str | None = None, breaker: Breaker | None = None, *, probe: bool = False) -> None:
        self.room_id = room_id
        self.breaker = breaker
        self.probe = probe  # True: the caller claimed the probe already (Breaker.claim_probe)

    def __enter__(self) -> None:
        if self.breaker is not None and not self.probe:
            self.probe = self.breaker.enter()  # raises at once while Valkey is held as unreachable

    def __exit__(self, typ: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        breaker = self.breaker
        if exc is None:
            if breaker is not None:
                breaker.answered(self.probe)
            return
        if not isinstance(exc, Exception):  # cancelled, interrupted: the command's fate is unknown
            if breaker is not None:
                breaker.abandoned(self.probe)
            return
        try:
            _map(exc, self.room_id)
        except ValkeyUnreachable:
            if breaker is not None:
                breaker.failed(self.probe)
            raise
        except Exception:
            if breaker is not None:
                breaker.answered(self.probe)  # an error reply is an answer
            raise
        if breaker is not None:  # pragma: no cover - _map always raises
            breaker.answered(self.probe)


def _map(exc: Exception, room_id: str | None) -> None:
    """Raise what the store raises for ``exc`` (the table above); never returns."""
    if isinstance(exc, StoreUnavailable):
        raise exc
    if isinstance(exc, rx.ResponseError):
        message = str(exc)
        if message.startswith("QM "):
            code = message[3:].split(" ", 1)[0]
            if code == "no_room":
                raise no_room(room_id or "") from None
            if code == "fenced":
                raise RoomFenced(f"room {room_id!r} is being rebuilt from the journal") from None
            if code == "parts":
                raise StoreUnavailable(f"room {room_id!r} is applying a draw or a purge in parts") from None
            raise exc  # pragma: no cover - every QM code is listed above
        if isinstance(exc, _UNAVAILABLE_CLASSES) or is_unavailable_reply(message):
            raise StoreUnavailable(f"valkey: {message.split(chr(10), 1)[0][:200]}") from exc
        raise exc
    if isinstance(exc, (rx.ConnectionError, rx.TimeoutError, OSError, TimeoutError)):
        if isinstance(exc, rx.MaxConnectionsError) or "No connection available" in str(exc):
            # every connection of this process is busy (a surge), not an outage: no fast-answer hold
            raise StoreUnavailable(f"valkey: no free connection: {exc}"[:300]) from exc
        raise ValkeyUnreachable(f"valkey unreachable: {type(exc).__name__}: {exc}"[:300]) from exc
    if isinstance(exc, (rx.ClusterError, rx.RedisClusterException)):  # a slot moving, a map being learned
        raise StoreUnavailable(f"valkey cluster: {exc}"[:300]) from exc
    raise exc
