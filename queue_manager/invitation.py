"""Invitation tokens: who may take a place in a room whose ``entry`` is ``token`` (or ``code``).

A token is a JWS in compact form, ``base64url(header) "." base64url(claims) "." base64url(signature)``,
signed with HMAC-SHA256 (``alg: HS256``) under the room's entry key; the header's ``kid`` names the key.
The customer's backend signs it with any JWT library, the key used as the text it was handed (its UTF-8
bytes are the HMAC key). The claims:

* ``room`` (required): the room id; another room's token is refused (``token_wrong_room``);
* ``sub`` (required): the user key: one place in line per user key, whatever the device or address;
* ``exp`` (required): seconds since the epoch; a lifetime over 24 h is refused as malformed;
* ``jti`` (required): the token's id, accepted once (the caller keeps the spent ids);
* ``lane`` (optional): the lane the visitor joins, ``[a-z0-9][a-z0-9-]{0,31}``;
* ``ip`` (optional): the visitor's address as the server sees it must equal it;
* ``iat`` (optional): the issue instant, seconds.

The keys are kept sealed (AES-256-GCM under a key derived from SECRET, the room and kid bound in), so a
copy of the database alone verifies nothing and signs nothing: :func:`seal` and :func:`unseal`.

Each refusal is an :class:`InvitationError` whose ``code`` is the API's (``token_invalid`` for anything
malformed, signed with an unknown key or tampered with: one code, so a forger learns nothing).
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
import ipaddress
import re
import secrets
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeGuard

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from queue_manager.tokens import b64url_decode, b64url_encode, hkdf_key

__all__ = [
    "LANE_RE",
    "MAX_LIFETIME_SEC",
    "REFUSAL_CODES",
    "Invitation",
    "InvitationError",
    "RefusalCode",
    "claimed_kid",
    "claimed_room",
    "looks_like_invitation",
    "new_key",
    "seal",
    "sign",
    "unseal",
    "verify",
]

RefusalCode = Literal[
    "token_required", "token_invalid", "token_expired", "token_used", "token_wrong_room", "token_ip_mismatch"
]
REFUSAL_CODES: Final[tuple[RefusalCode, ...]] = (
    "token_required",
    "token_invalid",
    "token_expired",
    "token_used",
    "token_wrong_room",
    "token_ip_mismatch",
)

MAX_LIFETIME_SEC: Final = 24 * 3600
MAX_LEN: Final = 4096
SKEW_SEC: Final = 60  # an iat this far ahead of the server's clock still counts as now
LANE_RE: Final = re.compile(r"[a-z0-9][a-z0-9-]{0,31}\Z")
_SUB_MAX: Final = 256
_JTI_MAX: Final = 128
_KID_RE: Final = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")
_SHAPE: Final = re.compile(r"eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\Z")
_SEAL_INFO: Final = "qm:entry-key"
_NONCE: Final = 12


class InvitationError(Exception):
    """A refused invitation token; ``code`` is the API's refusal code."""

    def __init__(self, code: RefusalCode, message: str) -> None:
        super().__init__(message)
        self.code: RefusalCode = code
        self.message = message


@dataclass(frozen=True, slots=True)
class Invitation:
    """A verified token's claims."""

    room: str
    sub: str
    exp: int
    jti: str
    kid: str
    lane: str | None = None
    ip: str | None = None


def looks_like_invitation(value: str) -> bool:
    """A JWS: three non-empty base64url parts, the first a JSON object (``eyJ``): an invitation token, not a
    ticket or a pass (which have two parts)."""
    return _SHAPE.match(value) is not None


def new_key() -> tuple[str, str]:
    """A fresh ``(kid, key)``: the key is 256 random bits as 43 base64url characters."""
    return secrets.token_hex(6), secrets.token_urlsafe(32)


def sign(key: str, kid: str, claims: dict[str, Any]) -> str:
    """An HS256 JWS of ``claims`` under ``key`` (what a customer's backend does with a JWT library)."""
    head = b64url_encode(orjson.dumps({"alg": "HS256", "typ": "JWT", "kid": kid}))
    body = b64url_encode(orjson.dumps(claims))
    mac = hmac.new(key.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64url_encode(mac)}"


def _invalid(message: str) -> InvitationError:
    return InvitationError("token_invalid", message)


def _part(text: str) -> dict[str, Any]:
    try:
        value = orjson.loads(b64url_decode(text))
    except (ValueError, binascii.Error, orjson.JSONDecodeError):
        raise _invalid("The invitation token is not a JWS.") from None
    if not isinstance(value, dict):
        raise _invalid("The invitation token is not a JWS.")
    return value


def _split(token: str) -> tuple[str, str, str]:
    if len(token) > MAX_LEN or not token.isascii() or not looks_like_invitation(token):
        raise _invalid("The invitation token is not a JWS.")
    head, body, mac = token.split(".")
    return head, body, mac


def claimed_kid(token: str) -> str:
    """The ``kid`` the token's header names (not yet verified); token_invalid when it has none or is not HS256."""
    head = _part(_split(token)[0])
    if head.get("alg") != "HS256":
        raise _invalid("The invitation token must be signed with HS256.")
    kid = head.get("kid")
    if not isinstance(kid, str) or not _KID_RE.match(kid):
        raise _invalid("The invitation token's header names no key (kid).")
    return kid


def claimed_room(token: str) -> Any:
    """The ``room`` claim before verification: only to tell a token of another room from a forged one."""
    return _part(_split(token)[1]).get("room")


def verify(token: str, key: str | None, *, room_id: str, now_sec: int, client_ip: str) -> Invitation:
    """The token's claims once its signature under ``key`` (None: its kid is not one of the room's) and
    every claim check out; an :class:`InvitationError` otherwise."""
    head, body, mac = _split(token)
    kid = claimed_kid(token)
    if key is None:
        if claimed_room(token) != room_id:
            raise InvitationError("token_wrong_room", "This invitation is for another room.")
        raise _invalid("The invitation token is signed with a key this room does not have.")
    want = hmac.new(key.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    try:
        got = b64url_decode(mac)
    except (ValueError, binascii.Error):
        raise _invalid("The invitation token's signature is not base64url.") from None
    if not hmac.compare_digest(want, got):
        raise _invalid("The invitation token's signature does not match.")
    claims = _part(body)
    if claims.get("room") != room_id:
        raise InvitationError("token_wrong_room", "This invitation is for another room.")
    sub, jti, exp, iat = claims.get("sub"), claims.get("jti"), claims.get("exp", 0), claims.get("iat")
    if not isinstance(sub, str) or not 0 < len(sub) <= _SUB_MAX:
        raise _invalid(f"The invitation token's sub must be a string of 1 to {_SUB_MAX} characters.")
    if not isinstance(jti, str) or not 0 < len(jti) <= _JTI_MAX:
        raise _invalid(f"The invitation token's jti must be a string of 1 to {_JTI_MAX} characters.")
    if not _seconds(exp) or (iat is not None and not _seconds(iat)):
        raise _invalid("The invitation token's exp (and iat) must be whole seconds since the epoch.")
    start = now_sec if iat is None else min(iat, now_sec + SKEW_SEC)
    if exp - start > MAX_LIFETIME_SEC:
        raise _invalid("An invitation token may live 24 hours at most.")
    if exp <= now_sec:
        raise InvitationError("token_expired", "This invitation has expired.")
    lane = claims.get("lane")
    if lane is not None and (not isinstance(lane, str) or not LANE_RE.match(lane)):
        raise _invalid("The invitation token's lane must match [a-z0-9][a-z0-9-]{0,31}.")
    ip = claims.get("ip")
    if ip is not None:
        bound = _address(ip)
        if bound is None:
            raise _invalid("The invitation token's ip must be an IPv4 or IPv6 address.")
        if bound != _address(client_ip):
            raise InvitationError("token_ip_mismatch", "This invitation is for another network address.")
    return Invitation(room=room_id, sub=sub, exp=exp, jti=jti, kid=kid, lane=lane, ip=ip)


def _seconds(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**40


def _address(value: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    if not isinstance(value, str):
        return None
    try:
        addr = ipaddress.ip_address(value.strip("[]"))
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


def _sealer(secret: str) -> AESGCM:
    return AESGCM(hkdf_key(secret, _SEAL_INFO, 32))


def seal(secret: str, room_id: str, kid: str, key: str) -> bytes:
    """``key`` encrypted under SECRET, bound to its room and kid: what the key store keeps."""
    nonce = secrets.token_bytes(_NONCE)
    return nonce + _sealer(secret).encrypt(nonce, key.encode(), f"{room_id}\0{kid}".encode())


def unseal(secrets_in_turn: tuple[str, ...], room_id: str, kid: str, sealed: bytes) -> str | None:
    """The key sealed under one of the secrets (SECRET, then SECRET_PREVIOUS); None when none opens it."""
    for secret in secrets_in_turn:
        try:
            plain = _sealer(secret).decrypt(sealed[:_NONCE], sealed[_NONCE:], f"{room_id}\0{kid}".encode())
        except (InvalidTag, ValueError):
            continue
        return plain.decode()
    return None
