"""Forward-auth benchmark: nginx in front of an app, with and without the queue's gate (``GET /api/gate``).

One run measures, on loopback, with ``ab`` (apache2-utils; keep-alive):

* **nginx**: ab → nginx ``proxy_pass`` (1 worker) → the app;
* **nginx + gate**: ab → nginx with the shipped ``connectors/nginx/queue-manager.conf`` (``auth_request`` to
  Queue Manager for every request) → the app, carrying an admitted visitor's ``qm_<room>`` and
  ``qm_dk_<room>`` cookies: the door-key replay, the hot path of a visitor inside.

The app is a second nginx answering ``return 200``. Pinning: nginx and the Queue Manager server share CPU 0
(the whole gated stack on one core), the app and ab on CPU 1. Throughput: ``CONNS`` connections for
``DURATION`` s; latency: 1 connection, ab's mean time per request. Added latency = gated minus plain.
The targets run in turn, ``ROUNDS`` times over; each figure is the median round.

    .venv/bin/python bench/forward_auth.py           # writes bench/results/forward_auth.json, prints a table
    ROUNDS=5 DURATION=10 .venv/bin/python bench/forward_auth.py

``make bench`` runs it as its ``gate`` phase (``BENCH_ONLY=gate make bench`` alone).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from proxy_bench import cpu_seconds, family, free_port, nginx, wait_port

ROOT = Path(__file__).resolve().parents[1]
PY = os.environ.get("PY", str(ROOT / ".venv/bin/python"))
DURATION = int(os.environ.get("DURATION", "5"))
CONNS = int(os.environ.get("CONNS", "32"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
LATENCY_REQUESTS = int(os.environ.get("LATENCY_REQUESTS", "2000"))
STACK_CPU, LOAD_CPU = "0", "1"
KEY = "bench-public-key-0123456789"
ADMIN = "bench-admin-key-0123456789"


def ab(url: str, cookies: list[str], *, conns: int, seconds: int | None = None, requests: int = 0) -> dict[str, float]:
    args = ["taskset", "-c", LOAD_CPU, "ab", "-q", "-k", "-c", str(conns)]
    args += ["-t", str(seconds), "-n", "10000000"] if seconds else ["-n", str(requests)]
    if cookies:  # one -C: ab keeps only the last of several
        args += ["-C", "; ".join(cookies)]
    out = subprocess.run([*args, url], capture_output=True, text=True, check=True).stdout

    def number(label: str) -> float:
        m = re.search(rf"^{label}:\s+([\d.]+)", out, re.M)
        assert m, out
        return float(m.group(1))

    non2xx = re.search(r"^Non-2xx responses:\s+(\d+)", out, re.M)
    return {
        "rps": number("Requests per second"),
        "requests": number("Complete requests"),
        "mean_ms": number(r"Time per request"),  # the first one: mean, across all concurrent requests
        "failed": number("Failed requests"),
        "non2xx": float(non2xx.group(1)) if non2xx else 0.0,
    }


def _gated_site(app_port: int, port: int, queue: str) -> str:
    conf = (ROOT / "connectors/nginx/queue-manager.conf").read_text()
    conf = conf.replace("QUEUE_URL", queue).replace("ROOM", "bench").replace("KEY", KEY)
    conf = conf.replace("APP", "http://app").replace("listen 80;", f"listen 127.0.0.1:{port};")
    body = conf.split("\nserver {", 1)[1]
    return (
        f"upstream app {{ server 127.0.0.1:{app_port}; keepalive 64; }}\n"
        "upstream qm { server QUEUE; keepalive 64; }\n".replace("QUEUE", queue.removeprefix("http://"))
        + "server {"
        + body.replace(f"proxy_pass {queue}/api/gate", "proxy_pass http://qm/api/gate").replace(
            "proxy_set_header Host $proxy_host;",
            "proxy_set_header Host $proxy_host; proxy_http_version 1.1; proxy_set_header Connection '';",
        )
    )


def admitted_cookies(queue: str, site: str) -> list[str]:
    """An admitted visitor's cookies, as the hand-off through nginx sets them."""
    auth = {"Authorization": f"Bearer {ADMIN}"}
    room = {"id": "bench", "targetUrl": site + "/", "returnOrigins": [site], "ratePerMinute": 6000}
    httpx.post(f"{queue}/api/admin/rooms", json=room, headers=auth).raise_for_status()
    with httpx.Client(base_url=queue, headers={"User-Agent": "ApacheBench/2.3"}) as c:
        token = c.post("/api/join", json={"roomId": "bench", "returnUrl": site + "/page"}).json()["token"]
        for _ in range(100):
            if c.get("/api/status", params={"roomId": "bench", "token": token}).json()["state"] == "passed":
                break
            time.sleep(0.1)
    r = httpx.get(f"{site}/page?qm_token={token}", headers={"User-Agent": "ApacheBench/2.3"})
    assert r.status_code == 302, r.text
    jar = [line.split(";", 1)[0] for line in r.headers.get_list("set-cookie")]
    assert len(jar) == 2, jar
    check = httpx.get(f"{site}/page", headers={"User-Agent": "ApacheBench/2.3", "Cookie": "; ".join(jar)})
    assert check.status_code == 200, check.text
    return jar


def main() -> dict[str, Any]:
    if not shutil.which("nginx") or not shutil.which("ab"):
        sys.exit("bench: nginx and ab are needed (apt-get install -y nginx apache2-utils)")
    tmp = Path(tempfile.mkdtemp(prefix="qm-gate-bench-"))
    os.chmod(tmp, 0o755)
    app_port, plain_port, gated_port, qm_port = free_port(), free_port(), free_port(), free_port()
    queue = f"http://127.0.0.1:{qm_port}"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        app = f"server {{ listen 127.0.0.1:{app_port}; location / {{ return 200 'hello from the app\\n'; }} }}"
        procs.append(nginx(tmp, "app", app, LOAD_CPU))
        plain = (
            f"upstream app {{ server 127.0.0.1:{app_port}; keepalive 64; }}\n"
            f"server {{ listen 127.0.0.1:{plain_port}; location / {{ proxy_pass http://app; "
            "proxy_http_version 1.1; proxy_set_header Connection ''; proxy_set_header Host $host; } }"
        )
        procs.append(nginx(tmp, "plain", plain, STACK_CPU))
        procs.append(nginx(tmp, "gated", _gated_site(app_port, gated_port, queue), STACK_CPU))
        env = {
            **os.environ,
            "PORT": str(qm_port),
            "HOST": "127.0.0.1",
            "ADMIN_KEY": ADMIN,
            "PUBLIC_API_KEY": KEY,
            "SECRET": "bench-secret-" + "x" * 40,
            "STORE": "memory",
            "JOIN_LIMIT_PER_MIN": "0",
            "CHECK_LIMIT_PER_MIN": "0",
            "WAITING_LIMIT_PER_MIN": "0",
        }
        qm = subprocess.Popen(
            ["taskset", "-c", STACK_CPU, PY, "-m", "queue_manager"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(tmp / "qm.stderr", "wb"),
        )
        procs.append(qm)
        for port in (app_port, plain_port, gated_port, qm_port):
            wait_port(port)
        cookies = admitted_cookies(queue, f"http://127.0.0.1:{gated_port}")
        targets = {
            "nginx": (f"http://127.0.0.1:{plain_port}/page", [], family(procs[1].pid)),
            "nginx + gate": (f"http://127.0.0.1:{gated_port}/page", cookies, [*family(procs[2].pid), qm.pid]),
        }
        rounds: dict[str, list[dict[str, float]]] = {name: [] for name in targets}
        for _ in range(ROUNDS):
            for name, (url, jar, pids) in targets.items():
                ab(url, jar, conns=CONNS, requests=2000)  # warm: connections open, caches filled
                before = cpu_seconds(pids)
                run = ab(url, jar, conns=CONNS, seconds=DURATION)
                run["cpu_us_per_request"] = (cpu_seconds(pids) - before) / run["requests"] * 1e6
                run["latency_ms"] = ab(url, jar, conns=1, requests=LATENCY_REQUESTS)["mean_ms"]
                if run["non2xx"] or run["failed"]:
                    probe = subprocess.run(
                        ["ab", "-v", "2", "-n", "1", "-C", "; ".join(jar), url], capture_output=True, text=True
                    ).stdout
                    raise AssertionError((name, run, probe[-1500:]))
                rounds[name].append(run)
        out: dict[str, Any] = {"rounds": rounds, "settings": {"durationSec": DURATION, "conns": CONNS}}
        for name, runs in rounds.items():
            out[name] = {k: statistics.median(r[k] for r in runs) for k in ("rps", "cpu_us_per_request", "latency_ms")}
        out["addedLatencyMs"] = out["nginx + gate"]["latency_ms"] - out["nginx"]["latency_ms"]
        out["throughputRatio"] = out["nginx + gate"]["rps"] / out["nginx"]["rps"]
        out["loadavg"] = os.getloadavg()
        return out
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def table(out: dict[str, Any]) -> str:
    lines = [
        "| target | requests/s (one core) | CPU µs / request | latency, 1 connection (ms) |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name in ("nginx", "nginx + gate"):
        t = out[name]
        lines.append(f"| {name} | {t['rps']:,.0f} | {t['cpu_us_per_request']:.0f} | {t['latency_ms']:.3f} |")
    lines.append(
        f"\nadded latency per request: {out['addedLatencyMs']:.3f} ms; throughput with the gate: "
        f"{out['throughputRatio']:.1%} of nginx alone"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    result = main()
    results = ROOT / "bench/results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "forward_auth.json").write_text(json.dumps(result, indent=2))
    print(table(result))
