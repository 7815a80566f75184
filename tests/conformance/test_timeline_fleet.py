"""The chart's marks on STORE=valkey + SIDESTORE=pg: they survive a clean restart and every instance shows them.

Over HTTP only. Memory keeps its marks in the process, so these run on Valkey alone.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from harness import Server, create_room, join, peer_env, start_server, unique_id, wait_until

pytestmark = pytest.mark.stores("valkey")

SHARED = ("VALKEY_PREFIX", "PG_SCHEMA", "SECRET", "ADMIN_KEY")


def marks(admin: httpx.Client, room: str, res: str = "10s") -> list[dict[str, Any]]:
    r = admin.get(f"/api/admin/series/{room}?res={res}")
    r.raise_for_status()
    return list(r.json()["marks"])


def kinds(admin: httpx.Client, room: str) -> list[str]:
    return [m["kind"] for m in marks(admin, room)]


def first_sample(admin: httpx.Client, room: str) -> None:
    wait_until(lambda: admin.get(f"/api/admin/series/{room}").json()["rows"], timeout=15, what="a first sample")


@contextmanager
def pair(extra: dict[str, str] | None = None) -> Iterator[tuple[Server, Server]]:
    a = start_server(extra)
    try:
        b = start_server({**peer_env(a), **(extra or {})})
        try:
            yield a, b
        finally:
            b.stop()
    finally:
        a.stop()


def test_a_pause_and_a_rate_move_are_still_marked_after_a_clean_restart() -> None:
    srv = start_server()
    again: Server | None = None
    try:
        room = unique_id("tl")
        with srv.admin() as admin:
            create_room(admin, room, ratePerMinute=0)
            first_sample(admin, room)
            admin.post(f"/api/admin/rooms/{room}/pause").raise_for_status()
            wait_until(lambda: "pause" in kinds(admin, room), timeout=15, what="a pause mark")
            admin.post(f"/api/admin/rooms/{room}/rate", json={"ratePerMinute": 42}).raise_for_status()
            wait_until(lambda: "rate" in kinds(admin, room), timeout=15, what="a rate mark")
            before = [(m["kind"], m["note"]) for m in marks(admin, room) if m["kind"] in ("pause", "rate")]
        # a clean stop (SIGTERM), leaving the Valkey prefix and the schema in place
        srv.proc.send_signal(signal.SIGTERM)
        assert srv.wait() == 0, srv.stderr  # a clean stop exits 0
        again = start_server({**{k: srv.env[k] for k in SHARED}, "SPOOL_DIR": srv.env["SPOOL_DIR"] + "-2"})
        with again.admin() as admin:
            after = [(m["kind"], m["note"]) for m in marks(admin, room) if m["kind"] in ("pause", "rate")]
            assert after == before, (before, after)
            assert ("rate", "rate 0 → 42/min") in after
            timeline = admin.get("/api/admin/health").json()["storage"]["timeline"]
            assert timeline["writeErrors"] == 0 and timeline["dropped"] == 0
            # the 1-minute chart shows them too, and the new process's recorder did not mark them again
            assert [m for m in marks(admin, room, "1m") if m["kind"] == "pause"] == [
                m for m in marks(admin, room) if m["kind"] == "pause"
            ]
    finally:
        if again is not None:
            again.stop()
        srv.stop()


def test_a_mark_made_through_one_instance_shows_once_on_the_other() -> None:
    with pair({"PROTECTION_MODE": "enforce"}) as (a, b):
        room = unique_id("tl")
        with a.admin() as admin_a, b.admin() as admin_b:
            create_room(admin_a, room, ratePerMinute=0)
            first_sample(admin_a, room)
            first_sample(admin_b, room)
            admin_a.post(f"/api/admin/rooms/{room}/pause").raise_for_status()
            wait_until(lambda: "pause" in kinds(admin_b, room), timeout=15, what="A's pause mark on B")
            # both instances saw the flip; the fleet keeps it once
            wait_until(lambda: "pause" in kinds(admin_a, room), timeout=15, what="the pause mark on A")
            assert kinds(admin_a, room).count("pause") == 1 and kinds(admin_b, room).count("pause") == 1
            # joins refused by bot protection through A: one counted mark, on B too
            with a.client(headers={"User-Agent": "curl/8.5.0"}) as bot:
                for _ in range(3):
                    assert join(bot, room).status_code == 403

            def blocked() -> dict[str, Any] | None:
                hit = [m for m in marks(admin_b, room) if m["kind"] == "block"]
                return hit[0] if hit and sum(m["count"] for m in hit) >= 3 else None

            mark = wait_until(blocked, timeout=15, what="A's block mark on B")
            assert "refused by bot protection" in mark["note"]
            assert sum(m["count"] for m in marks(admin_b, room) if m["kind"] == "block") == 3
