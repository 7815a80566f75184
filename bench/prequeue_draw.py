"""BENCH_ONLY=draw: a scheduled drop's pre-queue of ``BENCH_DRAW_JOINS`` (300,000) joins, drawn and verified.

One server (``WORKERS=2``, STORE=valkey + SIDESTORE=pg, its own prefix and schema, deleted after) and one
room, ``drop``, scheduled a day ahead. Its pre-queue is filled with real joins through the room's join
script, each acknowledged after its PostgreSQL commit (``bench/million_joins.py``, as the ``million``
phase fills its line). Then the drop is moved to open three seconds ahead (a room change that commits a
new seed) and the server's tick draws it. Measured:

  fill     joins, seconds, joins/s, Valkey's CPU per pre-queue join
  draw     seconds from the open instant until the pre-queue is empty and the line holds everyone;
           Valkey's and the server's CPU over that span; every Valkey command that took 10 ms or more
           (SLOWLOG), the longest being the time Valkey answered nobody else; the journal's
           ``prequeue.draw`` event in bytes
  verify   ``GET /api/rooms/drop/draw`` (bytes, seconds) checked by ``scripts/verify_draw.py --file``
           (the visitor's own check: commitment, seed, recomputed order), its exit code and seconds

    BENCH_VALKEY_URL / BENCH_DATABASE_URL   as for the fleet and million phases
    BENCH_DRAW_JOINS                        (300000)
    BENCH_DRAW_RATE                         (0: the room lets nobody through, so the line is the draw)
    BENCH_VALKEY_PID                        (the Redis/Valkey process, when more than one runs here)
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from fleet import VALKEY_URL, _cleanup, _guard, _valkey_env
from httpc import Conn
from million import _children_cpu, _fill, _psql, _valkey_pid

import bench
from bench import RESULTS, Server, admin, log, proc_cpu_seconds, room_body, room_stats, run

JOINS = int(os.environ.get("BENCH_DRAW_JOINS", "300000"))
RATE = int(os.environ.get("BENCH_DRAW_RATE", "0"))  # the room's ratePerMinute (0: nobody leaves the line)
ROOM = "drop"
ROOT = Path(__file__).resolve().parent.parent
SLOW_US = 10_000


def _iso(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def _room(server: Server, **fields: Any) -> None:
    conn = await Conn(server.host, server.port).open()
    try:
        await admin(conn, "POST", "/api/admin/rooms", room_body(ROOM, RATE, preQueueMaxPerIp=None, **fields))
    finally:
        await conn.close()


async def _stats(server: Server) -> dict[str, Any]:
    conn = await Conn(server.host, server.port).open()
    try:
        return await room_stats(conn, ROOM)
    finally:
        await conn.close()


def _draw(server: Server, client: Any, valkey_pid: int | None, schema: str, n: int) -> dict[str, Any]:
    """Move the drop to three seconds ahead and time its draw until everyone is in line."""
    old_slow = client.config_get("slowlog-log-slower-than")["slowlog-log-slower-than"]
    old_len = client.config_get("slowlog-max-len")["slowlog-max-len"]
    client.config_set("slowlog-log-slower-than", SLOW_US)
    client.config_set("slowlog-max-len", 1024)
    client.slowlog_reset()
    try:
        opens = time.time() + 3.0
        run(_room(server, opensAt=_iso(opens)))
        time.sleep(max(0.0, opens - time.time()))
        srv0, vk0 = proc_cpu_seconds(server.pid) + _children_cpu(server.pid), proc_cpu_seconds(valkey_pid)
        t0 = time.monotonic()
        deadline = t0 + 600
        refused: list[str] = []
        while True:
            try:
                stats = run(_stats(server))
            except (RuntimeError, TimeoutError) as exc:  # a 503 storage_unavailable, or no answer in time
                refused.append(str(exc)[:160])
                time.sleep(0.05)
                continue
            drawn = int(stats["waiting"]) + int(stats.get("passesTotal") or 0)  # in line, or let through since
            if int(stats.get("preQueue") or 0) == 0 and drawn >= n:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"draw: not done after 600 s: {stats}")
            time.sleep(0.05)
        seconds = time.monotonic() - t0
        srv = proc_cpu_seconds(server.pid) + _children_cpu(server.pid) - srv0
        vk = proc_cpu_seconds(valkey_pid) - vk0
        slow = [
            {"us": int(e["duration"]), "command": " ".join(str(a) for a in (e["command"] or b"").split()[:2])}
            for e in client.slowlog_get(1024)
        ]
    finally:
        client.config_set("slowlog-log-slower-than", old_slow)
        client.config_set("slowlog-max-len", old_len)
    slow.sort(key=lambda e: -e["us"])
    committed = None  # the draw's event reaches PostgreSQL when the call that applied its last part returns
    while time.monotonic() < t0 + seconds + 120:
        if _psql(f"SELECT count(*) FROM \"{schema}\".events WHERE type = 'prequeue.draw'") != "0":
            committed = round(time.monotonic() - t0, 2)
            break
        time.sleep(0.1)
    where = f"FROM \"{schema}\".events WHERE type = 'prequeue.draw'"
    event = _psql(f"SELECT coalesce(max(pg_column_size(data)), 0) {where}")
    text_len = _psql(f"SELECT coalesce(max(length(data::text)), 0) {where}")
    return {
        "waiting": int(stats["waiting"]),
        "seconds": round(seconds, 2),
        "valkeyCpuSeconds": round(vk, 2) if valkey_pid else None,
        "serverCpuSeconds": round(srv, 2),
        "adminReadsRefused": len(refused),
        "firstRefusal": refused[0] if refused else None,
        "longestValkeyCommandMs": round(slow[0]["us"] / 1000, 1) if slow else None,
        "slowCommands": slow[:12],
        "drawEventBytes": {"stored": int(event or 0), "json": int(text_len or 0)},
        "eventInJournalAfterSec": committed,
    }


def _verify(server: Server) -> dict[str, Any]:
    t0 = time.monotonic()
    with urllib.request.urlopen(f"{server.url}/api/rooms/{ROOM}/draw", timeout=300) as resp:
        body = resp.read()
    fetched = time.monotonic() - t0
    path = RESULTS / "draw-record.json"
    path.write_bytes(body)
    t1 = time.monotonic()
    done = subprocess.run(
        [bench.PY, str(ROOT / "scripts" / "verify_draw.py"), "--file", str(path)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    return {
        "recordBytes": len(body),
        "fetchSeconds": round(fetched, 2),
        "verifyExit": done.returncode,
        "verifySeconds": round(time.monotonic() - t1, 2),
        "verifySays": (done.stdout + done.stderr).strip().splitlines()[-1:] or [""],
    }


def complaints(server: Server) -> dict[str, Any]:
    """What the server complained of in its log (Valkey taken for unreachable, a journal read timing out…)."""
    lines = server.log_path.read_text(errors="replace").splitlines() if server.log_path.exists() else []
    found = [ln for ln in lines if any(w in ln for w in ("failed", "unreachable", "lost", "rror"))]
    return {"count": len(found), "first": found[:5]}


def phase_draw(results: dict[str, Any]) -> None:
    import redis

    _guard()
    tag = "d" + uuid.uuid4().hex[:8]
    spool = tempfile.mkdtemp(prefix="qm-bench-draw-")
    client = redis.Redis.from_url(VALKEY_URL)
    valkey_pid = int(os.environ["BENCH_VALKEY_PID"]) if os.environ.get("BENCH_VALKEY_PID") else _valkey_pid()
    server: Server | None = None
    out: dict[str, Any] = {"joins": JOINS}
    try:
        env = _valkey_env(tag, spool, WORKERS="2", MAX_CONNECTIONS="0")
        server = Server("draw", [bench.PY, "-m", "queue_manager"], env, cpu="0,1")
        run(_room(server, opensAt=_iso(time.time() + 86_400)))
        time.sleep(1.0)
        log(f"draw: filling the pre-queue of {ROOM} with {JOINS} joins (valkey+pg, WORKERS=2)")
        out["fill"] = _fill(server, env, valkey_pid, room=ROOM, tickets=JOINS)
        n = int(out["fill"]["waiting"])
        log(f"draw: {n} in the pre-queue in {out['fill']['seconds']} s; opening the drop")
        out["draw"] = _draw(server, client, valkey_pid, env["PG_SCHEMA"], n)
        log(
            f"draw: {out['draw']['waiting']} in line {out['draw']['seconds']} s after the open instant; "
            f"longest Valkey command {out['draw']['longestValkeyCommandMs']} ms; "
            f"draw event {out['draw']['drawEventBytes']['json']} bytes"
        )
        out["verify"] = _verify(server)
        log(f"draw: record {out['verify']['recordBytes']} bytes, verify exit {out['verify']['verifyExit']}")
    finally:
        if server is not None:
            server.stop()
            out["serverComplaints"] = complaints(server)
        _cleanup([tag])
        shutil.rmtree(spool, ignore_errors=True)
        client.close()
    results["draw"] = out
