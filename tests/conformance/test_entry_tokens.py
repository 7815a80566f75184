"""Invitation tokens over HTTP: a room whose entry is ``token`` admits the holders of tokens signed with its
entry key, once per token, one place per user key; every refusal has its code (docs/INTEGRATION.md)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from conftest import ServerFactory
from harness import Server, create_room, join, metric, status, unique_id
from invites import claims, entry_key, sign

LANES = [{"id": "public", "priority": 10}, {"id": "vip", "priority": 90}]


def token_room(admin: httpx.Client, **fields: Any) -> tuple[str, dict[str, Any]]:
    room = create_room(admin, ratePerMinute=0, entry="token", **fields)["id"]
    return room, entry_key(admin, room)


def refused(r: httpx.Response, code: str) -> None:
    assert r.status_code == 403, r.text
    assert r.json()["code"] == code
    assert r.json()["error"]


def test_entry_must_be_one_of_the_modes(admin: httpx.Client) -> None:
    r = admin.post("/api/admin/rooms", json={"id": unique_id(), "targetUrl": "https://shop.example/", "entry": "vip"})
    assert r.status_code == 400
    assert r.json()["code"] == "invalid_entry"
    room = create_room(admin)
    assert room["entry"] == "open"


def test_a_token_room_needs_a_token_and_keeps_the_place_it_gave(server: Server, admin: httpx.Client) -> None:
    room, key = token_room(admin)
    assert key["previousKid"] is None and key["alg"] == "HS256" and len(key["key"]) >= 43
    with server.client() as v:
        refused(join(v, room), "token_required")
        first = join(v, room, token=sign(key["key"], key["kid"], claims(room)))
        assert first.status_code == 200, first.text
        place = first.json()
        assert place["state"] == "waiting" and place["position"] == 1
        # a reload: the ticket cookie keeps the place, nothing is asked again
        again = join(v, room)
        assert again.status_code == 200, again.text
        assert again.json()["ticket"] == place["ticket"]
        assert status(v, room)["ticket"] == place["ticket"]


def test_the_header_carries_a_token_for_a_server_side_join(server: Server, admin: httpx.Client) -> None:
    room, key = token_room(admin)
    with server.client() as backend:
        r = backend.post(
            "/api/join",
            json={"roomId": room},
            headers={"X-QM-Enqueue-Token": sign(key["key"], key["kid"], claims(room))},
        )
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "waiting"


def test_a_token_is_used_once(server: Server, admin: httpx.Client) -> None:
    room, key = token_room(admin)
    token = sign(key["key"], key["kid"], claims(room))
    with server.client() as a, server.client(headers={"User-Agent": "another/1.0"}) as b:
        assert join(a, room, token=token).status_code == 200
        refused(join(b, room, token=token), "token_used")


def test_one_place_per_user_key_across_devices(server: Server, admin: httpx.Client) -> None:
    room, key = token_room(admin)
    with server.client() as phone, server.client(headers={"User-Agent": "laptop/1.0"}) as laptop:
        first = join(phone, room, token=sign(key["key"], key["kid"], claims(room, "alice"))).json()
        join(laptop, room, token=sign(key["key"], key["kid"], claims(room, "bob")))
        second = join(laptop, room, token=sign(key["key"], key["kid"], claims(room, "alice")))
        assert second.status_code == 200, second.text
        assert second.json()["ticket"] == first["ticket"]
        assert second.json()["position"] == 1
        # both devices now follow the one place
        assert status(laptop, room)["ticket"] == first["ticket"]
        assert status(phone, room)["ticket"] == first["ticket"]


def test_two_racing_joins_of_one_user_key_get_one_place(server: Server, admin: httpx.Client) -> None:
    room, key = token_room(admin)
    tokens = [sign(key["key"], key["kid"], claims(room, "carol")) for _ in range(4)]

    def one(i: int) -> int:
        with server.client(headers={"User-Agent": f"device-{i}/1.0"}) as c:
            r = join(c, room, token=tokens[i])
            assert r.status_code == 200, r.text
            return int(r.json()["ticket"])

    with ThreadPoolExecutor(4) as pool:
        tickets = set(pool.map(one, range(4)))
    assert len(tickets) == 1
    assert admin.get(f"/api/admin/rooms/{room}").json()["room"]["waiting"] == 1


@pytest.mark.parametrize(
    ("case", "code"),
    [
        ("tampered", "token_invalid"),
        ("unknown_kid", "token_invalid"),
        ("malformed", "token_invalid"),
        ("alg_none", "token_invalid"),
        ("too_long_lived", "token_invalid"),
        ("no_sub", "token_invalid"),
        ("bad_lane", "token_invalid"),
        ("expired", "token_expired"),
        ("other_room", "token_wrong_room"),
        ("other_address", "token_ip_mismatch"),
    ],
)
def test_each_refusal_has_its_code(server: Server, admin: httpx.Client, case: str, code: str) -> None:
    room, key = token_room(admin)
    other, other_key = token_room(admin)
    good = claims(room)
    token = {
        "tampered": lambda: sign(key["key"], key["kid"], good)[:-3] + "AAA",
        "unknown_kid": lambda: sign(key["key"], "feedfeedfeed", good),
        "malformed": lambda: "eyJub3Qgc28.e30.c2ln",
        "alg_none": lambda: sign(key["key"], key["kid"], good, alg="none"),
        "too_long_lived": lambda: sign(key["key"], key["kid"], {**good, "exp": int(time.time()) + 25 * 3600}),
        "no_sub": lambda: sign(key["key"], key["kid"], {k: v for k, v in good.items() if k != "sub"}),
        "bad_lane": lambda: sign(key["key"], key["kid"], {**good, "lane": "VIP lane"}),
        "expired": lambda: sign(key["key"], key["kid"], {**good, "exp": int(time.time()) - 5}),
        "other_room": lambda: sign(other_key["key"], other_key["kid"], claims(other)),
        "other_address": lambda: sign(key["key"], key["kid"], {**good, "ip": "203.0.113.9"}),
    }[case]()
    before = metric(server, "qm_entry_refused_total", code=code) or 0.0
    with server.client() as v:
        refused(join(v, room, token=token), code)
    assert (metric(server, "qm_entry_refused_total", code=code) or 0.0) == before + 1
    counts = admin.get(f"/api/admin/rooms/{room}").json()["room"]["entryCounts"]
    assert counts["tokensRefused"] == {code: 1}


def test_an_address_bound_token_admits_that_address(server: Server, admin: httpx.Client) -> None:
    room, key = token_room(admin, lanes=LANES)
    with server.client() as v:
        r = join(v, room, token=sign(key["key"], key["kid"], claims(room, ip="127.0.0.1", lane="vip")))
        assert r.status_code == 200, r.text
    counts = admin.get(f"/api/admin/rooms/{room}").json()["room"]["entryCounts"]
    assert counts["tokensAccepted"] == 1


def test_an_open_room_takes_a_token_and_counts_a_bad_one(server: Server, admin: httpx.Client) -> None:
    room = create_room(admin, ratePerMinute=0)["id"]
    key = entry_key(admin, room)
    with server.client() as v, server.client(headers={"User-Agent": "x/1"}) as w:
        assert join(v, room, token=sign(key["key"], key["kid"], claims(room))).status_code == 200
        bad = join(w, room, token=sign(key["key"], "000000000000", claims(room)))
        assert bad.status_code == 200 and bad.json()["position"] == 2  # let in as anyone: an open room
    counts = admin.get(f"/api/admin/rooms/{room}").json()["room"]["entryCounts"]
    assert counts["tokensAccepted"] == 1 and counts["tokensRefused"] == {"token_invalid": 1}


def test_following_the_link_again_keeps_the_place(server: Server, admin: httpx.Client) -> None:
    room, key = token_room(admin)
    token = sign(key["key"], key["kid"], claims(room))
    with server.client() as v:
        first = join(v, room, token=token).json()
        again = join(v, room, token=token)  # the same link opened again: the place is held, nothing spent
        assert again.status_code == 200 and again.json()["ticket"] == first["ticket"]
    assert admin.get(f"/api/admin/rooms/{room}").json()["room"]["entryCounts"]["tokensAccepted"] == 1


def test_rotation_keeps_the_previous_key_for_the_overlap(server: Server, admin: httpx.Client) -> None:
    room, first = token_room(admin)
    second = entry_key(admin, room)
    assert second["previousKid"] == first["kid"]
    assert second["previousValidUntil"] > time.time() * 1000 + 23 * 3600 * 1000
    with server.client() as a, server.client(headers={"User-Agent": "b/1"}) as b:
        assert join(a, room, token=sign(first["key"], first["kid"], claims(room))).status_code == 200
        assert join(b, room, token=sign(second["key"], second["kid"], claims(room))).status_code == 200
    audit = admin.get("/api/admin/audit", params={"room": room}).text
    assert "room.entry_key" in audit
    assert first["key"] not in audit and second["key"] not in audit


def test_without_an_overlap_the_replaced_key_stops(make_server: ServerFactory) -> None:
    srv = make_server({"ENTRY_KEY_OVERLAP_SEC": "0"})
    with srv.admin() as admin:
        room, first = token_room(admin)
        entry_key(admin, room)
        with srv.client() as v:
            refused(join(v, room, token=sign(first["key"], first["kid"], claims(room))), "token_invalid")


def test_a_refused_join_leaves_the_token_usable(server: Server, admin: httpx.Client) -> None:
    room, key = token_room(admin, maxWaiting=1)
    token = sign(key["key"], key["kid"], claims(room, "dave"))
    with server.client() as a, server.client(headers={"User-Agent": "b/1"}) as b:
        assert join(a, room, token=sign(key["key"], key["kid"], claims(room))).status_code == 200
        full = join(b, room, token=token)
        assert full.status_code == 503 and full.json()["code"] == "queue_full"
        assert admin.post("/api/admin/rooms", json={"id": room, "maxWaiting": 5}).status_code == 200
        assert join(b, room, token=token).status_code == 200


def test_the_lane_comes_from_the_token_or_the_code(server: Server, admin: httpx.Client) -> None:
    room, key = token_room(admin, lanes=LANES)
    with server.client() as plain, server.client(headers={"User-Agent": "vip/1"}) as vip:
        assert join(plain, room, token=sign(key["key"], key["kid"], claims(room))).json()["lane"] == "public"
        invited = join(vip, room, token=sign(key["key"], key["kid"], claims(room, lane="vip")))
        assert invited.status_code == 200 and invited.json()["lane"] == "vip"
        assert invited.json()["position"] == 1  # first in its own lane
    admin.post("/api/admin/rooms", json={"id": room, "entry": "code"}).raise_for_status()
    (code,) = admin.post(f"/api/admin/rooms/{room}/codes", json={"count": 1, "lane": "vip"}).json()["codes"]
    with server.client(headers={"User-Agent": "coded/1"}) as coded:
        r = join(coded, room, code=code)
        assert r.status_code == 200 and r.json()["lane"] == "vip"


def test_a_lane_the_room_lacks_refuses_the_join_and_gives_the_token_back(server: Server, admin: httpx.Client) -> None:
    room, key = token_room(admin, lanes=LANES)
    token = sign(key["key"], key["kid"], claims(room, lane="press"))
    with server.client() as v:
        r = join(v, room, token=token)
        assert r.status_code == 400 and r.json()["code"] == "unknown_lane"
        lanes = [*LANES, {"id": "press", "priority": 50}]
        admin.post("/api/admin/rooms", json={"id": room, "lanes": lanes}).raise_for_status()
        again = join(v, room, token=token)  # the same link, now that the room has the lane
        assert again.status_code == 200 and again.json()["lane"] == "press"
