"""The door check, the one way both the tag's ``/api/check`` and an inline host's gate ask whether a
visitor may walk in.

An admitted browser shows its door key (``qm_dk_<room>``, or ``dk`` on ``/api/check``) with its token:
the store answers that from the key's hash alone (``door_replay``, the cheap path). Anyone else, or a
key the store no longer knows, gets the full check, which mints a new door key when it admits.
"""

from __future__ import annotations

import functools
import hashlib
import secrets

from queue_manager.context import Context
from queue_manager.engine.visitor import CheckResult, Presented
from queue_manager.http import cookies
from queue_manager.http.wire import Request
from queue_manager.services.identity import Identity

MAX_DOOR_KEY = 64  # a longer value is no door key of ours: it is not hashed, and the full check runs


def new_door() -> tuple[str, bytes]:
    """A fresh door key: the value the browser keeps, and the hash the store keeps."""
    raw = secrets.token_urlsafe(18)
    return raw, hashlib.sha256(raw.encode()).digest()[:16]


@functools.lru_cache(maxsize=4096)
def door_hash(door_key: str | None) -> bytes | None:
    """The hash the store knows a door key by; None for no key or one too long to be ours.

    An admitted visitor shows the same key on every page: the hashes of the keys seen lately are kept."""
    if not door_key or len(door_key) > MAX_DOOR_KEY:
        return None
    return hashlib.sha256(door_key.encode()).digest()[:16]


async def door_check(
    ctx: Context,
    req: Request,
    ident: Identity,
    room_id: str,
    presented: Presented | None,
    door_key: str | None,
    url: str | None,
) -> CheckResult:
    """May this visitor walk in? The replay of a known door key first, else the full check."""
    hashed = door_hash(door_key)
    if presented is not None and hashed is not None:
        replayed = await ctx.store.door_replay(room_id, presented, hashed, url)
        if replayed is not None:
            return replayed
    client = ident.client(req.cookies.get(cookies.SESSION + room_id))
    return await ctx.store.check(room_id, client, presented, hashed, url, new_door)
