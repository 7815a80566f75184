"""BENCH_ONLY=shards: a drop's sign-ups on a 3-master Valkey cluster, its pre-queue in one slot against
three (``preQueueShards``), then a sharded pre-queue of ``BENCH_SHARDS_DRAW`` (300,000) drawn and verified.

One server (``WORKERS=2``, STORE=valkey on a throw-away 3-master cluster + SIDESTORE=pg, its own prefix and
schema, deleted after) and two rooms scheduled a day ahead: ``one`` (``preQueueShards`` 1: every sign-up on
the master of its slot) and ``three`` (``preQueueShards`` 3: the room and two hidden shards, one per master).
Sign-ups are real joins through the store (``bench/million_joins.py``, each acknowledged after its PostgreSQL
commit), ``BENCH_SHARDS_JOINS`` a fill, the two rooms in turn for ``BENCH_ROUNDS`` rounds. Measured per fill:
each master's CPU (from /proc) per sign-up, and the busiest master's. Then ``three`` is topped up to
``BENCH_SHARDS_DRAW`` sign-ups and opened: seconds from the open instant until everyone is in line, each
master's CPU over it, the longest command on any master (SLOWLOG), and the published record checked by
``scripts/verify_draw.py --file``.

    BENCH_DATABASE_URL / BENCH_VALKEY_URL   as for the fleet phase (the cluster is started here)
    BENCH_SHARDS_JOINS   (50000)     sign-ups per fill
    BENCH_SHARDS_DRAW    (300000)    the sharded pre-queue drawn at the end (0: no draw)
    BENCH_ROUNDS         (2)
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from fleet import ValkeyCluster, _cleanup, _guard, _valkey_env
from httpc import Conn
from million import _children_cpu, _psql, drive
from prequeue_draw import complaints

import bench
from bench import RESULTS, Server, admin, log, proc_cpu_seconds, room_body, room_stats, run
from queue_manager.store.valkey.shards import slot_of

JOINS = int(os.environ.get("BENCH_SHARDS_JOINS", "50000"))
DRAW = int(os.environ.get("BENCH_SHARDS_DRAW", "300000"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "2"))
# joins in flight in each driver process: the same for both rooms, or (BENCH_SHARDS_PER_SLOT=1) that many for
# each slot the room's sign-ups go to, so each master sees the same load as the one slot did
CONCURRENCY = int(os.environ.get("BENCH_SHARDS_CONCURRENCY", "64"))
PER_SLOT = os.environ.get("BENCH_SHARDS_PER_SLOT", "0") == "1"
# BENCH_SHARDS_BUSY=1: while room `one` fills, redis-benchmark keeps the two masters it does not use busy, so its
# master shares the two cores with as many busy Valkey processes as in `three`'s fills
BUSY = os.environ.get("BENCH_SHARDS_BUSY", "0") == "1"
DRIVERS = 2
BENCH = Path(__file__).resolve().parent
SLOW_US = 10_000


def _iso(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def _room(server: Server, room: str, **fields: Any) -> None:
    conn = await Conn(server.host, server.port).open()
    try:
        await admin(conn, "POST", "/api/admin/rooms", room_body(room, 0, preQueueMaxPerIp=None, **fields))
    finally:
        await conn.close()


async def _stats(server: Server, room: str) -> dict[str, Any]:
    conn = await Conn(server.host, server.port).open()
    try:
        return await room_stats(conn, room)
    finally:
        await conn.close()


def _cpu(pids: list[int]) -> list[float]:
    return [proc_cpu_seconds(pid) for pid in pids]


def _commands(masters: list[Any], joins: int) -> list[dict[str, float]]:
    """Each master's Valkey time per sign-up by command (INFO commandstats since the fill began), the top 4,
    and its script calls per 100 sign-ups (``evalsha/100``)."""
    out = []
    for m in masters:
        stats = m.info("commandstats")
        per = {k.removeprefix("cmdstat_"): round(v["usec"] / max(1, joins), 1) for k, v in stats.items()}
        top = dict(sorted(per.items(), key=lambda kv: -kv[1])[:4])
        top["evalsha/100"] = round(100 * stats.get("cmdstat_evalsha", {}).get("calls", 0) / max(1, joins), 1)
        out.append(top)
    return out


def _fill(
    url: str,
    env: dict[str, str],
    room: str,
    count: int,
    first: int,
    pids: list[int],
    slots: int = 1,
    masters: list[Any] | None = None,
) -> dict[str, Any]:
    """``count`` sign-ups into ``room`` from DRIVERS processes; each master's CPU per sign-up."""
    concurrency = CONCURRENCY * (slots if PER_SLOT else 1)
    for m in masters or []:
        m.config_resetstat()
    cpu0 = _cpu(pids)
    t0 = time.monotonic()
    joins, failed = drive(url, env, room, count, first, DRIVERS, concurrency)
    wall = time.monotonic() - t0
    per = [round((b - a) * 1e6 / max(1, joins), 1) for a, b in zip(cpu0, _cpu(pids), strict=True)]
    return {
        "joins": joins,
        "failed": failed,
        "inFlightPerDriver": concurrency,
        "seconds": round(wall, 1),
        "joinsPerSec": round(joins / wall, 1),
        "valkeyUsPerJoinByMaster": per,
        "busiestMasterUsPerJoin": max(per),
        "allMastersUsPerJoin": round(sum(per), 1),
        "commandUsPerJoinByMaster": _commands(masters or [], joins),
    }


def _slowlogs(clients: list[Any], *, reset: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for c in clients:
        if reset:
            c.config_set("slowlog-log-slower-than", SLOW_US)
            c.config_set("slowlog-max-len", 1024)
            c.slowlog_reset()
        else:
            out += [
                {"us": int(e["duration"]), "command": " ".join(str(a) for a in (e["command"] or b"").split()[:2])}
                for e in c.slowlog_get(1024)
            ]
    return sorted(out, key=lambda e: -e["us"])


def _draw(server: Server, room: str, n: int, pids: list[int], masters: list[Any]) -> dict[str, Any]:
    """Open ``room`` three seconds ahead and time its draw (merge of the shards included) until all are in line."""
    _slowlogs(masters, reset=True)
    opens = time.time() + 3.0
    run(_room(server, room, opensAt=_iso(opens), preQueueShards=3))
    time.sleep(max(0.0, opens - time.time()))
    cpu0, srv0 = _cpu(pids), proc_cpu_seconds(server.pid) + _children_cpu(server.pid)
    t0 = time.monotonic()
    refused = 0
    while True:
        try:
            stats = run(_stats(server, room))
        except (RuntimeError, TimeoutError):  # a 503 while the draw holds the room
            refused += 1
            time.sleep(0.05)
            continue
        if int(stats.get("preQueue") or 0) == 0 and int(stats["waiting"]) >= n:
            break
        if time.monotonic() > t0 + 900:
            raise RuntimeError(f"shards: not drawn after 900 s: {stats}")
        time.sleep(0.1)
    seconds = time.monotonic() - t0
    slow = _slowlogs(masters, reset=False)
    return {
        "waiting": int(stats["waiting"]),
        "seconds": round(seconds, 2),
        "valkeyCpuSecondsByMaster": [round(b - a, 2) for a, b in zip(cpu0, _cpu(pids), strict=True)],
        "serverCpuSeconds": round(proc_cpu_seconds(server.pid) + _children_cpu(server.pid) - srv0, 2),
        "adminReadsRefused": refused,
        "longestValkeyCommandMs": round(slow[0]["us"] / 1000, 1) if slow else None,
        "slowCommands": slow[:8],
    }


def _verify(server: Server, room: str) -> dict[str, Any]:
    import urllib.request

    with urllib.request.urlopen(f"{server.url}/api/rooms/{room}/draw", timeout=300) as resp:
        body = resp.read()
    path = RESULTS / "shards-draw-record.json"
    path.write_bytes(body)
    done = subprocess.run(
        [bench.PY, str(bench.ROOT / "scripts" / "verify_draw.py"), "--file", str(path)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    handles = len(orjson.loads(body).get("handles") or [])
    return {
        "recordBytes": len(body),
        "handles": handles,
        "verifyExit": done.returncode,
        "verifySays": (done.stdout + done.stderr).strip().splitlines()[-1:] or [""],
    }


def _busy(masters: list[Any]) -> list[subprocess.Popen[bytes]]:
    """redis-benchmark on each of ``masters`` (GETs of keys of its own slots), until terminated."""
    procs = []
    for m in masters:
        port = str(m.connection_pool.connection_kwargs["port"])
        cmd = ["redis-benchmark", "-p", port, "-c", "4", "-n", "1000000000", "-t", "ping", "-q"]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return procs


def _masters(cluster: ValkeyCluster) -> list[Any]:
    """A client on each master (the ports scripts/valkey-cluster.sh wrote), in port order."""
    import redis

    ports = sorted(int(p) for p in Path(cluster.dir, "ports").read_text().split())
    return [redis.Redis(host="127.0.0.1", port=p) for p in ports]


def phase_shards(results: dict[str, Any]) -> None:
    _guard()
    tag = "h" + uuid.uuid4().hex[:8]
    spool = tempfile.mkdtemp(prefix="qm-bench-shards-")
    cluster = ValkeyCluster(base_port=7300)
    server: Server | None = None
    out: dict[str, Any] = {"joinsPerFill": JOINS, "rounds": ROUNDS, "perSlot": PER_SLOT}
    masters: list[Any] = []
    try:
        masters = _masters(cluster)
        pids = [int(m.info("server")["process_id"]) for m in masters]
        env = _valkey_env(tag, spool, VALKEY_URL=cluster.url, WORKERS="2", MAX_CONNECTIONS="0")
        server = Server("shards", [bench.PY, "-m", "queue_manager"], env, cpu="0,1")
        day = _iso(time.time() + 86_400)
        run(_room(server, "one", opensAt=day))
        run(_room(server, "three", opensAt=day, preQueueShards=3))
        time.sleep(1.0)
        fills: dict[str, list[dict[str, Any]]] = {"one": [], "three": []}
        first = 0
        own = slot_of("one") * 3 // 16384  # the master (in port order) that holds room `one`
        for r in range(ROUNDS):
            for room in ("one", "three"):
                load = _busy([m for i, m in enumerate(masters) if i != own]) if BUSY and room == "one" else []
                try:
                    got = _fill(cluster.url, env, room, JOINS, first, pids, 3 if room == "three" else 1, masters)
                finally:
                    for proc in load:
                        proc.terminate()
                        proc.wait()
                first += JOINS
                fills[room].append(got)
                log(
                    f"shards: round {r + 1} {room}: {got['joins']} sign-ups in {got['seconds']} s, Valkey µs a sign-up "
                    f"by master {got['valkeyUsPerJoinByMaster']}"
                )
        out["fills"] = fills
        busiest = {room: sorted(f["busiestMasterUsPerJoin"] for f in fills[room]) for room in fills}
        out["busiestMasterUsPerJoin"] = busiest
        out["ratio"] = [round(t / o, 3) for o, t in zip(busiest["one"], busiest["three"], strict=True)]
        log(f"shards: the busiest master's Valkey µs a sign-up, one slot {busiest['one']}, three {busiest['three']}")
        if DRAW:
            n = sum(f["joins"] for f in fills["three"])  # what the drivers were told is signed up
            if DRAW > n:
                out["topUp"] = _fill(cluster.url, env, "three", DRAW - n, first, pids)
                n += out["topUp"]["joins"]
            time.sleep(1.1)  # a room's pre-queue count is summed over its shards at most once a second
            out["preQueueListed"] = int(run(_stats(server, "three")).get("preQueue") or 0)
            log(f"shards: {n} signed up in the sharded pre-queue ({out['preQueueListed']} listed); opening the drop")
            out["draw"] = _draw(server, "three", n, pids, masters)
            log(f"shards: {out['draw']['waiting']} in line {out['draw']['seconds']} s after the open instant")
            out["verify"] = _verify(server, "three")
            where = f'FROM "{env["PG_SCHEMA"]}".events'
            out["journal"] = {
                "merged": _psql(f"SELECT count(*) {where} WHERE type = 'prequeue.merge'"),
                "drained": _psql(f"SELECT count(*) {where} WHERE type = 'prequeue.drain'"),
            }
            log(f"shards: record of {out['verify']['handles']} handles, verify exit {out['verify']['verifyExit']}")
    finally:
        if server is not None:
            server.stop()
            out["serverComplaints"] = complaints(server)
        for m in masters:
            m.close()
        cluster.stop()
        _cleanup([tag])
        shutil.rmtree(spool, ignore_errors=True)
    results["shards"] = out
