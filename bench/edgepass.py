"""BENCH_ONLY=edgepass: an admitted visitor's request through the edge gate Worker in workerd, the edge pass
checked in the Worker, against the same request answered by the /api/check round trip, in one run.

One workerd process (the gate Worker served from this checkout's /connectors/cloudflare/latest.js, twice,
and a one-line origin Worker) and the queue servers run on CPU 0; wrk runs on CPU 1. Per round, in turn:

  local       the visitor's cookies carry the edge pass (``qmp_bench``) and the door key: the Worker checks
              the pass (PASS_SIGNING=ed25519 server) and forwards to the origin
  roundtrip   today's gate: a PASS_SIGNING=hmac server, the visitor's ticket and door key; every request is
              a vouched /api/check (the door-key replay) before the origin
  floor       no gate at all: the same Worker without a room forwards every request (what the origin hop costs)
  roundtrip_signing  the ed25519 server, the visitor without the edge pass: the round trip plus a pass signed
              per check (what a connector that never keeps the pass would cost)

``rpsPerCore`` = requests/s divided by the cores workerd and the queue servers used meanwhile (their CPU
seconds per wall second, from /proc); ``gateUsPerRequest`` = a variant's CPU per request over the floor's,
what the gate itself costs; ``gateCostRatio`` = the round trip's gate cost over the local check's.
``queueRequests`` = the requests the gate Workers sent to the queue during the run, by path, counted by the
workerd wrapper around ``fetch``. workerd comes from npm (the connector tests' cache, ~/.cache/qm-connectors).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from httpc import Conn

import bench
from bench import (
    CONNS,
    DURATION,
    ROOT,
    ROUNDS,
    SERVER_CPU,
    UA,
    WARMUP,
    Server,
    admin,
    log,
    proc_cpu_seconds,
    qm_server,
    room_body,
    run,
    wrk,
)

sys.path.insert(0, str(ROOT))
from tests.connectors.workerd_runtime import COMPATIBILITY_DATE, free_port, workerd_binary

KEY = "bench-public-key-0123456789abcdef0123"
ROOM = "bench"
TARGET_RATIO = 5.0

WRAPPER = """
import worker from "./gate.js";
const counts = {};
const realFetch = globalThis.fetch;
globalThis.fetch = (input, init) => {
  const url = new URL(typeof input === "string" ? input : input.url);
  counts[url.pathname] = (counts[url.pathname] || 0) + 1;
  return realFetch(input, init);
};
export default {
  async fetch(request, env, ctx) {
    if (new URL(request.url).pathname === "/__bench/counts") return Response.json(counts);
    const req = new Request(request);
    req.headers.set("cf-connecting-ip", "127.0.0.1");
    return worker.fetch(req, env, ctx);
  },
};
"""
ORIGIN = """
export default { fetch() { return new Response("origin ok", { headers: { "content-type": "text/plain" } }); } };
"""


class Workerd:
    """workerd on CPU 0: ``gate-<name>`` Workers (each with its vars) and the origin, a socket each."""

    def __init__(self, gate_js: bytes, gates: dict[str, dict[str, str]]) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="qm-bench-workerd-"))
        (self.dir / "gate.js").write_bytes(gate_js)
        (self.dir / "wrapper.js").write_text(WRAPPER)
        (self.dir / "origin.js").write_text(ORIGIN)
        self.ports = {"origin": free_port(), **{name: free_port() for name in gates}}
        origin_url = f"http://127.0.0.1:{self.ports['origin']}"
        services = [
            '(name = "net", network = (allow = ["public", "private", "local"]))',
            f'(name = "origin", worker = (modules = [(name = "origin.js", esModule = embed "origin.js")], '
            f'compatibilityDate = "{COMPATIBILITY_DATE}"))',
        ]
        for name, env in gates.items():
            bindings = ", ".join(
                f"(name = {json.dumps(k)}, text = {json.dumps(v)})"
                for k, v in {**env, "ORIGIN_URL": origin_url}.items()
            )
            services.append(
                f"(name = {json.dumps(name)}, worker = (modules = ["
                '(name = "main.js", esModule = embed "wrapper.js"), (name = "gate.js", esModule = embed "gate.js")], '
                f'compatibilityDate = "{COMPATIBILITY_DATE}", bindings = [{bindings}], globalOutbound = "net"))'
            )
        sockets = [
            f'(name = {json.dumps(name)}, address = "127.0.0.1:{port}", http = (), service = {json.dumps(name)})'
            for name, port in self.ports.items()
        ]
        (self.dir / "config.capnp").write_text(
            'using Workerd = import "/workerd/workerd.capnp";\n'
            "const config :Workerd.Config = (\n"
            f"  services = [{', '.join(services)}],\n"
            f"  sockets = [{', '.join(sockets)}],\n);\n"
        )
        self.log = open(self.dir / "workerd.log", "wb")
        self.proc = subprocess.Popen(
            ["taskset", "-c", SERVER_CPU, str(workerd_binary()), "serve", str(self.dir / "config.capnp")],
            cwd=self.dir,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        for port in self.ports.values():
            while True:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                        break
                except OSError:
                    if self.proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"workerd did not start: {(self.dir / 'workerd.log').read_text()}") from None
                    time.sleep(0.05)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}"

    def counts(self, name: str) -> dict[str, int]:
        with urllib.request.urlopen(self.url(name) + "/__bench/counts", timeout=5) as r:
            data: dict[str, int] = json.loads(r.read())
            return data

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


async def _passed_token(server: Server, return_url: str) -> str:
    """A visitor of room ``bench`` whose turn has come: the token the waiting page hands back."""
    conn = await Conn(server.host, server.port).open()
    try:
        await admin(conn, "POST", "/api/admin/rooms", room_body(ROOM, 600000, targetUrl=return_url))
        status, view = await conn.json("POST", "/api/join", {"roomId": ROOM, "returnUrl": return_url})
        assert status == 200, view
        token = str(view["token"])
        deadline = time.monotonic() + 5.0
        while view["state"] != "passed" and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            status, view = await conn.json("GET", f"/api/status?roomId={ROOM}&token={token}")
        if view["state"] != "passed":
            raise RuntimeError(f"the bench visitor was not passed within 5 s: {view}")
        return token
    finally:
        await conn.close()


def _hand_off(gate_url: str, token: str) -> dict[str, str]:
    """The waiting page's hand-off through the gate (GET /page?qm_token=): the cookies it sets."""
    u = urlsplit(gate_url)
    conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port, timeout=10)
    try:
        conn.request(
            "GET",
            f"/page?qm_token={quote(token, safe='')}",
            headers={"User-Agent": UA, "Accept": "text/html", "Sec-Fetch-Mode": "navigate"},
        )
        r = conn.getresponse()
        r.read()
        if r.status != 302:
            raise RuntimeError(f"the hand-off answered {r.status}")
        jar = {}
        for name, value in r.getheaders():
            if name.lower() == "set-cookie":
                k, _, rest = value.partition("=")
                jar[k.strip()] = rest.split(";", 1)[0]
        return jar
    finally:
        conn.close()


def _cookie(jar: dict[str, str], *names: str) -> str:
    return "; ".join(f"{n}={jar[n]}" for n in names)


def _measured(name: str, url: str, cookie: str, seconds: int, pids: list[int], record: bool = True) -> dict[str, Any]:
    """One wrk run; ``pids``: workerd first, then the queue servers. CPU per request of each side."""
    bench.wait_quiet()
    before, t0 = [proc_cpu_seconds(p) for p in pids], time.monotonic()
    r = wrk(name, url, "get.lua", {"QM_COOKIE": cookie}, seconds, connections=CONNS, record=record, gate=False)
    used = [proc_cpu_seconds(p) - b for p, b in zip(pids, before, strict=True)]
    cores = sum(used) / (time.monotonic() - t0)
    n = max(1, r["requests"])
    return {
        **r,
        "serverSideCores": round(cores, 3),
        "rpsPerCore": round(r["rps"] / cores, 1) if cores else None,
        "workerdUsPerRequest": round(used[0] * 1e6 / n, 1),
        "queueUsPerRequest": round(sum(used[1:]) * 1e6 / n, 1),
    }


def phase_edgepass(results: dict[str, Any]) -> None:
    signing: Server | None = None
    plain: Server | None = None
    workers: Workerd | None = None
    try:
        signing = qm_server(
            "qm-edgepass", extra={"PASS_SIGNING": "ed25519", "PUBLIC_API_KEY": KEY, "EDGE_PASS_TTL_SEC": "600"}
        )
        plain = qm_server("qm-edgepass-hmac", extra={"PUBLIC_API_KEY": KEY})
        with urllib.request.urlopen(signing.url + "/connectors/cloudflare/latest.js", timeout=10) as r:
            gate_js = r.read()
        gates = {
            "gate-pass": {"QM_URL": signing.url, "QM_ROOM": ROOM, "QM_KEY": KEY},
            "gate-hmac": {"QM_URL": plain.url, "QM_ROOM": ROOM, "QM_KEY": KEY},
            "gate-off": {"QM_URL": plain.url},  # no room: the Worker forwards every request (the floor)
        }
        workers = Workerd(gate_js, gates)
        pids = [workers.proc.pid, signing.pid, plain.pid]
        signed_jar = _hand_off(workers.url("gate-pass"), run(_passed_token(signing, workers.url("gate-pass") + "/")))
        plain_jar = _hand_off(workers.url("gate-hmac"), run(_passed_token(plain, workers.url("gate-hmac") + "/")))
        if f"qmp_{ROOM}" not in signed_jar or f"qmp_{ROOM}" in plain_jar:
            raise RuntimeError(f"unexpected hand-off cookies: {signed_jar.keys()} / {plain_jar.keys()}")
        variants = {
            "floor": (workers.url("gate-off") + "/page", "", "gate-off"),
            "local": (
                workers.url("gate-pass") + "/page",
                _cookie(signed_jar, f"qm_{ROOM}", f"qm_dk_{ROOM}", f"qmp_{ROOM}"),
                "gate-pass",
            ),
            "roundtrip": (
                workers.url("gate-hmac") + "/page",
                _cookie(plain_jar, f"qm_{ROOM}", f"qm_dk_{ROOM}"),
                "gate-hmac",
            ),
            "roundtrip_signing": (
                workers.url("gate-pass") + "/page",
                _cookie(signed_jar, f"qm_{ROOM}", f"qm_dk_{ROOM}"),
                "gate-pass",
            ),
        }
        for name, (url, cookie, _gate) in variants.items():  # warm-up: the key set and the list are loaded
            _measured(f"edgepass-{name}-warmup", url, cookie, max(WARMUP, 1), pids, record=False)
        per_round = max(1, DURATION // ROUNDS)
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
        queue: dict[str, dict[str, int]] = {name: {} for name in variants}
        for i in range(ROUNDS):
            for name, (url, cookie, gate) in variants.items():
                before = workers.counts(gate)
                runs[name].append(_measured(f"edgepass-{name}-r{i + 1}", url, cookie, per_round, pids))
                after = workers.counts(gate)
                for path, n in after.items():
                    if path.startswith(("/api/", "/.well-known/")) and n - before.get(path, 0):
                        queue[name][path] = queue[name].get(path, 0) + n - before.get(path, 0)
            log("edgepass round " + str(i + 1) + ": " + ", ".join(f"{n} {r[-1]['rps']:.0f}" for n, r in runs.items()))
        out: dict[str, Any] = {}
        for name, rs in runs.items():
            requests = sum(r["requests"] for r in rs)
            seconds = sum(r["seconds"] for r in rs)
            out[name] = {
                "requests": requests,
                "rps": round(requests / seconds, 1),
                "rpsPerCore": round(statistics.median(r["rpsPerCore"] for r in rs if r["rpsPerCore"]), 1),
                "serverSideCores": round(statistics.median(r["serverSideCores"] for r in rs), 3),
                "p99Ms": round(statistics.median(r["latencyMs"]["p99"] for r in rs), 3),
                "workerdUsPerRequest": round(statistics.median(r["workerdUsPerRequest"] for r in rs), 1),
                "queueUsPerRequest": round(statistics.median(r["queueUsPerRequest"] for r in rs), 1),
                "non2xx": sum(r["non2xx"] for r in rs),
                "socketErrors": sum(r["socketErrors"] for r in rs),
                "queueRequests": queue[name],
                "rounds": [{"rps": r["rps"], "rpsPerCore": r["rpsPerCore"]} for r in rs],
            }
        ratios = [
            a["rpsPerCore"] / b["rpsPerCore"]
            for a, b in zip(runs["local"], runs["roundtrip"], strict=True)
            if a["rpsPerCore"] and b["rpsPerCore"]
        ]
        out["localToRoundtripPerCore"] = round(statistics.median(ratios), 2) if ratios else None
        # the gate's own CPU per request: the server side's CPU per request over the floor's (no gate at all)
        us = {n: statistics.median(1e6 / r["rpsPerCore"] for r in rs if r["rpsPerCore"]) for n, rs in runs.items()}
        out["gateUsPerRequest"] = {n: round(us[n] - us["floor"], 1) for n in runs if n != "floor"}
        local_us = out["gateUsPerRequest"]["local"]
        out["gateCostRatio"] = round(out["gateUsPerRequest"]["roundtrip"] / local_us, 1) if local_us > 0 else None
        out["localToRoundtripRps"] = round(out["local"]["rps"] / out["roundtrip"]["rps"], 2)
        out["target"] = {
            "perCoreRatio": TARGET_RATIO,
            "met": bool(ratios)
            and statistics.median(ratios) >= TARGET_RATIO
            and out["local"]["queueRequests"].get("/api/check", 0) == 0,
        }
        uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
        out["uptimeAfter"] = uptime
        results["edgepass"] = out
        log(
            f"edgepass: local {out['local']['rps']:.0f} req/s ({out['local']['rpsPerCore']:.0f}/core, queue requests "
            f"{out['local']['queueRequests']}), roundtrip {out['roundtrip']['rps']:.0f} req/s "
            f"({out['roundtrip']['rpsPerCore']:.0f}/core, {out['roundtrip']['queueRequests']}); per core "
            f"{out['localToRoundtripPerCore']}x; gate CPU us/request {out['gateUsPerRequest']} "
            f"({out['gateCostRatio']}x); queue CPU us/request "
            f"{ {n: out[n]['queueUsPerRequest'] for n in runs} }; workerd CPU us/request "
            f"{ {n: out[n]['workerdUsPerRequest'] for n in runs} }; {uptime}"
        )
    finally:
        if workers is not None:
            workers.stop()
        for srv in (signing, plain):
            if srv is not None:
                srv.stop()


__all__ = ["phase_edgepass"]
