"""WORKERS=N: N server processes on one port, each an instance of its own on the shared store.

* on the valkey store, WORKERS=2 prints one ``listening`` line once both workers are ready; both
  answer (each names itself ``<QM_INSTANCE_ID>-w1`` / ``-w2`` as the ``server_id`` of
  /internal/api/shared-state/stats), health counts them as two instances, and a join taken by one is
  visible from the other;
* a worker killed with SIGKILL is logged on stderr and restarted (a new process serves under the
  same id); SIGTERM to the parent stops every worker and exits 0, and so does
  ``POST /api/admin/shutdown`` to any one worker;
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
    server_command,
    spawn_server,
    start_server,
    status,
    unique_id,
    wait_until,
)

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

        # SIGTERM to the parent: every worker stops, exit 0
        srv.proc.send_signal(signal.SIGTERM)
        assert srv.wait(40) == 0, srv.stderr
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
        for pid in workers:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
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
