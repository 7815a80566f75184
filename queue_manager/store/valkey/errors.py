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
    anything else                                       ->  raised unchanged (a bug, not an outage)

Refusals that happen after a script already changed the room (an identity ceiling after the
sweep, an unknown ticket after the draw) come back in band (``{"k": "err"}``) with the events the
script produced, and the store raises the engine's error after committing those events.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

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


@contextmanager
def translate(room_id: str | None = None, breaker: Breaker | None = None) -> Iterator[None]:
    """Map driver errors (table above). With ``breaker``: answer at once while Valkey is held as
    unreachable, and tell the breaker whether Valkey answered."""
    if breaker is None:
        with _translate(room_id):
            yield
        return
    probe = breaker.enter()
    try:
        with _translate(room_id):
            yield
    except ValkeyUnreachable:
        breaker.failed(probe)
        raise
    except Exception:
        breaker.answered(probe)  # an error reply is an answer
        raise
    except BaseException:
        breaker.abandoned(probe)
        raise
    breaker.answered(probe)


@contextmanager
def _translate(room_id: str | None = None) -> Iterator[None]:
    try:
        yield
    except StoreUnavailable:
        raise
    except rx.ResponseError as exc:
        message = str(exc)
        if message.startswith("QM "):
            code = message[3:].split(" ", 1)[0]
            if code == "no_room":
                raise no_room(room_id or "") from None
            if code == "fenced":
                raise RoomFenced(f"room {room_id!r} is being rebuilt from the journal") from None
            raise  # pragma: no cover - every QM code is listed above
        if isinstance(exc, _UNAVAILABLE_CLASSES) or is_unavailable_reply(message):
            raise StoreUnavailable(f"valkey: {message.split(chr(10), 1)[0][:200]}") from exc
        raise
    except (rx.ConnectionError, rx.TimeoutError, OSError, TimeoutError) as exc:
        if isinstance(exc, rx.MaxConnectionsError) or "No connection available" in str(exc):
            # every connection of this process is busy (a surge), not an outage: no fast-answer hold
            raise StoreUnavailable(f"valkey: no free connection: {exc}"[:300]) from exc
        raise ValkeyUnreachable(f"valkey unreachable: {type(exc).__name__}: {exc}"[:300]) from exc
