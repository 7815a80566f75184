"""Invitation tokens as a customer's backend makes them (an HS256 JWS, the stdlib alone), and a room's key."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from typing import Any

import httpx


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def sign(key: str, kid: str, claims: dict[str, Any], alg: str = "HS256") -> str:
    """An HS256 JWS of ``claims`` under the room's ``key`` (its UTF-8 bytes), ``kid`` in the header."""
    head = _b64(json.dumps({"alg": alg, "typ": "JWT", "kid": kid}).encode())
    body = _b64(json.dumps(claims).encode())
    mac = hmac.new(key.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{_b64(mac)}"


def claims(room: str, sub: str | None = None, **extra: Any) -> dict[str, Any]:
    """The required claims (ten minutes to live, a fresh jti), and any others."""
    base: dict[str, Any] = {
        "room": room,
        "sub": sub or f"user-{secrets.token_hex(6)}",
        "exp": int(time.time()) + 600,
        "jti": secrets.token_hex(8),
    }
    base.update(extra)
    return base


def entry_key(admin: httpx.Client, room: str) -> dict[str, Any]:
    """A new entry key for ``room``: ``{kid, key, alg, previousKid, previousValidUntil}``."""
    r = admin.post(f"/api/admin/rooms/{room}/entry-key")
    assert r.status_code == 200, r.text
    return dict(r.json())


def invitation(admin: httpx.Client, room: str, sub: str | None = None, **extra: Any) -> str:
    """A fresh key for ``room`` and a token signed with it."""
    key = entry_key(admin, room)
    return sign(key["key"], key["kid"], claims(room, sub, **extra))
