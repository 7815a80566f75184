"""Edge passes: what an admitted visitor carries so a connector can let them in without asking the queue.

With ``PASS_SIGNING=ed25519`` an admitting door check also hands out an *edge pass*, a JWS in compact form
(RFC 7515) signed with Ed25519 (``alg: EdDSA``, RFC 8037)::

    base64url(header) "." base64url(claims) "." base64url(signature)

* header: ``{"alg":"EdDSA","kid":<kid>,"typ":"qm-pass+jwt"}``;
* claims: ``room`` (room id), ``gen`` (the room's generation), ``sub`` (the pass id, what the revocation
  list names), ``bnd`` (base64url of the 16-byte door-key hash: SHA-256 of the ``qm_dk_<room>`` value,
  first 16 bytes), ``iat`` and ``exp`` (seconds since the epoch);
* signature: Ed25519 over the ASCII bytes ``header "." claims`` as they stand in the token.

Keys come from SECRET, so every instance sharing SECRET signs with the same key and nothing new is
stored: the private key's 32-byte seed is ``HKDF-SHA256(SECRET, salt="", info="qm:pass-ed25519")``.
``kid`` is the key's RFC 7638 JWK thumbprint (base64url SHA-256 of ``{"crv":"Ed25519","kty":"OKP","x":…}``).
SECRET_PREVIOUS's key is published and accepted beside the current one, exactly as long as it is set.

The pass id is ``base64url(HMAC-SHA256(HKDF(secret, "qm:pass-id"), "<room>:<gen>:<ticket>"))[:16]``:
stable for one ticket, so revoking a ticket revokes every pass it was ever given, and meaningless without
SECRET, so the public revocation list says nothing about which tickets were removed.

This module is a leaf: it signs and checks; the routes decide when (``routes/edge_passes.py``).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final, Literal, get_args

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from queue_manager.clock import Clock
from queue_manager.tokens import b64url_decode, b64url_encode, hkdf_key

__all__ = [
    "MAX_PASS_LEN",
    "PASS_TYPE",
    "PassClaims",
    "PassError",
    "PassReason",
    "PassSigner",
    "binding_of",
]

PASS_TYPE: Final = "qm-pass+jwt"
MAX_PASS_LEN: Final = 1024
_SEED_INFO: Final = "qm:pass-ed25519"
_ID_INFO: Final = "qm:pass-id"
_ID_LEN: Final = 16  # characters of base64url: 96 bits

PassReason = Literal["malformed", "unknown_kid", "bad_signature", "wrong_room", "expired", "revoked", "unbound"]
_REASONS: Final[frozenset[str]] = frozenset(get_args(PassReason))


class PassError(Exception):
    """An edge pass was refused; ``reason`` is one of :data:`PassReason`."""

    def __init__(self, reason: PassReason) -> None:
        if reason not in _REASONS:
            raise ValueError(f"unknown pass error reason: {reason!r}")
        super().__init__(reason)
        self.reason: PassReason = reason


@dataclass(frozen=True, slots=True)
class PassClaims:
    room: str
    gen: int
    sub: str
    bnd: str
    iat: int
    exp: int
    kid: str

    @property
    def door_hash(self) -> bytes:
        """The 16-byte door-key hash the pass is bound to (``bnd`` decoded)."""
        return b64url_decode(self.bnd)


def binding_of(door_hash: bytes) -> str:
    """The ``bnd`` claim for a door key's hash (the 16 bytes the store knows the key by)."""
    return b64url_encode(door_hash)


class _Key:
    """One SECRET's signing key, its public JWK, its kid and its pass-id key."""

    __slots__ = ("header", "id_key", "jwk", "kid", "private")

    def __init__(self, secret: str) -> None:
        self.private = Ed25519PrivateKey.from_private_bytes(hkdf_key(secret, _SEED_INFO, 32))
        x = b64url_encode(self.private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))
        # RFC 7638: the required members only, in lexicographic order, no whitespace
        thumb = orjson.dumps({"crv": "Ed25519", "kty": "OKP", "x": x})
        self.kid = b64url_encode(hashlib.sha256(thumb).digest())
        self.jwk = {"kty": "OKP", "crv": "Ed25519", "x": x, "kid": self.kid, "use": "sig", "alg": "EdDSA"}
        self.header = b64url_encode(orjson.dumps({"alg": "EdDSA", "kid": self.kid, "typ": PASS_TYPE}))
        self.id_key = hmac.new(hkdf_key(secret, _ID_INFO, 32), digestmod=hashlib.sha256)

    def pass_id(self, room_id: str, gen: int, n: int) -> str:
        mac = self.id_key.copy()
        mac.update(f"{room_id}:{gen}:{n}".encode())
        return b64url_encode(mac.digest())[:_ID_LEN]


class PassSigner:
    """Signs edge passes with SECRET's key; verifies passes of SECRET's and SECRET_PREVIOUS's keys."""

    def __init__(self, secret: str, clock: Clock, *, previous: str | None = None) -> None:
        if not isinstance(secret, str) or not secret:
            raise ValueError("secret must be a non-empty string")
        self._clock = clock
        self._current = _Key(secret)
        self._previous = _Key(previous) if previous and previous != secret else None
        self._by_kid = {k.kid: k for k in self.keys}

    @property
    def keys(self) -> tuple[_Key, ...]:
        return (self._current,) if self._previous is None else (self._current, self._previous)

    @property
    def kid(self) -> str:
        return self._current.kid

    def jwks(self) -> dict[str, Any]:
        """The JWK Set a connector fetches: the current key first, then the previous one."""
        return {"keys": [dict(k.jwk) for k in self.keys]}

    def pass_ids(self, room_id: str, gen: int, n: int) -> list[str]:
        """The id a pass for this ticket carries under each published key (what revoking it lists)."""
        return [k.pass_id(room_id, gen, n) for k in self.keys]

    def sign(self, room_id: str, gen: int, n: int, door_hash: bytes, exp_sec: int) -> str:
        """A pass for ticket ``n`` of ``room_id``/``gen``, bound to ``door_hash``, valid until ``exp_sec``."""
        key = self._current
        claims = {
            "room": room_id,
            "gen": gen,
            "sub": key.pass_id(room_id, gen, n),
            "bnd": binding_of(door_hash),
            "iat": self._clock.wall_ms() // 1000,
            "exp": exp_sec,
        }
        signing_input = key.header + "." + b64url_encode(orjson.dumps(claims))
        return signing_input + "." + b64url_encode(key.private.sign(signing_input.encode("ascii")))

    def verify(
        self,
        token: str,
        room_id: str,
        *,
        door_hash: bytes | None = None,
        revoked: Iterable[str] = (),
        generation: int | None = None,
    ) -> PassClaims:
        """The claims of a pass valid now for ``room_id``; raise :class:`PassError` otherwise.

        Given ``door_hash``, the pass must be bound to it; given ``revoked`` (pass ids) or ``generation``,
        a pass on the list or of another generation is ``revoked``.
        """
        claims = self._checked(token)
        if claims.room != room_id:
            raise PassError("wrong_room")
        if claims.exp * 1000 <= self._clock.wall_ms():
            raise PassError("expired")
        if (generation is not None and claims.gen != generation) or claims.sub in set(revoked):
            raise PassError("revoked")
        if door_hash is not None and not hmac.compare_digest(claims.bnd, binding_of(door_hash)):
            raise PassError("unbound")
        return claims

    def claims_of(self, token: str, room_id: str) -> PassClaims:
        """The claims of a pass this server signed for ``room_id``, expired or not (what names the session
        a revoke ends); raise :class:`PassError` for a forged or malformed pass, or one of another room."""
        claims = self._checked(token)
        if claims.room != room_id:
            raise PassError("wrong_room")
        try:
            bound = claims.door_hash
        except ValueError:
            raise PassError("malformed") from None
        if len(bound) != 16:
            raise PassError("malformed")
        return claims

    def _checked(self, token: object) -> PassClaims:
        """Shape, key and signature; raise ``PassError`` for anything else."""
        if not isinstance(token, str) or len(token) > MAX_PASS_LEN or token.count(".") != 2:
            raise PassError("malformed")
        head_text, body_text, sig_text = token.split(".")
        try:
            header = orjson.loads(b64url_decode(head_text))
            body = orjson.loads(b64url_decode(body_text))
            sig = b64url_decode(sig_text)
        except (ValueError, orjson.JSONDecodeError):
            raise PassError("malformed") from None
        if not isinstance(header, dict) or header.get("alg") != "EdDSA" or not isinstance(header.get("kid"), str):
            raise PassError("malformed")
        key = self._by_kid.get(header["kid"])
        if key is None:
            raise PassError("unknown_kid")
        try:
            key.private.public_key().verify(sig, (head_text + "." + body_text).encode("ascii"))
        except InvalidSignature:
            raise PassError("bad_signature") from None
        if not isinstance(body, dict):
            raise PassError("malformed")
        room, gen, sub, bnd, iat, exp = (body.get(k) for k in ("room", "gen", "sub", "bnd", "iat", "exp"))
        if not (
            isinstance(room, str)
            and isinstance(sub, str)
            and isinstance(bnd, str)
            and all(isinstance(v, int) and not isinstance(v, bool) for v in (gen, iat, exp))
        ):
            raise PassError("malformed")
        assert isinstance(gen, int) and isinstance(iat, int) and isinstance(exp, int)
        return PassClaims(room, gen, sub, bnd, iat, exp, key.kid)
