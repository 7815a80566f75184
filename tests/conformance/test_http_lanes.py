"""Priority lanes over HTTP, on every store: a room's lanes are set, refused and read back through the
admin API; a visitor joins the default lane whatever their request says (there is no visitor-chosen
lane), and their join, status and live-stream answers carry it; the operator's read has each lane's
figures (laneStats); a lane removed live moves its people to the default lane; a room without lanes
answers without any lane."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
from harness import Server, create_room, iter_sse, join, status, wait_until

SHARES = [{"id": "public", "share": 30}, {"id": "members", "share": 70}]


def room_read(admin: httpx.Client, rid: str) -> dict[str, Any]:
    r = admin.get(f"/api/admin/rooms/{rid}")
    assert r.status_code == 200, r.text
    room: dict[str, Any] = r.json()["room"]
    return room


def test_lanes_are_set_refused_and_read_back(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin, ratePerMinute=60, lanes=SHARES)["id"]
    room = room_read(admin, rid)
    assert room["lanes"] == SHARES
    assert [(r["id"], r["waiting"], r["sharePct"], r["releasedLastMinute"]) for r in room["laneStats"]] == [
        ("public", 0, 30, 0),
        ("members", 0, 70, 0),
    ]
    for lanes, words in (
        ([{"id": "public", "share": 30}], "add up to 100"),
        ([{"id": "public", "share": 50}, {"id": "vip", "priority": 5}], "not mixed"),
        ([{"id": "Public", "priority": 5}], "lowercase"),
        ("public", "must be a list"),
    ):
        r = admin.post("/api/admin/rooms", json={"id": rid, "lanes": lanes})
        assert r.status_code == 400, r.text
        body = r.json()
        assert (body["code"], body["field"]) == ("invalid_lanes", "lanes") and words in body["error"], body
    assert room_read(admin, rid)["lanes"] == SHARES  # nothing changed
    # a room read posted straight back (laneStats and all) is accepted and changes nothing
    r = admin.post("/api/admin/rooms", json=room_read(admin, rid))
    assert r.status_code == 200 and r.json()["room"]["lanes"] == SHARES, r.text


def test_visitors_join_the_default_lane_and_see_their_place_in_it(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin, ratePerMinute=0, queueMaxPerIp=None, lanes=SHARES)["id"]
    with server.client() as first, server.client() as second:
        a = join(first, rid).json()
        # a lane in the request is not a grant: ignored, the visitor joins the default lane
        b = join(second, rid, lane="members").json()
        assert (a["lane"], a["position"], b["lane"], b["position"]) == ("public", 1, "public", 2), (a, b)
        assert status(second, rid, b["token"])["lane"] == "public"
        room = room_read(admin, rid)
        assert [(r["id"], r["waiting"]) for r in room["laneStats"]] == [("public", 2), ("members", 0)]
        # the live stream's frames carry the lane too
        with second.stream("GET", "/events", params={"roomId": rid, "token": b["token"]}) as stream:
            assert stream.status_code == 200
            frame: dict[str, Any] = {}
            deadline = time.monotonic() + 8.0
            for event in iter_sse(stream):
                if event.get("event") == "message" and "data" in event:
                    frame = json.loads(event["data"])
                    break
                assert time.monotonic() < deadline, "no frame"
        assert (frame["lane"], frame["position"]) == ("public", 2), frame
        # the room is opened: the public lane is all there is, so it gets every release
        admin.post("/api/admin/rooms", json={"id": rid, "ratePerMinute": 600}).raise_for_status()

        def released() -> dict[str, Any] | None:
            rows = room_read(admin, rid)["laneStats"]
            return rows[0] if rows[0]["releasedLastMinute"] == 2 else None

        row = wait_until(released, 10.0, what="both released from the public lane")
        assert (row["id"], row["waiting"]) == ("public", 0)


def test_a_lane_removed_live_moves_its_people_to_the_default_lane(server: Server, admin: httpx.Client) -> None:
    lanes = [{"id": "members", "priority": 50}, {"id": "public", "priority": 10}]
    rid = create_room(admin, ratePerMinute=0, queueMaxPerIp=None, lanes=lanes)["id"]
    with server.client() as v1, server.client() as v2:
        one = join(v1, rid).json()
        # the default lane is changed: members stays, but arrivals now join public
        admin.post("/api/admin/rooms", json={"id": rid, "lanes": lanes[::-1]}).raise_for_status()
        two = join(v2, rid).json()
        assert (one["lane"], two["lane"], two["position"]) == ("members", "public", 1)
        # public (the default lane) ahead of it: members' ETA counts nobody, public's counts members
        admin.post("/api/admin/rooms", json={"id": rid, "ratePerMinute": 60}).raise_for_status()
        assert status(v2, rid, two["token"])["etaSec"] == 2
        admin.post("/api/admin/rooms", json={"id": rid, "ratePerMinute": 0}).raise_for_status()
        # members removed: its visitor joins the default lane, ahead of the one who joined after
        r = admin.post("/api/admin/rooms", json={"id": rid, "lanes": [{"id": "public", "priority": 10}]})
        assert r.status_code == 200, r.text
        mine, theirs = status(v1, rid, one["token"]), status(v2, rid, two["token"])
        assert (mine["lane"], mine["position"], theirs["position"]) == ("public", 1, 2)
        # lanes cleared: one line, and nobody is told of a lane
        admin.post("/api/admin/rooms", json={"id": rid, "lanes": []}).raise_for_status()
        plain = status(v1, rid, one["token"])
        assert "lane" not in plain and plain["position"] == 1
        assert "laneStats" not in room_read(admin, rid)


def test_a_room_without_lanes_answers_without_a_lane(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin, ratePerMinute=0)["id"]
    with server.client() as v:
        body = join(v, rid, lane="members").json()
        assert "lane" not in body and body["position"] == 1
        assert "lane" not in status(v, rid, body["token"])
    room = room_read(admin, rid)
    assert room["lanes"] == [] and "laneStats" not in room
