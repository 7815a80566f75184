"""Hot-path benchmarks, side by side with a raw-ASGI hello-world on the same stack (``make bench``).

Run through bench/run.sh, which installs wrk and pins this driver (and so every client it starts) to
CPU 1; every server it starts is pinned to CPU 0. Loopback only; every load run is bounded in time
and, where it creates state, in count.

Phases (BENCH_ONLY=comma,list picks some; BENCH_DURATION / BENCH_WARMUP shorten the wrk runs):

  http     hello-world baseline, /api/check (admitted visitor, token + door key, with and without the
           tag's Origin header), /api/status (waiting visitor), /api/join (new visitors)
  sse      N /events streams (bench/sse_fanout.py): frames/s and frame delay
  outflow  a room at 6,000/min with 8,000 waiting: passesTotal over exactly 60 s (monotonic)
  ssescale (opt-in) /events at scale: a fresh server per size (BENCH_SSE_SCALE, default 10000,19000 streams),
           server CPU us per frame, frame delay p50/p99, RSS per open stream; with BENCH_BASELINE, the other
           checkout's server runs each size too, interleaved, and the ratios are reported; BENCH_SSE_STORE=valkey
           runs the servers on Valkey + PostgreSQL (as the fleet phase does) and adds Valkey's CPU us per frame;
           BENCH_SSE_STORE=cluster the same on a 3-master Valkey cluster started for each server (the masters'
           CPU summed)
  edgepass (opt-in) an admitted visitor through the edge gate Worker in workerd: the edge pass checked in the
           Worker against the /api/check round trip, requests/s per core and queue requests (bench/edgepass.py)
  gate     (opt-in) nginx in front of an app with and without the forward-auth gate (GET /api/gate, the shipped
           connectors/nginx configuration), an admitted visitor's cookies: requests/s on one core, CPU us per
           request and the added latency, driven with ab (bench/forward_auth.py)
  million  (opt-in) a million waiting tickets in one room on valkey+pg (WORKERS=2), filled by real joins: Valkey
           memory per ticket (INFO memory and MEMORY USAGE per key), PostgreSQL journal and WAL bytes per join,
           and (BENCH_MILLION_STREAMS) the live /events streams the same server holds (bench/million.py)
  memory   a fresh server, 100,000 waiting tickets in one room: VmRSS before and after; and the engine's
           own Python heap for the same line (bench/engine_heap.py, tracemalloc, in a process of its own)

Writes bench/results/latest.json (and each wrk run's raw output next to it) and prints a table.
"""

from __future__ import annotations

import asyncio
import datetime
import importlib.metadata
import os
import platform
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
from httpc import UA, Conn, fan_out, fill, run  # noqa: E402

RESULTS = BENCH / "results"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PY = sys.executable
SERVER_CPU = "0"
CLIENT_CPU = "1"
HOST = "127.0.0.1"
CONNS = int(os.environ.get("BENCH_CONNECTIONS", "64"))
DURATION = int(os.environ.get("BENCH_DURATION", "10"))
WARMUP = int(os.environ.get("BENCH_WARMUP", "2"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
SSE_STREAMS = int(os.environ.get("BENCH_SSE_STREAMS", "2000"))
# the file-descriptor limit is often 20,000 per process: 19,000 streams leave room for the rest
SSE_SCALE = [int(n) for n in os.environ.get("BENCH_SSE_SCALE", "10000,19000").split(",") if n.strip()]
SSE_STORE = os.environ.get("BENCH_SSE_STORE", "memory")  # the ssescale phase's store: memory, valkey or cluster (+ pg)
SSE_US_PER_FRAME_TARGET = 25.0
SSE_KB_PER_STREAM_TARGET = 16.0
SSE_VALKEY_US_PER_STREAM_SEC = 1.0  # a replica of the line: Valkey CPU per stream-second
SSE_VALKEY_SERVER_US_PER_STREAM_SEC = 15.0  # and the server's
OUTFLOW_WINDOW = float(os.environ.get("BENCH_OUTFLOW_SECONDS", "60"))
OUTFLOW_RATE = 6000
OUTFLOW_SEED = 8000
QUIET_MAX_WAIT = float(os.environ.get("BENCH_QUIET_WAIT", "0.5"))
PROFILE_SECONDS = int(os.environ.get("BENCH_PROFILE_SECONDS", "6"))
BREAKDOWN_N = int(os.environ.get("BENCH_BREAKDOWN_N", "40000"))
MEMORY_TICKETS = int(os.environ.get("BENCH_MEMORY_TICKETS", "100000"))
# another checkout (e.g. `git worktree add /tmp/qm-base HEAD~1`): the check phase runs its server too, in the
# same interleaved rounds, so a change is judged against the code before it on the same machine, same minute
BASELINE = os.environ.get("BENCH_BASELINE", "")
ADMIN_KEY = "bench-admin-key-0123456789abcdef0123456789"
SECRET = "bench-secret-0123456789abcdef0123456789abcdef"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
TARGET = "https://shop.example"
CHECK_RATIO_TARGET = 0.5
SSE_DELAY_P99_NOTE_MS = 1000
RSS_TARGET_MB = 200

SERVER_ENV = {
    "HOST": HOST,
    "PORT": "0",
    "ADMIN_KEY": ADMIN_KEY,
    "SECRET": SECRET,
    "JOIN_LIMIT_PER_MIN": "0",
    "CHECK_LIMIT_PER_MIN": "0",
    "WAITING_LIMIT_PER_MIN": "0",
    "SSE_PER_IP": "0",
    "SSE_MAX_TOTAL": "0",
}


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------- processes


class Server:
    """A server process pinned to CPU 0; ready once it prints a line with ``listening`` and its URL."""

    def __init__(
        self, name: str, argv: list[str], env: dict[str, str], cpu: str = SERVER_CPU, cwd: Path = ROOT
    ) -> None:
        self.name = name
        self.target_pid: int | None = None
        self.log_path = RESULTS / f"server-{name}.log"
        self.log_file = open(self.log_path, "wb")
        full_env = {**os.environ, **env}
        self.proc = subprocess.Popen(
            ["taskset", "-c", cpu, *argv],
            cwd=cwd,
            env=full_env,
            stdout=self.log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        self.url = self._wait_ready(30.0)
        m = re.match(r"http://([^:/]+):(\d+)", self.url)
        assert m is not None
        self.host, self.port = m.group(1), int(m.group(2))

    @property
    def pid(self) -> int:
        # taskset execs the program: same pid; under py-spy the server is py-spy's child
        return self.target_pid or self.proc.pid

    def _wait_ready(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log_path.read_text(errors="replace")
            for line in text.splitlines():
                if "listening" in line:
                    m = re.search(r"http://\S+", line)
                    if m:
                        return m.group(0).rstrip("/")
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited early:\n{text}")
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{self.name} did not print 'listening' within {timeout} s")

    def rss_kb(self) -> dict[str, int]:
        out: dict[str, int] = {}
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    out[line.split(":")[0]] = int(line.split()[1])
        return out

    def stop(self) -> None:
        if self.target_pid is not None and self.proc.poll() is None:
            try:
                os.kill(self.target_pid, signal.SIGTERM)  # py-spy writes its profile when the child ends
                self.proc.wait(30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log_file.close()


def cpu_busy_seconds() -> float:
    """Busy time of all CPUs together (user+nice+system+irq+softirq+steal), in seconds."""
    with open("/proc/stat") as f:
        vals = [int(v) for v in f.readline().split()[1:9]]
    return (sum(vals) - vals[3] - vals[4]) / CLK_TCK


def proc_cpu_seconds(pid: int | None) -> float:
    if not pid:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except OSError:
        return 0.0


def wait_quiet(max_wait: float = QUIET_MAX_WAIT, threshold: float = 0.2) -> float:
    """Wait (bounded) until the machine is quiet: busy CPU under ``threshold`` cores over 0.25 s.

    Called between runs, when our own servers are idle, so whatever is busy is someone else's work.
    Returns the busy cores seen last (recorded with the run).
    """
    deadline = time.monotonic() + max_wait
    while True:
        b0, t0 = cpu_busy_seconds(), time.monotonic()
        time.sleep(0.25)
        cores = (cpu_busy_seconds() - b0) / (time.monotonic() - t0)
        if cores < threshold or time.monotonic() >= deadline:
            return round(cores, 2)


def children_cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def qm_server(name: str, tree: str = "", extra: dict[str, str] | None = None) -> Server:
    """This checkout's server, or (``tree``) the server of another checkout, with this venv."""
    env = {**SERVER_ENV, **(extra or {})}
    if not tree:
        return Server(name, [PY, "-m", "queue_manager"], env)
    # `python -m` puts the working directory first on sys.path: the other checkout's server runs from it
    return Server(name, [PY, "-m", "queue_manager"], {**env, "PYTHONPATH": tree}, cwd=Path(tree))


def wrk(
    name: str,
    url: str,
    script: str,
    env: dict[str, str],
    duration: int,
    *,
    connections: int = CONNS,
    record: bool = True,
    pid: int | None = None,
    gate: bool = True,
) -> dict[str, Any]:
    """One wrk run (1 thread, pinned to CPU 1); returns req/s, latency percentiles (ms) and errors."""
    cmd = [
        "taskset",
        "-c",
        CLIENT_CPU,
        "wrk",
        "-t1",
        f"-c{connections}",
        f"-d{duration}s",
        "--latency",
        "--timeout",
        "5s",
        "-s",
        str(BENCH / "lua" / script),
        url,
    ]
    full_env = {**os.environ, "QM_LUA_DIR": str(BENCH / "lua"), "QM_UA": UA, **env}
    quiet = wait_quiet() if gate else None
    busy0, srv0, kids0, t0 = cpu_busy_seconds(), proc_cpu_seconds(pid), children_cpu_seconds(), time.monotonic()
    proc = subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=duration + 60)
    wall = time.monotonic() - t0
    busy = cpu_busy_seconds() - busy0
    srv = proc_cpu_seconds(pid) - srv0
    wrk_cpu = children_cpu_seconds() - kids0
    out = proc.stdout + proc.stderr
    if record:
        (RESULTS / f"wrk-{name}.txt").write_text(" ".join(cmd) + "\n\n" + out)
    m = re.search(r"^QMJSON (\{.*\})$", out, re.M)
    if proc.returncode != 0 or m is None:
        raise RuntimeError(f"wrk {name} failed ({proc.returncode}):\n{out}")
    data = orjson.loads(m.group(1))
    seconds = data["duration_us"] / 1e6
    lat = data["latency_us"]
    errors = data["errors"]
    return {
        "requests": data["requests"],
        "seconds": round(seconds, 3),
        "rps": round(data["requests"] / seconds, 1),
        "latencyMs": {k: round(lat[k] / 1000.0, 3) for k in ("p50", "p90", "p99", "max", "mean")},
        "errors": errors,
        "non2xx": errors["status"],
        "socketErrors": errors["connect"] + errors["read"] + errors["write"] + errors["timeout"],
        # CPU cores used during the run: the server, wrk, and everything else on the machine
        "serverCpuSeconds": round(srv, 3) if pid else None,
        "serverUsPerRequest": round(srv * 1e6 / data["requests"], 1) if pid and data["requests"] else None,
        "cpu": {
            "server": round(srv / wall, 2) if pid else None,
            "wrk": round(wrk_cpu / wall, 2),
            "foreign": round(max(0.0, busy - srv - wrk_cpu) / wall, 2) if pid else None,
            "busyBefore": quiet,
        },
    }


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Rounds of one route: req/s over all rounds; latency percentiles are the median over rounds."""
    requests = sum(r["requests"] for r in runs)
    seconds = sum(r["seconds"] for r in runs)
    errors = {k: sum(r["errors"][k] for r in runs) for k in runs[0]["errors"]}

    def med(key: str) -> float:
        return round(statistics.median(r["latencyMs"][key] for r in runs), 3)

    return {
        "requests": requests,
        "seconds": round(seconds, 3),
        "rps": round(requests / seconds, 1),
        "latencyMs": {
            "p50": med("p50"),
            "p90": med("p90"),
            "p99": med("p99"),
            "p99Max": max(r["latencyMs"]["p99"] for r in runs),
            "max": max(r["latencyMs"]["max"] for r in runs),
        },
        "errors": errors,
        "non2xx": errors["status"],
        "socketErrors": errors["connect"] + errors["read"] + errors["write"] + errors["timeout"],
        "rounds": [{"rps": r["rps"], "p99": r["latencyMs"]["p99"], "cpu": r["cpu"]} for r in runs],
        "serverCores": _mean([r["cpu"]["server"] for r in runs]),
        "serverUsPerRequest": (
            round(sum(r["serverCpuSeconds"] for r in runs) * 1e6 / requests, 1)
            if requests and all(r["serverCpuSeconds"] is not None for r in runs)
            else None
        ),
        "wrkCores": _mean([r["cpu"]["wrk"] for r in runs]),
        "foreignCoresMax": max((r["cpu"]["foreign"] or 0.0) for r in runs),
    }


def _mean(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return round(sum(vals) / len(vals), 2) if vals else None


def interleaved(targets: list[tuple[str, str, str, dict[str, str], int]]) -> dict[str, dict[str, Any]]:
    """Warm every target up, then ROUNDS rounds of every target in turn (DURATION split over the rounds).

    This VM's throughput drifts by tens of percent over tens of seconds; comparing each route with a
    hello-world run a few seconds away (per-round ratio) keeps that drift out of the ratios.
    """
    for name, url, script, env, _pid in targets:
        if WARMUP > 0:
            wrk(f"{name}-warmup", url, script, env, WARMUP, record=False, gate=False)
    per_round = max(1, DURATION // ROUNDS)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, *_ in targets}
    for i in range(ROUNDS):
        for name, url, script, env, pid in targets:
            runs[name].append(wrk(f"{name}-r{i + 1}", url, script, env, per_round, pid=pid))
        log("round " + str(i + 1) + ": " + ", ".join(f"{n} {r[-1]['rps']:.0f}" for n, r in runs.items()))
    out = {name: aggregate(r) for name, r in runs.items()}
    base = runs.get("hello")
    if base:
        for name, res in out.items():
            ratios = [mine["rps"] / hello["rps"] for mine, hello in zip(runs[name], base, strict=True)]
            res["ratioToHello"] = round(res["rps"] / out["hello"]["rps"], 3)
            res["ratioRounds"] = [round(x, 3) for x in ratios]
            res["ratioMedian"] = round(statistics.median(ratios), 3)
            us, hello_us = res.get("serverUsPerRequest"), out["hello"].get("serverUsPerRequest")
            res["cpuRatioToHello"] = round(hello_us / us, 3) if us and hello_us else None
    for name, res in out.items():
        log(
            f"{name}: {res['rps']:.0f} req/s, p99 {res['latencyMs']['p99']} ms (median of rounds), "
            f"non-2xx {res['non2xx']}, socket errors {res['socketErrors']}"
        )
    return out


# ---------------------------------------------------------------------- admin helpers


async def admin(conn: Conn, method: str, path: str, body: Any = None) -> Any:
    status, data = await conn.json(method, path, body, ADMIN)
    if status >= 300:
        raise RuntimeError(f"{method} {path} -> {status} {data}")
    return data


def room_body(room_id: str, rate: int, **extra: Any) -> dict[str, Any]:
    return {
        "id": room_id,
        "targetUrl": TARGET,
        "ratePerMinute": rate,
        "queueMaxPerIp": None,
        "presenceSec": None,
        **extra,
    }


async def room_stats(conn: Conn, room_id: str) -> dict[str, Any]:
    data = await admin(conn, "GET", "/api/admin/rooms")
    for room in data["rooms"]:
        if room["id"] == room_id:
            return dict(room)
    raise RuntimeError(f"room {room_id} not listed")


async def joins(server: Server, room_id: str, count: int, concurrency: int = 32) -> list[str]:
    res = await fan_out(
        server.host,
        server.port,
        [("POST", "/api/join", {"roomId": room_id})] * count,
        concurrency=concurrency,
    )
    bad = [r for r in res if r[0] != 200]
    if bad:
        raise RuntimeError(f"{len(bad)} joins failed, e.g. {bad[0]}")
    return [body["token"] for _, body in res]


def check_path(room_id: str, token: str, dk: str | None) -> str:
    path = f"/api/check?roomId={room_id}&url={quote(TARGET + '/', safe='')}&qm_token={token}"
    return path + (f"&dk={quote(dk, safe='')}" if dk else "")


# ---------------------------------------------------------------------- phases


def phase_http(results: dict[str, Any]) -> None:
    hello = Server("hello", [PY, str(BENCH / "hello.py")], {"HOST": HOST, "PORT": "0"})
    server: Server | None = None
    try:
        server = qm_server("qm")
        setup = run(_http_setup(server))
        results["httpSetup"] = {k: v for k, v in setup.items() if k not in ("checkPath", "statusPath")}
        base = server.url
        before = run(_line_len(server))
        http = interleaved(
            [
                ("hello", hello.url + "/", "get.lua", {}, hello.pid),
                ("check", base + setup["checkPath"], "get.lua", {"QM_ORIGIN": TARGET}, server.pid),
                ("check_no_origin", base + setup["checkPath"], "get.lua", {}, server.pid),
                ("status", base + setup["statusPath"], "get.lua", {}, server.pid),
                ("join", base + "/api/join", "join.lua", {"QM_ROOM": "line"}, server.pid),
                ("healthz", base + "/healthz", "get.lua", {}, server.pid),
            ]
        )
        results["http"] = http
        hello.stop()
        after = run(_line_len(server))
        http["hello"]["variant"] = "raw ASGI hello-world (bench/hello.py), same uvicorn settings"
        http["check"]["variant"] = "admitted visitor: qm_token + dk, Origin: https://shop.example (as the tag)"
        http["check_no_origin"]["variant"] = "admitted visitor: qm_token + dk, no Origin header"
        http["status"]["variant"] = "waiting visitor in room 'line' (token in the query)"
        http["join"]["variant"] = "new visitor each request into room 'line' (60/min, queueMaxPerIp null)"
        http["healthz"]["variant"] = "GET /healthz: the cheapest route of the app (the floor for this stack)"
        http["join"]["lineBefore"] = before
        http["join"]["lineAfter"] = after
        log(f"join: line length {before} -> {after}")
        results["httpVerify"] = run(_http_verify(server, setup))
        results["qmServerRssKb"] = server.rss_kb()

        if "sse" in PHASES:
            phase_sse(results, server)
        if "outflow" in PHASES:
            phase_outflow(results, server)
    finally:
        hello.stop()
        if server is not None:
            server.stop()


def phase_check(results: dict[str, Any]) -> None:
    """The /api/check target alone (>= 0.5x hello-world): hello-world and an admitted visitor's /api/check,
    alternating, ROUNDS rounds."""
    hello = Server("hello", [PY, str(BENCH / "hello.py")], {"HOST": HOST, "PORT": "0"})
    server: Server | None = None
    base: Server | None = None
    try:
        server = qm_server("qm-check")
        setup = run(_http_setup(server, seed=0))
        targets = [
            ("hello", hello.url + "/", "get.lua", {}, hello.pid),
            ("check", server.url + setup["checkPath"], "get.lua", {"QM_ORIGIN": TARGET}, server.pid),
        ]
        if BASELINE:
            base = qm_server("qm-check-baseline", os.path.abspath(BASELINE))
            base_setup = run(_http_setup(base, seed=0))
            targets.append(("baseline", base.url + base_setup["checkPath"], "get.lua", {"QM_ORIGIN": TARGET}, base.pid))
        out = interleaved(targets)
        out["check"]["variant"] = "admitted visitor: qm_token + dk, Origin: https://shop.example (as the tag)"
        if BASELINE:
            out["baseline"]["variant"] = f"the same check on the server of {BASELINE}"
            ratios = [c / b for c, b in zip(out["check"]["ratioRounds"], out["baseline"]["ratioRounds"], strict=True)]
            out["check"]["toBaselineRounds"] = [round(x, 3) for x in ratios]
            out["check"]["toBaselineMedian"] = round(statistics.median(ratios), 3)
            log(
                f"check vs baseline: per round {out['check']['toBaselineRounds']}; median "
                f"{out['check']['toBaselineMedian']}"
            )
        results["check"] = out
        verify = run(_http_verify(server, {**setup, "statusPath": "/healthz"}))
        results["checkVerify"] = {"checkAdmit": verify["checkAdmit"], "checkState": verify["checkState"]}
        log(
            "check: ratio per round "
            + ", ".join(f"{x:.2f}" for x in out["check"]["ratioRounds"])
            + f"; median {out['check']['ratioMedian']:.2f}; by CPU {out['check']['cpuRatioToHello']}"
        )
    finally:
        hello.stop()
        for started in (server, base):
            if started is not None:
                started.stop()


async def _line_len(server: Server) -> int:
    conn = await Conn(server.host, server.port).open()
    try:
        return int((await room_stats(conn, "line"))["waiting"])
    finally:
        await conn.close()


async def _http_setup(server: Server, seed: int = 1000) -> dict[str, Any]:
    conn = await Conn(server.host, server.port).open()
    try:
        await admin(conn, "POST", "/api/admin/rooms", room_body("bench", 600000))
        await admin(conn, "POST", "/api/admin/rooms", room_body("line", 60))
        # the admitted visitor: join, wait for the tick to pass them, take the door
        status, view = await conn.json("POST", "/api/join", {"roomId": "bench"})
        assert status == 200, view
        token = view["token"]
        deadline = time.monotonic() + 5.0
        while view["state"] != "passed" and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            status, view = await conn.json("GET", f"/api/status?roomId=bench&token={token}")
        if view["state"] != "passed":
            raise RuntimeError(f"the bench visitor was not passed within 5 s: {view}")
        status, first = await conn.json("GET", check_path("bench", token, None))
        if status != 200 or not first.get("admit") or not first.get("doorKey"):
            raise RuntimeError(f"first check did not admit: {status} {first}")
        dk = first["doorKey"]
        status, replay = await conn.json("GET", check_path("bench", token, dk), headers={"Origin": TARGET})
        if status != 200 or not replay.get("admit"):
            raise RuntimeError(f"door-key replay did not admit: {status} {replay}")
        # the waiting visitor: 1,000 ahead in a room moving at 60/min
        if seed:
            await joins(server, "line", seed)
        status, wview = await conn.json("POST", "/api/join", {"roomId": "line"})
        assert status == 200, wview
        wtoken = wview["token"]
        status, wstatus = await conn.json("GET", f"/api/status?roomId=line&token={wtoken}")
        if wstatus.get("state") != "waiting":
            raise RuntimeError(f"the waiting visitor is not waiting: {wstatus}")
        return {
            "checkPath": check_path("bench", token, dk),
            "statusPath": f"/api/status?roomId=line&token={wtoken}",
            "replayAnswer": replay,
            "waitingPosition": wstatus.get("position"),
        }
    finally:
        await conn.close()


async def _http_verify(server: Server, setup: dict[str, Any]) -> dict[str, Any]:
    """After the runs: the door key still admits and the waiting visitor still waits."""
    conn = await Conn(server.host, server.port).open()
    try:
        _, check = await conn.json("GET", setup["checkPath"], headers={"Origin": TARGET})
        _, status = await conn.json("GET", setup["statusPath"])
        return {
            "checkAdmit": check.get("admit"),
            "checkState": check.get("state"),
            "statusState": status.get("state"),
            "statusPosition": status.get("position"),
        }
    finally:
        await conn.close()


def _fanout(server: Server, streams: int, out_file: str, timeout: float, *extra: str) -> dict[str, Any]:
    """One ``sse_fanout.py`` run on the client CPU against ``server``'s room ``line``; its last JSON line."""
    cmd = [
        *("taskset", "-c", CLIENT_CPU, PY, str(BENCH / "sse_fanout.py")),
        *("--base", server.url, "--room", "line", "--streams", str(streams), "--measure", str(DURATION)),
        *extra,
        *("--server-pid", str(server.pid)),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    (RESULTS / out_file).write_text(" ".join(cmd) + "\n\n" + proc.stdout + proc.stderr)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"sse_fanout failed:\n{proc.stdout}\n{proc.stderr}")
    out: dict[str, Any] = orjson.loads(lines[-1])
    return out


def phase_sse(results: dict[str, Any], server: Server) -> None:
    log(f"sse: {SSE_STREAMS} streams")
    sse = _fanout(server, SSE_STREAMS, "sse.txt", 240)
    if sse.get("serverCpuPct") and sse.get("framesPerSec"):
        sse["serverUsPerFrame"] = round(sse["serverCpuPct"] / 100.0 / sse["framesPerSec"] * 1e6, 1)
    results["sse"] = sse
    log(
        f"sse: {sse.get('streamsOpen')} open, {sse.get('framesPerSec')} frames/s, "
        f"delay p99 {sse.get('delayMs', {}).get('p99')} ms, server CPU {sse.get('serverCpuPct')} %"
    )
    time.sleep(1.0)  # let the server finish closing the streams


def _sse_scale_run(server: Server, streams: int, store_pids: list[int] | None = None) -> dict[str, Any]:
    """One sse_fanout run against a fresh server holding nothing but the room ``line`` (60/min); with
    ``store_pids`` (the Valkey server's, or a cluster's masters') their CPU per frame too."""
    run(_sse_room(server))
    pids = [arg for pid in store_pids or () for arg in ("--store-pid", str(pid))]
    extra = ("--settle", "3", "--open-timeout", "120", *pids)
    out = _fanout(server, streams, f"ssescale-{server.name}.txt", 600, *extra)
    frames = out.get("framesInWindow")
    if out.get("serverCpuSeconds") is not None and frames:
        out["serverUsPerFrame"] = round(out["serverCpuSeconds"] / frames * 1e6, 1)
    if out.get("storeCpuSeconds") is not None and frames:
        out["valkeyUsPerFrame"] = round(out["storeCpuSeconds"] / frames * 1e6, 1)
    # on Valkey a replica of the line sends a frame only when the visitor's numbers change, so the fair
    # figure there is the CPU per stream-second: the window's CPU over the open streams and the window
    stream_seconds = (out.get("streamsOpen") or 0) * (out.get("measureSeconds") or 0)
    if stream_seconds:
        if out.get("serverCpuSeconds") is not None:
            out["serverUsPerStreamSec"] = round(out["serverCpuSeconds"] / stream_seconds * 1e6, 2)
        if out.get("storeCpuSeconds") is not None:
            out["valkeyUsPerStreamSec"] = round(out["storeCpuSeconds"] / stream_seconds * 1e6, 2)
    return out


def _pids(name: str) -> list[str]:
    return subprocess.run(["pgrep", "-x", name], capture_output=True, text=True).stdout.split()


def _sse_scale_server(name: str, tree: str) -> tuple[Server, list[int] | None, Any]:
    """The ``ssescale`` server (BENCH_SSE_STORE: memory; valkey, +pg as the fleet phase runs it; or cluster,
    the same on a 3-master Valkey cluster started here), the Valkey servers' pids (none on memory) and what
    cleans up after it."""
    extra = {"MAX_CONNECTIONS": "0"}  # past MAX_CONNECTIONS (10,000 by default) a stream would be refused
    if SSE_STORE not in ("valkey", "cluster"):
        return qm_server(name, tree, extra), None, lambda: None
    import tempfile

    import fleet

    fleet._guard()
    tag = name.replace("-", "")
    spool = tempfile.mkdtemp(prefix="qmbench-sse-spool-")
    fleet._cleanup([tag])
    if SSE_STORE == "cluster":
        cluster = fleet.ValkeyCluster()
        extra["VALKEY_URL"] = cluster.url

        def stop_cluster() -> None:
            shutil.rmtree(spool, ignore_errors=True)
            cluster.stop()

        return qm_server(name, tree, fleet._valkey_env(tag, spool, **extra)), cluster.pids(), stop_cluster
    env = fleet._valkey_env(tag, spool, **extra)
    # BENCH_VALKEY_PID: the Valkey server BENCH_VALKEY_URL names, when more than one runs on the machine
    pinned = os.environ.get("BENCH_VALKEY_PID")
    found = [pinned] if pinned else _pids("redis-server") + _pids("valkey-server")

    def cleanup() -> None:
        fleet._cleanup([tag])
        shutil.rmtree(spool, ignore_errors=True)

    return qm_server(name, tree, env), [int(found[0])] if len(found) == 1 else None, cleanup


async def _sse_room(server: Server) -> None:
    conn = await Conn(server.host, server.port).open()
    try:
        await admin(conn, "POST", "/api/admin/rooms", room_body("line", 60))
    finally:
        await conn.close()


def phase_sse_scale(results: dict[str, Any]) -> None:
    """Fresh servers, one per size (and per checkout with BENCH_BASELINE, interleaved): CPU per frame, delay, RSS."""
    trees = [("this", "")] + ([("baseline", BASELINE)] if BASELINE else [])
    out: dict[str, Any] = {}
    for n in SSE_SCALE:
        row: dict[str, Any] = {}
        for name, tree in trees:
            log(f"ssescale: {name}, {n} streams, STORE={SSE_STORE}")
            server, store_pids, cleanup = _sse_scale_server(f"ssescale-{name}-{n}", tree)
            try:
                r = _sse_scale_run(server, n, store_pids)
            finally:
                server.stop()
                cleanup()
            r["store"] = SSE_STORE
            row[name] = r
            log(
                f"ssescale: {name} {r.get('streamsOpen')}/{n} open, {r.get('framesPerSec')} frames/s, "
                f"{r.get('serverUsPerFrame')} us/frame (Valkey {r.get('valkeyUsPerFrame')}), tick delay p50 "
                f"{r.get('tickDelayMs', {}).get('p50')} p99 {r.get('tickDelayMs', {}).get('p99')} ms, "
                f"{r.get('rssPerStreamKb')} KB/stream"
            )
            time.sleep(1.0)
        if "baseline" in row:
            a, b = row["this"], row["baseline"]
            if a.get("serverUsPerFrame") and b.get("serverUsPerFrame"):
                row["cpuRatioToBaseline"] = round(a["serverUsPerFrame"] / b["serverUsPerFrame"], 3)
            if a.get("rssPerStreamKb") and b.get("rssPerStreamKb"):
                row["rssRatioToBaseline"] = round(a["rssPerStreamKb"] / b["rssPerStreamKb"], 3)
        out[str(n)] = row
    results["sseScale"] = out


def phase_outflow(results: dict[str, Any], server: Server) -> None:
    log(f"outflow: room at {OUTFLOW_RATE}/min, {OUTFLOW_SEED} waiting, window {OUTFLOW_WINDOW:.0f} s")
    results["outflow"] = run(_outflow(server))
    o = results["outflow"]
    log(f"outflow: {o['passes']} passes in {o['windowSeconds']} s (expected {o['expected']}, error {o['error']:+d})")


async def _outflow(server: Server) -> dict[str, Any]:
    conn = await Conn(server.host, server.port).open()
    try:
        await admin(conn, "POST", "/api/admin/rooms", room_body("outflow", OUTFLOW_RATE, state="paused"))
        await joins(server, "outflow", OUTFLOW_SEED)
        await admin(conn, "POST", "/api/admin/rooms/outflow/resume", {})
        await asyncio.sleep(1.5)

        async def sample() -> tuple[float, int, float]:
            a = time.monotonic()
            passes = int((await room_stats(conn, "outflow"))["passesTotal"])
            b = time.monotonic()
            return (a + b) / 2.0, passes, b - a

        # Sample half-way between two ticks: wait for passesTotal to move (a tick), then 0.5 s.
        _, last, _ = await sample()
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            await asyncio.sleep(0.01)
            _, now_passes, _ = await sample()
            if now_passes != last:
                break
        await asyncio.sleep(0.5)
        t0, p0, lat0 = await sample()
        # keep the connection warm so the second sample does not pay a reconnect inside its timing
        while t0 + OUTFLOW_WINDOW - time.monotonic() > 1.5:
            await asyncio.sleep(min(2.0, t0 + OUTFLOW_WINDOW - time.monotonic() - 1.0))
            await conn.request("GET", "/healthz")
        await asyncio.sleep(max(0.0, t0 + OUTFLOW_WINDOW - lat0 / 2.0 - time.monotonic()))
        t1, p1, lat1 = await sample()
        end = await room_stats(conn, "outflow")
        # 60 s sampled half-way between ticks hold exactly 60 ticks: the count to hit is rate x 1 minute
        expected = round(OUTFLOW_RATE * OUTFLOW_WINDOW / 60.0)
        passes = p1 - p0
        return {
            "ratePerMinute": OUTFLOW_RATE,
            "seeded": OUTFLOW_SEED,
            "windowSeconds": round(t1 - t0, 4),
            "passesAtT0": p0,
            "passesAtT1": p1,
            "passes": passes,
            "expected": expected,
            "error": passes - expected,
            "expectedByWindowLength": round(OUTFLOW_RATE * (t1 - t0) / 60.0, 1),
            "sampleLatencyMs": [round(lat0 * 1000, 2), round(lat1 * 1000, 2)],
            "waitingAtEnd": end["waiting"],
            "pass": abs(passes - expected) <= 1 and end["waiting"] > 0,
        }
    finally:
        await conn.close()


def phase_memory(results: dict[str, Any]) -> None:
    log(f"memory: fresh server, {MEMORY_TICKETS} waiting tickets in one room")
    server = qm_server("memory")
    try:
        run(_mem_room(server))
        time.sleep(1.0)
        before = server.rss_kb()
        filled = run(fill(server.host, server.port, "mem", MEMORY_TICKETS, concurrency=CONNS))
        waiting = run(_mem_waiting(server))
        time.sleep(1.0)
        after = server.rss_kb()
        mb = after["VmRSS"] / 1024.0
        results["memory"] = {
            "tickets": waiting,
            "fill": filled,
            "rssBeforeMb": round(before["VmRSS"] / 1024.0, 1),
            "rssAfterMb": round(mb, 1),
            "hwmAfterMb": round(after["VmHWM"] / 1024.0, 1),
            "bytesPerTicket": round((after["VmRSS"] - before["VmRSS"]) * 1024 / max(1, waiting)),
            "pass": mb <= RSS_TARGET_MB and waiting >= MEMORY_TICKETS,
        }
        log(
            f"memory: {waiting} waiting (filled at {filled['rps']:.0f} joins/s), "
            f"VmRSS {before['VmRSS'] / 1024:.1f} -> {mb:.1f} MB"
        )
    finally:
        server.stop()
    log(f"memory: the engine's heap for {MEMORY_TICKETS} waiting tickets (bench/engine_heap.py)")
    out = subprocess.run(
        [PY, str(BENCH / "engine_heap.py"), "--tickets", str(MEMORY_TICKETS)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    heap = orjson.loads(out.stdout.strip().splitlines()[-1])
    results.setdefault("memory", {})["engineHeap"] = heap
    log(f"memory: engine heap {heap['heapMb']} MB (~{heap['bytesPerTicket']} B/ticket)")


def pyspy_path() -> str | None:
    if os.environ.get("BENCH_NO_PYSPY"):  # force the cProfile fallback
        return None
    found = Path(PY).parent / "py-spy"
    if found.exists():
        return str(found)
    return shutil.which("py-spy")


def _start_profiled(name: str, argv: list[str], env: dict[str, str], raw: Path) -> Server:
    """``argv`` under py-spy record: py-spy runs on the load CPU, the server it starts on the server CPU."""
    pyspy = pyspy_path()
    assert pyspy is not None
    spy = [pyspy, "record", "--rate", "250", "--format", "raw", "--output", str(raw), "--"]
    server = Server(f"profile-{name}", spy + argv, env, cpu=CLIENT_CPU)
    child = _child_of(server.proc.pid)
    os.sched_setaffinity(child, {int(SERVER_CPU)})
    server.target_pid = child
    return server


def phase_profile(results: dict[str, Any]) -> None:
    """Profile /api/check under load next to the hello-world: py-spy on the real servers, else cProfile."""
    seconds = PROFILE_SECONDS
    if pyspy_path() is None:
        _profile_cprofile(results, seconds)
        results["stalls"] = _stalls()
        return
    from pyspy_top import summarise

    out: dict[str, Any] = {
        "tool": "py-spy record --rate 250 (blocking sampling of the real server)",
        "seconds": seconds,
        "within": "Server.run (the serving loop; start-up excluded)",
    }
    targets: list[tuple[str, list[str], dict[str, str]]] = [
        ("hello", [PY, str(BENCH / "hello.py")], {"HOST": HOST, "PORT": "0"}),
        ("check", [PY, "-m", "queue_manager"], SERVER_ENV),
    ]
    for name, argv, env in targets:
        log(f"profile: py-spy on {name} for {seconds} s")
        raw = RESULTS / f"profile-{name}.pyspy.txt"
        server = _start_profiled(name, argv, env, raw)
        try:
            if name == "check":
                setup = run(_http_setup(server, seed=0))
                url, wenv = server.url + setup["checkPath"], {"QM_ORIGIN": TARGET}
            else:
                url, wenv = server.url + "/", {}
            wrk(f"profile-{name}-warmup", url, "get.lua", wenv, 2, record=False, gate=False)
            load = wrk(f"profile-{name}", url, "get.lua", wenv, seconds, pid=server.pid)
        finally:
            server.stop()
        summary = summarise(raw, 30, within="Server.run")
        us = load["serverUsPerRequest"] or 0.0
        for section in ("self", "inclusive", "areas"):
            for row in summary[section]:
                row["usPerRequest"] = round(row["pct"] * us / 100.0, 1)
        out[name] = {"rpsUnderProfiler": load["rps"], "serverUsPerRequest": us, "cpu": load["cpu"], **summary}
    out["inProcess"] = _profile_in_process()
    results["profile"] = out
    results["stalls"] = _stalls()
    (RESULTS / "profile-check.txt").write_text(profile_report(out))
    log(f"profile: written to {RESULTS / 'profile-check.txt'}")


def phase_sse_profile(results: dict[str, Any]) -> None:
    """Opt-in (BENCH_ONLY=sseprofile): py-spy on the server while bench/sse_fanout.py holds the streams."""
    from pyspy_top import summarise

    raw = RESULTS / "profile-sse.pyspy.txt"
    server = _start_profiled("sse", [PY, "-m", "queue_manager"], SERVER_ENV, raw)
    try:
        run(_http_setup(server, seed=0))
        phase_sse(results, server)
    finally:
        server.stop()
    summary = summarise(raw, 30, within="Server.run")
    results["sseProfile"] = summary
    lines = [f"py-spy on the server during the SSE run ({summary['samples']} samples); self time by area:"]
    lines += [f"  {a['pct']:5.1f}%  {a['area']}" for a in summary["areas"]]
    lines += ["inclusive:"] + [f"  {f['pct']:5.1f}%  {f['function']}" for f in summary["inclusive"]]
    lines += ["self:"] + [f"  {f['pct']:5.1f}%  {f['function']}" for f in summary["self"]]
    (RESULTS / "profile-sse.txt").write_text("\n".join(lines) + "\n")
    log(f"sse profile: written to {RESULTS / 'profile-sse.txt'}")


def _stalls() -> dict[str, Any]:
    log(f"stalls: Line growth and gen-2 GC with {MEMORY_TICKETS} tickets (in-process)")
    wait_quiet()
    cmd = ["taskset", "-c", SERVER_CPU, PY, str(BENCH / "stalls.py"), "--tickets", str(MEMORY_TICKETS)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"stalls failed:\n{proc.stdout}\n{proc.stderr}")
    out: dict[str, Any] = orjson.loads(proc.stdout)
    return out


def _profile_in_process() -> dict[str, Any]:
    """bench/check_breakdown.py under py-spy: the app's own cost of a check, without sockets or uvicorn."""
    from pyspy_top import summarise

    pyspy = pyspy_path()
    assert pyspy is not None
    raw = RESULTS / "profile-inprocess.pyspy.txt"
    log(f"profile: in-process /api/check breakdown ({BREAKDOWN_N} calls per timing)")
    driver = ["taskset", "-c", SERVER_CPU, PY, str(BENCH / "check_breakdown.py"), "--n", str(BREAKDOWN_N)]
    wait_quiet()
    proc = subprocess.run(driver, capture_output=True, text=True, timeout=300, cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"check_breakdown failed:\n{proc.stdout}\n{proc.stderr}")
    timings = orjson.loads(proc.stdout)
    # a second run under the sampler, for where the time goes (the sampler slows it: shares only)
    spy = [pyspy, "record", "--rate", "500", "--format", "raw", "--output", str(raw), "--"]
    proc = subprocess.run([*spy, *driver, "--asgi-only"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"py-spy on check_breakdown failed:\n{proc.stdout}\n{proc.stderr}")
    summary = summarise(raw, 30, within="check_call")
    app_us = timings["asgiUs"]["check"]
    for section in ("self", "inclusive", "areas"):
        for row in summary[section]:
            row["usPerRequest"] = round(row["pct"] * app_us / 100.0, 1)
    return {"timings": timings, **summary}


def profile_report(out: dict[str, Any]) -> str:
    hello, check = out["hello"], out["check"]
    lines = [
        f"{out['tool']}; samples {out['within']}",
        f"hello-world: {hello['rpsUnderProfiler']:.0f} req/s, {hello['serverUsPerRequest']} us server CPU/request",
        f"/api/check:  {check['rpsUnderProfiler']:.0f} req/s, {check['serverUsPerRequest']} us server CPU/request",
        "",
        "self time by area (us/request):      hello    check",
    ]
    h_areas = {a["area"]: a["usPerRequest"] for a in hello["areas"]}
    for a in check["areas"]:
        lines.append(f"  {a['area']:<34} {h_areas.get(a['area'], 0.0):7.1f}  {a['usPerRequest']:7.1f}")
    for a in hello["areas"]:
        if a["area"] not in {c["area"] for c in check["areas"]}:
            lines.append(f"  {a['area']:<34} {a['usPerRequest']:7.1f}  {0.0:7.1f}")
    lines += ["", "/api/check self time (top):"]
    lines += [f"  {f['pct']:5.1f}%  {f['usPerRequest']:6.1f} us  {f['function']}" for f in check["self"]]
    lines += ["", "/api/check inclusive time (top):"]
    lines += [f"  {f['pct']:5.1f}%  {f['usPerRequest']:6.1f} us  {f['function']}" for f in check["inclusive"]]
    lines += ["", "hello-world self time (top 10):"]
    lines += [f"  {f['pct']:5.1f}%  {f['usPerRequest']:6.1f} us  {f['function']}" for f in hello["self"][:10]]
    inproc = out.get("inProcess")
    if inproc:
        t = inproc["timings"]
        lines += [
            "",
            "IN-PROCESS (bench/check_breakdown.py: the App called through ASGI, no sockets, no uvicorn)",
            f"whole ASGI call: /api/check {t['asgiUs']['check']} us, hello-world {t['asgiUs']['hello']} us",
            "steps of visitor.check, timed one by one (best of 5):",
        ]
        lines += [f"  {v if isinstance(v, str) else f'{v:7.2f} us'}  {k}" for k, v in t["stepsUs"].items()]
        lines += ["sampled (py-spy, 500 Hz), inclusive, us of the ASGI call:"]
        lines += [
            f"  {f['pct']:5.1f}%  {f['usPerRequest']:6.1f} us  {f['function']}"
            for f in inproc["inclusive"]
            if "check_breakdown" not in f["function"] and "asyncio" not in f["function"]
        ]
        lines += ["sampled, self time:"]
        lines += [f"  {f['pct']:5.1f}%  {f['usPerRequest']:6.1f} us  {f['function']}" for f in inproc["self"][:20]]
    return "\n".join(lines) + "\n"


def _profile_cprofile(results: dict[str, Any], seconds: int) -> None:
    import io
    import pstats

    log(f"profile: py-spy unavailable; cProfile in-process on /api/check for {seconds} s")
    prof = RESULTS / "profile-check.prof"
    server = Server("profile", [PY, str(BENCH / "profile_server.py"), "--cprofile", str(prof)], SERVER_ENV)
    try:
        setup = run(_http_setup(server, seed=0))
        url = server.url + setup["checkPath"]
        wrk("profile-warmup", url, "get.lua", {"QM_ORIGIN": TARGET}, 2, record=False)
        load = wrk("profile-check", url, "get.lua", {"QM_ORIGIN": TARGET}, seconds, pid=server.pid)
    finally:
        server.stop()
    buf = io.StringIO()
    pstats.Stats(str(prof), stream=buf).sort_stats("tottime").print_stats(30)
    results["profile"] = {
        "tool": "cProfile (in-process; deterministic, inflates per-call cost)",
        "rpsUnderProfiler": load["rps"],
        "cprofileTop": buf.getvalue(),
    }
    (RESULTS / "profile-check.txt").write_text(buf.getvalue())


def _child_of(pid: int) -> int:
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        try:
            kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            kids = []
        if kids:
            return int(kids[0])
        time.sleep(0.05)
    raise RuntimeError("py-spy started no child")


async def _mem_room(server: Server) -> None:
    conn = await Conn(server.host, server.port).open()
    try:
        await admin(conn, "POST", "/api/admin/rooms", room_body("mem", 60, state="paused"))
    finally:
        await conn.close()


async def _mem_waiting(server: Server) -> int:
    conn = await Conn(server.host, server.port).open()
    try:
        return int((await room_stats(conn, "mem"))["waiting"])
    finally:
        await conn.close()


# ---------------------------------------------------------------------- report


def machine() -> dict[str, Any]:
    model = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    wrk_v = (  # the ssescale phase runs without wrk
        subprocess.run(["wrk", "-v"], capture_output=True, text=True).stdout.splitlines() if shutil.which("wrk") else []
    )
    versions = {}
    for pkg in ("uvicorn", "uvloop", "httptools", "orjson"):
        try:
            versions[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            versions[pkg] = None
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    return {
        "nproc": os.cpu_count(),
        "cpuModel": model,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "wrk": wrk_v[0] if wrk_v else None,
        "packages": versions,
        "commit": commit,
        "queueManagerDirty": bool(
            subprocess.run(
                ["git", "status", "--porcelain", "queue_manager"], cwd=ROOT, capture_output=True, text=True
            ).stdout.strip()
        ),
    }


def targets(results: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    http = results.get("http") or results.get("check") or {}
    if "check" in http and "ratioToHello" in http["check"]:
        ratio = http["check"]["ratioToHello"]
        by_cpu = http["check"].get("cpuRatioToHello")
        foreign = max(r.get("foreignCoresMax") or 0.0 for r in http.values())
        out["check_vs_hello"] = {
            "target": f">= {CHECK_RATIO_TARGET}x hello-world (req/s over all rounds, and by server CPU per request)",
            "value": ratio,
            "byCpu": by_cpu,
            "medianOfRounds": http["check"]["ratioMedian"],
            # on a shared machine req/s ratios move with other people's load; the CPU-cost ratio
            # does not: both must hold
            "pass": ratio >= CHECK_RATIO_TARGET and (by_cpu is None or by_cpu >= CHECK_RATIO_TARGET),
            "contended": foreign > 0.2,
        }
    if "fleet" in results and "target3000" in results["fleet"]:
        f = results["fleet"]
        out["fleet_joins"] = {
            "target": ">= 3000 acknowledged joins/s on one instance (STORE=valkey + SIDESTORE=pg)",
            "value": f["join_group"]["rps"],
            "medianOfRounds": f["join_group"]["medianRps"],
            "pass": f["target3000"]["pass"],
        }
    if "outflow" in results:
        o = results["outflow"]
        out["outflow"] = {"target": f"{OUTFLOW_RATE} +/- 1 in 60 s", "value": o["passes"], "pass": o["pass"]}
    if "memory" in results:
        m = results["memory"]
        if "rssAfterMb" in m:
            out["memory"] = {
                "target": f"VmRSS <= {RSS_TARGET_MB} MB with {MEMORY_TICKETS} waiting",
                "value": m["rssAfterMb"],
                "pass": m["pass"],
            }
        if "engineHeap" in m:
            h = m["engineHeap"]
            out["engine_heap"] = {"target": h["target"], "value": h["heapMb"], "pass": h["pass"]}
    if "sse" in results and "streamsOpen" in results["sse"]:
        s = results["sse"]
        ok = s["streamsOpen"] == s["streamsRequested"] and s["framesPerSec"] >= 0.98 * s["streamsRequested"]
        out["sse"] = {
            "target": "every stream open and fed one frame a second",
            "value": s["framesPerSec"],
            "pass": ok,
        }
    for n, row in results.get("sseScale", {}).items():
        s = row.get("this", {})
        if s.get("store") in ("valkey", "cluster") and "serverUsPerStreamSec" in s:
            # a replica of the line: frames only when the numbers change, so the targets are per stream-second
            out[f"sse_valkey_store_cpu_{n}"] = {
                "target": f"Valkey CPU <= {SSE_VALKEY_US_PER_STREAM_SEC} us per stream-second at {n} streams",
                "value": s.get("valkeyUsPerStreamSec"),
                "pass": s.get("valkeyUsPerStreamSec") is not None
                and s["valkeyUsPerStreamSec"] <= SSE_VALKEY_US_PER_STREAM_SEC,
            }
            out[f"sse_valkey_cpu_{n}"] = {
                "target": f"server CPU <= {SSE_VALKEY_SERVER_US_PER_STREAM_SEC} us per stream-second at {n} streams",
                "value": s["serverUsPerStreamSec"],
                "pass": s["serverUsPerStreamSec"] <= SSE_VALKEY_SERVER_US_PER_STREAM_SEC,
            }
            p99 = s.get("tickDelayMs", {}).get("p99")
            out[f"sse_valkey_delay_{n}"] = {
                "target": f"every frame sent within {SSE_DELAY_P99_NOTE_MS} ms of its tick, p99 ({n} streams)",
                "value": p99,
                "pass": p99 is not None
                and p99 <= SSE_DELAY_P99_NOTE_MS
                and s.get("streamsOpen") == s.get("streamsRequested"),
            }
        elif "serverUsPerFrame" in s:
            out[f"sse_cpu_{n}"] = {
                "target": f"server CPU <= {SSE_US_PER_FRAME_TARGET} us per /events frame at {n} streams",
                "value": s["serverUsPerFrame"],
                "pass": s["serverUsPerFrame"] <= SSE_US_PER_FRAME_TARGET,
            }
            p99 = s.get("tickDelayMs", {}).get("p99")
            fed = s.get("framesPerSec", 0) >= 0.98 * s.get("streamsRequested", 0)  # a round longer than 1 s lags
            out[f"sse_delay_{n}"] = {
                "target": f"each tick feeds every stream, p99 <= {SSE_DELAY_P99_NOTE_MS} ms after it ({n} streams)",
                "value": p99,
                "pass": p99 is not None and p99 <= SSE_DELAY_P99_NOTE_MS and fed,
            }
        if "rssPerStreamKb" in s:
            out[f"sse_rss_{n}"] = {
                "target": f"RSS <= {SSE_KB_PER_STREAM_TARGET} KB per open stream at {n} streams",
                "value": s["rssPerStreamKb"],
                "pass": s["rssPerStreamKb"] <= SSE_KB_PER_STREAM_TARGET,
            }
    return out


def table(results: dict[str, Any]) -> str:
    rows = [
        "| route | req/s | x hello | x hello per round | p50 ms | p99 ms | worst-round p99 ms "
        "| server CPU us/req | x hello by CPU | non-2xx | socket err | foreign cores (max) |",
        "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, r in {**results.get("check", {}), **results.get("http", {})}.items():
        lat = r["latencyMs"]
        spread = r.get("ratioRounds") or [0.0]
        rows.append(
            f"| {name} | {r['rps']:,.0f} | {r.get('ratioToHello', 0):.2f} | {min(spread):.2f}-{max(spread):.2f} "
            f"| {lat['p50']:.2f} | {lat['p99']:.2f} | {lat['p99Max']:.2f} | {r.get('serverUsPerRequest')} "
            f"| {r.get('cpuRatioToHello')} | {r['non2xx']} | {r['socketErrors']} | {r.get('foreignCoresMax')} |"
        )
    lines = ["\n".join(rows)]
    if "fleet" in results:
        f = results["fleet"]
        for name in ("join_group", "join_txn", "join_memory", "join_two", "check_valkey", "check_memory", "check_two"):
            if name in f:
                r = f[name]
                lines.append(
                    f"fleet {name}: {r['rps']:,.0f} req/s (rounds {', '.join(f'{x:.0f}' for x in r['rounds'])}), "
                    f"p99 {r['p99MsMedian']} ms, server CPU {r['serverUsPerRequest']} us/req, non-2xx {r['non2xx']}, "
                    f"foreign cores max {r.get('foreignCoresMax')}"
                )
        for name, r in f.get("ratios", {}).items():
            lines.append(f"fleet {name}: {r['overall']}x (per round {r['rounds']}, median {r['median']})")
        lines.append(f"fleet joins per transaction: {f.get('joinsPerTransaction')}")
    if "workers" in results:
        w = results["workers"]
        for name in ("join_one", "join_two", "check_one", "check_two"):
            if name in w:
                r = w[name]
                lines.append(
                    f"workers {name}: {r['rps']:,.0f} req/s (rounds {', '.join(f'{x:.0f}' for x in r['rounds'])}), "
                    f"server CPU {r['serverUsPerRequest']} us/req on {r['serverCores']} cores, non-2xx {r['non2xx']}"
                )
        for name, value in w.get("ratios", {}).items():
            lines.append(f"workers {name}: {value}")
    if "join" in results.get("http", {}):
        j = results["http"]["join"]
        lines.append(f"join: line length {j['lineBefore']:,} -> {j['lineAfter']:,}")
    if "sse" in results:
        s = results["sse"]
        lines.append(
            f"sse: {s.get('streamsOpen')}/{s.get('streamsRequested')} streams, "
            f"{s.get('framesPerSec')} frames/s, delay p50 {s.get('delayMs', {}).get('p50')} ms, "
            f"p99 {s.get('delayMs', {}).get('p99')} ms, server CPU {s.get('serverCpuPct')} %"
        )
    for n, row in results.get("sseScale", {}).items():
        for name in ("this", "baseline"):
            if name in row:
                s = row[name]
                lines.append(
                    f"sse at {n} ({name}, {s.get('store', 'memory')}): {s.get('streamsOpen')} open, "
                    f"{s.get('framesPerSec')} frames/s, server CPU {s.get('serverUsPerFrame')} us/frame "
                    f"(user, system {s.get('serverUserSystemSeconds')} s), "
                    + (f"Valkey CPU {s['valkeyUsPerFrame']} us/frame, " if s.get("valkeyUsPerFrame") else "")
                    + (
                        f"per stream-second: server {s['serverUsPerStreamSec']} us, Valkey "
                        f"{s.get('valkeyUsPerStreamSec')} us, "
                        if s.get("store") in ("valkey", "cluster") and "serverUsPerStreamSec" in s
                        else ""
                    )
                    + f"frame after its tick p50 {s.get('tickDelayMs', {}).get('p50')} ms "
                    f"p99 {s.get('tickDelayMs', {}).get('p99')} ms, RSS {s.get('rssPerStreamKb')} KB/stream"
                )
        if "cpuRatioToBaseline" in row or "rssRatioToBaseline" in row:
            lines.append(
                f"sse at {n}: CPU per frame x{row.get('cpuRatioToBaseline')} of the baseline, "
                f"RSS per stream x{row.get('rssRatioToBaseline')}"
            )
    if "outflow" in results:
        o = results["outflow"]
        lines.append(
            f"outflow: {o['passes']} passes in {o['windowSeconds']} s at {o['ratePerMinute']}/min "
            f"(expected {o['expected']}, error {o['error']:+d})"
        )
    if "memory" in results:
        m = results["memory"]
        if "rssAfterMb" in m:
            lines.append(
                f"memory: {m['tickets']:,} waiting: VmRSS {m['rssBeforeMb']} -> {m['rssAfterMb']} MB "
                f"(~{m['bytesPerTicket']} B/ticket)"
            )
        if "engineHeap" in m:
            h = m["engineHeap"]
            lines.append(
                f"memory: engine heap for {h['tickets']:,} waiting: {h['heapMb']} MB (~{h['bytesPerTicket']} B/ticket)"
            )
    for name, t in results.get("targets", {}).items():
        extra = f" (by CPU {t['byCpu']})" if t.get("byCpu") is not None else ""
        note = " [contended: other work used the machine during the runs]" if t.get("contended") else ""
        lines.append(f"target {name}: {t['target']}: {t['value']}{extra} -> {'PASS' if t['pass'] else 'FAIL'}{note}")
    return "\n".join(lines)


PHASES = {p.strip() for p in os.environ.get("BENCH_ONLY", "http,sse,outflow,memory,profile").split(",") if p.strip()}


DEFAULT_PHASES = {"http", "sse", "outflow", "memory", "profile"}
# only a full default run (every phase, default sizes) is latest.json; anything else is a partial result
RESULTS_NAME = (
    "latest.json"
    if PHASES >= DEFAULT_PHASES and not any(k.startswith("BENCH_") for k in os.environ)
    else "partial-" + "-".join(sorted(PHASES)) + ".json"
)


def main() -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    results: dict[str, Any] = {
        "startedAt": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "method": {
            "serverCpu": SERVER_CPU,
            "clientCpu": CLIENT_CPU,
            "connections": CONNS,
            "threads": 1,
            "durationSec": DURATION,
            "warmupSec": WARMUP,
            "rounds": ROUNDS,
            "sseStreams": SSE_STREAMS,
            "outflowWindowSec": OUTFLOW_WINDOW,
            "memoryTickets": MEMORY_TICKETS,
        },
    }
    try:
        if PHASES & {"http", "sse", "outflow"}:
            if "http" not in PHASES:
                raise SystemExit("sse and outflow run on the server the http phase sets up: include http")
            phase_http(results)
        if "check" in PHASES:
            phase_check(results)
        if "fleet" in PHASES:
            from fleet import phase_fleet

            phase_fleet(results)
        if "workers" in PHASES:
            from workers import phase_workers

            phase_workers(results)
        if "edgepass" in PHASES:
            from edgepass import phase_edgepass

            phase_edgepass(results)
        if "gate" in PHASES:  # nginx with and without the forward-auth gate (bench/forward_auth.py, ab)
            from forward_auth import main as gate_bench
            from forward_auth import table as gate_table

            results["gate"] = gate_bench()
            log(gate_table(results["gate"]))
        if "million" in PHASES:
            from million import phase_million

            phase_million(results)
        if "draw" in PHASES:
            from prequeue_draw import phase_draw

            phase_draw(results)
        if "rebuild" in PHASES:
            from rebuild import phase_rebuild

            phase_rebuild(results)
        if "polls" in PHASES:
            from polls import phase_polls

            phase_polls(results)
        if "shards" in PHASES:
            from prequeue_shards import phase_shards

            phase_shards(results)
        if "cluster" in PHASES:
            from cluster import phase_cluster

            phase_cluster(results)
        if "memory" in PHASES:
            phase_memory(results)
        if "profile" in PHASES:
            phase_profile(results)
        if "ssescale" in PHASES:
            phase_sse_scale(results)
        if "sseprofile" in PHASES:
            phase_sse_profile(results)
    finally:
        results["targets"] = targets(results)
        results["totalSeconds"] = round(time.monotonic() - started, 1)
        data = orjson.dumps(results, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
        (RESULTS / RESULTS_NAME).write_bytes(data)
        if RESULTS_NAME == "latest.json":  # every full run is kept too: this machine is shared and noisy
            (RESULTS / f"run-{time.strftime('%Y%m%d-%H%M%S')}.json").write_bytes(data)
    print()
    print(table(results))
    print(f"\nresults: {RESULTS / RESULTS_NAME} ({results['totalSeconds']} s)")


if __name__ == "__main__":
    main()
