"""Visitor tokens over HTTP: forged and foreign tokens, SECRET_PREVIOUS rotation, TOKEN_SIGN_V2."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from harness import (
    Server,
    create_room,
    join,
    metric,
    random_secret,
    status,
    tamper_signature,
    token_payload,
    unique_id,
    wait_until,
)

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


# ---------------------------------------------------------------------- a burst of refused tickets in the log

BURST_LINE = re.compile(r"^room (\S+): (\d+) visitor tickets refused in the last minute \(([^)]*)\): (.*)$")


def _burst_lines(srv: Server, room: str) -> list[re.Match[str]]:
    found = (BURST_LINE.match(line) for line in srv.stderr.splitlines())
    return [m for m in found if m is not None and m.group(1) == room]


def test_a_burst_of_refused_tickets_is_logged_once_per_room_per_minute_naming_the_cause(
    servers: dict[str, Server],
) -> None:
    """SECRET rotated without SECRET_PREVIOUS: the tickets of the old SECRET ("a") arrive at a server that
    no longer holds it ("c"); one that still does through SECRET_PREVIOUS ("b") takes them silently."""
    old, rotated, kept = servers["a"], servers["c"], servers["b"]
    room, quiet = unique_id("burst"), unique_id("trickle")
    for srv in (old, rotated, kept):
        with srv.admin() as a:
            create_room(a, room, ratePerMinute=0, queueMaxPerIp=None)
            create_room(a, quiet, ratePerMinute=0, queueMaxPerIp=None)
    tokens = []
    for _ in range(25):
        with old.client() as v:
            r = join(v, room)
            assert r.status_code == 200, r.text
            tokens.append(str(r.json()["token"]))
    with rotated.client() as v:
        for token in tokens:  # every waiting visitor's next poll, refused
            assert status(v, room, token)["ticket"] is None
    lines = wait_until(lambda: _burst_lines(rotated, room), timeout=10, what="the burst's warning line")
    count, reasons, cause = int(lines[0].group(2)), lines[0].group(3), lines[0].group(4)
    assert count >= 20 and reasons.startswith("bad_signature "), lines[0].group(0)
    assert "SECRET was likely changed without SECRET_PREVIOUS" in cause, cause
    assert "re-join at the back of the line" in cause
    with rotated.client() as v:  # the burst goes on: still one line for this room within the minute
        for token in tokens:
            assert status(v, room, token)["ticket"] is None
        quiet_token = tokens[0]
        assert status(v, quiet, quiet_token)["ticket"] is None  # a trickle elsewhere is no burst
    assert len(_burst_lines(rotated, room)) == 1, rotated.stderr
    assert _burst_lines(rotated, quiet) == []
    before = _rejected(kept)
    with kept.client() as v:  # with SECRET_PREVIOUS the same tickets still verify: nothing to say
        for token in tokens:
            status(v, room, token)
    assert _rejected(kept) == before and _burst_lines(kept, room) == []
