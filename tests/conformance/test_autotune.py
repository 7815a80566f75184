"""Autotune, black-box: a snippet room with people waiting, whose site (a real server in this test's
process, ``customer_site.py``) turns slow and then recovers. With ``AUTOTUNE=1`` the leader brings the
rate down while the site answers above ``targetLatencyMs`` and back up once it is fast again, within
``minRate``–``maxRate``, and every change is in the audit trail under the system actor.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from customer_site import Site
from harness import Server, create_room, join, wait_until

ServerFactory = Callable[..., Server]  # the make_server fixture (conftest.py)

ENV = {
    "AUTOTUNE": "1",
    "ALERT_EVERY_MS": "200",
    "TARGET_PROBE_EVERY_MS": "1000",
    "PROXY_ALLOW_PRIVATE": "1",
}
TUNING = {"enabled": True, "minRate": 10, "maxRate": 200, "targetLatencyMs": 300, "stepSec": 1}
WAITING = 60


@pytest.fixture
def site() -> Iterator[Site]:
    s = Site()
    try:
        yield s
    finally:
        s.close()


def rate(srv: Server, room: str) -> int:
    with srv.admin() as admin:
        r = admin.get(f"/api/admin/rooms/{room}")
    assert r.status_code == 200, r.text
    value: int = r.json()["room"]["ratePerMinute"]
    return value


def autotune_rows(srv: Server, room: str) -> list[dict[str, Any]]:
    with srv.admin() as admin:
        r = admin.get("/api/admin/audit", params={"roomId": room})
    assert r.status_code == 200, r.text
    return [a for a in r.json()["audit"] if a["action"] == "room.autotune"]


def test_the_rate_follows_a_site_that_turns_slow_and_recovers(make_server: ServerFactory, site: Site) -> None:
    srv = make_server(ENV)
    site.delay = 0.8  # every answer takes 800 ms: above the room's 300 ms
    with srv.admin() as admin:
        room = create_room(
            admin, name="Shop", targetUrl=site.url, ratePerMinute=60, queueMaxPerIp=None, autotune=TUNING
        )
        assert room["autotune"] == {**TUNING, "maxErrorRate": 0.05}
    with srv.client() as c:
        for _ in range(WAITING):
            c.cookies.clear()
            assert join(c, room["id"]).status_code == 200
    room_id = room["id"]

    low = wait_until(lambda: (r := rate(srv, room_id)) <= 20 and r, timeout=60, what="the rate to come down")
    assert low >= TUNING["minRate"]
    site.delay = 0.0
    wait_until(lambda: rate(srv, room_id) >= 60, timeout=60, what="the rate to climb back")

    rows = autotune_rows(srv, room_id)
    assert rows and all(r["actor"] == "system" and r["ok"] is True and r["roomId"] == room_id for r in rows)
    down = [r["detail"] for r in rows if r["detail"]["to"] < r["detail"]["from"]]
    up = [r["detail"] for r in rows if r["detail"]["to"] > r["detail"]["from"]]
    assert down and up
    assert down[-1]["reason"].startswith("target latency ") and down[-1]["reason"].endswith(" ms above 300 ms")
    assert up[-1]["reason"].startswith("target healthy: ")
    for detail in down + up:
        assert TUNING["minRate"] <= detail["to"] <= TUNING["maxRate"]


def test_without_autotune_on_nothing_moves(make_server: ServerFactory, site: Site) -> None:
    """``AUTOTUNE`` is the fleet's switch: off, a room's settings alone tune nothing."""
    srv = make_server({**ENV, "AUTOTUNE": "0"})
    site.delay = 0.8
    with srv.admin() as admin:
        room = create_room(admin, targetUrl=site.url, ratePerMinute=60, queueMaxPerIp=None, autotune=TUNING)["id"]
    with srv.client() as c:
        for _ in range(3):
            c.cookies.clear()
            assert join(c, room).status_code == 200
    # a third probe has started, so two slow answers were in the report for several frames: autotune,
    # were it on, would have acted on the first of them
    wait_until(lambda: len([m for m, _ in site.requests if m == "HEAD"]) >= 3, timeout=20, what="a third probe")
    assert rate(srv, room) == 60 and autotune_rows(srv, room) == []
