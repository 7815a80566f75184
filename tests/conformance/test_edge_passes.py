"""Edge passes (PASS_SIGNING=ed25519): the key set, the pass an admitting connector check gets, what the
queue refuses of a presented pass, and the revocation list.

The test derives the signing key from the server's SECRET on its own (RFC 5869 HKDF written out with
hmac, the JWK thumbprint of RFC 7638), so it checks the documented format rather than the code's, and
it can sign passes of any shape (expired, another room, another key) without waiting for one to age.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from harness import Server, create_room, metric, unique_id
from passkit import PUBLIC_KEY, UA, admitted, b64, bnd, key_of, kid_of, parts, sign, unb64, verify_with_jwk

ServerFactory = Callable[..., Server]


@pytest.fixture(scope="module")
def server(make_module_server: ServerFactory) -> Server:
    return make_module_server({"PASS_SIGNING": "ed25519", "PUBLIC_API_KEY": PUBLIC_KEY})


def test_the_key_set_is_the_secrets_key_with_its_headers(server: Server) -> None:
    with server.client() as c:
        r = c.get("/.well-known/jwks.json")
        assert r.status_code == 200
        assert r.headers["content-type"] == "application/jwk-set+json"
        assert r.headers["cache-control"] == "public, max-age=300"
        assert r.headers["access-control-allow-origin"] == "*"
        etag = r.headers["etag"]
        assert etag.startswith('"') and etag.endswith('"')
        key = key_of(server.env["SECRET"])
        x = b64(key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))
        assert r.json() == {
            "keys": [{"kty": "OKP", "crv": "Ed25519", "x": x, "kid": kid_of(key), "use": "sig", "alg": "EdDSA"}]
        }
        again = c.get("/.well-known/jwks.json", headers={"If-None-Match": etag})
        assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == etag
        other = c.get("/.well-known/jwks.json", headers={"If-None-Match": '"something-else"'})
        assert other.status_code == 200 and other.json() == r.json()


def test_the_key_set_is_there_on_an_inline_host_under_the_prefix(server: Server) -> None:
    with server.admin() as admin:
        create_room(admin, unique_id("inl"), targetUrl="http://shop-jwks.test", proxyOrigin="http://localhost:9")
    with server.client() as c:
        plain = c.get("/.well-known/jwks.json").json()
    with server.client(headers={"host": "shop-jwks.test"}) as c:
        r = c.get("/__qm/.well-known/jwks.json")
    assert r.status_code == 200 and r.json() == plain


def test_with_hmac_the_key_set_is_empty_and_no_pass_is_handed_out(make_server: ServerFactory) -> None:
    srv = make_server({"PUBLIC_API_KEY": PUBLIC_KEY})
    with srv.client() as c:
        r = c.get("/.well-known/jwks.json")
    assert r.status_code == 200 and r.json() == {"keys": []}
    assert r.headers["cache-control"] == "public, max-age=300"
    v = admitted(srv)
    body = v.check().json()
    assert body["admit"] is True and "edgePass" not in body


def test_an_admitting_connector_check_gets_a_pass_bound_to_the_door_key(server: Server) -> None:
    v = admitted(server, sessionTtlSec=600)
    first_key = v.door_key
    r = v.check()  # the door key's replay: admitted again, a fresh pass for the same key
    body = r.json()
    assert body["admit"] is True and body["doorKey"] is None and v.door_key == first_key
    token = body["edgePass"]
    header, claims, sig = parts(token)
    jwk = httpx.get(f"{server.base_url}/.well-known/jwks.json").json()["keys"][0]
    assert header == {"alg": "EdDSA", "kid": jwk["kid"], "typ": "qm-pass+jwt"}
    verify_with_jwk(token, jwk)
    assert len(sig) == 64
    assert set(claims) == {"room", "gen", "sub", "bnd", "iat", "exp"}
    assert claims["room"] == v.room_id and claims["bnd"] == bnd(v.door_key or "")
    assert isinstance(claims["gen"], int) and len(claims["sub"]) == 16
    now = time.time()
    assert claims["iat"] <= now + 2 and now - 5 < claims["exp"] <= claims["iat"] + 120  # EDGE_PASS_TTL_SEC
    assert body["edgePassExpiresAt"] == claims["exp"] * 1000
    line = next(x for x in r.headers.get_list("set-cookie") if x.startswith(f"qmp_{v.room_id}="))
    assert line.startswith(f"qmp_{v.room_id}={token};") and "HttpOnly" in line and "Max-Age=" in line
    # the same visitor's pass presented back is one the queue accepts
    assert "edgePassRefused" not in v.check(qm_pass=token).json()


def test_the_pass_runs_out_halfway_to_the_sessions_end(server: Server) -> None:
    v = admitted(server, sessionTtlSec=30)
    claims = parts(v.check().json()["edgePass"])[1]
    assert claims["exp"] - claims["iat"] <= 16  # half of 30 s (plus the second's rounding)


def test_a_direct_check_gets_no_pass(server: Server) -> None:
    v = admitted(server)
    with server.client(headers={"User-Agent": UA}) as c:
        c.cookies.set(f"qm_{v.room_id}", v.token)
        c.cookies.set(f"qms_{v.room_id}", v.qms)
        c.cookies.set(f"qm_dk_{v.room_id}", v.door_key or "")
        body = c.get("/api/check", params={"roomId": v.room_id, "url": "https://shop.example/p"}).json()
    assert body["admit"] is True and "edgePass" not in body


def test_the_queue_names_every_pass_it_would_refuse(server: Server) -> None:
    v = admitted(server, sessionTtlSec=600)
    good = v.check().json()["edgePass"]
    _, claims, _ = parts(good)
    own = key_of(server.env["SECRET"])
    stranger = Ed25519PrivateKey.generate()
    h, c, s = good.split(".")
    tampered_claims = b64(json.dumps({**claims, "exp": claims["exp"] + 3600}).encode())
    cases = {
        "expired": sign(own, {**claims, "iat": claims["iat"] - 600, "exp": claims["iat"] - 300}),
        "wrong_room": sign(own, {**claims, "room": v.room_id + "x"}),
        "unknown_kid": sign(stranger, claims),
        "bad_signature": sign(stranger, claims, kid=kid_of(own)),
        "unbound": sign(own, {**claims, "bnd": bnd("somebody-elses-door-key")}),
        "malformed": f"{h}.{c}",
        "revoked": sign(own, {**claims, "gen": claims["gen"] + 1}),
    }
    tampered = f"{h}.{tampered_claims}.{s}"
    refused_before = metric(server, "qm_refused_edge_passes_total") or 0.0
    assert v.check(qm_pass=tampered).json()["edgePassRefused"] == "bad_signature"
    for reason, token in cases.items():
        body = v.check(qm_pass=token).json()
        assert body.get("edgePassRefused") == reason, (reason, body)
        assert body["admit"] is True  # the ticket and the door key decide; the pass only caches that
    assert metric(server, "qm_refused_edge_passes_total") == refused_before + 1 + len(cases)
    # a pass alone (no ticket, no door key) never admits anybody at the queue
    headers = {"Authorization": f"Bearer {PUBLIC_KEY}", "Cookie": f"qmp_{v.room_id}={good}"}
    with server.client(headers=headers) as c:
        alone = c.get("/api/check", params={"roomId": v.room_id, "ip": "198.51.100.44", "agent": UA}).json()
    assert alone["admit"] is False and alone["reason"] == "no_ticket" and "edgePass" not in alone
    assert alone["edgePassRefused"] == "unbound"


def test_an_eject_puts_the_pass_on_the_revocation_list(server: Server) -> None:
    v = admitted(server, sessionTtlSec=600)
    token = v.check().json()["edgePass"]
    _, claims, _ = parts(token)
    with server.client() as c:
        listed = c.get("/api/passes/revoked", params={"roomId": v.room_id})
        assert listed.status_code == 200
        assert listed.headers["cache-control"] == "no-store"
        before = listed.json()
        assert before["roomId"] == v.room_id and before["revoked"] == [] and before["generation"] == claims["gen"]
        assert before["passTtlSec"] == 120
        with server.admin() as admin:
            n = json.loads(unb64(v.token.split(".")[0]))["n"]  # the ticket number: in the visitor's token
            r = admin.post(f"/api/admin/rooms/{v.room_id}/eject", json={"ticket": n})
            assert r.status_code == 200, r.text
        after = c.get("/api/passes/revoked", params={"roomId": v.room_id}).json()
        assert after["revoked"] == [claims["sub"]]
        assert c.get("/api/passes/revoked", params={"roomId": "no-such-" + unique_id()}).json()["code"] == "no_room"
        assert c.get("/api/passes/revoked").status_code == 400
        assert c.get("/api/passes/revoked", params={"roomId": "bad id!"}).json()["code"] == "no_room"
        assert c.get("/api/v1/passes/revoked", params={"roomId": v.room_id}).json()["revoked"] == [claims["sub"]]
    body = v.check(qm_pass=token).json()
    assert body["admit"] is False and body["reason"] == "ejected"
    assert body["edgePassRefused"] == "revoked"
    cleared = next(x for x in v.check(qm_pass=token).headers.get_list("set-cookie") if x.startswith("qmp_"))
    assert "Max-Age=0" in cleared
