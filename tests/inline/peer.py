"""Start and stop the peer app (peer_app.py) as its own process."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import httpx

from tests.conformance.harness import free_port

PEER = Path(__file__).with_name("peer_app.py")


class Peer:
    def __init__(self, host: str = "127.0.0.1") -> None:
        """``host``: the address it listens on (``::1`` for IPv6 loopback)."""
        self.port = free_port(host)
        self.url = f"http://{f'[{host}]' if ':' in host else host}:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, str(PEER), str(self.port), host],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        ready = threading.Event()

        def read() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                if b"peer listening" in line:
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        ready.wait(15)
        assert self.proc.poll() is None, "the peer app did not start"

    def release(self, key: str) -> None:
        httpx.get(f"{self.url}/release", params={"id": key}, timeout=5)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
