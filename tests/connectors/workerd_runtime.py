"""Cloudflare's Worker runtime for the connector tests: ``workerd`` from npm, a config per run, local peers.

* :func:`workerd_binary` installs the npm package ``workerd`` (it ships the linux-x64 binary as a
  package of its own, nothing downloaded at install time) into ``~/.cache/qm-connectors/workerd-<version>``
  (``QM_CONNECTORS_CACHE`` moves it) on first use, and reuses it after. Without npm, or when the install
  fails, the tests are skipped, and fail with ``CI=true``: CI must never pass by not running them.
* :class:`Workerd` writes a capnp config (one socket and one worker per :class:`WorkerSpec`, all in one
  process), starts it and waits until every socket answers. Each worker's main module is a small test
  wrapper that imports the script under test as ``worker.js`` unchanged, adds ``CF-Connecting-IP`` the
  way Cloudflare does, and, when asked, binds ``QM_ANALYTICS`` to a recorder whose data points
  ``GET /__test/points`` returns.
* :class:`Origin` (a site that names the path it served), :class:`FakeQueue` (answers what the test
  says), :class:`BlackHole` (accepts connections and never answers) and :class:`CountingProxy` (a real
  queue behind it, every request's path recorded) are thread servers on 127.0.0.1.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

WORKERD_VERSION = "1.20261117.1"
CACHE = Path(os.environ.get("QM_CONNECTORS_CACHE", Path.home() / ".cache" / "qm-connectors"))
COMPATIBILITY_DATE = "2025-01-01"

_install_lock = threading.Lock()


def _unavailable(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"workerd is required in CI: {why}")
    pytest.skip(f"workerd unavailable: {why}")


def workerd_binary() -> Path:
    """The workerd binary, installed from npm into the cache on first use."""
    home = CACHE / f"workerd-{WORKERD_VERSION}"
    binary = home / "node_modules" / "@cloudflare" / "workerd-linux-64" / "bin" / "workerd"
    with _install_lock:
        if binary.exists():
            return binary
        npm = shutil.which("npm")
        if npm is None:
            _unavailable("npm is not installed (apt-get install npm)")
        CACHE.mkdir(parents=True, exist_ok=True)
        # into a folder of its own, renamed into place when complete: a parallel run never sees half an install
        staging = Path(tempfile.mkdtemp(prefix=f"workerd-{WORKERD_VERSION}.", dir=CACHE))
        package = f"workerd@{WORKERD_VERSION}"
        done = subprocess.run(
            [npm, "install", "--no-save", "--no-audit", "--no-fund", "--prefix", str(staging), package],
            capture_output=True,
            text=True,
            timeout=300,
        )
        staged = staging / binary.relative_to(home)
        if done.returncode != 0 or not staged.exists():
            shutil.rmtree(staging, ignore_errors=True)
            _unavailable(f"npm install workerd@{WORKERD_VERSION} failed: {done.stderr[-800:]}")
        try:
            staging.rename(home)
        except OSError:  # another run finished first
            shutil.rmtree(staging, ignore_errors=True)
        if not binary.exists():
            _unavailable(f"workerd@{WORKERD_VERSION} installed but {binary} is missing")
        return binary


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listen_port() -> int:
    """A port for workerd to listen on a while after it is chosen: below the kernel's ephemeral range, so no
    outgoing connection of another test is given it meanwhile (the conformance harness's reserved_port)."""
    from harness import reserved_port  # the harness is on the path wherever these tests run

    return reserved_port()


# ------------------------------------------------------------------ workerd

WRAPPER = """
import worker from "./worker.js";
const points = [];
export default {
  async fetch(request, env, ctx) {
    const url = new URL(request.url);
    if (url.pathname === "/__test/points") return Response.json(points);
    if (url.pathname === "/__test/name") return new Response(env.QM_TEST_NAME);
    const e = { ...env };
    delete e.QM_TEST_ANALYTICS;
    delete e.QM_TEST_NAME;
    if (env.QM_TEST_ANALYTICS === "1") e.QM_ANALYTICS = { writeDataPoint(p) { points.push(p); } };
    let req = request;
    if (!request.headers.has("cf-connecting-ip")) {
      req = new Request(request);
      req.headers.set("cf-connecting-ip", "127.0.0.1");
    }
    return worker.fetch(req, e, ctx);
  },
};
"""


@dataclass
class WorkerSpec:
    name: str  # socket and service name (letters, digits, dashes)
    script: bytes  # the served latest.js
    vars: dict[str, str] = field(default_factory=dict)
    analytics: bool = False
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _capnp_string(value: str) -> str:
    return json.dumps(value)


class Workerd:
    """One workerd process serving every spec on a socket of its own."""

    def __init__(self, specs: list[WorkerSpec]) -> None:
        self.specs = {s.name: s for s in specs}
        self.dir = Path(tempfile.mkdtemp(prefix="qm-workerd-"))
        self.log_path = self.dir / "workerd.log"
        self._log = open(self.log_path, "wb")
        self.proc: subprocess.Popen[bytes] | None = None
        fixed = {s.name for s in specs if s.port}
        # A port chosen free can be taken by another test's listener before workerd binds it; workerd then
        # exits. Each try chooses fresh ports for every socket not fixed by the caller.
        for attempt in range(5):
            for spec in specs:
                if spec.name not in fixed:
                    spec.port = listen_port()
            if self._launch(specs):
                return
            if attempt == 4 or "Address already in use" not in self.log:
                break
        log = self.log
        self.stop()
        raise AssertionError(f"workerd did not serve every socket: {log}")

    def _launch(self, specs: list[WorkerSpec]) -> bool:
        """Write the config, start workerd and wait until each socket answers as its own worker."""
        if self.proc is not None:
            self._halt()
        services, sockets = [], []
        for spec in specs:
            (self.dir / f"{spec.name}.js").write_bytes(spec.script)
            (self.dir / f"{spec.name}.wrapper.js").write_text(WRAPPER)
            named = {**spec.vars, "QM_TEST_NAME": spec.name}
            bindings = [f"(name = {_capnp_string(k)}, text = {_capnp_string(v)})" for k, v in named.items()]
            if spec.analytics:
                bindings.append('(name = "QM_TEST_ANALYTICS", text = "1")')
            services.append(
                f"""(name = {_capnp_string(spec.name)}, worker = (
      modules = [
        (name = "main.js", esModule = embed {_capnp_string(spec.name + ".wrapper.js")}),
        (name = "worker.js", esModule = embed {_capnp_string(spec.name + ".js")}),
      ],
      compatibilityDate = "{COMPATIBILITY_DATE}",
      bindings = [{", ".join(bindings)}],
      globalOutbound = "net",
    ))"""
            )
            sockets.append(
                f'(name = {_capnp_string(spec.name)}, address = "127.0.0.1:{spec.port}", http = (), '
                f"service = {_capnp_string(spec.name)})"
            )
        joined_services = ",\n    ".join(services)
        joined_sockets = ",\n    ".join(sockets)
        config = f"""using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [
    (name = "net", network = (allow = ["public", "private", "local"])),
    {joined_services}
  ],
  sockets = [
    {joined_sockets}
  ],
);
"""
        self.config = self.dir / "config.capnp"
        self.config.write_text(config)
        self._log.truncate(0)
        self._log.seek(0)
        proc = subprocess.Popen(
            [str(workerd_binary()), "serve", str(self.config), "--verbose"],
            cwd=self.dir,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.proc = proc
        deadline = time.monotonic() + 20
        for spec in specs:
            # asked by name, so another process listening on a port that collided is never taken for workerd
            while _served_name(spec.port) != spec.name:
                if proc.poll() is not None or time.monotonic() > deadline:
                    return False
                time.sleep(0.05)
        return True

    def url(self, name: str) -> str:
        return self.specs[name].url

    @property
    def log(self) -> str:
        try:
            self._log.flush()
        except ValueError:
            pass
        return self.log_path.read_text(errors="replace")

    def _halt(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def stop(self) -> None:
        self._halt()
        self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _served_name(port: int) -> str | None:
    """The worker name a test workerd socket answers with, or None while nothing (or something else) does."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", "/__test/name")
        resp = conn.getresponse()
        body = resp.read().decode(errors="replace")
        return body if resp.status == 200 else None
    except OSError:
        return None
    finally:
        conn.close()


# ------------------------------------------------------------------ local peers


class _ThreadServer:
    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class Origin(_ThreadServer):
    """The customer's site: every path answers 200 with a page naming it; ``requests`` records what came.
    ``/thanks…`` (an order's thank-you page) also answers ``X-QM-Command: revoke``."""

    def __init__(self, title: str = "Origin shop") -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        origin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def _answer(self) -> None:
                origin.requests.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
                body = (
                    f"<!doctype html><html><head><title>{title}</title></head>"
                    f"<body><h1>{title}</h1><p>origin served {self.path}</p></body></html>"
                ).encode()
                self.send_response(200)
                self.send_header("content-type", "text/html; charset=utf-8")
                self.send_header("content-length", str(len(body)))
                self.send_header("x-origin", "1")
                if self.path.startswith("/thanks"):  # an order's thank-you page: the visitor is done
                    self.send_header("x-qm-command", "revoke")
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_HEAD = do_POST = _answer

        super().__init__(Handler)


class FakeQueue(_ThreadServer):
    """Answers every request with ``status``, ``headers`` and ``body`` as the test sets them."""

    def __init__(self) -> None:
        self.status = 500
        self.headers: dict[str, str] = {}
        self.body = b'{"error":"boom"}'
        self.requests: list[tuple[str, dict[str, str]]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def _answer(self) -> None:
                fake.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                self.send_response(fake.status)
                for k, v in {"content-type": "application/json", **fake.headers}.items():
                    self.send_header(k, v)
                self.send_header("content-length", str(len(fake.body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(fake.body)

            do_GET = do_HEAD = do_POST = _answer

        super().__init__(Handler)


class BlackHole:
    """Accepts every connection and never answers (a queue that hangs)."""

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.port = int(self._sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._held: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self._held.append(conn)

    def close(self) -> None:
        self._closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() above
        except OSError:
            pass
        self._sock.close()
        for conn in self._held:
            conn.close()


def dead_url() -> str:
    """An address where nothing listens (a queue that is not running)."""
    return f"http://127.0.0.1:{free_port()}"


class CountingProxy(_ThreadServer):
    """In front of a real queue: forwards every request to ``upstream`` unchanged and records its path,
    so a test can count the requests a connector made (``count("/api/check")``)."""

    def __init__(self, upstream: str) -> None:
        self.paths: list[str] = []
        target = urlsplit(upstream)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def _relay(self) -> None:
                proxy.paths.append(self.path)
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn = http.client.HTTPConnection(target.hostname or "127.0.0.1", target.port or 80, timeout=10)
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    answer = conn.getresponse()
                    data = answer.read()
                    self.send_response(answer.status)
                    for name, value in answer.getheaders():
                        if name.lower() not in ("content-length", "connection", "transfer-encoding"):
                            self.send_header(name, value)
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                finally:
                    conn.close()

            do_GET = do_HEAD = do_POST = _relay

        super().__init__(Handler)

    def count(self, path: str) -> int:
        return sum(1 for p in list(self.paths) if p.split("?", 1)[0] == path)
