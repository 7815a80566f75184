"""A memory server starts without the Valkey client, the PostgreSQL driver or the outbound HTTP client.

A fresh interpreter runs ``qm serve`` (the command line's own entry) on STORE=memory; a thread in the same
process waits for ``/healthz`` to answer 200, then prints the names in ``sys.modules`` and stops the server
with SIGTERM, the way an operator does. What a memory server never uses must not have been imported on the
way: ``redis`` (STORE=valkey), ``asyncpg``/``psycopg`` (SIDESTORE=pg) and ``httpx`` (the install
verifier, the alert webhook and the target probe load it on their first request).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Run in the child: serve, and from a thread report the loaded modules once /healthz answers.
CHILD = r"""
import json, os, signal, socket, sys, threading

PORT = int(os.environ["PORT"])


def healthz_ok():
    try:
        with socket.create_connection(("127.0.0.1", PORT), timeout=2) as conn:
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            head = conn.recv(64)
    except OSError:
        return False
    return head.startswith(b"HTTP/1.1 200")


def watch():
    ready = threading.Event()
    while not healthz_ok():
        ready.wait(0.05)  # the server is still starting: ask again
    print("QM-MODULES " + json.dumps(sorted(sys.modules)), flush=True)
    os.kill(os.getpid(), signal.SIGTERM)


threading.Thread(target=watch, daemon=True).start()
from queue_manager.cli import main

main(["serve"])
"""

#: Imported only by the stores and tools a memory server does not run.
NOT_ON_MEMORY = ("redis", "httpx", "asyncpg", "psycopg")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _memory_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VALKEY_", "DATABASE_", "PG_"))}
    for name in ("STORE", "SIDESTORE", "WORKERS", "ALERT_WEBHOOK_URL"):
        env.pop(name, None)
    env.update(
        {
            "STORE": "memory",
            "HOST": "127.0.0.1",
            "PORT": str(_free_port()),
            "ADMIN_KEY": "qm-test-admin-" + secrets.token_hex(12),
            "SECRET": secrets.token_urlsafe(36),
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def test_a_memory_server_starts_without_the_valkey_pg_and_http_clients() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        env=_memory_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("QM-MODULES ")]
    assert lines, f"the server never answered /healthz (exit {done.returncode}):\n{done.stderr[-3000:]}"
    assert done.returncode == 0, f"the server did not stop cleanly (exit {done.returncode}):\n{done.stderr[-3000:]}"
    loaded = set(json.loads(lines[0].removeprefix("QM-MODULES ")))
    assert {"queue_manager.server", "queue_manager.store.memory", "uvicorn"} <= loaded  # it really served
    top = {name.split(".")[0] for name in loaded}
    assert not top & set(NOT_ON_MEMORY), f"a memory server imported {sorted(top & set(NOT_ON_MEMORY))}"
