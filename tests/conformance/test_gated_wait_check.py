"""The door check describes the wait on request (``/api/check?wait=1``): the GatedWait body a connector
answers a request that asked for JSON, on every store."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import httpx
from harness import Server, create_room, join, status

PAGE = "https://shop.example/api/cart"


def test_a_refused_check_with_wait_1_describes_the_wait(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin, targetUrl="https://shop.example/", ratePerMinute=0, queueMaxPerIp=None)["id"]
    with server.client() as first, server.client() as second:
        assert join(first, rid).status_code == 200
        token = join(second, rid).json()["token"]
        # without wait=1 the refusal is as it was: no description
        plain = second.get("/api/check", params={"roomId": rid, "url": PAGE})
        assert plain.status_code == 200 and plain.json()["admit"] is False and "wait" not in plain.json()
        r = second.get("/api/check", params={"roomId": rid, "url": PAGE, "wait": "1"})
        assert r.status_code == 200, r.text
        verdict = r.json()
        wait = verdict["wait"]
        assert wait["roomId"] == rid and wait["state"] == "waiting" and wait["reason"] == "waiting"
        assert wait["position"] == status(second, rid, token)["position"] == 2
        assert wait["etaSec"] is None and wait["roomState"] == "active"  # a rate of 0: the line does not move
        assert wait["retryAfterSec"] == 5 and wait["code"] == "queued"
        assert wait["waitingUrl"] == verdict["waitUrl"]
        assert parse_qs(urlsplit(wait["waitingUrl"]).query)["qm_return"] == [PAGE]
        # the estimate follows the rate
        assert admin.post(f"/api/admin/rooms/{rid}/rate", json={"ratePerMinute": 1}).status_code == 200
        moving = second.get("/api/check", params={"roomId": rid, "url": PAGE, "wait": "1"}).json()["wait"]
        assert moving["state"] == "waiting"  # the second place needs two turns at 1 a minute
        assert moving["etaSec"] == 60 * moving["position"]
        # a paused room keeps the place and says paused
        assert admin.post(f"/api/admin/rooms/{rid}/pause", json={}).status_code == 200
        paused = second.get("/api/check", params={"roomId": rid, "url": PAGE, "wait": "1"}).json()["wait"]
        assert paused["state"] == "paused" and paused["roomState"] == "paused"
    with server.client() as stranger:  # no place in line
        none = stranger.get("/api/check", params={"roomId": rid, "url": PAGE, "wait": "1"}).json()["wait"]
        assert none["state"] == "not_in_line" and none["reason"] == "no_ticket" and none["position"] is None
        bad = stranger.get("/api/check", params={"roomId": rid, "wait": "yes"})
        assert bad.status_code == 400 and bad.json()["code"] == "bad_request"
