"""Target health for snippet rooms, black-box: the leader probes a room's targetUrl (a real site in this
test's process, ``customer_site.py``), a site that goes down fires ``target_failing`` and is an incident on
/api/admin/health, and both clear when it is back. Alert frames every 200 ms, a probe every second.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from customer_site import Site
from harness import Server, create_room, free_port, wait_until

ServerFactory = Callable[..., Server]  # the make_server fixture (conftest.py)

ENV = {
    "ALERT_EVERY_MS": "200",
    "ALERT_HOLD_SEC": "0",
    "TARGET_PROBE_EVERY_MS": "1000",
    "PROXY_ALLOW_PRIVATE": "1",
}


@pytest.fixture
def site() -> Iterator[Site]:
    s = Site()
    try:
        yield s
    finally:
        s.close()


def health(srv: Server) -> dict[str, Any]:
    with srv.admin() as admin:
        r = admin.get("/api/admin/health")
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def target(srv: Server, room: str) -> dict[str, Any] | None:
    result: dict[str, Any] | None = health(srv)["targets"].get(room)
    return result


def firing(srv: Server, room: str) -> dict[str, Any] | None:
    with srv.admin() as admin:
        rows = admin.get("/api/admin/alerts").json()["firing"]
    return next((f for f in rows if f["event"] == "target_failing" and f["roomId"] == room), None)


def test_a_site_that_goes_down_fires_target_failing_and_an_incident_until_it_is_back(
    make_server: ServerFactory, site: Site
) -> None:
    srv = make_server(ENV)
    with srv.admin() as admin:
        room = create_room(admin, name="Shop", targetUrl=site.url)["id"]
    ok = wait_until(lambda: (t := target(srv, room)) and t["ok"] is True and t, timeout=20, what="a healthy probe")
    assert ok["status"] == 200 and ok["url"] == site.url and ok["summary"] == f"HEAD {site.url} → 200"
    assert isinstance(ok["latencyMs"], int) and ok["failingSince"] is None
    assert ("HEAD", site.requests[0][1]) == site.requests[0] and site.requests[0][1].startswith("queue-manager-probe/")

    site.status = 503
    row = wait_until(lambda: firing(srv, room), timeout=20, what="target_failing firing")
    assert row["severity"] == "critical"
    assert row["message"] == f"Shop: the site is not answering (HEAD {site.url} → 503)"
    h = health(srv)
    assert h["status"] == "degraded" and h["ready"] is True
    assert f"target {site.url} not answering (room {room}): HEAD → 503" in h["incidents"]
    down = h["targets"][room]
    assert down["ok"] is False and down["status"] == 503 and down["failingSince"] is not None
    with srv.client() as c:
        probe = c.get("/healthz")
    assert probe.status_code == 200 and probe.json()["ready"] is True  # a site down never takes the pod out

    site.status = 200
    wait_until(lambda: firing(srv, room) is None, timeout=20, what="target_failing resolved")
    back = wait_until(lambda: (t := target(srv, room)) and t["ok"] is True and t, timeout=20, what="the site back")
    assert back["failingSince"] is None
    assert not [i for i in health(srv)["incidents"] if i.startswith("target ")]


def test_a_private_target_is_refused_not_failing(make_server: ServerFactory, site: Site) -> None:
    srv = make_server({**ENV, "PROXY_ALLOW_PRIVATE": "0"})
    with srv.admin() as admin:
        room = create_room(admin, name="Shop", targetUrl=site.url)["id"]
    result = wait_until(lambda: target(srv, room), timeout=20, what="the refused probe")
    assert "PROXY_ALLOW_PRIVATE=1" in result["refused"] and result["ok"] is False
    assert result["summary"] == (
        f"HEAD {site.url} → refused: a private or internal address (set PROXY_ALLOW_PRIVATE=1 to probe a site "
        "on this network, or TARGET_PROBE=0 to stop probing)"
    )
    assert site.requests == []  # never contacted
    assert not [i for i in health(srv)["incidents"] if i.startswith("target ")]
    assert firing(srv, room) is None


def test_inline_rooms_are_not_target_probed(make_server: ServerFactory, site: Site) -> None:
    srv = make_server(ENV)
    with srv.admin() as admin:
        snippet = create_room(admin, targetUrl=site.url)["id"]
        inline = create_room(
            admin, targetUrl=f"http://localhost:{free_port()}", proxyOrigin=f"http://127.0.0.1:{site.port}"
        )["id"]
    wait_until(lambda: target(srv, snippet), timeout=20, what="the snippet room's probe")
    assert inline not in health(srv)["targets"]


def test_the_readme_room_under_a_reserved_name_is_not_probed_and_health_stays_ok(make_server: ServerFactory) -> None:
    """targetUrl https://shop.example (a name reserved never to resolve): reported as not probed, neither an
    incident nor a degraded /healthz, and nothing fires."""
    srv = make_server({**ENV, "PROXY_ALLOW_PRIVATE": "0"})
    with srv.admin() as admin:
        room = create_room(admin, name="Shop", targetUrl="https://shop.example")["id"]
    result = wait_until(lambda: target(srv, room), timeout=20, what="the target's report")
    assert result["notProbed"] == "reserved name" and result["ok"] is None and result["failingSince"] is None
    assert result["summary"].startswith("https://shop.example → not probed: shop.example is a name reserved")
    # several alert frames later it is still not an incident, and nothing fires
    seen = result["checkedAt"]
    wait_until(lambda: (t := target(srv, room)) and t["checkedAt"] > seen, timeout=20, what="a later round")
    h = health(srv)
    assert h["status"] == "ok", h["incidents"]
    assert not [i for i in h["incidents"] if i.startswith("target ")]
    assert firing(srv, room) is None
    with srv.client() as c:
        assert c.get("/healthz").json()["status"] == "ok"
