"""Alerting, black-box: the conditions, the hold, the repeat, the resolved, the webhook's body and its
limits, against a real receiver process (``receiver.py``) that can be made slow, failing or unreachable.

Servers here evaluate every 200 ms (``ALERT_EVERY_MS``) so the holds are a second or two, not minutes.
A paused room with somebody waiting is the condition the tests raise (``queue_frozen``); purging the
line clears it. Pages are filtered by event all the same (a test room's ``targetUrl`` is a reserved
example name, which is not probed, so no ``target_failing`` pages beside it).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
from harness import Server, create_room, join, peer_env, spawn_server, wait_until
from receiver import Receiver

ServerFactory = Callable[..., Server]

FIELDS = {"source", "event", "status", "severity", "roomId", "message", "ts", "since", "text"}


def alert_env(receiver: Receiver | None, **extra: str) -> dict[str, str]:
    env = {"ALERT_EVERY_MS": "200", "ALERT_HOLD_SEC": "1", "ALERT_REPEAT_SEC": "3600", "ALERT_ALLOW_PRIVATE": "1"}
    if receiver is not None:
        env["ALERT_WEBHOOK_URL"] = receiver.url
    env.update(extra)
    return env


def frozen_room(srv: Server) -> str:
    with srv.admin() as admin:
        room = create_room(admin, state="paused", name="Shop")["id"]
    with srv.client() as c:
        assert join(c, room).status_code == 200
    return room


def pages_for(receiver: Receiver, room: str, event: str = "queue_frozen") -> list[dict[str, Any]]:
    return [p for p in receiver.pages() if p and p.get("event") == event and p.get("roomId") == room]


def alerts(srv: Server) -> dict[str, Any]:
    with srv.admin() as admin:
        r = admin.get("/api/admin/alerts")
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def frozen(rows: list[dict[str, Any]], room: str) -> list[dict[str, Any]]:
    """The room's queue_frozen rows (firing, holding or deliveries)."""
    return [r for r in rows if r["roomId"] == room and r["event"] == "queue_frozen"]


def purge(srv: Server, room: str) -> None:
    with srv.admin() as admin:
        assert admin.post(f"/api/admin/rooms/{room}/purge").status_code == 200


def test_fires_after_the_hold_with_the_guides_body_and_resolves(make_server: ServerFactory, receiver: Receiver) -> None:
    srv = make_server(alert_env(receiver, ALERT_HOLD_SEC="2"))
    room = frozen_room(srv)
    firing = wait_until(lambda: pages_for(receiver, room), timeout=20, what="the firing page")
    page = firing[0]
    assert set(page) == FIELDS
    assert page["source"] == "queue-manager"
    assert page["status"] == "firing" and page["severity"] == "warning"
    assert page["message"] == "Shop: 1 waiting and the room is paused"
    assert page["text"] == "[queue-manager] WARNING: Shop: 1 waiting and the room is paused"
    assert page["ts"] - page["since"] >= 2000  # held for ALERT_HOLD_SEC before it fired
    record = next(r for r in receiver.records() if r["body"] == page)
    assert record["headers"]["content-type"] == "application/json"
    assert record["path"] == "/hook/T000/secret-part"
    view = alerts(srv)
    row = next(f for f in view["firing"] if f["event"] == "queue_frozen" and f["roomId"] == room)
    assert row["since"] == page["since"] and row["firedAt"] == page["ts"]
    delivered = [d for d in view["deliveries"] if d["event"] == "queue_frozen" and d["roomId"] == room]
    assert delivered and delivered[0]["ok"] and delivered[0]["httpStatus"] == 200
    purge(srv, room)
    resolved = wait_until(
        lambda: [p for p in pages_for(receiver, room) if p["status"] == "resolved"], timeout=20, what="the resolved"
    )
    assert len(resolved) == 1
    assert resolved[0]["since"] == page["since"] and resolved[0]["ts"] > page["ts"]  # paired by event, room, since
    assert resolved[0]["text"].startswith("[queue-manager] RESOLVED: ")
    assert not [f for f in alerts(srv)["firing"] if f["roomId"] == room and f["event"] == "queue_frozen"]
    assert [p["status"] for p in pages_for(receiver, room)] == ["firing", "resolved"]


def test_a_condition_shorter_than_the_hold_never_pages(make_server: ServerFactory, receiver: Receiver) -> None:
    srv = make_server(alert_env(receiver, ALERT_HOLD_SEC="30"))
    room = frozen_room(srv)
    wait_until(
        lambda: [h for h in alerts(srv)["holding"] if h["roomId"] == room and h["event"] == "queue_frozen"],
        timeout=20,
        what="the condition listed as holding",
    )
    purge(srv, room)
    wait_until(lambda: not frozen(alerts(srv)["holding"], room), timeout=20, what="cleared")
    assert pages_for(receiver, room) == []


def test_a_condition_still_true_pages_again_every_repeat(make_server: ServerFactory, receiver: Receiver) -> None:
    srv = make_server(alert_env(receiver, ALERT_HOLD_SEC="0", ALERT_REPEAT_SEC="1"))
    room = frozen_room(srv)
    pages = wait_until(lambda: len(pages_for(receiver, room)) >= 3 and pages_for(receiver, room), timeout=30)
    assert {p["status"] for p in pages} == {"firing"}
    assert len({p["since"] for p in pages}) == 1  # one incident, re-paged
    gaps = [b["ts"] - a["ts"] for a, b in itertools.pairwise(pages)]
    assert all(g >= 1000 for g in gaps), gaps


def test_a_slow_receiver_times_out_at_5_s_and_the_page_is_retried(
    make_server: ServerFactory, receiver: Receiver
) -> None:
    receiver.mode(delay=8)
    srv = make_server(alert_env(receiver, ALERT_HOLD_SEC="0"))
    room = frozen_room(srv)

    def timed_out() -> list[dict[str, Any]]:
        return [d for d in frozen(alerts(srv)["deliveries"], room) if not d["ok"]]

    failed = wait_until(timed_out, timeout=30, what="a delivery that timed out")
    assert failed[0]["error"] == "timed out after 5 s"
    assert failed[0]["httpStatus"] is None
    receiver.mode(delay=0)
    wait_until(
        lambda: [d for d in frozen(alerts(srv)["deliveries"], room) if d["ok"]],
        timeout=60,
        what="the retried page delivered",
    )
    firing = [p for p in pages_for(receiver, room) if p["status"] == "firing"]
    assert len({p["ts"] for p in firing}) == 1  # the same page retried (its ts is when it was decided)


def test_receiver_down_then_back_gets_the_firing_and_the_resolved(
    make_server: ServerFactory, receiver: Receiver
) -> None:
    receiver.stop()
    srv = make_server(alert_env(receiver, ALERT_HOLD_SEC="0"))
    room = frozen_room(srv)
    failed = wait_until(
        lambda: [d for d in frozen(alerts(srv)["deliveries"], room) if not d["ok"]],
        timeout=20,
        what="a failed delivery while the receiver is down",
    )
    assert failed[0]["error"], failed[0]
    purge(srv, room)  # it clears while the receiver is still down
    wait_until(lambda: not frozen(alerts(srv)["firing"], room), timeout=20, what="cleared")
    receiver.start()
    pages = wait_until(
        lambda: len(pages_for(receiver, room)) >= 2 and pages_for(receiver, room), timeout=60, what="both pages"
    )
    assert sorted(p["status"] for p in pages) == ["firing", "resolved"]
    assert pages[0]["since"] == pages[1]["since"]


def test_send_test_alert_and_who_may(make_server: ServerFactory, receiver: Receiver) -> None:
    srv = make_server(alert_env(receiver))
    with srv.admin() as admin:
        r = admin.post("/api/admin/alerts")
        assert r.status_code == 200, r.text
        assert r.json()["sent"] is True
        view = admin.get("/api/admin/alerts").json()
        assert view["configured"] is True
        assert view["webhook"] == f"http://127.0.0.1:{receiver.port}/…"  # the path (the receiver's secret) is not shown
        viewer_key = admin.post("/api/admin/operators", json={"name": "v", "role": "viewer"}).json()["key"]
        link = admin.post("/api/admin/monitor-links").json()["token"]
    tests = [p for p in receiver.pages() if p["event"] == "test"]
    assert len(tests) == 1 and set(tests[0]) == FIELDS and tests[0]["roomId"] is None
    assert tests[0]["severity"] == "info" and tests[0]["status"] == "firing"
    with srv.client(headers={"Authorization": f"Bearer {viewer_key}"}) as viewer:
        assert viewer.post("/api/admin/alerts").status_code == 403
        assert viewer.get("/api/admin/alerts").json()["webhook"] is not None
    with srv.client(headers={"Authorization": f"Bearer {link}"}) as monitor:
        assert monitor.post("/api/admin/alerts").status_code == 403
        view = monitor.get("/api/admin/alerts").json()
        assert "webhook" not in view
        assert view["deliveries"] and view["deliveries"][0]["event"] == "test"


def test_without_a_webhook_conditions_are_still_evaluated(make_server: ServerFactory) -> None:
    srv = make_server(alert_env(None, ALERT_HOLD_SEC="0"))
    room = frozen_room(srv)
    view = wait_until(
        lambda: (v := alerts(srv)) and [f for f in v["firing"] if f["roomId"] == room] and v,
        timeout=20,
        what="firing now without a webhook",
    )
    assert view["configured"] is False and view["delivering"] is False and view["deliveries"] == []
    with srv.admin() as admin:
        r = admin.post("/api/admin/alerts")
    assert r.status_code == 409 and r.json()["code"] == "webhook_not_configured"


def test_a_private_webhook_refuses_start_unless_allowed(make_server: ServerFactory) -> None:

    srv = spawn_server({"ALERT_WEBHOOK_URL": "http://127.0.0.1:9/hook"})
    try:
        assert srv.wait(15) == 2
        assert "ALERT_ALLOW_PRIVATE=1" in srv.stderr and "private or internal" in srv.stderr
    finally:
        srv.stop()
    make_server({"ALERT_WEBHOOK_URL": "http://127.0.0.1:9/hook", "ALERT_ALLOW_PRIVATE": "1"})
    make_server({"ALERT_WEBHOOK_URL": "http://127.0.0.1:9/hook", "PROXY_ALLOW_PRIVATE": "1"})


@pytest.mark.stores("valkey")
def test_leader_killed_mid_incident_pages_once_and_resolves_once(
    make_server: ServerFactory, receiver: Receiver
) -> None:
    """Two instances on one Valkey: the leader is SIGKILLed after it paged; the survivor takes the lease,
    neither pages the open incident again nor forgets its resolved (the delivery state is in Valkey)."""
    # a 3 s lease (renewed every second): a loaded machine must not hand the lease over before the kill,
    # or a delivery still in flight when it moves is sent again by the other instance (at-least-once)
    env = alert_env(receiver, ALERT_HOLD_SEC="1", LEADER_LEASE_MS="3000")
    a = make_server(env)
    b = make_server({**env, **peer_env(a)})

    def leader() -> Server | None:
        for srv in (a, b):
            with srv.client() as c:
                if c.get("/healthz").json().get("leader") is True:
                    return srv
        return None

    room = frozen_room(a)
    wait_until(lambda: pages_for(receiver, room), timeout=20, what="the firing page")
    first = wait_until(leader, timeout=10, what="a leader")
    # the delivery has settled in the shared state (a kill between the POST and that save re-pages:
    # at-least-once is what a webhook without idempotency keys can promise)
    wait_until(lambda: alerts(first)["outbox"] == 0, timeout=20, what="the outbox drained")
    survivor = b if first is a else a
    # both instances list the same incident (the state is the fleet's; each reads it again at its next frame)
    for srv in (a, b):
        wait_until(
            lambda srv=srv: [f for f in alerts(srv)["firing"] if f["roomId"] == room and f["event"] == "queue_frozen"],
            timeout=10,
            what=f"the incident listed by {srv.base_url}",
        )
    first.kill()
    wait_until(
        lambda: (v := alerts(survivor))["leader"] and v["lastFrameAt"] and v, timeout=20, what="the survivor to lead"
    )
    frames_then = alerts(survivor)["lastFrameAt"]
    wait_until(lambda: alerts(survivor)["lastFrameAt"] >= frames_then + 2000, timeout=20, what="10 more frames")
    assert [p["status"] for p in pages_for(receiver, room)] == ["firing"]  # not paged again
    purge(survivor, room)
    wait_until(
        lambda: [p for p in pages_for(receiver, room) if p["status"] == "resolved"], timeout=20, what="the resolved"
    )
    frames_then = alerts(survivor)["lastFrameAt"]
    wait_until(lambda: alerts(survivor)["lastFrameAt"] >= frames_then + 2000, timeout=20, what="10 more frames")
    pages = pages_for(receiver, room)
    assert [p["status"] for p in pages] == ["firing", "resolved"]
    assert pages[0]["since"] == pages[1]["since"]
