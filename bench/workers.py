"""BENCH_ONLY=workers: WORKERS=1 against WORKERS=2 on valkey+pg, on the same machine.

Two servers, each on a Valkey prefix and PostgreSQL schema of its own, both allowed CPUs 0 and 1 (wrk
runs on CPU 1, as in every phase; Redis and PostgreSQL unpinned on the same two cores):

  one   WORKERS=1 (one process serves: it can use one core at a time)
  two   WORKERS=2 (a supervisor and two workers on one port)

Per round, in turn: joins on one / two, then an admitted visitor's /api/check on one / two. The
server CPU of a run is the CPU time of every process of that server (the supervisor and its workers,
read from /proc before and after), so ``serverUsPerRequest`` is what one request costs the whole
server. Redis db, key prefixes and schemas are the bench's own (BENCH_VALKEY_URL, BENCH_DATABASE_URL,
as for the fleet phase) and are deleted after.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
import uuid
from typing import Any

from fleet import _cleanup, _guard, _valkey_env

import bench
from bench import CONNS, DURATION, ROUNDS, TARGET, WARMUP, Server, log, proc_cpu_seconds, run, wrk

BOTH_CPUS = "0,1"


def _tree(pid: int) -> list[int]:
    """``pid`` and its children (a supervisor's workers)."""
    pids = [pid]
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            pids += [int(p) for p in fh.read().split()]
    except OSError:
        pass
    return pids


def _cpu(pid: int) -> float:
    return sum(proc_cpu_seconds(p) for p in _tree(pid))


def _measured(name: str, server: Server, path: str, script: str, env: dict[str, str], seconds: int) -> dict[str, Any]:
    bench.wait_quiet()
    cpu0 = _cpu(server.pid)
    r = wrk(name, server.url + path, script, env, seconds, connections=CONNS, gate=False)
    cpu = _cpu(server.pid) - cpu0
    return {
        "rps": r["rps"],
        "requests": r["requests"],
        "seconds": r["seconds"],
        "non2xx": r["non2xx"],
        "socketErrors": r["socketErrors"],
        "p99Ms": r["latencyMs"]["p99"],
        "serverCpuSeconds": round(cpu, 3),
        "serverCores": round(cpu / r["seconds"], 2) if r["seconds"] else None,
        "serverUsPerRequest": round(cpu * 1e6 / r["requests"], 1) if r["requests"] else None,
    }


Run = tuple[str, str, str, str, dict[str, str]]  # (name, server, path, wrk script, its environment)


def measure_rounds(
    phase: str,
    servers: dict[str, Server],
    runs: list[Run],
    cpu_of: dict[str, list[int]] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Warm each run up, then ROUNDS rounds of every run in turn (DURATION split between them). With
    ``cpu_of`` (server name -> pids of its Valkey processes) each run also records ``valkeyCpuSeconds``."""
    if WARMUP > 0:
        for name, srv, path, script, env in runs:
            wrk(f"{phase}-{name}-warmup", servers[srv].url + path, script, env, WARMUP, record=False, gate=False)
    per_round = max(1, DURATION // ROUNDS)
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name, *_ in runs}
    for i in range(ROUNDS):
        for name, srv, path, script, env in runs:
            pids = (cpu_of or {}).get(srv, [])
            v0 = sum(proc_cpu_seconds(p) for p in pids)
            r = _measured(f"{phase}-{name}-r{i + 1}", servers[srv], path, script, env, per_round)
            if cpu_of is not None:
                r["valkeyCpuSeconds"] = round(sum(proc_cpu_seconds(p) for p in pids) - v0, 3)
            rounds[name].append(r)
        log(f"{phase} round {i + 1}: " + ", ".join(f"{n} {rounds[n][-1]['rps']:.0f}" for n in rounds))
    return rounds


def summarize(rs: list[dict[str, Any]]) -> dict[str, Any]:
    """One route's rounds added up: req/s over all of them, each round's, errors, the median p99, and the
    server's (and, when measured, Valkey's) CPU per request."""
    requests = sum(r["requests"] for r in rs)
    seconds = sum(r["seconds"] for r in rs)
    cpu = sum(r["serverCpuSeconds"] for r in rs)
    out: dict[str, Any] = {
        "rps": round(requests / seconds, 1) if seconds else 0.0,
        "rounds": [r["rps"] for r in rs],
        "non2xx": sum(r["non2xx"] for r in rs),
        "socketErrors": sum(r["socketErrors"] for r in rs),
        "p99MsMedian": round(statistics.median(r["p99Ms"] for r in rs), 2),
        "serverCores": round(cpu / seconds, 2) if seconds else None,
        "serverUsPerRequest": round(cpu * 1e6 / requests, 1) if requests else None,
    }
    if all("valkeyCpuSeconds" in r for r in rs):
        vcpu = sum(r["valkeyCpuSeconds"] for r in rs)
        out["valkeyUsPerRequest"] = round(vcpu * 1e6 / requests, 1) if requests else None
    return out


def ratio_of(out: dict[str, Any], a: str, b: str, key: str) -> float | None:
    x, y = out[a][key], out[b][key]
    return round(x / y, 3) if x and y else None


def phase_workers(results: dict[str, Any]) -> None:
    _guard()
    run_tag = uuid.uuid4().hex[:8]
    tags = [f"{run_tag}w1", f"{run_tag}w2"]
    spool = tempfile.mkdtemp(prefix="qm-bench-spool-")
    servers: dict[str, Server] = {}
    try:
        argv = [bench.PY, "-m", "queue_manager"]
        servers["one"] = Server("workers-one", argv, _valkey_env(tags[0], spool + "/1", WORKERS="1"), cpu=BOTH_CPUS)
        servers["two"] = Server("workers-two", argv, _valkey_env(tags[1], spool + "/2", WORKERS="2"), cpu=BOTH_CPUS)
        setups = {name: run(bench._http_setup(servers[name], seed=0)) for name in servers}
        origin = {"QM_ORIGIN": TARGET}
        join_env = {"QM_ROOM": "line"}
        runs = [
            ("join_one", "one", "/api/join", "join.lua", join_env),
            ("join_two", "two", "/api/join", "join.lua", join_env),
            ("check_one", "one", setups["one"]["checkPath"], "get.lua", origin),
            ("check_two", "two", setups["two"]["checkPath"], "get.lua", origin),
        ]
        rounds = measure_rounds("workers", servers, runs)
        out: dict[str, Any] = {name: summarize(rs) for name, rs in rounds.items()}

        def ratio(a: str, b: str, key: str) -> float | None:
            return ratio_of(out, a, b, key)

        out["ratios"] = {
            "join_rps_two_vs_one": ratio("join_two", "join_one", "rps"),
            "check_rps_two_vs_one": ratio("check_two", "check_one", "rps"),
            "join_cpu_per_request_two_vs_one": ratio("join_two", "join_one", "serverUsPerRequest"),
            "check_cpu_per_request_two_vs_one": ratio("check_two", "check_one", "serverUsPerRequest"),
        }
        results["workers"] = out
        for name in rounds:
            o = out[name]
            log(
                f"workers {name}: {o['rps']:.0f} req/s (rounds {o['rounds']}), {o['serverUsPerRequest']} us server CPU "
                f"per request, {o['serverCores']} cores, non-2xx {o['non2xx']}"
            )
        for name, value in out["ratios"].items():
            log(f"workers ratio {name}: {value}")
    finally:
        for s in servers.values():
            s.stop()
        _cleanup(tags)
        shutil.rmtree(spool, ignore_errors=True)
        time.sleep(0.2)
