"""Signing and verification of every Queue Manager token (tickets, handles, share links, cookies).

A token is ``base64url(JSON payload) "." base64url(HMAC-SHA256(key, body))`` where ``body`` is the
first part as text; base64url is unpadded. Every payload carries ``iat`` (issue instant, ms since
the epoch, from the injected clock).

Two signing forms are always accepted on verify; ``TOKEN_SIGN_V2`` only picks the one written:

* legacy — the key is SECRET itself and the payload has no ``kid``. It carries no purpose, so it
  is accepted for every purpose (callers check payload fields);
* v2 — one 32-byte key per purpose, ``HKDF-SHA256(SECRET, salt="", info="qm:<purpose>")``, and the
  payload names the secret in ``kid`` = hex ``HKDF-SHA256(SECRET, salt="", info="qm:kid", 4)``.
  A v2 token of one purpose never verifies as another.

Rotation: move SECRET to SECRET_PREVIOUS and set a new SECRET. Tokens of the old secret keep
verifying (v2 by ``kid``, legacy by trying SECRET then SECRET_PREVIOUS); ``signed_with_previous``
tells callers which tokens to re-issue. Once SECRET_PREVIOUS is removed they are refused.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Mapping
from typing import Any, Final, Literal, get_args

import orjson
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from queue_manager.clock import Clock

__all__ = [
    "DEFAULT_MAX_AGE_SEC",
    "FUTURE_SKEW_SEC",
    "MAX_TOKEN_LEN",
    "PURPOSES",
    "Purpose",
    "TokenError",
    "TokenErrorReason",
    "TokenSigner",
    "b64url_decode",
    "b64url_encode",
    "hkdf_key",
]

Purpose = Literal["visitor", "monitor", "session", "operator", "preview"]
PURPOSES: Final[tuple[Purpose, ...]] = get_args(Purpose)

TokenErrorReason = Literal["malformed", "bad_signature", "unknown_kid", "wrong_purpose", "future", "expired"]
_REASONS: Final[frozenset[str]] = frozenset(get_args(TokenErrorReason))

MAX_TOKEN_LEN: Final = 4096
FUTURE_SKEW_SEC: Final = 60
DEFAULT_MAX_AGE_SEC: Final = 86400

_KEY_LEN: Final = 32
_KID_LEN: Final = 4
_MAC_LEN: Final = 32
_B64URL_RE: Final = re.compile(r"[A-Za-z0-9_-]*", re.ASCII)


class TokenError(Exception):
    """A token was refused; ``reason`` is one of :data:`TokenErrorReason`."""

    def __init__(self, reason: TokenErrorReason, detail: str = "") -> None:
        if reason not in _REASONS:
            raise ValueError(f"unknown token error reason: {reason!r}")
        super().__init__(reason)
        self.reason: TokenErrorReason = reason
        self.detail = detail

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}" if self.detail else self.reason


def b64url_encode(data: bytes) -> str:
    """Unpadded base64url."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    """Strict unpadded base64url: only ``[A-Za-z0-9_-]``, no ``=``, canonical trailing bits.

    Raises ``ValueError`` on anything else (including non-str input).
    """
    if not isinstance(text, str) or _B64URL_RE.fullmatch(text) is None or len(text) % 4 == 1:
        raise ValueError("invalid base64url")
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except binascii.Error as exc:  # pragma: no cover - excluded by the checks above
        raise ValueError("invalid base64url") from exc
    if b64url_encode(data) != text:  # non-zero padding bits: another spelling of the same bytes
        raise ValueError("non-canonical base64url")
    return data


def hkdf_key(secret: str, info: str, length: int) -> bytes:
    """HKDF-SHA256 (RFC 5869) with ``ikm`` = utf-8 ``secret``, empty salt and utf-8 ``info``."""
    return HKDF(
        algorithm=hashes.SHA256(),
        length=length,
        salt=None,  # RFC 5869: absent salt = HashLen zero bytes (same HMAC key as an empty salt)
        info=info.encode("utf-8"),
    ).derive(secret.encode("utf-8"))


def _kid_of(secret: str) -> str:
    return hkdf_key(secret, "qm:kid", _KID_LEN).hex()


def _mac_base(key: bytes) -> hmac.HMAC:
    # Keyed HMAC state computed once; .copy() per call skips re-hashing the padded key.
    return hmac.new(key, digestmod=hashlib.sha256)


class _KeySet:
    """Everything derived from one secret: its kid, its legacy MAC and one v2 MAC per purpose."""

    __slots__ = ("kid", "legacy", "v2")

    def __init__(self, secret: str) -> None:
        self.kid = _kid_of(secret)
        self.legacy = _mac_base(secret.encode("utf-8"))
        self.v2 = {p: _mac_base(hkdf_key(secret, f"qm:{p}", _KEY_LEN)) for p in PURPOSES}


def _mac_ok(base: hmac.HMAC, body: bytes, sig: bytes) -> bool:
    mac = base.copy()
    mac.update(body)
    return hmac.compare_digest(mac.digest(), sig)


def _sign_mac(base: hmac.HMAC, body: bytes) -> str:
    mac = base.copy()
    mac.update(body)
    return b64url_encode(mac.digest())


class TokenSigner:
    """Signs in the configured form, verifies both; see the module docstring."""

    def __init__(
        self,
        secret: str,
        clock: Clock,
        *,
        previous: str | None = None,
        sign_v2: bool = False,
        max_age_sec: int = DEFAULT_MAX_AGE_SEC,
    ) -> None:
        if not isinstance(secret, str) or not secret:
            raise ValueError("secret must be a non-empty string")
        if previous is not None and not isinstance(previous, str):
            raise ValueError("previous secret must be a string or None")
        if isinstance(max_age_sec, bool) or not isinstance(max_age_sec, int) or max_age_sec <= 0:
            raise ValueError("max_age_sec must be a positive int")
        self._clock = clock
        self._sign_v2 = bool(sign_v2)
        self._max_age_sec = max_age_sec
        self._current = _KeySet(secret)
        # An empty SECRET_PREVIOUS (an unset environment variable) means "no previous secret".
        self._previous = _KeySet(previous) if previous else None
        by_kid: dict[str, _KeySet] = {}
        if self._previous is not None:
            by_kid[self._previous.kid] = self._previous
        by_kid[self._current.kid] = self._current  # current wins if both secrets are equal
        self._by_kid = by_kid

    @property
    def kid(self) -> str:
        return self._current.kid

    @property
    def previous_kid(self) -> str | None:
        return self._previous.kid if self._previous is not None else None

    @property
    def sign_v2(self) -> bool:
        return self._sign_v2

    @property
    def max_age_sec(self) -> int:
        return self._max_age_sec

    def sign(self, payload: Mapping[str, Any], purpose: Purpose) -> str:
        """Copy ``payload``, set ``iat`` (and ``kid`` in v2 form), return the token.

        A caller-supplied ``kid`` is dropped in legacy form (it would make the token read as v2).
        Raises ``ValueError`` for an unknown purpose or a token that would exceed
        :data:`MAX_TOKEN_LEN`, and ``TypeError`` for a payload orjson cannot serialise.
        """
        if purpose not in PURPOSES:
            raise ValueError(f"unknown token purpose: {purpose!r}")
        data = dict(payload)
        data["iat"] = self._clock.wall_ms()
        if self._sign_v2:
            data["kid"] = self._current.kid
            base = self._current.v2[purpose]
        else:
            data.pop("kid", None)
            base = self._current.legacy
        body = b64url_encode(orjson.dumps(data)).encode("ascii")
        token = body.decode("ascii") + "." + _sign_mac(base, body)
        if len(token) > MAX_TOKEN_LEN:
            raise ValueError(f"token longer than {MAX_TOKEN_LEN} characters")
        return token

    def verify(self, token: str, purpose: Purpose, *, max_age_sec: int | None = None) -> dict[str, Any]:
        """Return the payload of a valid token for ``purpose``; raise :class:`TokenError` otherwise."""
        if purpose not in PURPOSES:
            raise ValueError(f"unknown token purpose: {purpose!r}")
        body, sig, data = _parse(token)
        kid = data.get("kid")
        if kid is None:
            base = self._current.legacy
            if not _mac_ok(base, body, sig) and (
                self._previous is None or not _mac_ok(self._previous.legacy, body, sig)
            ):
                raise TokenError("bad_signature")
        else:
            keys = self._by_kid.get(kid)
            if keys is None:
                raise TokenError("unknown_kid")
            if not _mac_ok(keys.v2[purpose], body, sig):
                # Failure path only: a genuine token of another purpose is reported as such.
                for other in PURPOSES:
                    if other != purpose and _mac_ok(keys.v2[other], body, sig):
                        raise TokenError("wrong_purpose", f"token is for {other!r}")
                raise TokenError("bad_signature")
        self._check_time(data["iat"], self._max_age_sec if max_age_sec is None else max_age_sec)
        return data

    def signed_with_previous(self, token: str) -> bool:
        """True when ``token`` carries a valid signature by SECRET_PREVIOUS (and not by SECRET).

        Signature only, for any purpose: age and purpose are the business of :meth:`verify`,
        which the caller has already run. False on any failure.
        """
        prev = self._previous
        if prev is None:
            return False
        try:
            body, sig, data = _parse(token)
        except TokenError:
            return False
        kid = data.get("kid")
        if kid is None:
            return not _mac_ok(self._current.legacy, body, sig) and _mac_ok(prev.legacy, body, sig)
        if kid != prev.kid or kid == self._current.kid:
            return False
        return any(_mac_ok(prev.v2[p], body, sig) for p in PURPOSES)

    def _check_time(self, iat: int, max_age_sec: int) -> None:
        now = self._clock.wall_ms()
        if iat - now > FUTURE_SKEW_SEC * 1000:
            raise TokenError("future")
        if now - iat > max_age_sec * 1000:
            raise TokenError("expired")


def _parse(token: object) -> tuple[bytes, bytes, dict[str, Any]]:
    """Split and decode a token, check its shape; the signature is *not* checked here.

    Returns ``(body bytes as signed, signature bytes, payload)``; raises ``TokenError("malformed")``.
    """
    if not isinstance(token, str):
        raise TokenError("malformed", "not a string")
    if len(token) > MAX_TOKEN_LEN:
        raise TokenError("malformed", "too long")
    if token.count(".") != 1:
        raise TokenError("malformed", "expected exactly one dot")
    body_text, sig_text = token.split(".")
    if not body_text or not sig_text:
        raise TokenError("malformed", "empty part")
    try:
        raw = b64url_decode(body_text)
        sig = b64url_decode(sig_text)
    except ValueError:
        raise TokenError("malformed", "bad base64url") from None
    if len(sig) != _MAC_LEN:
        raise TokenError("malformed", "bad signature length")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise TokenError("malformed", "invalid JSON") from None
    if not isinstance(data, dict):
        raise TokenError("malformed", "payload is not an object")
    iat = data.get("iat")
    if not isinstance(iat, int) or isinstance(iat, bool):
        raise TokenError("malformed", "iat is not an int")
    if "kid" in data and not isinstance(data["kid"], str):
        raise TokenError("malformed", "kid is not a string")
    return body_text.encode("ascii"), sig, data
