"""BENCH_ONLY=million: a million waiting tickets in one room on valkey+pg, in numbers.

One server (``WORKERS=2``, STORE=valkey + SIDESTORE=pg, on both CPUs; its prefix and schema are the
bench's own and deleted after) and one room, ``million``, at a rate of 0 (nobody leaves the line). The line
is filled with ``BENCH_MILLION_TICKETS`` real joins by ``BENCH_MILLION_PROCESSES`` driver processes
(``bench/million_joins.py``): the room's join script through a ValkeyStore on the server's prefix, each
join acknowledged after its PostgreSQL commit through a PgJournal on the server's schema, as the server
does for ``/api/join`` but without HTTP (the server's HTTP join path costs ~175 µs of CPU a join, which on
two shared cores would make the fill take many minutes). Each visitor has an address and a cookie of its
own. The server runs beside them: it ticks the room and its leader trims the outbox. Measured:

  fill        joins, seconds, joins/s, Valkey's CPU per join
  valkey      INFO memory ``used_memory`` before and after (after: once the leader has trimmed the room's
              outbox below 1 % of the tickets, at most 30 s), per waiting ticket; ``MEMORY USAGE`` (SAMPLES 0)
              of every key of the room, largest first, per ticket
  journal     ``pg_total_relation_size`` of every table of the schema before and after, per join; WAL bytes
              per join (``pg_current_wal_lsn`` before and after: the whole PostgreSQL cluster's WAL,
              so other databases' writes in the same window count too)
  streams     with ``BENCH_MILLION_STREAMS`` (e.g. ``19000,38000``): ``/events`` streams opened by
              ``bench/sse_fanout.py`` against the same server (its own tickets, in a room of their own),
              from as many client processes as the open-file limit needs (19,000 streams each, each
              from its own loopback address), how many opened and got frames; the open-file limit of
              this process is reported beside it

    BENCH_VALKEY_URL       (redis://127.0.0.1:6379/11; database 0 refused)
    BENCH_DATABASE_URL     (postgresql://postgres@127.0.0.1:5432/qm_bench_test; must end in _test)
    BENCH_MILLION_TICKETS  (1000000)
    BENCH_MILLION_PROCESSES (2)
    BENCH_MILLION_STREAMS  (unset: no stream count)
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import tempfile
import time
import uuid
from typing import Any

import orjson
from fleet import DATABASE_URL, VALKEY_URL, _cleanup, _guard, _valkey_env
from httpc import Conn

import bench
from bench import BENCH, CLIENT_CPU, RESULTS, Server, admin, log, proc_cpu_seconds, room_body, room_stats, run

TICKETS = int(os.environ.get("BENCH_MILLION_TICKETS", "1000000"))
STREAMS = [int(x) for x in os.environ.get("BENCH_MILLION_STREAMS", "").split(",") if x.strip()]
PROCESSES = int(os.environ.get("BENCH_MILLION_PROCESSES", "2"))
ROOM = "million"


def _valkey_pid() -> int | None:
    found = subprocess.run(["pgrep", "-x", "redis-server"], capture_output=True, text=True).stdout.split()
    found += subprocess.run(["pgrep", "-x", "valkey-server"], capture_output=True, text=True).stdout.split()
    return int(found[0]) if len(found) == 1 else None


def _psql(sql: str) -> str:
    out = subprocess.run(["psql", DATABASE_URL, "-tAc", sql], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def _wal_lsn() -> str:
    return _psql("SELECT pg_current_wal_lsn()")


def _table_sizes(schema: str) -> dict[str, int]:
    rows = _psql(
        "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        f"WHERE n.nspname = '{schema}' AND c.relkind = 'r'"
    )
    out: dict[str, int] = {}
    for line in rows.splitlines():
        name, size = line.split("|")
        out[name] = int(size)
    return out


def _used_memory(client: Any) -> int:
    return int(client.info("memory")["used_memory"])


def _key_usage(client: Any, prefix: str) -> list[dict[str, Any]]:
    """Every key of the server's prefix: its type, length and ``MEMORY USAGE … SAMPLES 0``."""
    out = []
    for key in client.scan_iter(match=f"{prefix}*", count=1000):
        kind = client.type(key).decode()
        size = {"hash": client.hlen, "zset": client.zcard, "set": client.scard, "list": client.llen}.get(kind)
        usage = client.memory_usage(key, samples=0) or 0
        encoding = client.object("encoding", key)
        out.append(
            {
                "key": key.decode(errors="replace"),
                "type": kind,
                "encoding": encoding.decode() if isinstance(encoding, bytes) else encoding,
                "length": size(key) if size else None,
                "bytes": usage,
            }
        )
    out.sort(key=lambda x: -int(x["bytes"]))
    return out


async def _waiting(server: Server, room: str = ROOM) -> int:
    """Those waiting in ``room``, in line or in its pre-queue."""
    conn = await Conn(server.host, server.port).open()
    try:
        stats = await room_stats(conn, room)
        return int(stats["waiting"]) + int(stats.get("preQueue") or 0)
    finally:
        await conn.close()


async def _setup(server: Server) -> None:
    conn = await Conn(server.host, server.port).open()
    try:
        await admin(conn, "POST", "/api/admin/rooms", room_body(ROOM, 0))
        await admin(conn, "POST", "/api/admin/rooms", room_body("line", 60))
    finally:
        await conn.close()


def _fill(
    server: Server, env: dict[str, str], valkey_pid: int | None, room: str = ROOM, tickets: int = TICKETS
) -> dict[str, Any]:
    """``tickets`` real joins into ``room``, split over PROCESSES drivers (bench/million_joins.py) on both CPUs."""
    t0 = time.monotonic()
    srv0, vk0 = proc_cpu_seconds(server.pid) + _children_cpu(server.pid), proc_cpu_seconds(valkey_pid)
    joins, failed = drive(VALKEY_URL, env, room, tickets, 0, PROCESSES)
    wall = time.monotonic() - t0
    srv = proc_cpu_seconds(server.pid) + _children_cpu(server.pid) - srv0
    vk = proc_cpu_seconds(valkey_pid) - vk0
    waiting = run(_waiting(server, room))
    return {
        "waiting": waiting,
        "joins": joins,
        "failed": failed,
        "processes": PROCESSES,
        "seconds": round(wall, 1),
        "joinsPerSec": round(joins / wall, 1),
        "valkeyUsPerJoin": round(vk * 1e6 / joins, 1) if valkey_pid and joins else None,
        "serverCpuSeconds": round(srv, 1),
    }


def drive(
    url: str, env: dict[str, str], room: str, count: int, first: int, processes: int, in_flight: int | None = None
) -> tuple[int, int]:
    """``count`` real joins into ``room`` (visitors ``first`` on) from ``processes`` driver processes
    (bench/million_joins.py, ``in_flight`` joins each at once: its default when None). (joins, failed)."""
    share = -(-count // processes)
    procs = []
    for i in range(processes):
        n = min(share, count - i * share)
        cmd = [
            *(bench.PY, str(BENCH / "million_joins.py")),
            *("--valkey", url, "--prefix", env["VALKEY_PREFIX"], "--database", DATABASE_URL),
            *("--schema", env["PG_SCHEMA"], "--room", room, "--count", str(n), "--first", str(first + i * share)),
            *(("--concurrency", str(in_flight)) if in_flight else ()),
        ]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    joins = failed = 0
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=7200)
        lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or not lines:
            raise RuntimeError(f"million_joins failed:\n{stdout}\n{stderr}")
        got = orjson.loads(lines[-1])
        joins += int(got["joins"])
        failed += int(got["failed"])
    return joins, failed


def _children_cpu(pid: int) -> float:
    """The CPU time of the workers a supervisor started (WORKERS=2), read from /proc."""
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return sum(proc_cpu_seconds(int(child)) for child in out)


PER_CLIENT = 19000  # streams one client process opens: its open-file limit here is 20,000


def _streams(server: Server) -> list[dict[str, Any]]:
    """Each count of streams opened at once by client processes of at most PER_CLIENT streams, each from a
    loopback address of its own (127.0.0.2, .3, …: ~28,000 ephemeral ports each), their figures summed."""
    rows = []
    for count in STREAMS:
        clients = -(-count // PER_CLIENT)
        procs = []
        for i in range(clients):
            share = min(PER_CLIENT, count - i * PER_CLIENT)
            cmd = [
                *("taskset", "-c", CLIENT_CPU, bench.PY, str(BENCH / "sse_fanout.py")),
                *("--base", server.url, "--room", "line", "--streams", str(share), "--measure", "5"),
                *("--settle", "3", "--open-timeout", "300", "--source", f"127.0.0.{2 + i}"),
            ]
            procs.append((cmd, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
        found: list[dict[str, Any]] = []
        exits = []
        for i, (cmd, proc) in enumerate(procs):
            stdout, _ = proc.communicate(timeout=1200)
            exits.append(proc.returncode)
            (RESULTS / f"million-streams-{count}-{i}.txt").write_text(" ".join(cmd) + "\n\n" + stdout)
            lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
            found.append(orjson.loads(lines[-1]) if lines else {})
        row = {
            "asked": count,
            "clients": clients,
            "exit": exits,
            "open": sum(int(f.get("streamsOpen") or 0) for f in found),
            "framesPerSec": round(sum(float(f.get("framesPerSec") or 0) for f in found), 1),
            "delayMs": [f.get("delayMs") for f in found],
            "workersRssKb": _workers_rss_kb(server.pid),
        }
        rows.append(row)
        log(f"million: {count} streams asked, {row['open']} open, {row['framesPerSec']} frames/s")
        time.sleep(3.0)
    return rows


def _workers_rss_kb(pid: int) -> list[int]:
    """VmRSS of each worker a supervisor started, now (its streams closed again by then)."""
    out = []
    for child in subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split():
        try:
            with open(f"/proc/{child}/status") as f:
                out += [int(line.split()[1]) for line in f if line.startswith("VmRSS:")]
        except OSError:
            pass
    return out


def phase_million(results: dict[str, Any]) -> None:
    import redis

    _guard()
    tag = "m" + uuid.uuid4().hex[:8]
    spool = tempfile.mkdtemp(prefix="qm-bench-million-")
    client = redis.Redis.from_url(VALKEY_URL)
    valkey_pid = _valkey_pid()
    server: Server | None = None
    out: dict[str, Any] = {"tickets": TICKETS, "openFiles": resource.getrlimit(resource.RLIMIT_NOFILE)}
    try:
        env = _valkey_env(tag, spool, WORKERS="2", MAX_CONNECTIONS="0")
        server = Server("million", [bench.PY, "-m", "queue_manager"], env, cpu="0,1")
        run(_setup(server))
        prefix, schema = env["VALKEY_PREFIX"], env["PG_SCHEMA"]
        time.sleep(1.0)
        mem0, lsn0, sizes0 = _used_memory(client), _wal_lsn(), _table_sizes(schema)
        log(f"million: filling room {ROOM} to {TICKETS} waiting (valkey+pg, WORKERS=2)")
        out["fill"] = _fill(server, env, valkey_pid)
        time.sleep(1.0)
        # the outbox holds each event until the journal has it and the leader trims it (every RESYNC_MS):
        # at the end of a fast fill that is tens of thousands of events, not the waiting tickets' memory
        outbox = f"{prefix}{{{ROOM}}}:ob"
        n = out["fill"]["waiting"]
        at_fill_end = client.zcard(outbox)
        waited_until = time.monotonic() + 30
        while client.zcard(outbox) > n // 100 and time.monotonic() < waited_until:
            time.sleep(0.5)
        mem1, lsn1, sizes1 = _used_memory(client), _wal_lsn(), _table_sizes(schema)
        keys = [k for k in _key_usage(client, prefix) if ROOM in k["key"]]
        out["valkey"] = {
            "usedMemoryBefore": mem0,
            "usedMemoryAfter": mem1,
            "bytesPerTicket": round((mem1 - mem0) / n, 1),
            "keysBytesPerTicket": round(sum(int(k["bytes"]) for k in keys) / n, 1),
            "keys": [{**k, "perTicket": round(int(k["bytes"]) / n, 1)} for k in keys[:12]],
            "outboxAtFillEnd": at_fill_end,
            "outboxMeasured": client.zcard(outbox),
        }
        wal = int(_psql(f"SELECT pg_wal_lsn_diff('{lsn1}', '{lsn0}')"))
        grown = {name: sizes1.get(name, 0) - sizes0.get(name, 0) for name in sizes1}
        out["journal"] = {
            "walBytes": wal,
            "walBytesPerJoin": round(wal / n, 1),
            "tableBytesPerJoin": round(sum(grown.values()) / n, 1),
            "tables": {k: {"bytes": sizes1[k], "perJoin": round(v / n, 1)} for k, v in grown.items() if v},
        }
        log(
            f"million: {n} waiting in {out['fill']['seconds']} s ({out['fill']['joinsPerSec']} joins/s); "
            f"Valkey {out['valkey']['bytesPerTicket']} B/ticket (keys {out['valkey']['keysBytesPerTicket']}); "
            f"PostgreSQL {out['journal']['tableBytesPerJoin']} B/join in tables, "
            f"WAL {out['journal']['walBytesPerJoin']}"
        )
        for k in out["valkey"]["keys"][:6]:
            log(f"  {k['key']}: {k['type']}/{k['encoding']} len {k['length']}, {k['perTicket']} B/ticket")
        if STREAMS:
            out["streams"] = _streams(server)
    finally:
        if server is not None:
            server.stop()
        _cleanup([tag])
        shutil.rmtree(spool, ignore_errors=True)
        client.close()
    results["million"] = out
