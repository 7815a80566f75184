"""Preview links over HTTP: made by an operator for one room, state and language, opened by anyone holding them
for an hour, refused when forged or old, and never a ticket or a visitor in the room's numbers."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from harness import Server, create_room, join, tamper_signature
from passkit import b64, hkdf, unb64

STATES = ("waiting", "random", "prequeue", "turn", "paused", "full", "closed", "origin_down", "offline")
LANGS = ("en", "th", "es", "ja", "de")
HOUR_MS = 3_600_000
ServerFactory = Callable[..., Server]


def payload_of(token: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(unb64(token.split(".", 1)[0]))
    return data


def sign(payload: dict[str, Any], secret: str, form: str, purpose: str = "preview") -> str:
    """A token as the server writes it: base64url JSON, a dot, base64url HMAC-SHA256 (v2: the purpose's key)."""
    data = dict(payload)
    if form == "v2":
        data["kid"] = hkdf(secret, "qm:kid", 4).hex()
        key = hkdf(secret, f"qm:{purpose}", 32)
    else:
        data.pop("kid", None)
        key = secret.encode()
    body = b64(json.dumps(data, separators=(",", ":")).encode())
    return f"{body}.{b64(hmac.new(key, body.encode(), hashlib.sha256).digest())}"


def make_link(admin: httpx.Client, room: str, **body: Any) -> dict[str, Any]:
    r = admin.post(f"/api/admin/rooms/{room}/preview", json=body)
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


def path_of(url: str) -> str:
    return urlsplit(url).path


def config_of(page: str) -> dict[str, Any]:
    start = page.index('id="qm-config">') + len('id="qm-config">')
    data: dict[str, Any] = json.loads(page[start : page.index("</script>", start)])
    return data


def numbers(admin: httpx.Client, room: str) -> dict[str, Any]:
    """Everything the room's card counts, with the clock-driven fields left out."""
    r = admin.get(f"/api/admin/rooms/{room}")
    assert r.status_code == 200, r.text
    data = r.json()["room"]
    return {
        k: v
        for k, v in data.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and "At" not in k and k != "oldestWaitSec"
    }


def test_a_link_for_each_state_opens_without_a_credential(server: Server, admin: httpx.Client) -> None:
    room = create_room(admin, name="Spring drop", ratePerMinute=0)["id"]
    for state in STATES:
        link = make_link(admin, room, state=state, lang="th", position=7, waitSec=420)
        assert link["url"].startswith(f"{server.base_url}/preview/"), link
        assert set(link) >= {"url", "expiresAt"}
        iat = payload_of(path_of(link["url"]).rsplit("/", 1)[1])["iat"]
        assert link["expiresAt"] == iat + HOUR_MS
        with server.client() as anyone:  # no key, no cookie
            r = anyone.get(path_of(link["url"]), headers={"accept-encoding": "identity"})
        assert r.status_code == 200, (state, r.text)
        assert r.headers["content-type"].startswith("text/html")
        assert r.headers["cache-control"] == "no-store"
        assert r.headers["referrer-policy"] == "no-referrer"
        assert "set-cookie" not in r.headers, state
        assert '<html lang="th"' in r.text, state
        assert "ตัวอย่าง" in r.text, state  # the Preview marker, in the link's language
        if state in ("origin_down", "offline"):
            assert 'id="qm-preview"' in r.text
            continue
        preview = config_of(r.text)["preview"]
        if state == "full":
            assert preview["status"] is None
        else:
            assert preview["status"]["state"] == {"prequeue": "scheduled", "turn": "passed"}.get(state, "waiting")
        if state in ("waiting", "paused"):
            assert preview["status"]["position"] == 7 and preview["status"]["etaSec"] == 420
            assert preview["status"]["roomState"] == ("paused" if state == "paused" else "active")
        if state == "prequeue":
            assert preview["status"]["opensAt"] - preview["status"]["now"] == 420_000


def test_opening_every_preview_creates_no_ticket_and_counts_nothing(server: Server, admin: httpx.Client) -> None:
    room = create_room(admin, ratePerMinute=0)["id"]
    with server.client() as visitor:  # one real visitor, so the numbers are not all zero
        assert join(visitor, room).status_code == 200
    before = numbers(admin, room)
    for state in STATES:
        for lang in LANGS:
            link = make_link(admin, room, state=state, lang=lang)
            with server.client() as anyone:
                r = anyone.get(path_of(link["url"]))
                assert r.status_code == 200, r.text
                assert not anyone.cookies, dict(anyone.cookies)
    assert numbers(admin, room) == before
    # no ticket was handed out: the next real visitor is the second in the line
    with server.client() as visitor:
        second = join(visitor, room).json()
    assert second["position"] == 2, second
    after = numbers(admin, room)
    assert after["waiting"] == before["waiting"] + 1


def test_bad_bodies_are_refused_with_their_code(admin: httpx.Client) -> None:
    room = create_room(admin)["id"]
    cases: list[tuple[Any, str]] = [
        ({}, "invalid_preview_state"),
        ({"state": "sleeping"}, "invalid_preview_state"),
        ({"state": 3}, "invalid_preview_state"),
        ({"state": "waiting", "lang": "xx"}, "invalid_preview_lang"),
        ({"state": "waiting", "lang": None}, "invalid_preview_lang"),
        ({"state": "waiting", "position": 0}, "invalid_preview_value"),
        ({"state": "waiting", "position": 1.5}, "invalid_preview_value"),
        ({"state": "waiting", "position": True}, "invalid_preview_value"),
        ({"state": "waiting", "position": 1_000_001}, "invalid_preview_value"),
        ({"state": "waiting", "waitSec": -1}, "invalid_preview_value"),
        ({"state": "waiting", "waitSec": "60"}, "invalid_preview_value"),
        ({"state": "waiting", "ticket": 1}, "unknown_field"),
        ([], "bad_request"),
    ]
    for body, code in cases:
        r = admin.post(f"/api/admin/rooms/{room}/preview", json=body)
        assert r.status_code == 400, (body, r.text)
        assert r.json()["code"] == code, (body, r.text)
    r = admin.post("/api/admin/rooms/no-such-room/preview", json={"state": "waiting"})
    assert r.status_code == 404 and r.json()["code"] == "no_room", r.text


def test_forged_old_and_borrowed_links_are_refused(server: Server, admin: httpx.Client) -> None:
    room = create_room(admin, ratePerMinute=0)["id"]
    other = create_room(admin)["id"]
    token = path_of(make_link(admin, room, state="waiting")["url"]).rsplit("/", 1)[1]
    claims = payload_of(token)
    with server.client() as visitor:
        ticket = join(visitor, room).json()["token"]
    now = int(time.time() * 1000)
    refused = {
        "tampered signature": tamper_signature(token),
        "another room, old signature": f"{b64(json.dumps({**claims, 'r': other}).encode())}.{token.split('.')[1]}",
        "another secret": sign(claims, "not-the-servers-secret-at-all", "legacy"),
        "a visitor ticket": ticket,
        "a visitor ticket's claims, signed": sign({**payload_of(ticket), "t": "tk"}, server.secret, "legacy"),
        "another purpose (v2)": sign(claims, server.secret, "v2", purpose="visitor"),
        "an unknown state": sign({**claims, "s": "sleeping"}, server.secret, "legacy"),
        "not a token": "preview",
    }
    with server.client() as anyone:
        for what, forged in refused.items():
            r = anyone.get(f"/preview/{forged}")
            assert r.status_code == 403, (what, r.status_code, r.text)
            assert r.json()["code"] == "invalid_preview_link", (what, r.text)
        # the server's clock an hour and a second on: the same link, signed back then, is refused as expired
        for form in ("legacy", "v2"):
            old = sign({**claims, "iat": now - HOUR_MS - 1000}, server.secret, form)
            r = anyone.get(f"/preview/{old}")
            assert r.status_code == 410 and r.json()["code"] == "preview_expired", (form, r.text)
            fresh = sign({**claims, "iat": now - HOUR_MS + 60_000}, server.secret, form)
            assert anyone.get(f"/preview/{fresh}").status_code == 200, form
        # a preview link is no ticket: presented as one, it is refused
        r = anyone.get("/api/status", params={"roomId": room, "token": token})
        assert r.json()["ticket"] is None and r.json()["state"] == "expired", r.text


def test_a_deleted_rooms_link_is_404(server: Server, admin: httpx.Client) -> None:
    room = create_room(admin)["id"]
    link = make_link(admin, room, state="paused")
    assert admin.delete(f"/api/admin/rooms/{room}").status_code == 200
    with server.client() as anyone:
        r = anyone.get(path_of(link["url"]))
    assert r.status_code == 404 and r.json()["code"] == "no_room", r.text


def test_making_a_link_is_audited_and_a_monitor_may_not(server: Server, admin: httpx.Client) -> None:
    room = create_room(admin)["id"]
    make_link(admin, room, state="turn", lang="de")
    rows = admin.get("/api/admin/audit").json()["audit"]
    assert any(x["action"] == "room.preview" and x.get("roomId", room) == room for x in rows), rows[:3]
    monitor = admin.post("/api/admin/monitor-links").json()["token"]
    with server.client(headers={"Authorization": f"Bearer {monitor}"}) as m:
        r = m.post(f"/api/admin/rooms/{room}/preview", json={"state": "waiting"})
    assert r.status_code == 403 and r.json()["code"] == "insufficient_role", r.text


@pytest.fixture(scope="module")
def v2_server(make_module_server: ServerFactory) -> Server:
    return make_module_server({"TOKEN_SIGN_V2": "1"})


def test_v2_links_open_and_are_no_visitor_ticket(v2_server: Server) -> None:
    with v2_server.admin() as admin:
        room = create_room(admin, ratePerMinute=0)["id"]
        token = path_of(make_link(admin, room, state="prequeue", lang="ja")["url"]).rsplit("/", 1)[1]
    assert "kid" in payload_of(token)
    with v2_server.client() as anyone:
        assert anyone.get(f"/preview/{token}").status_code == 200
        r = anyone.get("/api/status", params={"roomId": room, "token": token})
        assert r.json()["ticket"] is None and r.json()["state"] == "expired", r.text
