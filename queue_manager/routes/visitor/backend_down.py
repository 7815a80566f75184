"""What ``/api/check`` answers for a snippet room while Valkey is unreachable (onBackendDown).

While the store holds Valkey as unreachable (``store/valkey/breaker.py``: after the first failure,
every call answers at once), a door check never reaches Valkey. It is answered from this process's
last copy of the room's config, and the answer is still the guide's ``503 storage_unavailable`` with
``Retry-After``, so every client that fails open on a 5xx keeps doing so. The body adds what the
room's ``onBackendDown`` asks for, for an integration that reads it:

* ``open``: ``"admit": true`` — let the visitor through (the surge goes to the origin unqueued);
* ``closed`` (the default): ``"admit": false, "reason": "backend_down"`` and the ``waitUrl`` of the
  room's waiting page — the visitor must wait (the waiting page retries until the queue is back).

The tag (``qm.js``) fails open on any answer but 200 and 429: on this 503 it shows the page in both
modes. The CORS headers are the room's usual ones, so the tag can read the answer. A room this
process never saw answers the plain 503. On ``STORE=memory`` none of this applies.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from urllib.parse import quote, urlencode

from queue_manager.context import Context
from queue_manager.http.wire import HttpError, Request

log = logging.getLogger("queue_manager.backend_down")

_logged: dict[str, float] = {}  # room -> when its backend-down answer was last logged (once a minute)


def refusal(
    ctx: Context,
    req: Request,
    room_id: str,
    base: Callable[[], str],
    url: str | None,
    headers: list[tuple[bytes, bytes]],
) -> HttpError | None:
    """The answer to a door check while Valkey is held as unreachable; None when it is not."""
    store = ctx.store
    breaker = getattr(store, "breaker", None)
    if breaker is None or not breaker.down:
        return None
    retry = [("Retry-After", str(max(1, round(breaker.hold_until - breaker.clock()))))]
    known = store.known_config(room_id)  # type: ignore[attr-defined]
    if known is None:
        return HttpError(503, "storage_unavailable", "The queue's storage is unreachable; retry shortly.", retry)
    cfg, policy = known
    mode = cfg.on_backend_down
    cors: list[tuple[str, str]] = []
    origin = req.header(b"origin")
    if origin and origin != "null" and policy.tag_allowed(origin):
        cors = [("access-control-allow-origin", origin), ("access-control-allow-credentials", "true")]
    extra: dict[str, object] = {"roomId": room_id, "onBackendDown": mode, "admit": mode == "open"}
    if mode != "open":
        wait = f"{base()}/w/{quote(room_id)}"
        if url is not None:
            wait += "?" + urlencode({"qm_return": url})
        extra.update(reason="backend_down", waitUrl=wait)
    now = time.monotonic()
    if now - _logged.get(room_id, -60.0) >= 60.0:
        if len(_logged) > 10_000:
            _logged.clear()
        _logged[room_id] = now
        log.warning("room %s: Valkey unreachable, door checks answered per onBackendDown=%s", room_id, mode)
    return HttpError(
        503,
        "storage_unavailable",
        "The queue's storage is unreachable; retry shortly.",
        [*retry, *((k.decode(), v.decode()) for k, v in headers), *cors],
        **extra,
    )
