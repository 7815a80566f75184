"""Entry codes over HTTP: generated (answered once) or uploaded as CSV, redeemed at the join once per use,
atomically, rate-limited; counted on the codes read and the room read (docs/OPERATIONS.md, Entry codes)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from conftest import ServerFactory
from harness import Server, create_room, join, metric, status, wait_until
from invites import claims, entry_key, sign


@pytest.fixture(scope="module")
def server(make_module_server: ServerFactory) -> Iterator[Server]:
    """Every test of the module tries wrong codes from 127.0.0.1: a budget large enough for all of them."""
    yield make_module_server({"CODE_TRIES_PER_MIN": "1000"})


def code_room(admin: httpx.Client, **fields: Any) -> str:
    return str(create_room(admin, ratePerMinute=0, entry="code", **fields)["id"])


def generate(admin: httpx.Client, room: str, **body: Any) -> list[str]:
    r = admin.post(f"/api/admin/rooms/{room}/codes", json=body)
    assert r.status_code == 200, r.text
    return list(r.json()["codes"])


def refused(r: httpx.Response, code: str, status_code: int = 403) -> None:
    assert r.status_code == status_code, r.text
    assert r.json()["code"] == code


def test_generated_codes_admit_once_each(server: Server, admin: httpx.Client) -> None:
    room = code_room(admin, lanes=[{"id": "public", "share": 50}, {"id": "press", "share": 50}])
    codes = generate(admin, room, count=3, lane="press")
    assert len(set(codes)) == 3
    assert all(len(c) == 11 and c[5] == "-" for c in codes)
    with server.client() as a, server.client(headers={"User-Agent": "b/1"}) as b:
        refused(join(a, room), "code_required")
        first = join(a, room, code=codes[0].lower().replace("-", " "))  # typed loosely
        assert first.status_code == 200, first.text
        # the place is kept: a reload asks nothing and spends nothing
        assert join(a, room).json()["ticket"] == first.json()["ticket"]
        assert join(a, room, code=codes[1]).json()["ticket"] == first.json()["ticket"]
        assert status(a, room)["ticket"] == first.json()["ticket"]
        refused(join(b, room, code=codes[0]), "code_used_up")
        refused(join(b, room, code="ZZZZZ-ZZZZZ"), "code_invalid")
        assert join(b, room, code=codes[1]).status_code == 200
    counts = admin.get(f"/api/admin/rooms/{room}/codes").json()
    assert counts["issued"] == 3 and counts["redeemed"] == 2 and counts["uses"] == 3
    assert counts["refused"] == {"code_invalid": 1, "code_required": 1, "code_used_up": 1}
    assert counts["byLane"] == [{"lane": "press", "codes": 3, "uses": 3, "redeemed": 2}]
    read = admin.get(f"/api/admin/rooms/{room}").json()["room"]["entryCounts"]
    assert read["codesIssued"] == 3 and read["codesRedeemed"] == 2
    assert (metric(server, "qm_entry_refused_total", code="code_used_up") or 0) >= 1


def test_a_single_use_code_raced_by_many_admits_one(server: Server, admin: httpx.Client) -> None:
    room = code_room(admin)
    (code,) = generate(admin, room, count=1)

    def one(i: int) -> int:
        with server.client(headers={"User-Agent": f"racer-{i}/1.0"}) as c:
            return join(c, room, code=code).status_code

    with ThreadPoolExecutor(6) as pool:
        answers = sorted(pool.map(one, range(6)))
    assert answers == [200, 403, 403, 403, 403, 403]


def test_a_code_with_uses_admits_that_many(server: Server, admin: httpx.Client) -> None:
    room = code_room(admin)
    (code,) = generate(admin, room, count=1, uses=2)
    with (
        server.client() as a,
        server.client(headers={"User-Agent": "b"}) as b,
        server.client(headers={"User-Agent": "c"}) as c,
    ):
        assert join(a, room, code=code).status_code == 200
        assert join(b, room, code=code).status_code == 200
        refused(join(c, room, code=code), "code_used_up")


def test_an_uploaded_csv_is_stored_and_its_bad_rows_named(server: Server, admin: httpx.Client) -> None:
    room = code_room(admin, lanes=[{"id": "public", "priority": 10}, {"id": "vip", "priority": 90}])
    csv = "code,lane,uses\nSPRING-2027,vip,2\nsummer-2027,,\nx,,\nAUTUMN-2027,Bad Lane,1\nspring-2027,vip,1\n"
    r = admin.post(f"/api/admin/rooms/{room}/codes", content=csv, headers={"Content-Type": "text/csv"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["stored"] == 2 and body["duplicates"] == 1 and body["rejectedCount"] == 2
    assert [row["line"] for row in body["rejected"]] == [4, 5]
    with server.client() as a, server.client(headers={"User-Agent": "b"}) as b:
        spring = join(a, room, code="Spring-2027")
        assert spring.status_code == 200 and spring.json()["lane"] == "vip"
        assert join(b, room, code="SUMMER2027").json()["lane"] == "public"  # no lane: the default one
    no_column = admin.post(f"/api/admin/rooms/{room}/codes", content="x\n1\n", headers={"Content-Type": "text/csv"})
    assert no_column.status_code == 200 and no_column.json()["stored"] == 0


def test_bad_generation_requests_are_refused(admin: httpx.Client) -> None:
    room = code_room(admin)
    for body in ({"count": 0}, {"count": 100_001}, {"count": 1, "lane": "No"}, {"count": 1, "uses": 0}, {}):
        r = admin.post(f"/api/admin/rooms/{room}/codes", json=body)
        assert r.status_code == 400 and r.json()["code"] == "invalid_codes", (body, r.text)
    r = admin.post(f"/api/admin/rooms/{room}/codes", json={"count": 1, "colour": "red"})
    assert r.status_code == 400 and r.json()["code"] == "unknown_field"
    assert admin.post("/api/admin/rooms/no-such-room/codes", json={"count": 1}).status_code == 404


def test_codes_for_a_lane_the_room_lacks_are_refused_when_made(admin: httpx.Client) -> None:
    """A code for a lane the room does not have could never be redeemed: refused when generated (400
    unknown_lane, naming the room's lanes), its row rejected when uploaded."""
    plain = code_room(admin)
    r = admin.post(f"/api/admin/rooms/{plain}/codes", json={"count": 1, "lane": "vip"})
    assert r.status_code == 400 and r.json()["code"] == "unknown_lane" and "one line" in r.json()["error"], r.text
    laned = code_room(admin, lanes=[{"id": "public", "share": 60}, {"id": "vip", "share": 40}])
    r = admin.post(f"/api/admin/rooms/{laned}/codes", json={"count": 1, "lane": "press"})
    assert r.status_code == 400 and r.json()["code"] == "unknown_lane" and "public, vip" in r.json()["error"]
    csv = "code,lane\nPRESS-2027,press\nVIP-2027,vip\n"
    up = admin.post(f"/api/admin/rooms/{laned}/codes", content=csv, headers={"Content-Type": "text/csv"})
    assert up.status_code == 200 and up.json()["stored"] == 1, up.text
    assert up.json()["rejected"] == [{"line": 2, "reason": "the room has no lane 'press'"}]
    assert admin.post(f"/api/admin/rooms/{laned}/codes", json={"count": 2, "lane": "vip"}).status_code == 200


def test_deleting_the_codes_refuses_them(server: Server, admin: httpx.Client) -> None:
    room = code_room(admin)
    codes = generate(admin, room, count=2)
    r = admin.delete(f"/api/admin/rooms/{room}/codes")
    assert r.status_code == 200 and r.json()["deleted"] == 2
    with server.client() as a:
        refused(join(a, room, code=codes[0]), "code_invalid")
    assert "room.codes_delete" in admin.get("/api/admin/audit", params={"room": room}).text


def test_a_code_room_takes_an_invitation_token_too(server: Server, admin: httpx.Client) -> None:
    room = code_room(admin)
    key = entry_key(admin, room)
    with server.client() as a:
        assert join(a, room, token=sign(key["key"], key["kid"], claims(room))).status_code == 200


def test_wrong_codes_tried_too_often_are_refused_with_retry_after(make_server: ServerFactory) -> None:
    srv = make_server({"CODE_TRIES_PER_MIN": "2"})
    with srv.admin() as admin, srv.client() as v:
        room = code_room(admin)
        good = generate(admin, room, count=3)
        for code in good[:2]:  # a code that admits charges nothing
            with srv.client() as ok:
                assert join(ok, room, code=code).status_code == 200
        refused(join(v, room, code="AAAAA-AAAAA"), "code_invalid")
        refused(join(v, room, code="AAAAA-AAAAB"), "code_invalid")
        r = join(v, room, code="AAAAA-AAAAC")
        refused(r, "code_rate_limited", 429)
        assert int(r.headers["Retry-After"]) >= 1
        refused(join(v, room, code=good[2]), "code_rate_limited", 429)  # until the minute is over


def test_a_refused_join_gives_the_use_back(server: Server, admin: httpx.Client) -> None:
    room = code_room(admin, maxWaiting=1)
    a_code, b_code = generate(admin, room, count=2)
    with server.client() as a, server.client(headers={"User-Agent": "b"}) as b:
        assert join(a, room, code=a_code).status_code == 200
        refused(join(b, room, code=b_code), "queue_full", 503)
        assert admin.post("/api/admin/rooms", json={"id": room, "maxWaiting": 5}).status_code == 200
        assert join(b, room, code=b_code).status_code == 200


def test_the_reports_count_codes_and_tokens_per_hour(server: Server, admin: httpx.Client) -> None:
    room = code_room(admin)
    codes = generate(admin, room, count=4)
    key = entry_key(admin, room)
    with server.client() as a, server.client(headers={"User-Agent": "b"}) as b:
        assert join(a, room, code=codes[0]).status_code == 200
        refused(join(b, room, code="ZZZZZ-ZZZZZ"), "code_invalid")
        assert join(b, room, token=sign(key["key"], key["kid"], claims(room))).status_code == 200

    def counted() -> dict[str, Any] | None:
        rows = admin.get(f"/api/admin/reports?roomId={room}").json()["rows"]
        return rows[-1] if rows and rows[-1]["tokensAccepted"] >= 1 else None

    row = wait_until(counted, timeout=15, what="the entry counted in the open hour")
    assert (row["codesIssued"], row["codesRedeemed"], row["codesRefused"]) == (4, 1, 1)
    assert (row["tokensAccepted"], row["tokensRefused"]) == (1, 0)
