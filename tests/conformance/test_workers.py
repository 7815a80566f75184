"""WORKERS=N: N server processes on one port, each an instance of its own on the shared store.

* on the valkey store, WORKERS=2 prints one ``listening`` line once both workers are ready; both
  answer (each names itself ``<QM_INSTANCE_ID>-w1`` / ``-w2`` as the ``server_id`` of
  /internal/api/shared-state/stats), health counts them as two instances, and a join taken by one is
  visible from the other;
* a worker killed with SIGKILL is logged on stderr and restarted (a new process serves under the
  same id); SIGTERM to the parent stops every worker (each exiting 0 itself) and exits 0, and so does
  ``POST /api/admin/shutdown`` to any one worker;
* ``/metrics`` on the shared port answers every worker's metrics in one exposition (each series with
  its worker's ``instance``, each family's ``# TYPE`` once, ``qm_workers`` and ``qm_workers_scraped``
  under the server's own QM_INSTANCE_ID), ``?scope=local`` the one worker that took the connection; a
  killed worker is missing from the scrape until it is back. The workers reach each other through a
  private directory (0700) named on their command line, gone when the server stops;
* with STORE=memory, WORKERS=2 (or ``qm --workers 2``) refuses to start (exit 2, one line), and
  WORKERS=auto is read as the number of cores.

Which worker answers is the kernel's choice: a fresh connection per request, asked until each id is
seen. A keep-alive connection stays with the worker that accepted it, which is how a test talks to
one worker on purpose. The worker processes are found as the children of the server's process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from typing import Any

import httpx
import pytest
from harness import (
    HTTP_TIMEOUT_SEC,
    Server,
    create_room,
    join,
    parse_metrics,
    server_command,
    spawn_server,
    start_server,
    status,
    unique_id,
    wait_until,
)
from prometheus_client.parser import text_string_to_metric_families

STATS = "/internal/api/shared-state/stats"
START_TIMEOUT = 45.0  # two instances boot at once against Valkey and PostgreSQL


def children(srv: Server) -> set[int]:
    """The pids of the server process's children (its workers)."""
    found: set[int] = set()
    task_dir = f"/proc/{srv.proc.pid}/task"
    for task in os.listdir(task_dir):
        try:
            with open(f"{task_dir}/{task}/children", encoding="ascii") as fh:
                found.update(int(pid) for pid in fh.read().split())
        except FileNotFoundError:
            continue
    return found


def answering_id(srv: Server) -> str:
    """The server_id of whichever worker accepts a fresh connection."""
    r = httpx.get(srv.base_url + STATS, headers=srv.admin_headers, timeout=HTTP_TIMEOUT_SEC)
    assert r.status_code == 200, r.text
    server_id: str = r.json()["server_id"]
    return server_id


def ids_seen(srv: Server, wanted: set[str], timeout: float = 20.0) -> set[str]:
    seen: set[str] = set()

    def probe() -> bool:
        seen.add(answering_id(srv))
        return wanted <= seen

    wait_until(probe, timeout=timeout, interval=0.02, what=f"answers from {sorted(wanted)}")
    return seen


def client_on(srv: Server, wanted: str, avoid: str | None = None) -> tuple[httpx.Client, str]:
    """A keep-alive admin client whose connection was accepted by the worker ``wanted`` names
    (``-w1``...) or, with ``avoid``, by any worker but that one."""
    deadline = time.monotonic() + 20.0
    while time.monotonic() < deadline:
        c = srv.admin()
        r = c.get(STATS)
        assert r.status_code == 200, r.text
        sid: str = r.json()["server_id"]
        if (avoid is not None and sid != avoid) or (avoid is None and sid.endswith(wanted)):
            return c, sid
        c.close()
    raise AssertionError(f"no connection reached the worker {wanted or 'other than ' + str(avoid)}")


def health(c: httpx.Client) -> dict[str, Any]:
    r = c.get("/api/admin/health")
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


@pytest.mark.stores("valkey")
def test_two_workers_share_one_port_and_the_store_and_a_dead_one_comes_back() -> None:
    base = unique_id("qmw")
    srv = start_server({"WORKERS": "2", "QM_INSTANCE_ID": base}, timeout=START_TIMEOUT)
    try:
        listening = [line for line in srv.stdout_lines if "listening" in line]
        assert len(listening) == 1, srv.stdout
        assert "(STORE=valkey, WORKERS=2)" in listening[0]
        workers = children(srv)
        assert len(workers) == 2, workers

        # both answer, each as an instance of its own
        assert ids_seen(srv, {f"{base}-w1", f"{base}-w2"}) == {f"{base}-w1", f"{base}-w2"}
        with srv.admin() as admin:
            h = wait_until(
                lambda: b if (b := health(admin))["fleet"]["instances"] == 2 else None, timeout=20, what="2 instances"
            )
            assert h["fleet"]["partial"] is False

        # a join taken by one worker is visible from the other
        first, first_id = client_on(srv, "-w1")
        with contextlib.closing(first):
            rid = create_room(first, ratePerMinute=0)["id"]
            r = join(first, rid)
            assert r.status_code == 200, r.text
            token = r.json()["token"]
            assert r.json()["position"] == 1
        other, other_id = client_on(srv, "", avoid=first_id)
        with contextlib.closing(other):
            assert other_id != first_id
            seen = wait_until(
                lambda: p if (p := status(other, rid, token))["state"] == "waiting" else None,
                timeout=10,
                what="the join seen from the other worker",
            )
            assert seen["position"] == 1
            second = join(other, rid)  # another visitor (no cookie of the first on this client)
            assert second.status_code == 200, second.text
            assert second.json()["position"] == 2

        # SIGKILL one worker: it is logged and a new process serves under its id
        victim = min(workers)
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: "was killed by SIGKILL" in srv.stderr, timeout=10, what="the stderr line")
        line = next(x for x in srv.stderr.splitlines() if "was killed by SIGKILL" in x)
        assert f"pid {victim}" in line and "restarting" in line, line
        assert line.startswith("queue-manager: worker "), line
        renewed = wait_until(
            lambda: c if len(c := children(srv)) == 2 and victim not in c else None, timeout=15, what="a new worker"
        )
        assert len(renewed & workers) == 1  # the survivor kept serving
        ids_seen(srv, {f"{base}-w1", f"{base}-w2"}, timeout=40)

        # SIGTERM to the parent: every worker stops cleanly (each exits 0 itself), exit 0
        srv.proc.send_signal(signal.SIGTERM)
        assert srv.wait(40) == 0, srv.stderr
        assert "did not stop cleanly" not in srv.stderr, srv.stderr
        for pid in renewed:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
        assert "Traceback" not in srv.stderr, srv.stderr
    finally:
        srv.stop()


@pytest.mark.stores("valkey")
def test_the_shutdown_route_on_one_worker_stops_them_all() -> None:
    srv = start_server({"WORKERS": "2"}, timeout=START_TIMEOUT)
    try:
        workers = children(srv)
        assert len(workers) == 2, workers
        with srv.admin() as admin:
            r = admin.post("/api/admin/shutdown")
            assert r.status_code == 200, r.text
        assert srv.wait(40) == 0, srv.stderr
        assert "stopped cleanly; stopping them all" in srv.stderr, srv.stderr
        assert "restarting" not in srv.stderr, srv.stderr
        # the start-up hardening line is printed once, by the supervisor, not once per worker
        assert srv.stderr.count("EDGE_SECRET is not set: requests that bypass Cloudflare are accepted") == 1, srv.stderr
        for pid in workers:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    finally:
        srv.stop()


def worker_option(pid: int, option: str) -> str:
    """The value of ``option`` on the command line of the worker process ``pid``."""
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        argv = fh.read().decode().split("\0")
    return argv[argv.index(option) + 1]


def scrape_text(srv: Server, query: str = "") -> str:
    """``/metrics`` on a fresh connection (so any worker may take it), checked for the exposition's shape:
    it parses with prometheus_client's parser and names each family's HELP and TYPE once."""
    r = httpx.get(srv.base_url + "/metrics" + query, headers=srv.admin_headers, timeout=HTTP_TIMEOUT_SEC)
    assert r.status_code == 200, r.text
    families = list(text_string_to_metric_families(r.text))
    assert families
    for kind in ("# TYPE ", "# HELP "):
        named = [line.split()[2] for line in r.text.splitlines() if line.startswith(kind)]
        assert len(named) == len(set(named)), [n for n in named if named.count(n) > 1]
    return r.text


def instances_in(text: str) -> set[str]:
    """The ``instance`` labels of every worker's own series (the server's qm_workers gauges aside)."""
    return {lab["instance"] for name, lab, _ in parse_metrics(text) if not name.startswith("qm_workers")}


def sample(text: str, name: str, **labels: str) -> float | None:
    found = [v for n, lab, v in parse_metrics(text) if n == name and all(lab.get(k) == x for k, x in labels.items())]
    assert len(found) <= 1, (name, labels, found)
    return found[0] if found else None


@pytest.mark.stores("valkey")
def test_metrics_on_the_shared_port_show_every_worker() -> None:
    """Boots two workers and, once, waits for a killed one's restart (the 1 s pause, then its boot)."""
    base = unique_id("qmm")
    w1, w2 = f"{base}-w1", f"{base}-w2"
    srv = start_server({"WORKERS": "2", "QM_INSTANCE_ID": base}, timeout=START_TIMEOUT)
    try:
        workers = children(srv)
        assert len(workers) == 2, workers
        peer_dir = worker_option(min(workers), "--peer-dir")
        assert {worker_option(pid, "--peer-dir") for pid in workers} == {peer_dir}
        assert os.stat(peer_dir).st_mode & 0o777 == 0o700
        assert os.stat(peer_dir).st_uid == os.getuid()
        with srv.admin() as admin:
            rid = create_room(admin, ratePerMinute=0)["id"]
            assert join(admin, rid).status_code == 200

        # every scrape, whichever worker takes it, carries both workers: the room gauges of each too
        for _ in range(6):
            text = scrape_text(srv)
            assert instances_in(text) == {w1, w2}, text
            for worker in (w1, w2):
                assert sample(text, "qm_room_waiting", room=rid, instance=worker) == 1.0
                assert sample(text, "qm_uptime_seconds", instance=worker) is not None
                assert sample(text, "qm_rejected_tokens_all_total", instance=worker) == 0.0
            assert sample(text, "qm_workers", instance=base) == 2.0
            assert sample(text, "qm_workers_scraped", instance=base) == 2.0

        # scope=local: the one worker that took the connection, and nothing of the merge
        locals_seen: set[str] = set()

        def both_locals() -> bool:
            text = scrape_text(srv, "?scope=local")
            names = instances_in(text)
            assert len(names) == 1, names
            assert "qm_workers" not in text
            locals_seen.update(names)
            return locals_seen == {w1, w2}

        wait_until(both_locals, timeout=20, interval=0.02, what="a local scrape of each worker")
        r = httpx.get(srv.base_url + "/metrics?scope=everything", headers=srv.admin_headers, timeout=HTTP_TIMEOUT_SEC)
        assert r.status_code == 400 and r.json()["code"] == "bad_request", r.text
        for query in ("", "?scope=local"):  # the same credential as ever, on either scope
            r = httpx.get(srv.base_url + "/metrics" + query, timeout=HTTP_TIMEOUT_SEC)
            assert r.status_code == 401 and r.json()["code"] == "unauthorized", r.text

        # health names the worker that answered, and counts both as instances of the fleet
        named: set[str] = set()

        def both_healths() -> bool:
            with srv.admin() as admin:
                h = health(admin)
            if h["fleet"]["instances"] == 2:
                named.add(h["instance"])
            return named == {w1, w2}

        wait_until(both_healths, timeout=20, interval=0.02, what="health from each worker, two instances")

        # a killed worker is missing from the scrape (the live one answers); once restarted it is back
        victim = min(workers)
        victim_id = worker_option(victim, "--worker-index")
        os.kill(victim, signal.SIGKILL)
        survivor = f"{base}-w{3 - int(victim_id)}"
        alone = wait_until(
            lambda: t if sample(t := scrape_text(srv), "qm_workers_scraped", instance=base) == 1.0 else None,
            timeout=10,
            interval=0.02,
            what="a scrape without the killed worker",
        )
        assert instances_in(alone) == {survivor}, alone
        assert sample(alone, "qm_workers", instance=base) == 2.0
        back = wait_until(
            lambda: t if sample(t := scrape_text(srv), "qm_workers_scraped", instance=base) == 2.0 else None,
            timeout=40,
            interval=0.1,
            what="both workers in the scrape again",
        )
        assert instances_in(back) == {w1, w2}, back
        assert sample(back, "qm_room_waiting", room=rid, instance=f"{base}-w{victim_id}") == 1.0

        srv.proc.send_signal(signal.SIGTERM)
        assert srv.wait(40) == 0, srv.stderr
        assert not os.path.exists(peer_dir)
        assert "Traceback" not in srv.stderr, srv.stderr
    finally:
        srv.stop()


# ---------------------------------------------------------------------- refusals (exit code + stderr)


def _refused(env: dict[str, str], *, cmd: list[str] | None = None) -> Server:
    srv = spawn_server(env, cmd=cmd, store="memory")
    try:
        code = srv.wait(15)
    except subprocess.TimeoutExpired:
        srv.stop()
        pytest.fail(f"the server did not refuse {env}; it is still running\n{srv.stdout}")
    srv.stop()
    assert code == 2, (code, srv.stderr)
    assert srv.listening_line is None
    lines = [x for x in srv.stderr.splitlines() if x.startswith("queue-manager: refusing to start: ")]
    assert len(lines) == 1, srv.stderr
    return srv


@pytest.mark.stores("memory")
def test_memory_store_refuses_more_than_one_worker() -> None:
    srv = _refused({"WORKERS": "2"})
    assert "queue-manager: refusing to start: WORKERS=2 needs STORE=valkey" in srv.stderr


@pytest.mark.stores("memory")
def test_the_workers_flag_overrides_the_variable() -> None:
    srv = _refused({"WORKERS": "1"}, cmd=[*server_command(), "--workers", "2"])
    assert "WORKERS=2 needs STORE=valkey" in srv.stderr


@pytest.mark.stores("memory")
def test_workers_auto_is_the_number_of_cores() -> None:
    cores = len(os.sched_getaffinity(0))
    if cores > 1:
        srv = _refused({"WORKERS": "auto"})
        assert f"WORKERS=auto ({cores} cores) needs STORE=valkey" in srv.stderr
    else:  # one core: one process, as without WORKERS
        srv = start_server({"WORKERS": "auto"}, store="memory")
        try:
            assert "WORKERS" not in srv.stderr, srv.stderr  # read, not warned about
        finally:
            srv.stop()
