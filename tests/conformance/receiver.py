"""A webhook receiver for the alert tests: a real HTTP server in its own process that records every POST.

Run as ``python receiver.py PORT LOG`` (the tests use :class:`Receiver`). Every POST to any path other
than ``/__mode`` is appended to ``LOG`` as one JSON line ``{"at", "path", "headers", "body"}`` and
answered according to the current mode, set by ``POST /__mode {"status": 200, "delay": 0}``: the status
it answers with and how long it waits first (a slow receiver). Making it unreachable is stopping the
process; :meth:`Receiver.start` again on the same port brings it back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

MODE: dict[str, Any] = {"status": 200, "delay": 0.0}
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    log_path = ""

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        if self.path == "/__mode":
            MODE.update(json.loads(raw or b"{}"))
            self._answer(200, b'{"ok":true}')
            return
        with LOCK:
            status, delay = int(MODE["status"]), float(MODE["delay"])
        if delay:
            time.sleep(delay)
        record = {
            "at": time.time(),
            "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": json.loads(raw) if raw else None,
            "answered": status,
        }
        with LOCK, open(self.log_path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
        self._answer(status, b'{"ok":true}' if status < 300 else b'{"error":"down"}')

    def _answer(self, status: int, body: bytes) -> None:
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass  # the client gave up (a timeout test)


def main() -> None:
    port, log_path = int(sys.argv[1]), sys.argv[2]
    Handler.log_path = log_path
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    print("receiving", flush=True)
    server.serve_forever()


class Receiver:
    """The receiver process, seen from a test: start, stop, set the mode, read what it got."""

    def __init__(self, port: int) -> None:
        self.port = port
        fd, self.log_path = tempfile.mkstemp(prefix="qm-receiver-", suffix=".jsonl")
        os.close(fd)
        self.proc: subprocess.Popen[str] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook/T000/secret-part"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, str(self.port), self.log_path],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert "receiving" in line, line

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None

    def mode(self, *, status: int = 200, delay: float = 0.0) -> None:
        r = httpx.post(f"http://127.0.0.1:{self.port}/__mode", json={"status": status, "delay": delay}, timeout=5)
        assert r.status_code == 200

    def pages(self) -> list[dict[str, Any]]:
        """The bodies received (answered with any status), in arrival order."""
        with open(self.log_path, encoding="utf-8") as fh:
            return [json.loads(line)["body"] for line in fh if line.strip()]

    def got(self, **fields: Any) -> list[dict[str, Any]]:
        """The bodies received whose fields have the values given, in arrival order."""
        return [b for b in self.pages() if b and all(b.get(k) == v for k, v in fields.items())]

    def records(self) -> list[dict[str, Any]]:
        with open(self.log_path, encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]

    def close(self) -> None:
        self.stop()
        os.unlink(self.log_path)


if __name__ == "__main__":
    main()
