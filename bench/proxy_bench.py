"""Inline proxy benchmark: proxied vs direct GET, with Debian's nginx proxy_pass as the anchor.

One run measures, on loopback:

* **direct**: wrk → the app;
* **nginx**: wrk → nginx ``proxy_pass`` (1 worker, upstream keep-alive) → the app;
* **qm static**: wrk → Queue Manager inline → the app, for a static asset (skips the gate: pure proxy);
* **qm gated**: the same for a page, carrying an admitted visitor's cookies (door check + proxy);
* **… (ASGI path)**: the same two on a second server with ``PROXY_FAST_PATH=0`` (the baseline the fast
  path is measured against);
* **python floor**: ``bench/proxy_floor.py``, a Python relay on the same server stack with no rules at
  all (what any Python proxy here costs before it does anything a waiting room needs).

The app is a second nginx answering ``return 200`` (so the proxies, not the app, are what is measured).
Pinning: the proxy under test on CPU 0; the app and wrk on CPU 1. Throughput: 64 connections for
``DURATION`` s; latency: 1 connection, wrk's p50/p99. Added latency = proxied minus direct.
The targets are measured in turn, ``ROUNDS`` times over (interleaved, so a noisy neighbour on a shared
machine hits every target alike); the table gives each target's median round, and the ratios are
taken within each round (nginx and Queue Manager measured minutes apart at most), then the median.

    .venv/bin/python bench/proxy_bench.py            # writes bench/results/proxy.json and prints a table
    ROUNDS=5 DURATION=10 .venv/bin/python bench/proxy_bench.py
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
PY = os.environ.get("PY", str(ROOT / ".venv/bin/python"))
DURATION = int(os.environ.get("DURATION", "10"))
CONNS = int(os.environ.get("CONNS", "64"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
PROXY_CPU, LOAD_CPU = "0", "1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on {port}")


def nginx(tmp: Path, name: str, server_block: str, cpu: str) -> subprocess.Popen[bytes]:
    prefix = tmp / name
    (prefix / "logs").mkdir(parents=True)
    conf = prefix / "nginx.conf"
    conf.write_text(
        f"""
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/logs/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {prefix}/body; proxy_temp_path {prefix}/proxy;
  fastcgi_temp_path {prefix}/fcgi; uwsgi_temp_path {prefix}/uwsgi; scgi_temp_path {prefix}/scgi;
  keepalive_requests 1000000;
  {server_block}
}}
"""
    )
    return subprocess.Popen(
        ["taskset", "-c", cpu, "nginx", "-p", str(prefix), "-c", str(conf), "-g", "daemon off;"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def cpu_seconds(pids: list[int]) -> float:
    """user + system CPU of these processes so far."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (clock ticks)
    return total / os.sysconf("SC_CLK_TCK")


def family(pid: int) -> list[int]:
    """A process and its children (nginx's master and its worker)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            kids = [int(k) for k in fh.read().split()]
    except FileNotFoundError:
        kids = []
    return [pid, *kids]


def wrk(url: str, conns: int, seconds: int, headers: list[str]) -> dict[str, float]:
    args = ["taskset", "-c", LOAD_CPU, "wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "--latency"]
    for h in headers:
        args += ["-H", h]
    out = subprocess.run([*args, url], capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]

    def pct(label: str) -> float:
        m = re.search(rf"^\s+{label}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        assert m, out
        value, unit = float(m.group(1)), m.group(2)
        return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value

    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    done = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    return {
        "rps": rps,
        "requests": float(done),
        "p50_ms": pct("50"),
        "p99_ms": pct("99"),
        "non2xx": float(errors.group(1)) if errors else 0.0,
    }


def main() -> None:
    if not shutil.which("nginx"):
        sys.exit("bench: nginx is needed (apt-get install -y nginx)")
    load_before = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="qm-proxy-bench-"))
    os.chmod(tmp, 0o755)
    app_port, nginx_port = free_port(), free_port()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(
            nginx(
                tmp,
                "app",
                f"server {{ listen 127.0.0.1:{app_port}; location / {{ return 200 'hello from the app\\n'; }} }}",
                LOAD_CPU,
            )
        )
        procs.append(
            nginx(
                tmp,
                "proxy",
                f"upstream app {{ server 127.0.0.1:{app_port}; keepalive 64; }}\n"
                f"server {{ listen 127.0.0.1:{nginx_port}; location / {{ proxy_pass http://app; "
                "proxy_http_version 1.1; proxy_set_header Connection ''; proxy_set_header Host $host; "
                "proxy_set_header X-Forwarded-For $remote_addr; proxy_buffering off; } }",
                PROXY_CPU,
            )
        )
        admin_key = "bench-admin-key-0123456789"
        servers = {}
        for label, fast in (("", "1"), (" (ASGI path)", "0")):
            port = free_port()
            env = {
                **os.environ,
                "PORT": str(port),
                "HOST": "127.0.0.1",
                "ADMIN_KEY": admin_key,
                "SECRET": "bench-secret-" + "x" * 40,
                "PROXY_ALLOW_PRIVATE": "1",
                "PROXY_FAST_PATH": fast,
                "JOIN_LIMIT_PER_MIN": "0",
                "CHECK_LIMIT_PER_MIN": "0",
                "WAITING_LIMIT_PER_MIN": "0",
            }
            proc = subprocess.Popen(
                ["taskset", "-c", PROXY_CPU, PY, "-m", "queue_manager"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=open(tmp / f"qm{fast}.stderr", "wb"),
            )
            procs.append(proc)
            servers[label] = (port, proc)
        floor_port = free_port()
        floor = subprocess.Popen(
            ["taskset", "-c", PROXY_CPU, PY, str(ROOT / "bench/proxy_floor.py"), str(floor_port), str(app_port)],
            stdout=subprocess.DEVNULL,
            stderr=open(tmp / "floor.stderr", "wb"),
        )
        procs.append(floor)
        for port in (app_port, nginx_port, floor_port, *(p for p, _ in servers.values())):
            wait_port(port)
        auth = {"Authorization": f"Bearer {admin_key}"}
        origin = f"http://127.0.0.1:{app_port}"
        app_pids, nginx_pids = family(procs[0].pid), family(procs[1].pid)
        targets = {
            "direct": (f"http://127.0.0.1:{app_port}/page", [], app_pids),
            "nginx": (f"http://127.0.0.1:{nginx_port}/page", [], nginx_pids),
            # bench/proxy_floor.py: a Python relay with no rules at all, the floor for this stack
            "python floor": (f"http://127.0.0.1:{floor_port}/assets/app.js", ["Host: bench.local"], [floor.pid]),
        }
        for label, (port, proc) in servers.items():
            base = f"http://127.0.0.1:{port}"
            room = {"id": "bench", "targetUrl": "http://bench.local", "proxyOrigin": origin, "ratePerMinute": 6000}
            httpx.post(f"{base}/api/admin/rooms", json=room, headers=auth).raise_for_status()
            with httpx.Client(base_url=base, headers={"Host": "bench.local"}) as c:
                c.post("/__qm/api/join", json={"roomId": "bench"}).raise_for_status()
                for _ in range(100):
                    if c.get("/__qm/api/status", params={"roomId": "bench"}).json()["state"] == "passed":
                        break
                    time.sleep(0.1)
                r = c.get("/page")
                assert r.status_code == 200, r.text
                cookie = "Cookie: " + "; ".join(f"{k}={v}" for k, v in c.cookies.items())
            targets[f"qm static{label}"] = (f"{base}/assets/app.js", ["Host: bench.local"], [proc.pid])
            targets[f"qm gated{label}"] = (f"{base}/page", ["Host: bench.local", cookie], [proc.pid])
        rounds: list[dict[str, dict[str, float]]] = []
        for _ in range(ROUNDS):
            results: dict[str, dict[str, float]] = {}
            for name, (url, headers, pids) in targets.items():
                wrk(url, 8, 2, headers)  # warm
                cpu_before = cpu_seconds(pids)
                through = wrk(url, CONNS, DURATION, headers)
                cpu_used = cpu_seconds(pids) - cpu_before
                latency = wrk(url, 1, max(3, DURATION // 2), headers)
                results[name] = {
                    "rps": through["rps"],
                    "non2xx": through["non2xx"] + latency["non2xx"],
                    "p50_ms": latency["p50_ms"],
                    "p99_ms": latency["p99_ms"],
                    "p99_ms_at_64": through["p99_ms"],
                    # CPU the server under test spent per request: robust to other load on the machine
                    "cpu_us_per_req": round(cpu_used / through["requests"] * 1e6, 1),
                    "rps_per_core": round(through["requests"] / cpu_used) if cpu_used else 0,
                }
            direct_round = results["direct"]
            for r in results.values():
                r["added_p50_ms"] = round(r["p50_ms"] - direct_round["p50_ms"], 3)
                r["added_p99_ms"] = round(r["p99_ms"] - direct_round["p99_ms"], 3)
            rounds.append(results)

        def median(values: list[float]) -> float:
            ordered = sorted(values)
            mid = len(ordered) // 2
            return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2

        results = {}
        for name in targets:
            per = [rnd[name] for rnd in rounds]
            results[name] = {key: round(median([p[key] for p in per]), 3) for key in per[0]}
        ratios: dict[str, list[float]] = {}
        for name in targets:
            if name.startswith(("qm ", "python floor")):
                ratios[name] = [round(rnd[name]["rps_per_core"] / rnd["nginx"]["rps_per_core"], 3) for rnd in rounds]
        fast_vs_asgi = {
            kind: [
                round(rnd[f"qm {kind}"]["rps_per_core"] / rnd[f"qm {kind} (ASGI path)"]["rps_per_core"], 3)
                for rnd in rounds
            ]
            for kind in ("static", "gated")
        }
        ratio_static = median(ratios["qm static"])
        ratio_gated = median(ratios["qm gated"])
        report = {
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
            "duration_s": DURATION,
            "connections": CONNS,
            "rounds": ROUNDS,
            "results": results,
            "per_round": rounds,
            "per_core_vs_nginx_each_round": ratios,
            "fast_path_vs_asgi_path_each_round": fast_vs_asgi,
            "qm_static_vs_nginx": round(ratio_static, 3),
            "qm_gated_vs_nginx": round(ratio_gated, 3),
        }
        out = ROOT / "bench/results/proxy.json"
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps(report, indent=2))
        print(
            "| path | req/s (64 conns) | CPU µs/req | req/s per core | p50 ms (1 conn) | p99 ms (1 conn) "
            "| added p50 ms | added p99 ms |"
        )
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for name, r in results.items():
            print(
                f"| {name} | {r['rps']:,.0f} | {r['cpu_us_per_req']:.1f} | {r['rps_per_core']:,.0f} | "
                f"{r['p50_ms']:.3f} | {r['p99_ms']:.3f} | {r['added_p50_ms']:.3f} | {r['added_p99_ms']:.3f} |"
            )
        print(f"per core, median of {ROUNDS} rounds: qm static / nginx = {ratio_static:.2f}, gated = {ratio_gated:.2f}")
        for name, values in ratios.items():
            print(f"  {name} / nginx, each round: {values}")
        for kind, values in fast_vs_asgi.items():
            print(f"  fast path / ASGI path per core, {kind}, each round: {values}")
        print(f"load average before {report['loadavg_before']}, after {os.getloadavg()}")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
