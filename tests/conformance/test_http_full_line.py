"""A full line over HTTP, on every store: maxWaiting / maxWaitSec refuse a new join with 503 queue_full
(Retry-After, no token, no cookie), keep every place already held, and count the refusal in the room's
read, in /metrics and in the hourly report's ``refusedFull`` column."""

from __future__ import annotations

import httpx
import pytest
from harness import Server, create_room, join, metric, peer_env, start_server, wait_until


def test_a_full_line_refuses_new_joins_with_503(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin, ratePerMinute=0, queueMaxPerIp=None, maxWaiting=2)["id"]
    with server.client() as v1, server.client() as v2, server.client() as v3:
        a = join(v1, rid)
        b = join(v2, rid)
        assert a.status_code == b.status_code == 200, (a.text, b.text)
        r = join(v3, rid)
        assert r.status_code == 503, r.text
        assert r.json()["code"] == "queue_full"
        assert r.headers.get("retry-after") == "60"
        assert r.json()["state"] == "full" and r.json()["retryAfterSec"] == 60  # the gated wait's names
        assert r.headers.get_list("set-cookie") == []
        assert not r.json().get("token")
        again = join(v1, rid)  # a place already held is never refused
        assert again.status_code == 200 and again.json()["ticket"] == a.json()["ticket"]
        by_token = join(v2, rid, token=b.json()["token"])
        assert by_token.status_code == 200 and by_token.json()["ticket"] == b.json()["ticket"]
    room = admin.get(f"/api/admin/rooms/{rid}").json()["room"]
    assert (room["maxWaiting"], room["maxWaitSec"], room["waiting"], room["refusedFull"]) == (2, None, 2, 1)
    assert metric(server, "qm_room_refused_full_total", room=rid) == 1.0

    def reported() -> int | None:  # summed over the room's hours: the test may straddle an hour's turn
        rows = admin.get(f"/api/admin/reports?roomId={rid}").json()["rows"]
        total = sum(int(r["refusedFull"]) for r in rows)
        return total if total else None

    assert wait_until(reported, timeout=15, what="the refusal in the hourly report") == 1
    csv_head = admin.get(f"/api/admin/reports?roomId={rid}&format=csv").text.splitlines()[0]
    tallies = "refusedFull,sessionsRevoked,tokensAccepted,tokensRefused,codesIssued,codesRedeemed,codesRefused"
    assert f"warned,{tallies},samples" in csv_head
    # lowered below the line: nobody leaves; removed: joins are taken again
    assert admin.post("/api/admin/rooms", json={"id": rid, "maxWaiting": 1}).status_code == 200
    assert admin.get(f"/api/admin/rooms/{rid}").json()["room"]["waiting"] == 2
    assert admin.post("/api/admin/rooms", json={"id": rid, "maxWaiting": None}).status_code == 200
    with server.client() as v4:
        assert join(v4, rid).status_code == 200


def test_max_wait_sec_refuses_past_the_estimate(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin, ratePerMinute=60, presenceSec=None, queueMaxPerIp=None, maxWaitSec=2)["id"]
    with server.client() as v1, server.client() as v2, server.client() as v3:
        assert join(v1, rid).status_code == 200
        assert join(v2, rid).status_code == 200
        r = join(v3, rid)
        assert r.status_code == 503 and r.json()["code"] == "queue_full", r.text


def test_bad_values_are_400(admin: httpx.Client) -> None:
    rid = create_room(admin)["id"]
    for field, value in (("maxWaiting", 0), ("maxWaitSec", "60"), ("maxWaiting", 1.5)):
        r = admin.post("/api/admin/rooms", json={"id": rid, field: value})
        assert r.status_code == 400 and r.json()["code"] == "invalid_field", r.text


@pytest.mark.stores("valkey")
def test_the_line_is_full_for_the_whole_fleet() -> None:
    """Two instances on one Valkey: places taken through A fill the line for joins through B, and a limit
    raised on A lets B take joins again."""
    a = start_server()
    b = None
    try:
        b = start_server(peer_env(a))
        with a.admin() as admin, a.client() as v1, a.client() as v2, b.client() as late:
            rid = create_room(admin, ratePerMinute=0, queueMaxPerIp=None, maxWaiting=2)["id"]
            assert join(v1, rid).status_code == 200
            assert join(v2, rid).status_code == 200

            refusals = 0

            def refused_on_b() -> bool:
                nonlocal refusals
                r = join(late, rid)
                assert r.status_code != 200, r.text  # the line A filled is the line B reads
                refusals += r.status_code == 503 and r.json()["code"] == "queue_full"
                return refusals > 0

            wait_until(refused_on_b, timeout=10, what="B refusing a join to the full line")
            admin.post("/api/admin/rooms", json={"id": rid, "maxWaiting": 3}).raise_for_status()
            wait_until(lambda: join(late, rid).status_code == 200, timeout=10, what="B taking joins again")
        with b.admin() as admin_b:
            room = admin_b.get(f"/api/admin/rooms/{rid}").json()["room"]
            assert (room["waiting"], room["refusedFull"]) == (3, refusals), room
    finally:
        a.stop()
        if b is not None:
            b.stop()
