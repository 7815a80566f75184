"""Measure recovery on STORE=valkey + SIDESTORE=pg (the numbers in docs/adr/0002-journal-lease-and-recovery.md).

Not a test (pytest does not collect it): a black-box run over HTTP through the conformance harness, on
real servers, with the default RESYNC_MS unless told otherwise. Run::

    STORE=valkey TEST_VALKEY_URL=redis://127.0.0.1:6379/12 \\
      TEST_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/qm_conformance_test \\
      .venv/bin/python tests/fleet/measure_recovery.py [runs]

It prints, per scenario, the time from the fault to the room answering again (every token's position
as before) and how many acknowledged joins were lost (must be 0):

* flush: every key of the server's prefix deleted (Valkey lost its data);
* rollback: the room's keys restored from a DUMP taken before the last joins (no traffic after);
* kill -9: the process killed in the middle of a join surge; time from the kill to a restarted
  process (same Valkey prefix and schema) answering the room again, boot included.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))

from harness import Server, create_room, join, start_server

POLL_SEC = 0.02


def joined(srv: Server, room: str, count: int) -> list[tuple[int, str]]:
    out = []
    with srv.client() as c:
        for _ in range(count):
            r = join(c, room)
            r.raise_for_status()
            out.append((r.json()["ticket"], r.json()["token"]))
            c.cookies.clear()
    return out


def positions(srv: Server, room: str, tokens: list[str]) -> list[Any]:
    out = []
    with srv.client() as c:
        for token in tokens:
            r = c.get("/api/status", params={"roomId": room, "token": token})
            out.append(r.json().get("position") if r.status_code == 200 else r.status_code)
    return out


def until_back(srv: Server, room: str, token: str, start: float, timeout: float = 120) -> tuple[float, int]:
    """Seconds from ``start`` until the room answers ``token`` with a position; and how many 503s it gave."""
    refusals = 0
    with srv.client(timeout=10) as c:
        while time.monotonic() - start < timeout:
            r = c.get("/api/status", params={"roomId": room, "token": token})
            if r.status_code == 200 and r.json().get("position") is not None:
                return time.monotonic() - start, refusals
            if r.status_code == 503:
                refusals += 1
            elif r.status_code != 200:
                raise AssertionError(f"{r.status_code} {r.text}")
            time.sleep(POLL_SEC)
    raise AssertionError("the room did not come back")


def room_keys(client: redis.Redis, srv: Server, room: str) -> list[bytes]:
    return list(client.scan_iter(match=f"{srv.env['VALKEY_PREFIX']}{{{room}}}:*", count=1000))


def flush_run(waiting: int) -> dict[str, Any]:
    srv = start_server()
    try:
        with srv.admin() as admin:
            room = create_room(admin, ratePerMinute=0, queueMaxPerIp=None, presenceSec=None)["id"]
        people = joined(srv, room, waiting)
        tokens = [t for _, t in people]
        before = positions(srv, room, tokens)
        client = redis.Redis.from_url(srv.env["VALKEY_URL"])
        keys = list(client.scan_iter(match=f"{srv.env['VALKEY_PREFIX']}*", count=1000))
        start = time.monotonic()
        client.delete(*keys)
        client.close()
        seconds, refusals = until_back(srv, room, tokens[-1], start)
        after = positions(srv, room, tokens)
        lost = sum(1 for a, b in zip(before, after, strict=True) if a != b)
        return {"seconds": seconds, "refusals": refusals, "lost": lost}
    finally:
        srv.stop()


def rollback_run(waiting: int) -> dict[str, Any]:
    srv = start_server()
    try:
        with srv.admin() as admin:
            room = create_room(admin, ratePerMinute=0, queueMaxPerIp=None, presenceSec=None)["id"]
        people = joined(srv, room, waiting // 2)
        client = redis.Redis.from_url(srv.env["VALKEY_URL"])
        saved = {k: client.dump(k) for k in room_keys(client, srv, room)}
        people += joined(srv, room, waiting - waiting // 2)
        tokens = [t for _, t in people]
        before = positions(srv, room, tokens)
        start = time.monotonic()
        for key in room_keys(client, srv, room):
            if key not in saved:
                client.delete(key)
        for key, value in saved.items():
            client.restore(key, 0, value, replace=True)
        client.close()
        seconds, refusals = until_back(srv, room, tokens[-1], start)
        after = positions(srv, room, tokens)
        lost = sum(1 for a, b in zip(before, after, strict=True) if a != b)
        return {"seconds": seconds, "refusals": refusals, "lost": lost}
    finally:
        srv.stop()


def kill_run(surge: int) -> dict[str, Any]:
    srv = start_server()
    again: Server | None = None
    try:
        with srv.admin() as admin:
            room = create_room(admin, ratePerMinute=0, queueMaxPerIp=None)["id"]
        acknowledged: list[tuple[int, str]] = []
        lock = threading.Lock()
        killed = threading.Event()

        def one(_: int) -> None:
            if killed.is_set():
                return
            try:
                with srv.client() as c:
                    r = join(c, room)
            except httpx.HTTPError:
                return
            if r.status_code == 200:
                with lock:
                    acknowledged.append((r.json()["ticket"], r.json()["token"]))

        with ThreadPoolExecutor(16) as pool:
            futures = [pool.submit(one, i) for i in range(surge)]
            while len(acknowledged) < surge // 4:
                time.sleep(0.005)
            srv.kill()
            start = time.monotonic()
            killed.set()
            for f in futures:
                f.result()
        env = {k: srv.env[k] for k in ("VALKEY_PREFIX", "PG_SCHEMA", "SPOOL_DIR", "SECRET", "ADMIN_KEY")}
        again = start_server(env)
        first = min(acknowledged)[1]
        seconds, _ = until_back(again, room, first, start)
        lost = 0
        with again.admin() as admin:
            for n, _token in acknowledged:
                v = admin.get(f"/api/admin/rooms/{room}/visitors/{n}")
                if v.status_code != 200 or v.json()["visitor"]["state"] != "waiting":
                    lost += 1
        return {"seconds": seconds, "acknowledged": len(acknowledged), "lost": lost}
    finally:
        if again is not None:
            again.stop()
        srv.stop()


def summary(name: str, runs: list[dict[str, Any]]) -> None:
    secs = [r["seconds"] for r in runs]
    lost = sum(r["lost"] for r in runs)
    extra = ""
    if "acknowledged" in runs[0]:
        extra = f", acknowledged joins {sum(r['acknowledged'] for r in runs)}"
    print(
        f"{name}: {len(runs)} runs, back after median {statistics.median(secs):.2f} s "
        f"(min {min(secs):.2f}, max {max(secs):.2f}); acknowledged-then-lost {lost}{extra}",
        flush=True,
    )


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    summary("valkey flush, 200 waiting", [flush_run(200) for _ in range(runs)])
    summary(
        "valkey rollback (restore of an older copy, no traffic), 200 waiting", [rollback_run(200) for _ in range(runs)]
    )
    summary("kill -9 mid surge of 400 joins -> restarted instance serving", [kill_run(400) for _ in range(runs)])


if __name__ == "__main__":
    main()
