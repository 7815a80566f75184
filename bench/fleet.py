"""BENCH_ONLY=fleet: STORE=valkey + SIDESTORE=pg side by side, in one run (the several-instances benchmarks).

Servers (each pinned to CPU 0; wrk on CPU 1; Redis and PostgreSQL unpinned on the same two cores):

  group    valkey+pg, group commit (JOURNAL_MAX_BATCH default 512)
  txn      valkey+pg, one transaction per acknowledged join (JOURNAL_MAX_BATCH=1)
  memory   STORE=memory
  second   a second valkey+pg instance on the same prefix and schema as ``group`` (one shared line),
           pinned to CPU 1 (with wrk): two instances get the machine's two cores, one instance one core

Per round, in turn: joins on group / txn / memory / group+second together; then an admitted visitor's
/api/check on group / memory / group+second. "Two instances" runs two wrk at once (half the
connections each) and adds their requests. Every 200 to a join on valkey+pg was acknowledged after
its PostgreSQL commit. Redis db, key prefix and schema are the bench's own and are deleted after.

    BENCH_VALKEY_URL   (redis://127.0.0.1:6379/11; database 0 refused)
    BENCH_DATABASE_URL (postgresql://postgres@127.0.0.1:5432/qm_bench_test; must end in _test, created if missing)
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from typing import Any
from urllib.parse import urlsplit

from httpc import Conn

import bench
from bench import CONNS, DURATION, ROUNDS, TARGET, WARMUP, Server, log, proc_cpu_seconds, run, wrk

VALKEY_URL = os.environ.get("BENCH_VALKEY_URL", "redis://127.0.0.1:6379/11")
DATABASE_URL = os.environ.get("BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/qm_bench_test")


def _guard() -> None:
    db = urlsplit(VALKEY_URL).path.strip("/")
    if not db.isdigit() or int(db) == 0:
        raise SystemExit(f"fleet: BENCH_VALKEY_URL must name a Redis database other than 0 (got {VALKEY_URL})")
    name = urlsplit(DATABASE_URL).path.strip("/")
    if not name.endswith("_test"):
        raise SystemExit(f"fleet: BENCH_DATABASE_URL must name a database ending in _test (got {name!r})")
    parts = urlsplit(DATABASE_URL)
    admin = parts._replace(path="/postgres").geturl()
    found = subprocess.run(
        ["psql", admin, "-tAc", f"SELECT 1 FROM pg_database WHERE datname='{name}'"], capture_output=True, text=True
    )
    if found.stdout.strip() != "1":
        subprocess.run(["psql", admin, "-qc", f'CREATE DATABASE "{name}"'], capture_output=True, check=True)


class ValkeyCluster:
    """A throw-away 3-master cluster on loopback (scripts/valkey-cluster.sh), ports from ``base_port``:
    its URL, its masters' pids, and ``stop()``."""

    def __init__(self, base_port: int = 7200) -> None:
        self.dir = tempfile.mkdtemp(prefix="qm-bench-cluster-")
        self.script = str(bench.ROOT / "scripts" / "valkey-cluster.sh")
        started = subprocess.run(
            ["bash", self.script, "start", self.dir],
            capture_output=True,
            text=True,
            env={**os.environ, "CLUSTER_BASE_PORT": str(base_port)},
            check=True,
        )
        self.url = started.stdout.strip().splitlines()[-1]

    def pids(self) -> list[int]:
        out = []
        for pid_file in sorted(os.listdir(self.dir)):
            if pid_file.endswith(".pid"):
                try:
                    with open(os.path.join(self.dir, pid_file)) as f:
                        out.append(int(f.read().split()[0]))
                except (OSError, ValueError):
                    pass
        return out

    def stop(self) -> None:
        subprocess.run(["bash", self.script, "stop", self.dir], capture_output=True)


def _valkey_env(tag: str, spool: str, **extra: str) -> dict[str, str]:
    return {
        **bench.SERVER_ENV,
        "STORE": "valkey",
        "SIDESTORE": "pg",
        "VALKEY_URL": VALKEY_URL,
        "DATABASE_URL": DATABASE_URL,
        "VALKEY_PREFIX": f"qmbench{tag}:",
        "PG_SCHEMA": f"qmbench_{tag}",
        "SPOOL_DIR": spool,
        **extra,
    }


def _cleanup(tags: list[str]) -> None:
    import redis

    client = redis.Redis.from_url(VALKEY_URL)
    for tag in tags:
        keys = list(client.scan_iter(match=f"qmbench{tag}:*", count=1000))
        for i in range(0, len(keys), 500):
            client.delete(*keys[i : i + 500])
        subprocess.run(
            ["psql", DATABASE_URL, "-qc", f'DROP SCHEMA IF EXISTS "qmbench_{tag}" CASCADE'], capture_output=True
        )
    client.close()


async def _journal(server: Server) -> dict[str, Any]:
    conn = await Conn(server.host, server.port).open()
    try:
        _, data = await conn.json("GET", "/api/admin/health", headers=bench.ADMIN)
        journal = ((data.get("storage") or {}).get("journal")) or _find(data, "journal") or {}
        return {k: journal.get(k) for k in ("transactions", "failedBatches", "writeErrors")}
    finally:
        await conn.close()


def _find(data: Any, key: str) -> Any:
    if isinstance(data, dict):
        if key in data and isinstance(data[key], dict):
            return data[key]
        for value in data.values():
            hit = _find(value, key)
            if hit is not None:
                return hit
    return None


async def _waiting(server: Server) -> int:
    conn = await Conn(server.host, server.port).open()
    try:
        return int((await bench.room_stats(conn, "line"))["waiting"])
    finally:
        await conn.close()


def _pair(
    name: str, targets: list[tuple[Server, str, str, dict[str, str]]], seconds: int, gate: bool = True
) -> dict[str, Any]:
    """Several wrk at once (CONNS split between them), their requests added; CPU of every server counted."""
    if gate:
        bench.wait_quiet()
    conns = max(1, CONNS // len(targets))
    cpu0 = [proc_cpu_seconds(s.pid) for s, *_ in targets]
    out: list[dict[str, Any]] = [{} for _ in targets]

    def one(i: int, server: Server, path: str, script: str, env: dict[str, str]) -> None:
        out[i] = wrk(f"{name}-{i}", server.url + path, script, env, seconds, connections=conns, record=True, gate=False)

    threads = [
        threading.Thread(target=one, args=(i, s, path, script, env)) for i, (s, path, script, env) in enumerate(targets)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cpu = sum(proc_cpu_seconds(s.pid) for s, *_ in targets) - sum(cpu0)
    requests = sum(r["requests"] for r in out)
    seconds_run = max(r["seconds"] for r in out)
    return {
        "requests": requests,
        "seconds": seconds_run,
        "rps": round(sum(r["rps"] for r in out), 1),
        "non2xx": sum(r["non2xx"] for r in out),
        "socketErrors": sum(r["socketErrors"] for r in out),
        "p99Ms": max(r["latencyMs"]["p99"] for r in out),
        "serverUsPerRequest": round(cpu * 1e6 / requests, 1) if requests else None,
        "perInstanceRps": [r["rps"] for r in out],
    }


def phase_fleet(results: dict[str, Any]) -> None:
    _guard()
    run_tag = uuid.uuid4().hex[:8]
    tags = [f"{run_tag}g", f"{run_tag}t"]
    spool = tempfile.mkdtemp(prefix="qm-bench-spool-")
    servers: dict[str, Server] = {}
    try:
        servers["group"] = Server("fleet-group", [bench.PY, "-m", "queue_manager"], _valkey_env(tags[0], spool + "/g"))
        servers["txn"] = Server(
            "fleet-txn",
            [bench.PY, "-m", "queue_manager"],
            _valkey_env(tags[1], spool + "/t", JOURNAL_MAX_BATCH="1"),
        )
        servers["memory"] = bench.qm_server("fleet-memory")
        setups = {name: run(bench._http_setup(servers[name], seed=0)) for name in ("group", "txn", "memory")}
        # the second instance joins the group's line (same prefix and schema), after the rooms exist
        servers["second"] = Server(
            "fleet-second",
            [bench.PY, "-m", "queue_manager"],
            _valkey_env(tags[0], spool + "/s", QM_INSTANCE_ID=f"bench-second-{run_tag}"),
            cpu=bench.CLIENT_CPU,  # a core of its own, as in a fleet (shared with wrk: this machine has two)
        )
        check_path = setups["group"]["checkPath"]
        origin = {"QM_ORIGIN": TARGET}
        join_env = {"QM_ROOM": "line"}
        journal_before = {n: run(_journal(servers[n])) for n in ("group", "txn", "second")}
        waiting_before = run(_waiting(servers["group"]))

        single: list[tuple[str, str, str, str, dict[str, str]]] = [
            ("join_group", "group", "/api/join", "join.lua", join_env),
            ("join_txn", "txn", "/api/join", "join.lua", join_env),
            ("join_memory", "memory", "/api/join", "join.lua", join_env),
            ("check_valkey", "group", check_path, "get.lua", origin),
            ("check_memory", "memory", setups["memory"]["checkPath"], "get.lua", origin),
        ]
        pairs: list[tuple[str, str, str, dict[str, str]]] = [
            ("join_two", "/api/join", "join.lua", join_env),
            ("check_two", check_path, "get.lua", origin),
        ]
        if WARMUP > 0:
            for name, srv, path, script, env in single:
                wrk(f"fleet-{name}-warmup", servers[srv].url + path, script, env, WARMUP, record=False, gate=False)
            for name, path, script, env in pairs:
                _pair(
                    f"fleet-{name}-warmup",
                    [(servers["group"], path, script, env), (servers["second"], path, script, env)],
                    WARMUP,
                    gate=False,
                )
        per_round = max(1, DURATION // ROUNDS)
        rounds: dict[str, list[dict[str, Any]]] = {name: [] for name, *_ in single + pairs}  # type: ignore[misc]
        order = ["join_group", "join_txn", "join_memory", "join_two", "check_valkey", "check_memory", "check_two"]
        by_name = {name: (srv, path, script, env) for name, srv, path, script, env in single}
        pair_by = {name: (path, script, env) for name, path, script, env in pairs}
        for i in range(ROUNDS):
            for name in order:
                if name in by_name:
                    srv, path, script, env = by_name[name]
                    r = wrk(
                        f"fleet-{name}-r{i + 1}", servers[srv].url + path, script, env, per_round, pid=servers[srv].pid
                    )
                    rounds[name].append(
                        {
                            "rps": r["rps"],
                            "requests": r["requests"],
                            "seconds": r["seconds"],
                            "non2xx": r["non2xx"],
                            "socketErrors": r["socketErrors"],
                            "p99Ms": r["latencyMs"]["p99"],
                            "serverUsPerRequest": r["serverUsPerRequest"],
                            "foreign": r["cpu"]["foreign"],
                        }
                    )
                else:
                    path, script, env = pair_by[name]
                    rounds[name].append(
                        _pair(
                            f"fleet-{name}-r{i + 1}",
                            [(servers["group"], path, script, env), (servers["second"], path, script, env)],
                            per_round,
                        )
                    )
            log("fleet round " + str(i + 1) + ": " + ", ".join(f"{n} {rounds[n][-1]['rps']:.0f}" for n in order))
        out: dict[str, Any] = {}
        for name, rs in rounds.items():
            requests = sum(r["requests"] for r in rs)
            seconds = sum(r["seconds"] for r in rs)
            out[name] = {
                "rps": round(requests / seconds, 1) if seconds else 0.0,
                "rounds": [r["rps"] for r in rs],
                "medianRps": round(statistics.median(r["rps"] for r in rs), 1),
                "non2xx": sum(r["non2xx"] for r in rs),
                "socketErrors": sum(r["socketErrors"] for r in rs),
                "p99MsMedian": round(statistics.median(r["p99Ms"] for r in rs), 2),
                "foreignCoresMax": max((r.get("foreign") or 0.0) for r in rs),
                "serverUsPerRequest": statistics.median(
                    [r["serverUsPerRequest"] for r in rs if r["serverUsPerRequest"] is not None] or [0.0]
                ),
            }

        def ratio(a: str, b: str) -> dict[str, Any]:
            per = [x / y for x, y in zip(out[a]["rounds"], out[b]["rounds"], strict=True) if y]
            return {
                "overall": round(out[a]["rps"] / out[b]["rps"], 3) if out[b]["rps"] else None,
                "rounds": [round(x, 3) for x in per],
                "median": round(statistics.median(per), 3) if per else None,
            }

        out["ratios"] = {
            "group_vs_txn": ratio("join_group", "join_txn"),
            "join_valkey_vs_memory": ratio("join_group", "join_memory"),
            "check_valkey_vs_memory": ratio("check_valkey", "check_memory"),
            "join_two_vs_one": ratio("join_two", "join_group"),
            "check_two_vs_one": ratio("check_two", "check_valkey"),
        }
        journal_after = {n: run(_journal(servers[n])) for n in ("group", "txn", "second")}
        out["journal"] = {"before": journal_before, "after": journal_after}
        txn = {
            n: (journal_after[n]["transactions"] or 0) - (journal_before[n]["transactions"] or 0) for n in journal_after
        }
        joined = {
            "group": sum(r["requests"] for r in rounds["join_group"]),
            "txn": sum(r["requests"] for r in rounds["join_txn"]),
            "two": sum(r["requests"] for r in rounds["join_two"]),
        }
        out["joinsPerTransaction"] = {
            "group (with the second instance's share of join_two)": round(
                (joined["group"] + joined["two"]) / max(1, txn["group"] + txn["second"]), 1
            ),
            "txn": round(joined["txn"] / max(1, txn["txn"]), 2),
        }
        out["lineGrew"] = {"before": waiting_before, "after": run(_waiting(servers["group"]))}
        verify = run(bench._http_verify(servers["second"], {**setups["group"], "statusPath": "/healthz"}))
        out["secondInstanceAdmitsTheGroupVisitor"] = verify["checkAdmit"]
        out["target3000"] = {"value": out["join_group"]["rps"], "pass": out["join_group"]["rps"] >= 3000}
        results["fleet"] = out
        for name in order:
            o = out[name]
            log(f"fleet {name}: {o['rps']:.0f} req/s (rounds {o['rounds']}), non-2xx {o['non2xx']}")
        for name, r in out["ratios"].items():
            log(f"fleet ratio {name}: {r['overall']} (median of rounds {r['median']})")
        log(f"fleet joins per transaction: {out['joinsPerTransaction']}")
    finally:
        for s in servers.values():
            s.stop()
        _cleanup(tags)
        shutil.rmtree(spool, ignore_errors=True)
        time.sleep(0.2)
