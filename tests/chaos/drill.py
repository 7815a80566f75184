"""The fault drill: a fleet of two instances under join load through kill -9, a PostgreSQL cut, a Valkey
cut and a clean restart, then every acknowledged join reconciled before and after a rebuild.

Run it with ``make chaos`` (options in ``CHAOS_ARGS``) or ``.venv/bin/python -m tests.chaos.drill --help``
from the repository root. The Operations guide's "The fault drill" says how to read its output.

What it does:

1. Starts two instances, ``a`` and ``b`` (``python -m queue_manager``, or ``QM_SERVER_CMD``), on
   ``STORE=valkey SIDESTORE=pg`` with one ``VALKEY_PREFIX`` and one ``PG_SCHEMA`` of the drill's own:
   one fleet. Both reach Valkey and PostgreSQL only through TCP relays the drill owns, so a cut is a
   cut of the relay, never of the shared servers. ``b`` runs with ``SPOOL_ON_FAILURE=1``.
2. Sends joins at ``--rate`` a second, alternating between the instances, over ``--rooms`` rooms, for
   ``--duration`` seconds, recording every acknowledgement (ticket and token) and every refusal by its
   ``code``.
3. Meanwhile, one after the other: ``--kills`` times ``kill -9`` of ``a`` with a burst of joins in flight
   on it (restarted at once on the same settings), a PostgreSQL cut of ``--pg-cut`` seconds (``b`` spools,
   ``a`` refuses), a Valkey cut of ``--valkey-cut`` seconds, and a clean stop (SIGTERM) and restart of
   ``b``. Each waits until joins succeed again on both instances.
4. Stops the load, waits for the fleet to settle (``/healthz`` ready, Valkey up, no room recovering, every
   spool drained, no gap in the journal), reconciles every acknowledged join with the live line and the
   journal, deletes the fleet's keys in Valkey so that every room is rebuilt from the journal, waits for
   the rooms to answer, and reconciles again.
5. Prints a table per fault and the reconciliation; exits 1 on a lost, duplicated or reordered join, a
   journal gap left at the end, a room that could not be rebuilt, or a fault the fleet did not recover
   from; 2 when the drill itself could not run. The prefix and the schema are deleted afterwards unless
   ``--keep``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import secrets
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from tests.chaos.reconcile import (
    Clients,
    Gap,
    Join,
    Ledger,
    by_room,
    drop_schema,
    forget_valkey,
    journal_gaps,
    look_up,
    read_journal,
    reconcile,
    refusals,
    settled,
    sql,
    table,
    unrebuildable,
    wait_for_no_gaps,
    wait_for_rooms,
)
from tests.conformance.harness import (
    LIMIT_KNOBS,
    SERVER_VARIABLES,
    Server,
    ServerStartError,
    free_port,
    random_secret,
    server_command,
    sync_valkey,
)
from tests.conformance.relay import Relay, through

DEFAULT_VALKEY = "redis://127.0.0.1:6379/12"
DEFAULT_DATABASE = "postgresql://postgres@127.0.0.1:5432/qm_conformance_test"
RECOVERY_TIMEOUT_SEC = 60.0
START_TIMEOUT_SEC = 30.0


@dataclass
class Options:
    duration: float = 60.0
    rate: float = 120.0
    kills: int = 2
    seed: int = 0
    rooms: int = 2
    pg_cut: float = 8.0
    valkey_cut: float = 5.0
    resync_ms: int = 500
    lease_ms: int = 2000
    settle_timeout: float = 60.0
    gap_timeout: float = 45.0
    rebuild_timeout: float = 30.0
    valkey_url: str = DEFAULT_VALKEY
    database_url: str = DEFAULT_DATABASE
    keep: bool = False
    ledger: str = ""


def parse(argv: Sequence[str] | None = None) -> Options:
    p = argparse.ArgumentParser(
        prog="python -m tests.chaos.drill",
        description="Fault drill: two instances on Valkey + PostgreSQL under join load through kill -9, a "
        "PostgreSQL cut, a Valkey cut and a clean restart; then every acknowledged join reconciled with the "
        "line and the journal, before and after a rebuild from the journal.",
    )
    d = Options()
    p.add_argument("--duration", type=float, default=d.duration, help="seconds of load (default %(default)s)")
    p.add_argument("--rate", type=float, default=d.rate, help="joins a second, both instances (default %(default)s)")
    p.add_argument("--kills", type=int, default=d.kills, help="kill -9 cycles of instance a (default %(default)s)")
    p.add_argument("--seed", type=int, default=None, help="random seed: fault timing, rooms (default: random)")
    p.add_argument("--rooms", type=int, default=d.rooms, help="rooms under load (default %(default)s)")
    p.add_argument("--pg-cut", type=float, default=d.pg_cut, help="seconds PostgreSQL is cut (default %(default)s)")
    p.add_argument("--valkey-cut", type=float, default=d.valkey_cut, help="seconds Valkey is cut (default %(default)s)")
    p.add_argument("--resync-ms", type=int, default=d.resync_ms, help="the instances' RESYNC_MS (default %(default)s)")
    p.add_argument("--lease-ms", type=int, default=d.lease_ms, help="their LEADER_LEASE_MS (default %(default)s)")
    p.add_argument("--settle-timeout", type=float, default=d.settle_timeout, help="seconds (default %(default)s)")
    p.add_argument(
        "--gap-timeout", type=float, default=d.gap_timeout, help="seconds to wait for the journal's gaps to close"
    )
    p.add_argument("--rebuild-timeout", type=float, default=d.rebuild_timeout, help="seconds (default %(default)s)")
    p.add_argument(
        "--valkey-url",
        default=os.environ.get("TEST_VALKEY_URL") or DEFAULT_VALKEY,
        help="the Valkey to use, one server (default: TEST_VALKEY_URL, else %(default)s)",
    )
    p.add_argument(
        "--database-url",
        default=os.environ.get("TEST_DATABASE_URL") or DEFAULT_DATABASE,
        help="the PostgreSQL database to use (default: TEST_DATABASE_URL, else %(default)s)",
    )
    p.add_argument("--keep", action="store_true", help="keep the drill's Valkey keys and schema afterwards")
    p.add_argument("--ledger", default="", help="write every join and fault to this file, one JSON object a line")
    a = p.parse_args(argv)
    if a.duration <= 0 or a.rate <= 0 or a.kills < 0 or a.rooms < 1:
        p.error("--duration and --rate must be positive, --kills at least 0, --rooms at least 1")
    if urlsplit(a.valkey_url).scheme not in ("redis", "rediss", "valkey", "valkeys"):
        p.error("--valkey-url: one Valkey server (redis://host:port/db): the drill cuts it through a relay")
    seed = a.seed if a.seed is not None else secrets.randbelow(1_000_000)
    return Options(
        duration=a.duration,
        rate=a.rate,
        kills=a.kills,
        seed=seed,
        rooms=a.rooms,
        pg_cut=a.pg_cut,
        valkey_cut=a.valkey_cut,
        resync_ms=a.resync_ms,
        lease_ms=a.lease_ms,
        settle_timeout=a.settle_timeout,
        gap_timeout=a.gap_timeout,
        rebuild_timeout=a.rebuild_timeout,
        valkey_url=a.valkey_url,
        database_url=a.database_url,
        keep=a.keep,
        ledger=a.ledger,
    )


# ---------------------------------------------------------------------- the fleet


class Instance:
    """One instance of the fleet: the same settings (and port) across its restarts."""

    def __init__(self, name: str, env: dict[str, str], port: int) -> None:
        self.name = name
        self.env = env
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.server: Server | None = None
        self.runs: list[Server] = []

    def start(self) -> None:
        last: ServerStartError | None = None
        for _ in range(5):  # after a kill the port can take a moment to be free again
            srv = Server(server_command(), self.env, self.port, tempfile.mkdtemp(prefix=f"qm-drill-{self.name}-"))
            self.runs.append(srv)
            try:
                srv.wait_listening(START_TIMEOUT_SEC)
            except ServerStartError as err:
                last = err
                if "address already in use" not in err.stderr.lower():
                    raise
                time.sleep(0.5)
                continue
            self.server = srv
            return
        assert last is not None
        raise last

    @property
    def pid(self) -> int | None:
        return self.server.proc.pid if self.server is not None else None

    def kill(self) -> None:
        if self.server is not None:
            self.server.kill()

    def terminate(self) -> int | None:
        """SIGTERM and wait for the exit (SIGKILL after 10 s): a clean stop."""
        return self.server.stop() if self.server is not None else None

    def exited_by_itself(self) -> int | None:
        """The exit code of a run that ended without the drill stopping it (None: running)."""
        return self.server.returncode if self.server is not None else None

    def stderr_tail(self, lines: int = 15) -> str:
        text = self.server.stderr if self.server is not None else ""
        return "\n".join(text.rstrip().splitlines()[-lines:])

    def close(self, logs: Path) -> None:
        """Stop every run still going and keep each run's stderr in ``logs`` (``<name>-<run>.stderr``)."""
        logs.mkdir(parents=True, exist_ok=True)
        for k, srv in enumerate(self.runs, 1):
            with contextlib.suppress(Exception):
                srv.stop()
            with contextlib.suppress(Exception):
                (logs / f"{self.name}-{k}.stderr").write_text(srv.stderr, encoding="utf-8")


class Load:
    """Joins at a steady rate, alternating between the instances, each into a room drawn at random."""

    def __init__(
        self, ledger: Ledger, clients: Clients, fleet: Sequence[Instance], rooms: Sequence[str], rate: float, seed: int
    ) -> None:
        self.ledger, self.clients, self.fleet, self.rooms, self.rate = ledger, clients, fleet, rooms, rate
        self.rng = random.Random(seed)
        self.pool = ThreadPoolExecutor(64, thread_name_prefix="drill-join")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="drill-load", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        t0 = time.monotonic()
        i = 0
        while not self._stop.is_set():
            ahead = t0 + i / self.rate - time.monotonic()
            if ahead > 0 and self._stop.wait(ahead):  # the pace of the load, not a wait for a condition
                return
            inst = self.fleet[i % len(self.fleet)]
            room = self.rooms[self.rng.randrange(len(self.rooms))]
            self.pool.submit(self.ledger.join, self.clients, inst.url, room, inst.name)
            i += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.pool.shutdown(wait=True)


class InstanceExited(RuntimeError):
    """An instance of the fleet ended without the drill stopping it."""


@dataclass
class Fault:
    name: str
    start: float
    end: float = 0.0
    recovered: float | None = None
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------- the drill


class Drill:
    def __init__(self, o: Options) -> None:
        self.o = o
        tag = uuid.uuid4().hex[:10]
        self.prefix = f"qmchaos{tag}:"
        self.schema = f"qmchaos_{tag}"
        self.rooms = [f"drill-{tag[:6]}-{k + 1}" for k in range(o.rooms)]
        self.admin_key = "qm-drill-admin-" + secrets.token_hex(12)
        self.workdir = Path(tempfile.mkdtemp(prefix="qm-drill-"))
        self.ledger = Ledger()
        self.clients = Clients()
        self.faults: list[Fault] = []
        self.fleet: list[Instance] = []
        self.t0 = time.monotonic()
        self.relays: dict[str, Relay] = {}
        self.load: Load | None = None

    # ---------------------------------------------------------------- output

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.t0:6.1f} s] {text}", file=sys.stderr, flush=True)

    def at(self, t: float) -> str:
        return f"{t - self.t0:.1f} s"

    # ---------------------------------------------------------------- setup

    def preflight(self) -> None:
        client = sync_valkey(self.o.valkey_url, socket_connect_timeout=3)
        try:
            client.ping()
        finally:
            client.close()
        sql(self.o.database_url, "SELECT 1")

    def start_fleet(self) -> None:
        v, d = urlsplit(self.o.valkey_url), urlsplit(self.o.database_url)
        self.relays["valkey"] = Relay(v.hostname or "127.0.0.1", v.port or 6379)
        self.relays["pg"] = Relay(d.hostname or "127.0.0.1", d.port or 5432)
        secret = random_secret(48)
        for name, extra in (("a", {}), ("b", {"SPOOL_ON_FAILURE": "1"})):
            port = free_port()
            env = {k: v for k, v in os.environ.items() if k not in SERVER_VARIABLES}
            env.update(
                {
                    "STORE": "valkey",
                    "SIDESTORE": "pg",
                    "VALKEY_URL": through(self.relays["valkey"], self.o.valkey_url),
                    "DATABASE_URL": through(self.relays["pg"], self.o.database_url),
                    "VALKEY_PREFIX": self.prefix,
                    "PG_SCHEMA": self.schema,
                    "SPOOL_DIR": str(self.workdir / f"spool-{name}"),
                    "QM_INSTANCE_ID": f"drill-{name}",
                    "PORT": str(port),
                    "HOST": "127.0.0.1",
                    "ADMIN_KEY": self.admin_key,
                    "SECRET": secret,
                    "RESYNC_MS": str(self.o.resync_ms),
                    "LEADER_LEASE_MS": str(self.o.lease_ms),
                    "ALERT_EVERY_MS": "1000",
                    "PYTHONUNBUFFERED": "1",
                    **dict.fromkeys(LIMIT_KNOBS, "0"),  # one address sends every join: no per-address limits
                    **extra,
                }
            )
            inst = Instance(name, env, port)
            inst.start()
            self.fleet.append(inst)
            self.say(
                f"instance {name} listening on {inst.url} (pid {inst.pid}){' with SPOOL_ON_FAILURE=1' * bool(extra)}"
            )
        with httpx.Client(base_url=self.fleet[0].url, timeout=10, headers=self.headers) as admin:
            for room in self.rooms:
                body = {
                    "id": room,
                    "targetUrl": "https://shop.example/",
                    "ratePerMinute": 0,  # nobody leaves the line: every place can be checked at the end
                    "queueMaxPerIp": None,
                    "presenceSec": None,
                }
                r = admin.post("/api/admin/rooms", json=body)
                if r.status_code != 201:
                    raise RuntimeError(f"creating room {room}: HTTP {r.status_code} {r.text[:300]}")
        self.say(f"rooms {', '.join(self.rooms)}; prefix {self.prefix}, schema {self.schema}, seed {self.o.seed}")

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.admin_key}"}

    @property
    def urls(self) -> list[str]:
        return [inst.url for inst in self.fleet]

    # ---------------------------------------------------------------- faults

    def plan(self) -> list[str]:
        """kill, pg, kill, valkey, kill, …, sigterm: the kills spread between the other faults."""
        kills, out = self.o.kills, []
        if kills:
            out.append("kill")
            kills -= 1
        for other in ("pg", "valkey"):
            out.append(other)
            if kills:
                out.append("kill")
                kills -= 1
        return [*out, *["kill"] * kills, "sigterm"]

    def kill(self, inst: Instance) -> Fault:
        """kill -9 with joins in flight: a burst on the instance, killed once some are acknowledged."""
        pool = ThreadPoolExecutor(24, thread_name_prefix="drill-burst")
        burst: list[Future[Join]] = [
            pool.submit(self.ledger.join, self.clients, inst.url, self.rooms[i % len(self.rooms)], inst.name)
            for i in range(48)
        ]
        deadline = time.monotonic() + 10
        while sum(f.done() and f.result().acknowledged for f in burst) < 8 and time.monotonic() < deadline:
            self.watch()
            time.sleep(0.005)
        pid = inst.pid
        fault = Fault(f"kill -9 {inst.name}", time.monotonic())
        inst.kill()
        pool.shutdown(wait=True)
        acked = sum(f.result().acknowledged for f in burst)
        fault.notes.append(f"pid {pid}; {acked} of a burst of {len(burst)} acknowledged")
        fault.end = time.monotonic()  # restarted at once, on the same settings and port
        inst.start()
        self.say(f"{fault.name}: {fault.notes[-1]}; restarted (pid {inst.pid})")
        return fault

    def cut(self, which: str, seconds: float) -> Fault:
        relay = self.relays[which]
        name = {"pg": "PostgreSQL", "valkey": "Valkey"}[which]
        relay.cut()
        fault = Fault(f"{name} cut {seconds:g} s", time.monotonic())
        self.say(f"{name} cut (relay closed)")
        self.idle(seconds)  # the fault's length: the link is down this long
        relay.restore()
        fault.end = time.monotonic()
        self.say(f"{name} restored")
        return fault

    def sigterm(self, inst: Instance) -> Fault:
        pid = inst.pid
        fault = Fault(f"SIGTERM + restart {inst.name}", time.monotonic())
        code = inst.terminate()
        fault.notes.append(f"pid {pid} exited {code}")
        fault.end = time.monotonic()
        inst.start()
        self.say(f"{fault.name}: {fault.notes[-1]}; restarted (pid {inst.pid})")
        return fault

    def watch(self) -> None:
        """Raise when an instance has exited without the drill stopping it: a crash, or a signal from
        outside the drill; the drill cannot tell which, its stderr may."""
        for inst in self.fleet:
            code = inst.exited_by_itself()
            if code is not None:
                raise InstanceExited(
                    f"instance {inst.name} (pid {inst.pid}) exited by itself with code {code} at "
                    f"{self.at(time.monotonic())}; the last lines of its stderr:\n{inst.stderr_tail()}"
                )

    def idle(self, seconds: float) -> None:
        """Let ``seconds`` pass (the load runs meanwhile), watching the instances."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            self.watch()
            time.sleep(min(0.1, left))

    def wait_recovered(self, fault: Fault) -> None:
        """Until a join sent after the fault's end is acknowledged by every instance."""
        deadline = fault.end + RECOVERY_TIMEOUT_SEC
        while time.monotonic() < deadline:
            firsts = [self.ledger.first_ack(inst.name, fault.end) for inst in self.fleet]
            if all(firsts):
                fault.recovered = max(j.done for j in firsts if j is not None)
                self.say(f"{fault.name}: joins succeed on both instances {fault.recovered - fault.end:.2f} s after")
                return
            self.idle(0.1)
        self.say(f"{fault.name}: NOT recovered within {RECOVERY_TIMEOUT_SEC:g} s")

    def run_faults(self) -> None:
        steps = self.plan()
        warmup, tail = 3.0, 3.0
        slot = max(0.0, self.o.duration - warmup - tail) / max(1, len(steps))
        rng = random.Random(self.o.seed)
        begin = time.monotonic()
        ready_at = begin + warmup
        a, b = self.fleet
        actions: dict[str, Callable[[], Fault]] = {
            "kill": lambda: self.kill(a),
            "pg": lambda: self.cut("pg", self.o.pg_cut),
            "valkey": lambda: self.cut("valkey", self.o.valkey_cut),
            "sigterm": lambda: self.sigterm(b),
        }
        for k, step in enumerate(steps):
            planned = begin + warmup + k * slot + rng.uniform(0, min(2.0, slot / 4))
            pause = max(planned, ready_at) - time.monotonic()
            if pause > 0:
                self.idle(pause)  # the schedule: faults are spread over the load's duration
            fault = actions[step]()
            self.faults.append(fault)
            self.wait_recovered(fault)
            ready_at = (fault.recovered or time.monotonic()) + 1.0
        rest = begin + self.o.duration - time.monotonic()
        self.idle(max(rest, tail))  # load after the last fault, until the planned duration

    # ---------------------------------------------------------------- settle and reconcile

    def settle(self) -> list[str]:
        deadline = time.monotonic() + self.o.settle_timeout
        waiting: list[str] = []
        while time.monotonic() < deadline:
            waiting = [w for w in (settled(self.clients, url, self.admin_key) for url in self.urls) if w]
            if not waiting:
                break
            time.sleep(0.25)
        self.say("fleet settled" if not waiting else f"fleet NOT settled: {'; '.join(waiting)}")
        return waiting

    def fault_table(self) -> str:
        joins = self.ledger.joins
        rows: list[list[Any]] = []
        inside: set[int] = set()
        for f in self.faults:
            until = f.recovered if f.recovered is not None else f.end + RECOVERY_TIMEOUT_SEC
            during = [j for j in joins if f.start <= j.sent <= until or (j.sent < f.start <= j.done)]
            inside.update(j.index for j in during)
            recovery = f"{f.recovered - f.end:.2f} s" if f.recovered is not None else "NOT recovered"
            rows.append([f.name, self.at(f.start), f"{f.end - f.start:.1f} s", *self.split(during), recovery])
        rest = [j for j in joins if j.index not in inside]
        rows.append(["(outside the faults)", "", "", *self.split(rest), ""])
        names = " / ".join(inst.name for inst in self.fleet)
        head = ["fault", "at", "lasted", f"acknowledged ({names})", "refused, by instance and code", "recovery"]
        return table(head, rows)

    def split(self, joins: Sequence[Join]) -> tuple[str, str]:
        """('12 / 62', 'a: storage_unavailable ×480; b: —'): acknowledged and refused, per instance."""
        acked = " / ".join(str(sum(j.acknowledged for j in joins if j.instance == i.name)) for i in self.fleet)
        refused = [(i.name, refusals(j for j in joins if j.instance == i.name)) for i in self.fleet]
        return acked, "; ".join(f"{name}: {text}" for name, text in refused if text != "—") or "—"

    def dump(self, path: str) -> None:
        """Every join as one JSON line (times in seconds from the start of the load)."""
        with open(path, "w", encoding="utf-8") as fh:
            for j in self.ledger.joins:
                row = {
                    "index": j.index,
                    "room": j.room,
                    "instance": j.instance,
                    "sent": round(j.sent - self.t0, 4),
                    "done": round(j.done - self.t0, 4),
                    "code": j.code,
                    "ticket": j.ticket,
                    "detail": j.detail,
                }
                fh.write(json.dumps(row) + "\n")
            for f in self.faults:
                row = {
                    "fault": f.name,
                    "start": round(f.start - self.t0, 4),
                    "end": round(f.end - self.t0, 4),
                    "recovered": None if f.recovered is None else round(f.recovered - self.t0, 4),
                    "notes": f.notes,
                }
                fh.write(json.dumps(row) + "\n")

    def check(self) -> int:
        acked = self.ledger.acknowledged()
        joins = self.ledger.joins
        self.say(f"load stopped: {len(joins)} joins sent, {len(acked)} acknowledged")
        unsettled = self.settle()
        gaps_settled: list[Gap] = wait_for_no_gaps(self.o.database_url, self.schema, self.o.gap_timeout)
        self.say(
            "journal: no gap"
            if not gaps_settled
            else f"journal gaps after {self.o.gap_timeout:g} s: {len(gaps_settled)}"
        )
        self.say(f"looking up {len(acked)} acknowledged joins in the line")
        live = look_up(self.clients, self.urls, acked)
        journal = read_journal(self.o.database_url, self.schema, self.rooms)
        client = sync_valkey(self.o.valkey_url)
        try:
            gone = forget_valkey(client, self.prefix)
        finally:
            client.close()
        lost_at = time.monotonic()
        self.say(
            f"deleted the fleet's {gone} Valkey keys ({self.prefix}*): every room must be rebuilt from the journal"
        )
        probes = by_room(acked)
        back = wait_for_rooms(self.clients, self.urls, probes, self.o.rebuild_timeout)
        for room, ok in sorted(back.items()):
            self.say(f"room {room}: " + ("answers again" if ok else f"still 503 after {self.o.rebuild_timeout:g} s"))
        rebuilt_in = time.monotonic() - lost_at
        answering = [j for j in acked if back.get(j.room)]
        rebuilt = look_up(self.clients, self.urls, answering)
        why = unrebuildable(self.clients, self.urls, self.admin_key)
        gaps = journal_gaps(self.o.database_url, self.schema)
        result = reconcile(acked, live, journal, rebuilt, back, gaps, why)
        if self.o.ledger:
            self.dump(self.o.ledger)
            self.say(f"every join written to {self.o.ledger}")

        print()
        print(
            f"Fault drill: {self.o.duration:g} s at {self.o.rate:g} joins/s over {len(self.rooms)} rooms, "
            f"{self.o.kills} kill -9, seed {self.o.seed}"
        )
        print()
        print(self.fault_table())
        print()
        if unsettled:
            print("not settled after the load: " + "; ".join(unsettled))
        print("journal gaps once settled: " + ("none" if not gaps_settled else f"{len(gaps_settled)}"))
        for g in gaps_settled:
            print(f"  {g}")
        if all(back.values()):
            print(f"rebuild after the Valkey keys were deleted: every room answered within {rebuilt_in:.1f} s")
        print()
        print(result.render())
        unrecovered = [f.name for f in self.faults if f.recovered is None]
        if unrecovered:
            print("faults the fleet did not recover from: " + ", ".join(unrecovered))
        return 0 if result.ok and not unrecovered else 1

    # ---------------------------------------------------------------- all of it

    def run(self) -> int:
        try:
            self.preflight()
        except Exception as err:
            print(f"drill: Valkey or PostgreSQL unreachable: {err}", file=sys.stderr)
            return 2
        code = 2
        try:
            self.start_fleet()
            self.load = Load(self.ledger, self.clients, self.fleet, self.rooms, self.o.rate, self.o.seed)
            self.t0 = time.monotonic()
            self.load.start()
            self.say(f"load: {self.o.rate:g} joins/s for {self.o.duration:g} s")
            self.run_faults()
            self.load.stop()
            self.load = None
            code = self.check()
        except InstanceExited as err:
            print(f"drill: FAIL — {err}", file=sys.stderr)
            code = 1
        except (ServerStartError, RuntimeError, OSError) as err:
            print(f"drill: {err}", file=sys.stderr)
        finally:
            self.cleanup(keep_logs=code != 0)
        return code

    def cleanup(self, keep_logs: bool) -> None:
        if self.load is not None:
            self.load.stop()
        logs = self.workdir / "logs"
        for inst in self.fleet:
            inst.close(logs)
        self.clients.close()
        for relay in self.relays.values():
            relay.close()
        if self.o.keep:
            print(
                f"kept: Valkey keys {self.prefix}*, schema {self.schema}, spools and logs in {self.workdir}",
                file=sys.stderr,
            )
            return
        with contextlib.suppress(Exception):
            client = sync_valkey(self.o.valkey_url)
            forget_valkey(client, self.prefix)
            client.close()
        with contextlib.suppress(Exception):
            drop_schema(self.o.database_url, self.schema)
        for spool in self.workdir.glob("spool-*"):
            shutil.rmtree(spool, ignore_errors=True)
        if keep_logs:
            print(f"the instances' stderr, one file per run: {logs}", file=sys.stderr)
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    return Drill(parse(argv)).run()


if __name__ == "__main__":
    sys.exit(main())
