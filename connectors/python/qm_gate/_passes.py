"""Edge passes checked in the app's process: the queue's Ed25519 keys and the room's revocation list.

An admitted visitor's ``qmp_<room>`` cookie is an Ed25519-signed pass bound to their door key (the queue's
``PASS_SIGNING=ed25519``). :class:`EdgePasses` verifies it against ``/.well-known/jwks.json`` and
``/api/passes/revoked?roomId=``, both fetched by a background thread, and says why the queue must be asked
when it cannot admit the pass itself. Without the ``cryptography`` package (the ``edge`` extra) nothing is
checked here: every request asks the queue.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
from typing import Any
from urllib.parse import quote

from qm_gate._fetch import Unanswered, fetch

try:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
except ImportError:  # the edge extra is not installed: every request asks the queue
    Ed25519PublicKey = None  # type: ignore[assignment,misc]
    InvalidSignature = Exception  # type: ignore[assignment,misc]

JWKS_DEFAULT_MAX_AGE = 300.0
JWKS_RETRY = 10.0  # an unknown kid fetches the key set again, at most this often
_B64URL = re.compile(r"^[A-Za-z0-9_-]*$")
_MAX_AGE = re.compile(r"max-age=(\d+)", re.I)
CACHE_MAX = 10000


def _from_b64url(text: str) -> bytes:
    if not _B64URL.match(text):
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def binding_of(door_key: str) -> str:
    """The pass's ``bnd`` claim for a door key: base64url of the first 16 bytes of SHA-256(key)."""
    digest = hashlib.sha256(door_key.encode()).digest()[:16]
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def available() -> bool:
    """Can this process verify Ed25519 signatures (the ``cryptography`` package is installed)?"""
    return Ed25519PublicKey is not None


class EdgePasses:
    """What the gate knows to check passes itself; :meth:`refusal` is cheap (no I/O on the request path)."""

    def __init__(self, queue_url: str, room: str, timeout: float, refresh: float, agent: dict[str, str]) -> None:
        self.queue_url, self.room, self.timeout, self.refresh = queue_url, room, timeout, refresh
        self.agent = agent
        self.keys: dict[str, Any] | None = None
        self.keys_until = 0.0
        self.keys_tried = 0.0
        self.generation: int | None = None  # None: no usable revocation list (not fetched yet, or the room is gone)
        self.revoked: frozenset[str] = frozenset()
        self.revoked_before: int | None = None  # a flush's cutoff (s): a pass issued before it is refused
        self.ended: dict[str, float] = {}  # pass id -> its exp: sessions ended here, refused whatever the list says
        self.verified: dict[str, dict[str, Any]] = {}  # "<pass> <door key>" -> claims checked once
        self._lock = threading.Lock()
        self._loading_keys = False
        self._watching = False
        self._stop = threading.Event()

    def _get(self, path: str) -> tuple[int, Any, str]:
        headers = {"Accept": "application/json", **self.agent}
        answer = fetch(f"{self.queue_url}{path}", headers, self.timeout)
        body: Any = None
        if answer.status == 200:
            try:
                body = json.loads(answer.body)
            except ValueError:
                body = None
        return answer.status, body, answer.headers.get("Cache-Control", "")

    def _load_keys(self) -> None:
        try:
            _, body, cache_control = self._get("/.well-known/jwks.json")
            if isinstance(body, dict) and isinstance(body.get("keys"), list) and Ed25519PublicKey is not None:
                keys: dict[str, Any] = {}
                for jwk in body["keys"]:
                    if not isinstance(jwk, dict) or jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519":
                        continue
                    if not isinstance(jwk.get("kid"), str) or not isinstance(jwk.get("x"), str):
                        continue
                    try:
                        keys[jwk["kid"]] = Ed25519PublicKey.from_public_bytes(_from_b64url(jwk["x"]))
                    except ValueError:
                        continue  # a key this process cannot read is a key it does not know
                m = _MAX_AGE.search(cache_control)
                with self._lock:
                    self.keys = keys
                    self.verified.clear()  # a key no longer published no longer vouches for what it signed
                    self.keys_until = time.monotonic() + (float(m.group(1)) if m else JWKS_DEFAULT_MAX_AGE)
        except Unanswered:
            pass
        finally:
            self._loading_keys = False

    def _reload_keys(self) -> None:
        with self._lock:
            if self._loading_keys:
                return
            self._loading_keys = True
            self.keys_tried = time.monotonic()
        threading.Thread(target=self._load_keys, name="qm-gate-jwks", daemon=True).start()

    def _load_revoked(self) -> None:
        try:
            status, body, _ = self._get(f"/api/passes/revoked?roomId={quote(self.room, safe='')}")
        except Unanswered:
            return  # keep the last list; a pass still expires within EDGE_PASS_TTL_SEC
        with self._lock:
            if status == 404:
                self.generation = None  # the room is gone: no pass of it is trusted
            elif (
                isinstance(body, dict)
                and isinstance(body.get("generation"), int)
                and isinstance(body.get("revoked"), list)
            ):
                self.generation = body["generation"]
                self.revoked = frozenset(str(s) for s in body["revoked"])
                cutoff = body.get("revokedBefore")
                self.revoked_before = cutoff if isinstance(cutoff, int) else None

    def _refresh_loop(self) -> None:
        while not self._stop.is_set():
            self._load_revoked()
            self._stop.wait(self.refresh)

    def watch(self) -> None:
        """A pass was seen: keep the key set and the revocation list fresh from now on."""
        if not available():
            return
        with self._lock:
            if self._watching:
                return
            self._watching = True
        self._reload_keys()
        threading.Thread(target=self._refresh_loop, name="qm-gate-revoked", daemon=True).start()

    def close(self) -> None:
        self._stop.set()

    def _revoked(self, claims: dict[str, Any]) -> bool:
        sub = claims.get("sub")
        if sub in self.revoked or sub in self.ended:
            return True
        iat = claims.get("iat")
        return self.revoked_before is not None and not (isinstance(iat, int) and iat >= self.revoked_before)

    def refusal(self, token: str, door_key: str | None) -> str | None:
        """None when the pass admits its holder here and now; otherwise why the queue must be asked."""
        if not available():
            return "unavailable"
        keys = self.keys
        if keys is None or self.generation is None:
            return "not_ready"
        now = time.monotonic()
        if now >= self.keys_until:
            self._reload_keys()
        if not door_key:
            return "unbound"
        cache_key = f"{token} {door_key}"
        known = self.verified.get(cache_key)
        if known is not None:
            if known["exp"] <= time.time():
                return "expired"
            if known.get("gen") != self.generation or self._revoked(known):
                return "revoked"
            return None
        parts = token.split(".")
        if len(parts) != 3:
            return "malformed"
        try:
            header = json.loads(_from_b64url(parts[0]))
            claims = json.loads(_from_b64url(parts[1]))
            signature = _from_b64url(parts[2])
        except ValueError:
            return "malformed"
        if not isinstance(header, dict) or header.get("alg") != "EdDSA" or not isinstance(header.get("kid"), str):
            return "malformed"
        key = keys.get(header["kid"])
        if key is None:
            if now - self.keys_tried >= JWKS_RETRY:
                self._reload_keys()
            return "unknown_kid"
        try:
            key.verify(signature, f"{parts[0]}.{parts[1]}".encode("ascii"))
        except (InvalidSignature, ValueError):
            return "bad_signature"
        if not isinstance(claims, dict):
            return "malformed"
        if claims.get("room") != self.room:
            return "wrong_room"
        exp = claims.get("exp")
        if not isinstance(exp, int) or isinstance(exp, bool) or exp <= time.time():
            return "expired"
        if claims.get("gen") != self.generation or self._revoked(claims):
            return "revoked"
        if claims.get("bnd") != binding_of(door_key):
            return "unbound"
        # signature, room and binding hold for the pass's life: later requests check only time and revocation
        with self._lock:
            if len(self.verified) >= CACHE_MAX:
                self.verified.clear()
            self.verified[cache_key] = claims
        return None

    def forget(self, token: str) -> None:
        """This pass admits nobody here any more (its session was ended): refused until the list says so too."""
        try:
            claims = json.loads(_from_b64url(token.split(".")[1]))
        except (ValueError, IndexError):
            claims = None
        with self._lock:
            if isinstance(claims, dict) and isinstance(claims.get("sub"), str):
                now = time.time()
                for sub, exp in list(self.ended.items()):
                    if not exp > now:
                        del self.ended[sub]
                if len(self.ended) < CACHE_MAX:
                    until = claims.get("exp")
                    self.ended[claims["sub"]] = float(until) if isinstance(until, int | float) else now + 86400
            for cached in [k for k in self.verified if k.startswith(f"{token} ")]:
                del self.verified[cached]
