"""BENCH_ONLY=cluster: one Valkey against a 3-master Valkey cluster, on valkey+pg, on the same machine.

Two servers, each on a key prefix and PostgreSQL schema of its own, pinned like every phase's server:

  single   VALKEY_URL = BENCH_VALKEY_URL (one Redis, the fast lane)
  cluster  VALKEY_URL = redis+cluster://… (a lane per master; three masters started here by
           scripts/valkey-cluster.sh on free loopback ports from 7200, stopped after)

Per round, in turn: joins into one room on single / cluster, then an admitted visitor's /api/check on
single / cluster. Server CPU is read from /proc; the Redis processes' CPU is summed over the one Redis
(its pid from INFO) or over the three masters, so ``valkeyUsPerRequest`` says what a request costs
Valkey. One room is one hash slot: on the cluster its joins all go to one master, so this compares
what the cluster's client side and one master cost per request, not what more masters buy (that is more
rooms, see "Scale on paper" in docs/benchmarks.md).
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from typing import Any

from fleet import VALKEY_URL, ValkeyCluster, _cleanup, _guard, _valkey_env
from workers import measure_rounds, ratio_of, summarize

import bench
from bench import TARGET, Server, log, run


def _redis_pids(url: str) -> list[int]:
    import redis

    client = redis.Redis.from_url(url)
    try:
        return [int(client.info("server")["process_id"])]
    finally:
        client.close()


def phase_cluster(results: dict[str, Any]) -> None:
    _guard()
    run_tag = uuid.uuid4().hex[:8]
    tags = [f"{run_tag}s", f"{run_tag}c"]
    spool = tempfile.mkdtemp(prefix="qm-bench-spool-")
    cluster = ValkeyCluster()
    cluster_url = cluster.url
    servers: dict[str, Server] = {}
    try:
        argv = [bench.PY, "-m", "queue_manager"]
        servers["single"] = Server("cluster-single", argv, _valkey_env(tags[0], spool + "/s"))
        servers["cluster"] = Server("cluster-cluster", argv, _valkey_env(tags[1], spool + "/c", VALKEY_URL=cluster_url))
        redis_pids = {"single": _redis_pids(VALKEY_URL), "cluster": cluster.pids()}
        setups = {name: run(bench._http_setup(servers[name], seed=0)) for name in servers}
        origin = {"QM_ORIGIN": TARGET}
        join_env = {"QM_ROOM": "line"}
        runs = [
            ("join_single", "single", "/api/join", "join.lua", join_env),
            ("join_cluster", "cluster", "/api/join", "join.lua", join_env),
            ("check_single", "single", setups["single"]["checkPath"], "get.lua", origin),
            ("check_cluster", "cluster", setups["cluster"]["checkPath"], "get.lua", origin),
        ]
        rounds = measure_rounds("cluster", servers, runs, cpu_of=redis_pids)
        out: dict[str, Any] = {name: summarize(rs) for name, rs in rounds.items()}

        def ratio(a: str, b: str, key: str) -> float | None:
            return ratio_of(out, a, b, key)

        out["ratios"] = {
            "join_rps_cluster_vs_single": ratio("join_cluster", "join_single", "rps"),
            "check_rps_cluster_vs_single": ratio("check_cluster", "check_single", "rps"),
            "join_server_cpu_cluster_vs_single": ratio("join_cluster", "join_single", "serverUsPerRequest"),
            "check_server_cpu_cluster_vs_single": ratio("check_cluster", "check_single", "serverUsPerRequest"),
        }
        results["cluster"] = out
        for name in rounds:
            o = out[name]
            log(
                f"cluster {name}: {o['rps']:.0f} req/s (rounds {o['rounds']}), server {o['serverUsPerRequest']} us, "
                f"valkey {o['valkeyUsPerRequest']} us per request, non-2xx {o['non2xx']}"
            )
        for name, value in out["ratios"].items():
            log(f"cluster ratio {name}: {value}")
    finally:
        for s in servers.values():
            s.stop()
        _cleanup(tags[:1])
        cluster.stop()
        shutil.rmtree(spool, ignore_errors=True)
        time.sleep(0.2)
