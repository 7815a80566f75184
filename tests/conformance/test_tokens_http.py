"""Visitor tokens over HTTP: forged and foreign tokens, SECRET_PREVIOUS rotation, TOKEN_SIGN_V2."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from harness import Server, create_room, join, metric, random_secret, status, tamper_signature, token_payload

REJECTED = "qm_rejected_tokens_all_total"
ROOM = "tokens-room"
SECRET_X = random_secret(48)
SECRET_Y = random_secret(48)


def _rejected(srv: Server) -> float:
    value = metric(srv, REJECTED)
    assert value is not None, f"{REJECTED} missing from /metrics"
    return value


def _token_from(srv: Server) -> dict[str, object]:
    with srv.client() as v:
        r = join(v, ROOM)
        assert r.status_code == 200, r.text
        payload: dict[str, object] = r.json()
        return payload


@pytest.fixture(scope="module")
def servers(make_module_server: Callable[..., Server]) -> dict[str, Server]:
    out = {
        "main": make_module_server(),
        "a": make_module_server({"SECRET": SECRET_X}),
        "a_v2": make_module_server({"SECRET": SECRET_X, "TOKEN_SIGN_V2": "1"}),
        "b": make_module_server({"SECRET": SECRET_Y, "SECRET_PREVIOUS": SECRET_X}),
        "c": make_module_server({"SECRET": SECRET_Y}),
    }
    for srv in out.values():
        with srv.admin() as a:
            create_room(a, ROOM, ratePerMinute=0, queueMaxPerIp=None)
    return out


def test_forged_signature_is_no_ticket(servers: dict[str, Server]) -> None:
    srv = servers["main"]
    mine = _token_from(srv)
    forged = tamper_signature(str(mine["token"]))
    before = _rejected(srv)
    with srv.client() as thief:
        s = status(thief, ROOM, forged)
        assert s["ticket"] is None
        assert s["position"] is None
        r = join(thief, ROOM, token=forged)
        assert r.status_code == 200, r.text
        fresh = r.json()
        assert fresh["state"] == "waiting"
        assert fresh["ticket"] != mine["ticket"]
        assert fresh["token"] != forged
        check = thief.get("/api/check", params={"roomId": ROOM, "url": "https://shop.example/", "qm_token": forged})
        assert check.status_code == 200
        assert check.json()["admit"] is False
    assert _rejected(srv) >= before + 2


@pytest.mark.parametrize(
    "mangle",
    [
        lambda t: t + "x",
        lambda t: t.replace(".", ""),
        lambda t: "." + t,
        lambda t: t.split(".")[0],
        lambda t: "!!!." + t.split(".")[1],
    ],
)
def test_mangled_tokens_are_no_ticket(servers: dict[str, Server], mangle: Callable[[str], str]) -> None:
    srv = servers["main"]
    mine = _token_from(srv)
    before = _rejected(srv)
    with srv.client() as v:
        r = join(v, ROOM, token=mangle(str(mine["token"])))
        assert r.status_code == 200, r.text
        assert r.json()["ticket"] != mine["ticket"]
    assert _rejected(srv) == before + 1


def test_token_signed_with_another_secret(servers: dict[str, Server]) -> None:
    srv, other = servers["main"], servers["c"]
    theirs = _token_from(other)
    before = _rejected(srv)
    with srv.client() as v:
        r = join(v, ROOM, token=str(theirs["token"]))
        assert r.status_code == 200, r.text
        fresh = r.json()
        assert fresh["state"] == "waiting"
        assert fresh["token"] != theirs["token"]
        assert status(v, ROOM)["ticket"] == fresh["ticket"]
    assert _rejected(srv) == before + 1


@pytest.mark.parametrize("issuer", ["a", "a_v2"])
def test_secret_previous_keeps_old_tokens_verifying(servers: dict[str, Server], issuer: str) -> None:
    token = str(_token_from(servers[issuer])["token"])
    b, c = servers["b"], servers["c"]
    before_b, before_c = _rejected(b), _rejected(c)
    for srv in (b, c):
        with srv.client() as v:
            r = join(v, ROOM, token=token)
            assert r.status_code == 200, r.text
            assert r.json()["state"] == "waiting"
    # B verifies it with SECRET_PREVIOUS (the place itself exists only on the issuer), C refuses it
    assert _rejected(b) == before_b
    assert _rejected(c) == before_c + 1


def test_token_sign_v2_names_the_key(servers: dict[str, Server]) -> None:
    p = _token_from(servers["a_v2"])
    payload = token_payload(str(p["token"]))
    assert isinstance(payload.get("kid"), str)
    assert re.fullmatch(r"[0-9a-f]{8}", payload["kid"]), payload["kid"]
    with servers["a_v2"].client() as bare:
        s = status(bare, ROOM, str(p["token"]))
        assert s["ticket"] == p["ticket"]
    # the same SECRET names the same kid; another SECRET another
    assert token_payload(str(_token_from(servers["a_v2"])["token"]))["kid"] == payload["kid"]


def test_legacy_tokens_carry_no_kid(servers: dict[str, Server]) -> None:
    payload = token_payload(str(_token_from(servers["main"])["token"]))
    assert "kid" not in payload


def test_v2_token_accepted_by_a_legacy_writer_with_the_same_secret(servers: dict[str, Server]) -> None:
    # "Both forms are always accepted": a server writing legacy tokens reads v2 ones of its SECRET.
    token = str(_token_from(servers["a_v2"])["token"])
    before = _rejected(servers["a"])
    with servers["a"].client() as v:
        assert join(v, ROOM, token=token).status_code == 200
    assert _rejected(servers["a"]) == before
