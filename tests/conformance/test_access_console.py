"""Console sessions (qm_console + CSRF) and the rationing of wrong admin credentials."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable
from typing import Any

import httpx
from harness import (
    Server,
    clear_of_the_minute_turn,
    cookie_attributes,
    create_room,
    random_secret,
    set_cookies,
    token_payload,
    unique_id,
)

ServerFactory = Callable[..., Server]

CSRF = {"X-QM-CSRF": "1"}


def sign_in(srv: Server, key: str, headers: dict[str, str] | None = None) -> httpx.Response:
    with srv.client() as c:
        return c.post("/api/admin/session", json={"key": key}, headers={**CSRF, **(headers or {})})


def session_cookie(srv: Server, key: str) -> str:
    r = sign_in(srv, key)
    assert r.status_code == 200, r.text
    line = set_cookies(r)["qm_console"]
    value = line.split(";", 1)[0].split("=", 1)[1]
    assert value
    return value


def with_cookie(srv: Server, value: str, **headers: str) -> httpx.Client:
    """A client that sends qm_console explicitly (no jar games)."""
    return srv.client(headers={"Cookie": f"qm_console={value}", **headers})


def clears_console_cookie(r: httpx.Response) -> bool:
    line = set_cookies(r).get("qm_console")
    if line is None:
        return False
    value = line.split(";", 1)[0].split("=", 1)[1]
    attrs = {p.strip().lower() for p in line.split(";")[1:]}
    return value == "" or "max-age=0" in attrs


def mint_operator(admin: httpx.Client, role: str) -> tuple[str, str]:
    r = admin.post("/api/admin/operators", json={"name": unique_id(role), "role": role})
    assert r.status_code == 201, r.text
    return r.json()["operator"]["id"], r.json()["key"]


# ---------------------------------------------------------------------- sign-in


def test_sign_in_needs_the_csrf_header(server: Server) -> None:
    with server.client() as c:
        r = c.post("/api/admin/session", json={"key": server.admin_key})
    assert r.status_code == 403, r.text
    assert r.json()["code"] == "csrf_required"
    assert "qm_console" not in set_cookies(r)
    r = sign_in(server, server.admin_key, {"Sec-Fetch-Site": "cross-site"})
    assert r.status_code == 403, r.text
    assert r.json()["code"] == "csrf_required"
    assert "qm_console" not in set_cookies(r)


def test_sign_in_sets_a_strict_http_only_cookie_without_the_key(server: Server) -> None:
    r = sign_in(server, server.admin_key, {"Sec-Fetch-Site": "same-origin"})
    assert r.status_code == 200, r.text
    line = set_cookies(r)["qm_console"]
    attrs = {p.strip().lower() for p in line.split(";")[1:]}
    assert "httponly" in cookie_attributes(line)
    assert "samesite=strict" in attrs, line
    assert "path=/api/admin" in attrs, line
    assert "max-age=43200" in attrs, line
    assert "secure" not in cookie_attributes(line)  # plain http here
    value = line.split(";", 1)[0].split("=", 1)[1]
    assert server.admin_key not in value
    assert server.admin_key not in r.text


def test_wrong_key_at_sign_in_is_401(server: Server) -> None:
    r = sign_in(server, "not-the-key")
    assert r.status_code == 401, r.text
    assert r.json()["code"] == "unauthorized"
    assert "qm_console" not in set_cookies(r)


def test_cookie_alone_authenticates_reads(server: Server) -> None:
    value = session_cookie(server, server.admin_key)
    with with_cookie(server, value) as c:
        r = c.get("/api/admin/rooms")
        assert r.status_code == 200, r.text
        who = c.get("/api/admin/whoami").json()["principal"]
        assert who["via"] == "cookie" and who["role"] == "owner"


def test_changes_with_the_cookie_need_csrf_from_the_same_origin(server: Server, admin: httpx.Client) -> None:
    value = session_cookie(server, server.admin_key)
    rid = unique_id()
    body = {"id": rid, "targetUrl": "https://shop.example/"}
    with with_cookie(server, value) as c:
        r = c.post("/api/admin/rooms", json=body)
        assert r.status_code == 403, r.text
        assert r.json()["code"] == "csrf_required"
        r = c.post("/api/admin/rooms", json=body, headers={**CSRF, "Sec-Fetch-Site": "cross-site"})
        assert r.status_code == 403, r.text
        assert r.json()["code"] == "csrf_required"
        r = c.post("/api/admin/rooms", json=body, headers={**CSRF, "Sec-Fetch-Site": "same-site"})
        assert r.status_code == 403, r.text
        assert admin.get(f"/api/admin/rooms/{rid}").status_code == 404  # none of those created it
        r = c.post("/api/admin/rooms", json=body, headers=CSRF)
        assert r.status_code == 201, r.text
        r = c.post(f"/api/admin/rooms/{rid}/pause", headers={**CSRF, "Sec-Fetch-Site": "same-origin"})
        assert r.status_code == 200, r.text
        # signing out is a change too
        r = c.delete("/api/admin/session")
        assert r.status_code == 403, r.text
        assert r.json()["code"] == "csrf_required"
        assert c.get("/api/admin/rooms").status_code == 200  # still signed in


def test_bearer_is_judged_alone_and_a_failed_bearer_keeps_the_cookie(server: Server, admin: httpx.Client) -> None:
    value = session_cookie(server, server.admin_key)
    with with_cookie(server, value, Authorization="Bearer not-a-valid-key") as c:
        r = c.get("/api/admin/rooms")
    assert r.status_code == 401, r.text
    assert "qm_console" not in set_cookies(r), r.headers.get_list("set-cookie")
    # the owner's session survived that
    with with_cookie(server, value) as c:
        assert c.get("/api/admin/rooms").status_code == 200
    # a share link opened in the owner's browser stays read-only: the Bearer decides, not the cookie
    token = admin.post("/api/admin/monitor-links").json()["token"]
    with with_cookie(server, value, Authorization=f"Bearer {token}") as c:
        r = c.post("/api/admin/rooms", json={"id": unique_id(), "targetUrl": "https://shop.example/"}, headers=CSRF)
        assert r.status_code == 403, r.text
        assert r.json()["code"] == "insufficient_role"
    # a valid Bearer needs no CSRF header even when a cookie rides along
    with with_cookie(server, value, Authorization=f"Bearer {server.admin_key}") as c:
        r = c.post("/api/admin/rooms", json={"id": unique_id(), "targetUrl": "https://shop.example/"})
        assert r.status_code == 201, r.text


def test_sign_out_clears_and_revokes_server_side(server: Server) -> None:
    value = session_cookie(server, server.admin_key)
    with with_cookie(server, value) as c:
        r = c.delete("/api/admin/session", headers=CSRF)
    assert r.status_code == 200, r.text
    assert clears_console_cookie(r), r.headers.get_list("set-cookie")
    # the browser forgot it; a copy of the old value is dead on the server too
    with with_cookie(server, value) as c:
        r = c.get("/api/admin/rooms")
    assert r.status_code == 401, r.text
    assert r.json()["code"] == "unauthorized"
    assert clears_console_cookie(r), r.headers.get_list("set-cookie")


def _audit(admin: httpx.Client) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = admin.get("/api/admin/audit", params={"limit": "10000"}).json()["audit"]
    return rows


def test_only_a_real_sign_out_is_an_audit_row(server: Server, admin: httpx.Client) -> None:
    _, viewer = mint_operator(admin, "viewer")
    before = _audit(admin)
    # a Bearer credential has no console session: nothing is closed, recorded or cleared
    for key in (viewer, server.admin_key):
        with server.client(headers={"Authorization": f"Bearer {key}"}) as c:
            for _ in range(5):
                r = c.delete("/api/admin/session")
                assert r.status_code == 200, r.text
                assert r.json() == {"ok": True, "closed": False}
                assert "qm_console" not in set_cookies(r)
    assert _audit(admin) == before
    # signing a cookie out is: once, and the cookie is dead afterwards
    value = session_cookie(server, viewer)
    with with_cookie(server, value, **CSRF) as c:
        r = c.delete("/api/admin/session")
        assert r.status_code == 200 and r.json() == {"ok": True, "closed": True}, r.text
        assert c.delete("/api/admin/session").status_code == 401
    new = [a for a in _audit(admin) if a not in before]
    assert sorted(a["action"] for a in new) == ["session.close", "session.open"], new


def test_a_read_only_key_cannot_grow_the_trail_by_signing_in(server: Server, admin: httpx.Client) -> None:
    op_id, viewer = mint_operator(admin, "viewer")
    answers = [sign_in(server, viewer) for _ in range(12)]
    codes = [r.status_code for r in answers]
    assert codes[:10] == [200] * 10 and codes[10:] == [429, 429], codes
    refused = answers[-1]
    assert refused.json()["code"] == "rate_limited", refused.text
    assert refused.headers.get("retry-after", "").isdigit(), refused.headers
    assert "qm_console" not in set_cookies(refused)
    opened = [a for a in _audit(admin) if a["action"] == "session.open" and a["actorId"] == op_id]
    assert len(opened) == 10, opened
    # a key that can change things is not held to it (its changes are audit rows anyway)
    assert all(sign_in(server, server.admin_key).status_code == 200 for _ in range(12))


def _digests(key: str) -> dict[str, str]:
    """Unkeyed digests of ``key`` (hex and base64url) a cookie must not carry even in part."""
    out = {}
    for name in ("md5", "sha1", "sha224", "sha256", "sha384", "sha512", "sha3_256", "sha3_512", "blake2b", "blake2s"):
        raw = hashlib.new(name, key.encode()).digest()
        out[f"{name}/hex"] = raw.hex()
        out[f"{name}/b64"] = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    return out


def test_the_console_cookie_carries_no_digest_of_admin_key(server: Server) -> None:
    value = session_cookie(server, server.admin_key)
    payload = token_payload(value)
    assert payload["who"] == "ADMIN_KEY" and payload["role"] == "owner"
    readable = json.dumps(payload) + value
    for name, digest in _digests(server.admin_key).items():
        for cut in (8, 12, 16):  # a prefix is as good as the whole for testing guesses offline
            assert digest[:cut] not in readable, (name, cut, payload)
            assert digest[:cut].upper() not in readable, (name, cut, payload)


def _old_session_cookie(srv: Server) -> str:
    """An ADMIN_KEY session as servers before this one wrote it: ``kh``, the first 16 hex digits of
    sha256(ADMIN_KEY), signed in the legacy form (HMAC-SHA256 keyed with SECRET over the first part)."""
    payload = {
        "t": "ses",
        "sid": secrets.token_urlsafe(12),
        "who": "ADMIN_KEY",
        "role": "owner",
        "kh": hashlib.sha256(srv.admin_key.encode()).hexdigest()[:16],
        "iat": int(time.time() * 1000),
    }
    body = base64.urlsafe_b64encode(json.dumps(payload).encode()).rstrip(b"=")
    sig = base64.urlsafe_b64encode(hmac.new(srv.secret.encode(), body, hashlib.sha256).digest()).rstrip(b"=")
    return f"{body.decode()}.{sig.decode()}"


def test_a_session_opened_before_the_upgrade_ends(server: Server) -> None:
    """A cookie carrying the old ``kh`` is not honoured: its owner signs in once more."""
    old = _old_session_cookie(server)
    with with_cookie(server, old) as c:
        r = c.get("/api/admin/whoami")
    assert r.status_code == 401, r.text
    assert r.json()["code"] == "unauthorized"
    assert clears_console_cookie(r)
    assert sign_in(server, server.admin_key).status_code == 200  # signing in again is all it takes


def test_a_changed_admin_key_ends_console_sessions_and_a_secret_rotation_does_not(
    make_server: ServerFactory,
) -> None:
    key, secret = "qm-test-admin-" + secrets.token_hex(12), random_secret(48)

    def still_signed_in(env: dict[str, str | None], cookie: str) -> bool:
        srv = make_server(env)
        try:
            with with_cookie(srv, cookie) as c:
                r = c.get("/api/admin/whoami")
            assert r.status_code in (200, 401), r.text
            return r.status_code == 200
        finally:
            srv.stop()

    first = make_server({"ADMIN_KEY": key, "SECRET": secret})
    cookie = session_cookie(first, key)
    first.stop()
    assert still_signed_in({"ADMIN_KEY": key, "SECRET": secret}, cookie)  # a restart keeps it
    assert not still_signed_in({"ADMIN_KEY": key + "-new", "SECRET": secret}, cookie)  # a new ADMIN_KEY ends it
    rotated = random_secret(48)
    assert still_signed_in({"ADMIN_KEY": key, "SECRET": rotated, "SECRET_PREVIOUS": secret}, cookie)
    assert not still_signed_in({"ADMIN_KEY": key, "SECRET": rotated}, cookie)  # SECRET_PREVIOUS removed


def test_revoking_an_operator_ends_their_console_session(server: Server, admin: httpx.Client) -> None:
    op_id, key = mint_operator(admin, "operator")
    value = session_cookie(server, key)
    with with_cookie(server, value) as c:
        who = c.get("/api/admin/whoami").json()["principal"]
        assert who["role"] == "operator" and who["operatorId"] == op_id
        assert admin.delete(f"/api/admin/operators/{op_id}").status_code == 200
        r = c.get("/api/admin/rooms")
    assert r.status_code == 401, r.text


def test_session_keeps_the_role_it_was_opened_with(server: Server, admin: httpx.Client) -> None:
    _, key = mint_operator(admin, "viewer")
    value = session_cookie(server, key)
    rid = create_room(admin)["id"]
    with with_cookie(server, value, **CSRF) as c:
        r = c.post(f"/api/admin/rooms/{rid}/pause")
    assert r.status_code == 403, r.text
    assert r.json()["code"] == "insufficient_role"


# ---------------------------------------------------------------------- auth-failure rationing


def _locked(r: httpx.Response, what: str) -> None:
    assert r.status_code == 429, (what, r.status_code, r.text)
    assert r.json()["code"] == "too_many_auth_failures", (what, r.text)
    retry = r.headers.get("retry-after")
    assert retry is not None and retry.isdigit() and 1 <= int(retry) <= 60, (what, retry)


def test_wrong_keys_are_rationed_and_lockout_covers_every_credential(make_server: ServerFactory) -> None:
    public_key = "pk-" + unique_id("vouch")
    srv = make_server({"ADMIN_AUTH_FAIL_PER_MIN": "3", "PUBLIC_API_KEY": public_key})
    with srv.admin() as a:
        _, viewer = mint_operator(a, "viewer")
        token = a.post("/api/admin/monitor-links").json()["token"]
        ticket = a.post("/api/admin/sse-ticket").json()["ticket"]
    cookie = session_cookie(srv, srv.admin_key)
    anon = srv.client()
    # requests presenting no credential are not counted
    for _ in range(10):
        assert anon.get("/api/admin/rooms").status_code == 401
    # a valid key on a route it may not use (403) and a valid monitor link spend nothing either
    with srv.client(headers={"Authorization": f"Bearer {viewer}"}) as v:
        for _ in range(4):
            assert (
                v.post("/api/admin/rooms", json={"id": unique_id(), "targetUrl": "https://s.example/"}).status_code
                == 403
            )
    with srv.client(headers={"Authorization": f"Bearer {token}"}) as m:
        for _ in range(4):
            assert m.get("/api/admin/rooms").status_code == 200
    with srv.admin() as a:
        assert a.get("/api/admin/rooms").status_code == 200
    # three wrong keys: each 401
    clear_of_the_minute_turn()
    for i in range(3):
        with srv.client(headers={"Authorization": f"Bearer wrong-{i}"}) as w:
            r = w.get("/api/admin/rooms")
            assert r.status_code == 401, r.text
    # the fourth request is refused before it is checked, even with the right key
    with srv.admin() as a:
        _locked(a.get("/api/admin/rooms"), "ADMIN_KEY")
    with srv.client(headers={"Authorization": "Bearer wrong-again"}) as w:
        _locked(w.get("/api/admin/rooms"), "wrong key")
    with srv.client(headers={"Authorization": f"Bearer {token}"}) as m:
        _locked(m.get("/api/admin/rooms"), "monitor link")
    with with_cookie(srv, cookie) as c:
        _locked(c.get("/api/admin/rooms"), "console cookie")
    _locked(anon.get("/api/admin/events", params={"ticket": ticket}), "stream ticket")
    _locked(sign_in(srv, srv.admin_key), "sign-in with the right key")
    # no credential at all is still just 401
    assert anon.get("/api/admin/rooms").status_code == 401
    # the public-key door shares the allowance: a locked-out address's key is treated as absent
    r = anon.get("/api/verify", headers={"Authorization": f"Bearer {public_key}"})
    assert r.status_code == 401, r.text
    assert r.json()["ok"] is False
    anon.close()


def test_wrong_key_at_sign_in_spends_the_allowance(make_server: ServerFactory) -> None:
    srv = make_server({"ADMIN_AUTH_FAIL_PER_MIN": "3"})
    clear_of_the_minute_turn()
    for i in range(3):
        r = sign_in(srv, f"wrong-{i}")
        assert r.status_code == 401, r.text
    with srv.admin() as a:
        _locked(a.get("/api/admin/rooms"), "ADMIN_KEY after three bad sign-ins")
