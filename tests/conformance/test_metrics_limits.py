"""/metrics and the per-address rate limits (X-RateLimit-* headers, 429 with Retry-After)."""

from __future__ import annotations

import re
from collections.abc import Callable

import httpx
import pytest
from harness import Server, create_room, join, metric, parse_metrics, scrape

PROCESS_SERIES = [
    "qm_rooms",
    "qm_sse_subscribers",
    "qm_uptime_seconds",
    "qm_shutting_down",
    "qm_storage_write_errors_total",
    "qm_unknown_room_checks_total",
    "qm_blocked_return_urls_total",
    "qm_refused_key_checks_all_total",
    "qm_rate_limited_checks_all_total",
    "qm_rejected_tokens_all_total",
]
ROOM_SERIES = [
    "qm_room_waiting",
    "qm_room_active_sessions",
    "qm_room_pending_entry",
    "qm_room_occupancy",
    "qm_room_max_concurrent",
    "qm_room_rate_per_minute",
    "qm_room_passed_last_minute",
    "qm_room_oldest_wait_seconds",
    "qm_room_state",
]


def test_metrics_exposition(server: Server) -> None:
    with server.admin() as a:
        rid = create_room(a, ratePerMinute=0)["id"]
        other = create_room(a, ratePerMinute=7)["id"]
        with server.client() as v1, server.client() as v2:
            join(v1, rid)
            join(v2, rid)
        r = a.get("/metrics")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    samples = parse_metrics(r.text)
    names = {name for name, _, _ in samples}
    for name in PROCESS_SERIES:
        assert name in names, f"{name} missing"
    for name in ROOM_SERIES:
        assert any(n == name and lab.get("room") == rid for n, lab, _ in samples), f"{name}{{room={rid}}} missing"
    # the room label as exposed (STORE=valkey adds an instance label beside it)
    assert re.search(rf'^qm_room_waiting{{(?:[^}}]*,)?room="{re.escape(rid)}"(?:,[^}}]*)?}} 2', r.text, re.M)
    assert metric(server, "qm_room_waiting", room=rid) == 2
    assert metric(server, "qm_room_waiting", room=other) == 0
    assert metric(server, "qm_room_rate_per_minute", room=other) == 7
    rooms = metric(server, "qm_rooms")
    assert rooms is not None and rooms >= 2
    assert metric(server, "qm_shutting_down") == 0
    uptime = metric(server, "qm_uptime_seconds")
    assert uptime is not None and uptime >= 0


def test_metrics_head(server: Server) -> None:
    with server.admin() as a:
        r = a.head("/metrics")
    assert r.status_code == 200
    assert r.content == b""


def test_one_process_has_no_worker_merge_and_scope_is_checked(server: Server) -> None:
    """A single process answers its own metrics on either scope, without the workers' gauges."""
    with server.admin() as a:
        for query in ("", "?scope=all", "?scope=local"):
            r = a.get("/metrics" + query)
            assert r.status_code == 200, r.text
            assert "qm_uptime_seconds" in r.text
            assert "qm_workers" not in r.text
        r = a.get("/metrics?scope=workers")
    assert r.status_code == 400 and r.json()["code"] == "bad_request", r.text


def test_deleted_room_leaves_metrics(server: Server) -> None:
    with server.admin() as a:
        rid = create_room(a)["id"]
        assert metric(server, "qm_room_waiting", room=rid) == 0
        assert a.delete(f"/api/admin/rooms/{rid}").status_code == 200
    assert metric(server, "qm_room_waiting", room=rid) is None


# ---------------------------------------------------------------------- rate limits


@pytest.fixture(scope="module")
def limited(make_module_server: Callable[..., Server]) -> Server:
    return make_module_server({"JOIN_LIMIT_PER_MIN": "3", "CHECK_LIMIT_PER_MIN": "2"})


def _rate_headers(headers: httpx.Headers) -> tuple[int, int, int]:
    return int(headers["x-ratelimit-limit"]), int(headers["x-ratelimit-remaining"]), int(headers["x-ratelimit-reset"])


def test_join_limit_headers_and_429(limited: Server) -> None:
    with limited.admin() as a:
        rid = create_room(a, ratePerMinute=0, queueMaxPerIp=None)["id"]
    remaining_seen = []
    with limited.client() as v:
        for _ in range(3):
            r = v.post("/api/join", json={"roomId": rid})
            v.cookies.clear()
            assert r.status_code == 200, r.text
            limit, remaining, reset = _rate_headers(r.headers)
            assert limit == 3
            assert 0 < reset <= 60
            remaining_seen.append(remaining)
        assert remaining_seen == [2, 1, 0]
        r = v.post("/api/join", json={"roomId": rid})
        assert r.status_code == 429, r.text
        assert isinstance(r.json()["code"], str)
        retry = int(r.headers["retry-after"])
        assert 0 < retry <= 60
        limit, remaining, reset = _rate_headers(r.headers)
        assert (limit, remaining) == (3, 0)
        assert r.headers.get_list("set-cookie") == []
        assert not r.json().get("token")
    with limited.admin() as a:
        assert a.get(f"/api/admin/rooms/{rid}").json()["room"]["waiting"] == 3


def test_check_limit_counts_429s(limited: Server) -> None:
    with limited.admin() as a:
        rid = create_room(a)["id"]
    before = metric(limited, "qm_rate_limited_checks_all_total")
    assert before is not None
    with limited.client() as v:
        codes = [
            v.get("/api/check", params={"roomId": rid, "url": "https://shop.example/"}).status_code for _ in range(4)
        ]
    assert codes[:2] == [200, 200]
    assert codes[2:] == [429, 429]
    assert metric(limited, "qm_rate_limited_checks_all_total") == before + 2
    assert any(n == "qm_rate_limited_checks_all_total" for n, _, _ in scrape(limited))
