"""What the edge-pass tests share: the documented key derivation written out independently (RFC 5869 HKDF
with hmac, the RFC 7638 thumbprint), signing passes of any shape, and a visitor checked in through a
connector (a vouched check carrying the visitor's cookies)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from typing import Any

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from harness import Server, create_room, join, wait_for_state

PUBLIC_KEY = "pk-" + secrets.token_urlsafe(24)
UA = "Mozilla/5.0 (edge-pass-test)"
VISITOR_IP = "127.0.0.1"


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def hkdf(secret: str, info: str, length: int = 32) -> bytes:
    prk = hmac.new(b"\x00" * 32, secret.encode(), hashlib.sha256).digest()
    okm, block, counter = b"", b"", 1
    while len(okm) < length:
        block = hmac.new(prk, block + info.encode() + bytes([counter]), hashlib.sha256).digest()
        okm += block
        counter += 1
    return okm[:length]


def key_of(secret: str) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(hkdf(secret, "qm:pass-ed25519"))


def kid_of(key: Ed25519PrivateKey) -> str:
    x = b64(key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))
    return b64(hashlib.sha256(f'{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}'.encode()).digest())


def sign(key: Ed25519PrivateKey, claims: dict[str, Any], kid: str | None = None) -> str:
    header = b64(json.dumps({"alg": "EdDSA", "kid": kid or kid_of(key), "typ": "qm-pass+jwt"}).encode())
    body = b64(json.dumps(claims).encode())
    return f"{header}.{body}.{b64(key.sign(f'{header}.{body}'.encode()))}"


def parts(token: str) -> tuple[dict[str, Any], dict[str, Any], bytes]:
    h, c, s = token.split(".")
    return json.loads(unb64(h)), json.loads(unb64(c)), unb64(s)


def verify_with_jwk(token: str, jwk: dict[str, Any]) -> None:
    h, c, s = token.split(".")
    Ed25519PublicKey.from_public_bytes(unb64(jwk["x"])).verify(unb64(s), f"{h}.{c}".encode())


def bnd(door_key: str) -> str:
    return b64(hashlib.sha256(door_key.encode()).digest()[:16])


class Visitor:
    """A visitor who queued on the queue host and is checked in through a connector (vouched)."""

    def __init__(self, srv: Server, room_id: str) -> None:
        self.srv, self.room_id = srv, room_id
        with srv.client(headers={"User-Agent": UA}) as c:
            r = join(c, room_id)
            assert r.status_code == 200, r.text
            self.token = r.json()["token"]
            self.qms = r.cookies[f"qms_{room_id}"]
            wait_for_state(c, room_id, self.token, ("passed",), timeout=15)
        self.door_key: str | None = None

    def check(self, **extra: str) -> httpx.Response:
        cookies = {f"qm_{self.room_id}": self.token, f"qms_{self.room_id}": self.qms}
        if self.door_key:
            cookies[f"qm_dk_{self.room_id}"] = self.door_key
        cookie = "; ".join(f"{k}={v}" for k, v in cookies.items())
        headers = {"Authorization": f"Bearer {PUBLIC_KEY}", "Cookie": cookie}
        params = {"roomId": self.room_id, "url": "https://shop.example/p", "ip": VISITOR_IP, "agent": UA, **extra}
        with self.srv.client(headers=headers) as c:
            r = c.get("/api/check", params=params)
        assert r.status_code == 200, r.text
        if r.json().get("doorKey"):
            self.door_key = r.json()["doorKey"]
        return r


def admitted(srv: Server, **room: Any) -> Visitor:
    """A visitor of a new room, admitted through a connector's check (so holding a door key)."""
    with srv.admin() as a:
        room_id = create_room(a, ratePerMinute=600, **room)["id"]
    v = Visitor(srv, room_id)
    r = v.check()
    assert r.json()["admit"] is True, r.text
    return v
