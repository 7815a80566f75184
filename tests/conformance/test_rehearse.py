"""``qm rehearse`` against a real server: its report against the server's own counters, and ``qm simulate``
against the rehearsal of the same scenario.

Tolerance for the comparison: the median wait of the rehearsal is within 15 % or 2 s (whichever is larger)
of the simulation's. Both measure the wait as the visitor sees it (join → its page shows the pass), so
both are quantised by the same poll interval; what differs is the server's tick phase against the
arrivals (up to 1 s: the server ticks on its own second, the simulation from the first arrival) and the
HTTP time of each join, poll and door check on a shared machine (up to another second under load).
Two seconds covers those two; 15 % covers the drift that accumulates over a longer wait.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import Server, create_room

pytestmark = pytest.mark.stores("memory")

ROOT = Path(__file__).resolve().parents[2]


def _qm(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "queue_manager", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        check=False,
    )


def _rehearse(server: Server, room: str, *argv: str) -> dict[str, Any]:
    done = _qm(
        "rehearse", "--server", server.base_url, "--admin-key", server.admin_key, "--room", room, "--json", *argv
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def _counters(admin: httpx.Client, room: str) -> tuple[int, int]:
    r = admin.get(f"/api/admin/rooms/{room}").json()["room"]
    return r["joinsTotal"], r["passesTotal"]


def test_the_report_counts_what_the_server_counts(server: Server, admin: httpx.Client) -> None:
    room = create_room(admin, ratePerMinute=6000, queueMaxPerIp=None)["id"]
    joins0, passes0 = _counters(admin, room)
    r = _rehearse(server, room, "--visitors", "300", "--arrival", "const:200/s", "--stream", "0.3", "--poll-every", "1")
    joins1, passes1 = _counters(admin, room)
    assert r["finished"] is True
    assert r["errors"] == {}
    assert r["joins"]["ok"] == 300 == joins1 - joins0
    assert r["serverCounters"] == {"joinsTotal": joins1 - joins0, "passesTotal": passes1 - passes0}
    # every visitor saw its pass and walked in, and the server let out exactly those
    assert r["passesSeen"] == r["admitted"] == 300 == passes1 - passes0
    assert r["wait"]["count"] == 300
    assert r["health"]["samples"] >= 1 and r["health"]["alwaysReady"] is True


def test_no_shows_and_a_missing_room(server: Server, admin: httpx.Client) -> None:
    room = create_room(admin, ratePerMinute=6000, queueMaxPerIp=None)["id"]
    joins0, passes0 = _counters(admin, room)
    r = _rehearse(
        server, room, "--visitors", "200", "--arrival", "burst", "--no-show", "0.25", "--seed", "5", "--poll-every", "1"
    )
    joins1, passes1 = _counters(admin, room)
    assert r["joins"]["ok"] == 200 == joins1 - joins0
    assert 20 <= r["noShows"] <= 80
    assert r["admitted"] == r["passesSeen"] == 200 - r["noShows"]
    # the no-shows were let out too (absent at the head, or promoted and never used): the server counts
    # every pass it gave, the report the ones a visitor saw
    assert passes1 - passes0 >= r["passesSeen"]
    missing = _qm(
        "rehearse",
        "--server",
        server.base_url,
        "--admin-key",
        server.admin_key,
        "--room",
        "nope-nope",
        "--visitors",
        "5",
    )
    assert missing.returncode == 2
    assert "no room 'nope-nope'" in missing.stderr


def test_a_rehearsal_waits_as_long_as_the_simulation_predicts(server: Server, admin: httpx.Client) -> None:
    room = create_room(admin, ratePerMinute=1200, queueMaxPerIp=None)["id"]
    crowd = ("--visitors", "300", "--arrival", "const:100/s", "--poll-every", "1", "--no-show", "0.1")
    rehearsed = _rehearse(server, room, *crowd, "--stream", "0.3", "--seed", "4")
    done = _qm("simulate", "--rate", "1200", *crowd, "--stream", "0.3", "--seed", "4", "--json")
    assert done.returncode == 0, done.stderr
    simulated = json.loads(done.stdout)
    measured, predicted = rehearsed["wait"]["p50"], simulated["wait"]["p50"]
    assert predicted > 4  # a real line: the comparison means something
    assert abs(measured - predicted) <= max(2.0, 0.15 * predicted), (measured, predicted)
    assert rehearsed["errors"] == {}


def test_two_processes_drive_one_crowd_and_report_it_as_one(server: Server, admin: httpx.Client) -> None:
    room = create_room(admin, ratePerMinute=6000, queueMaxPerIp=None)["id"]
    joins0, passes0 = _counters(admin, room)
    crowd = ("--visitors", "200", "--arrival", "const:200/s", "--no-show", "0.1", "--stream", "0.3", "--seed", "3")
    r = _rehearse(server, room, "--processes", "2", "--poll-every", "1", *crowd)
    joins1, passes1 = _counters(admin, room)
    assert r["finished"] is True
    assert r["errors"] == {}
    assert r["arrived"] == 200
    assert r["joins"]["ok"] == 200 == joins1 - joins0
    assert r["serverCounters"] == {"joinsTotal": joins1 - joins0, "passesTotal": passes1 - passes0}
    # the same no-shows one process draws from the seed, and every other visitor walked in
    pick = random.Random(3)
    no_shows = 0
    for _ in range(200):
        no_show = pick.random() < 0.1
        no_shows += no_show
        if not no_show:
            pick.random()
    assert r["noShows"] == no_shows
    assert r["passesSeen"] == r["admitted"] == 200 - no_shows
    assert r["wait"]["count"] == 200 - no_shows
    assert r["health"]["samples"] >= 1 and r["health"]["alwaysReady"] is True
