"""The Node connector on node, in front of an Express app and a node:http app, against a live Queue Manager.

The package is the one the server hands out: ``npm install http://<server>/connectors/node/latest.tgz``
(beside ``express``), as the README says, into a cache folder outside the checkout named by the tarball's
hash (``~/.cache/qm-connectors/node-<hash>``; one install per tarball, so repeated runs take no network). One
node process serves every site the tests need, each on a port of its own with its own gate:

* ``express`` and ``http``: a live server's room (waiting, admitted, static files, cookies);
* ``limited``: a server with ``CHECK_LIMIT_PER_MIN=1`` (429 → the waiting room), stopped afterwards
  (unreachable);
* ``hole``, ``e500``, ``bogus``: a socket that never answers, a queue answering 500, a 200 that is not
  a pass (timeout, http-500, invalid-response);
* ``bare``: no key (unconfigured: the app, unmarked, one warning);
* ``stray``: the live queue's room whose targetUrl is another site (``https://shop.example/``) and whose
  returnOrigins leave this app out: one warning at start that admitted visitors land there;
* ``edge``: a server with ``PASS_SIGNING=ed25519`` (edge passes checked in the connector), stopped by the
  last test.

Without node or npm the module is skipped, which ``CI=true`` turns into a failure (tests/conftest.py).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from harness import (
    Server,
    clear_of_the_minute_turn,
    create_room,
    reserved_port,
    start_server,
    stores_under_test,
    unique_id,
    use_store,
    wait_until,
)
from invites import invitation
from passkit import b64, key_of, kid_of, sign

# one worker takes this module (make test: --dist loadgroup): one npm install and one node process
pytestmark = pytest.mark.xdist_group("node-connector")

NODE = shutil.which("node") or "/usr/bin/node"
NPM = shutil.which("npm") or "/usr/bin/npm"
EXPRESS = "express@4"
PACKAGE = "queue-manager-connector"
UA = "qm-node-connector-test/1.0"
NAV = {"User-Agent": UA, "Accept": "text/html,application/xhtml+xml", "Sec-Fetch-Mode": "navigate"}
API = {"User-Agent": UA, "Accept": "application/json", "Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty"}


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _unavailable(why: str) -> None:
    if _in_ci():
        pytest.fail(f"the Node connector tests need node and npm: {why}")
    pytest.skip(f"the Node connector tests need node and npm: {why}")


APP_JS = r"""
'use strict';
const http = require('node:http');
const { createGate, middleware } = require(process.env.QM_PACKAGE);
const express = require('express');
const sites = JSON.parse(process.env.QM_SITES);

function note(name) {
  return (event) => process.stdout.write('FAILOPEN ' + JSON.stringify({ site: name, ...event }) + '\n');
}

function expressApp(site) {
  const app = express();
  const qm = middleware({ ...site.options, onFailOpen: note(site.name) });
  app.get('/__has-revoke', (req, res) => res.json({ revokeSession: typeof qm.revokeSession }));
  app.use(qm);
  app.get('/assets/app.css', (req, res) => res.type('text/css').send('body{color:black}'));
  app.all('*', (req, res) => {
    res.cookie('app_session', 'e1', { path: '/' });
    res.type('text/plain').send('APP ' + site.name + ' ' + req.method + ' ' + req.originalUrl);
  });
  return http.createServer(app);
}

function plainApp(site) {
  const gate = createGate({ ...site.options, onFailOpen: note(site.name) });
  return http.createServer(async (req, res) => {
    if (req.url === '/__gate-stats') return res.end(JSON.stringify(gate.stats)); // what the test reads
    if (!(await gate(req, res))) return;
    if (req.url === '/__thanks') {  // the order is complete: the visitor's slot goes to the next one
      const revoked = await gate.revokeSession(req);
      res.writeHead(200, { 'Content-Type': 'application/json' });
      return res.end(JSON.stringify({ revoked }));
    }
    // the app replaces Set-Cookie outright: the queue's cookies must survive that
    res.setHeader('Set-Cookie', 'app_session=h1; Path=/');
    res.writeHead(200, { 'Content-Type': 'text/plain' });
    res.end('APP ' + site.name + ' ' + req.method + ' ' + req.url);
  });
}

let pending = sites.length;
for (const site of sites) {
  const server = site.kind === 'express' ? expressApp(site) : plainApp(site);
  server.listen(site.port, '127.0.0.1', () => {
    if (--pending === 0) process.stdout.write('READY\n');
  });
}
"""


# ---------------------------------------------------------------------- npm install (cached)


def _cache_root() -> Path:
    """Where the connector tests keep what they install (``QM_CONNECTORS_CACHE``, as the Workers' tests)."""
    if os.environ.get("QM_CONNECTORS_CACHE"):
        return Path(os.environ["QM_CONNECTORS_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "qm-connectors"


def install(srv: Server) -> Path:
    """The node_modules folder holding the server's connector and express (installed once per tarball).

    The tarball is downloaded first for its hash (the cache key); npm then installs it from the same URL."""
    if not os.path.exists(NODE) or not os.path.exists(NPM):
        _unavailable(f"node at {NODE!r} and npm at {NPM!r}")
    latest = f"{srv.base_url}/connectors/node/latest.tgz"  # what a site owner installs, as the README says
    tgz = httpx.get(latest, timeout=10)
    assert tgz.status_code == 200, tgz.text
    assert tgz.headers["content-type"] == "application/gzip"
    digest = hashlib.sha256(tgz.content + EXPRESS.encode()).hexdigest()[:16]
    home = _cache_root() / f"node-{digest}"
    modules = home / "node_modules"
    if (modules / PACKAGE / "package.json").is_file() and (modules / "express" / "package.json").is_file():
        return modules
    _cache_root().mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="node-install-", dir=_cache_root()))
    try:
        (work / "package.json").write_text('{"name": "qm-connector-test", "private": true}\n')
        try:
            done = subprocess.run(
                [NPM, "install", "--no-audit", "--no-fund", "--loglevel=error", latest, EXPRESS],
                cwd=work,
                capture_output=True,
                text=True,
                timeout=240,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            _unavailable(f"npm install failed: {err}")
        if done.returncode != 0:
            _unavailable(f"npm install failed ({done.returncode}): {done.stderr[-2000:]}")
        if home.exists() and not (home / "node_modules" / PACKAGE / "package.json").is_file():
            shutil.rmtree(home, ignore_errors=True)  # a broken earlier install
        with contextlib.suppress(OSError):  # another run may have finished the same install first
            work.rename(home)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert (modules / PACKAGE / "package.json").is_file(), f"no {PACKAGE} in {modules}"
    return modules


# ---------------------------------------------------------------------- stand-in queues


class _Fixed(BaseHTTPRequestHandler):
    status = 500
    body = b'{"error":"boom"}'
    seen: list[dict[str, Any]]

    def do_GET(self) -> None:
        self.seen.append({"path": self.path, "headers": dict(self.headers)})
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: Any) -> None:
        pass


def fixed_queue(status: int, body: bytes) -> tuple[ThreadingHTTPServer, list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []
    handler = type("Handler", (_Fixed,), {"status": status, "body": body, "seen": seen})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, seen


class Hole:
    """A socket that accepts connections and never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        self.open = True
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while self.open:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def close(self) -> None:
        self.open = False
        for conn in self.held:
            conn.close()
        self.sock.close()


# ---------------------------------------------------------------------- the rig


@dataclass
class Rig:
    live: Server
    limited: Server
    edge: Server
    edge_room: str
    room: str
    limited_room: str
    stray_room: str
    ports: dict[str, int]
    modules: Path
    app: subprocess.Popen[str]
    out: list[str] = field(default_factory=list)
    err_path: str = ""
    store: str = "memory"
    seen: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def url(self, site: str, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.ports[site]}{path}"

    def stderr(self) -> str:
        return Path(self.err_path).read_text(errors="replace")

    def fail_opens(self) -> list[dict[str, Any]]:
        return [json.loads(line[len("FAILOPEN ") :]) for line in list(self.out) if line.startswith("FAILOPEN ")]


@pytest.fixture(scope="module", params=stores_under_test())
def rig(request: pytest.FixtureRequest) -> Iterator[Rig]:
    """Everything the tests talk to, once per store asked for (QM_TEST_STORES); the npm install is shared."""
    store: str = request.param
    started: list[Server] = []
    closers: list[Callable[[], None]] = []
    app: subprocess.Popen[str] | None = None
    tmp = tempfile.mkdtemp(prefix="qm-node-connector-")
    try:
        live = start_server({"PUBLIC_API_KEY": "pk-live-" + unique_id()}, store=store)
        started.append(live)
        limited = start_server({"PUBLIC_API_KEY": "pk-lim-" + unique_id(), "CHECK_LIMIT_PER_MIN": "1"}, store=store)
        started.append(limited)
        edge = start_server({"PUBLIC_API_KEY": "pk-edge-" + unique_id(), "PASS_SIGNING": "ed25519"}, store=store)
        started.append(edge)
        modules = install(live)
        names = ("express", "http", "limited", "hole", "e500", "bogus", "bare", "wrongkey", "edge", "stray")
        # the apps bind these once three servers and their rooms exist: ports no outgoing connection is given
        ports = {name: reserved_port() for name in names}
        origins = [f"http://127.0.0.1:{ports[n]}" for n in ("express", "http")]
        with live.admin() as admin:
            room = create_room(admin, targetUrl=origins[0] + "/", returnOrigins=origins, ratePerMinute=0)["id"]
            stray_room = create_room(admin, targetUrl="https://shop.example/", ratePerMinute=0)["id"]
        with limited.admin() as admin:
            limited_room = create_room(admin, targetUrl=f"http://127.0.0.1:{ports['limited']}/", state="bypass")["id"]
        with edge.admin() as admin:
            edge_room = create_room(admin, targetUrl=f"http://127.0.0.1:{ports['edge']}/", ratePerMinute=600)["id"]
        hole = Hole()
        closers.append(hole.close)
        e500, e500_seen = fixed_queue(500, b'{"error":"boom"}')
        closers += [e500.shutdown, e500.server_close]
        bogus, bogus_seen = fixed_queue(200, b'{"ok":true}')
        closers += [bogus.shutdown, bogus.server_close]

        def site(name: str, kind: str, **options: Any) -> dict[str, Any]:
            return {"name": name, "kind": kind, "port": ports[name], "options": options}

        local, limited_key = "http://127.0.0.1", limited.env["PUBLIC_API_KEY"]
        bogus_url = f"{local}:{bogus.server_address[1]}"
        live_opts = {"queueUrl": live.base_url, "roomId": room, "key": live.env["PUBLIC_API_KEY"]}
        sites = [
            site("express", "express", **live_opts),
            site("http", "http", **live_opts),
            site("limited", "express", queueUrl=limited.base_url, roomId=limited_room, key=limited_key),
            site("hole", "http", queueUrl=f"{local}:{hole.port}", roomId="shop", key="k"),
            site("e500", "http", queueUrl=f"{local}:{e500.server_address[1]}", roomId="shop", key="k", timeoutMs=1500),
            site("bogus", "express", queueUrl=bogus_url, roomId="shop", key="k", trustProxy=True),
            site("bare", "http", queueUrl=live.base_url, roomId=room),
            site("wrongkey", "express", queueUrl=live.base_url, roomId=room, key="not-the-key"),
            site("edge", "http", queueUrl=edge.base_url, roomId=edge_room, key=edge.env["PUBLIC_API_KEY"],
                 revokedRefreshMs=200),
            site("stray", "express", queueUrl=live.base_url, roomId=stray_room, key=live.env["PUBLIC_API_KEY"]),
        ]  # fmt: skip
        script = Path(tmp) / "app.js"
        script.write_text(APP_JS)
        err_path = os.path.join(tmp, "app.stderr")
        env = {
            **os.environ,
            "NODE_PATH": str(modules),
            "QM_PACKAGE": str(modules / PACKAGE),
            "QM_SITES": json.dumps(sites),
        }
        with open(err_path, "wb") as err_file:
            app = subprocess.Popen(
                [NODE, str(script)], cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=err_file, text=True
            )
        out: list[str] = []

        def read() -> None:
            assert app is not None and app.stdout is not None
            for line in app.stdout:
                out.append(line.rstrip("\n"))

        threading.Thread(target=read, daemon=True).start()
        wait_until(lambda: "READY" in out or app.poll() is not None, 15, 0.05, "the node apps listening")
        assert "READY" in out, Path(err_path).read_text(errors="replace")
        yield Rig(
            live,
            limited,
            edge,
            edge_room,
            room,
            limited_room,
            stray_room,
            ports,
            modules,
            app,
            out,
            err_path,
            store,
            {"e500": e500_seen, "bogus": bogus_seen},
        )
    finally:
        if app is not None:
            app.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                app.wait(5)
            if app.poll() is None:
                app.kill()
                app.wait(5)
        for close in closers:
            with contextlib.suppress(Exception):
                close()
        for srv in reversed(started):
            srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def visitor() -> httpx.Client:
    return httpx.Client(timeout=10, follow_redirects=False)


def cookie_lines(r: httpx.Response) -> dict[str, str]:
    return {line.split("=", 1)[0].strip(): line for line in r.headers.get_list("set-cookie")}


# ---------------------------------------------------------------------- the tests


def test_the_package_is_the_servers_build(rig: Rig) -> None:
    manifest = httpx.get(f"{rig.live.base_url}/connectors/manifest.json").json()
    node = next(c for c in manifest["connectors"] if c["name"] == "node")
    installed = json.loads((rig.modules / PACKAGE / "package.json").read_text())
    assert node["version"] == installed["version"] == "1.4.0"
    assert installed.get("dependencies") in (None, {})
    source = (rig.modules / PACKAGE / "index.js").read_text()
    assert "const VERSION = '1.4.0';" in source and "__QM_CONNECTOR_VERSION__" not in source
    esm = (rig.modules / PACKAGE / "index.mjs").as_uri()
    probe = (
        f"import c, {{ createGate, middleware, VERSION }} from '{esm}';"
        "console.log(typeof createGate, typeof middleware, VERSION, typeof c.createGate)"
    )
    done = subprocess.run(
        [NODE, "--input-type=module", "-e", probe], capture_output=True, text=True, timeout=20, check=False
    )
    assert done.stdout.split() == ["function", "function", "1.4.0", "function"], done.stderr


# (method, path, Sec-Fetch-Dest or None, skips?): the four conditions of "What skips the gate"
STATIC_CASES = [
    ("GET", "/assets/app.js", None, True),
    ("HEAD", "/img/logo.PNG", "image", True),
    ("GET", "/fonts/a.woff2", "font", True),
    ("POST", "/assets/app.js", None, False),
    ("GET", "/api/stock.json", None, False),
    ("GET", "/robots.txt", None, False),
    ("GET", "/api/stock;.js", None, False),
    ("GET", "/a%2fb.css", None, False),
    ("GET", "/a\\b.css", None, False),
    ("GET", "/x/../admin.css", None, False),
    ("GET", "/x/./a.css", None, False),
    ("GET", "/.css", None, False),
    ("GET", "/app.css", "document", False),
    ("GET", "/app.css", "IFRAME", False),
    ("GET", "/app.css", "style", True),
    ("GET", "/page", None, False),
]


def test_the_static_rule_is_the_inline_gates(rig: Rig) -> None:
    cases = json.dumps([c[:3] for c in STATIC_CASES])
    probe = (
        f"const {{ skipsGate }} = require({json.dumps(str(rig.modules / PACKAGE))});"
        f"process.stdout.write(JSON.stringify({cases}.map(([m, p, d]) => skipsGate(m, p, d))))"
    )
    done = subprocess.run([NODE, "-e", probe], capture_output=True, text=True, timeout=20, check=False)
    assert json.loads(done.stdout or "null") == [c[3] for c in STATIC_CASES], done.stderr


def test_waiting_then_admitted_through_express(rig: Rig) -> None:
    page = rig.url("express", "/shop/item?x=1&y=two")
    with visitor() as c, rig.live.client(headers={"User-Agent": UA}) as queue:
        r = c.get(page, headers=NAV)
        assert r.status_code == 302, r.text
        assert "x-qm-failover" not in r.headers
        wait = r.headers["location"]
        assert wait.startswith(f"{rig.live.base_url}/w/{rig.room}?qm_return=")
        assert parse_qs(urlsplit(wait).query)["qm_return"] == [page]

        api = c.get(rig.url("express", "/api/cart"), headers=API)
        assert api.status_code == 503
        assert api.headers["x-qm-queued"] == "1" and "x-qm-failover" not in api.headers
        body = api.json()
        assert body["code"] == "queued" and body["roomId"] == rig.room and body["reload"] is True
        assert body["waitUrl"].startswith(f"{rig.live.base_url}/w/{rig.room}?qm_return=")

        css = c.get(rig.url("express", "/assets/app.css"), headers={"User-Agent": UA, "Sec-Fetch-Dest": "style"})
        assert css.status_code == 200 and css.text == "body{color:black}" and "x-qm-failover" not in css.headers
        tricky = c.get(rig.url("express", "/assets/app;.css"), headers={"User-Agent": UA, "Accept": "text/html"})
        assert tricky.status_code == 302  # not a plain path: gated like any page
        doc = c.get(rig.url("express", "/assets/app.css"), headers={**NAV, "Sec-Fetch-Dest": "document"})
        assert doc.status_code == 302  # a browsing context is never a subresource
        form = c.post(rig.url("express", "/checkout"), headers={**NAV, "Sec-Fetch-Dest": "document"}, data={"a": "1"})
        assert form.status_code == 302 and form.headers["location"].startswith(wait.split("?")[0])  # a form post

        joined = queue.post("/api/join", json={"roomId": rig.room, "returnUrl": page})
        assert joined.status_code == 200, joined.text
        token = joined.json()["token"]
        with rig.live.admin() as admin:
            assert admin.post(f"/api/admin/rooms/{rig.room}/rate", json={"ratePerMinute": 600}).status_code == 200

        def admitted() -> str | None:
            s = queue.get("/api/status", params={"roomId": rig.room, "token": token}).json()
            return s.get("redirectUrl") if s.get("state") in ("passed", "admitted") else None

        back = wait_until(admitted, 10, 0.1, "the visitor's turn")
        assert back.startswith(page) and "qm_token=" in back

        handoff = c.get(back, headers=NAV)
        assert handoff.status_code == 303, handoff.text
        assert handoff.headers["location"] == "/shop/item?x=1&y=two"
        set_by_queue = cookie_lines(handoff)
        assert f"qm_{rig.room}" in set_by_queue and "HttpOnly" in set_by_queue[f"qm_{rig.room}"]  # the pass, kept
        assert f"qm_dk_{rig.room}" in set_by_queue  # the check's door key, relayed
        assert "x-qm-failover" not in handoff.headers

        r = c.get(rig.url("express", handoff.headers["location"]), headers=NAV)
        assert r.status_code == 200, r.text
        assert r.text == "APP express GET /shop/item?x=1&y=two"
        assert "x-qm-failover" not in r.headers
        lines = cookie_lines(r)
        assert "app_session" in lines  # the app's own cookie

        again = c.get(rig.url("express", "/api/cart"), headers=API)
        assert again.status_code == 200 and again.text == "APP express GET /api/cart"


def _gated_wait(r: httpx.Response) -> dict[str, Any]:
    """The connector's JSON answer: 503, X-QM-Queued, Retry-After as retryAfterSec, no-store, Vary: Accept."""
    assert r.status_code == 503, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert r.headers["x-qm-queued"] == "1" and "x-qm-failover" not in r.headers
    assert r.headers["cache-control"] == "no-store" and "Accept" in r.headers["vary"]
    body: dict[str, Any] = r.json()
    keys = {"roomId", "state", "position", "etaSec", "retryAfterSec", "waitingUrl", "reason", "code"}
    assert keys <= body.keys(), body
    assert r.headers["retry-after"] == str(body["retryAfterSec"]) == "5"
    return body


def test_a_request_asking_for_json_gets_the_gated_wait(rig: Rig) -> None:
    with rig.live.admin() as admin:  # a line that does not move while the test looks at it
        assert admin.post(f"/api/admin/rooms/{rig.room}/rate", json={"ratePerMinute": 0}).status_code == 200
    wait_page = f"{rig.live.base_url}/w/{rig.room}?qm_return="
    json_only = {"User-Agent": UA, "Accept": "application/json"}
    for site in ("express", "http"):
        with visitor() as c:
            first = _gated_wait(c.get(rig.url(site, "/api/cart?x=1"), headers=json_only))
            assert first["roomId"] == rig.room and first["state"] == "not_in_line" and first["reason"] == "no_ticket"
            assert first["position"] is None and first["etaSec"] is None
            assert parse_qs(urlsplit(first["waitingUrl"]).query)["qm_return"] == [rig.url(site, "/api/cart?x=1")]
            assert first["waitingUrl"].startswith(wait_page)
            for ask in ({"X-QM-Accept": "json"}, {"X-Requested-With": "XMLHttpRequest"}):
                assert _gated_wait(c.get(rig.url(site, "/orders"), headers={**NAV, **ask}))["roomId"] == rig.room
            head = c.head(rig.url(site, "/api/cart"), headers=json_only)
            assert head.status_code == 503 and head.headers["retry-after"] == "5" and head.content == b""
            page = c.get(rig.url(site, "/orders"), headers=NAV)  # a browser still goes to the waiting room
            assert page.status_code == 302 and page.headers["location"].startswith(wait_page)
            assert "Accept" in page.headers["vary"]
    # with a place in line (the app presents its ticket in the qm_<room> cookie): the place and the room's state
    with rig.live.client(headers={"User-Agent": UA}) as queue:
        token = queue.post("/api/join", json={"roomId": rig.room}).json()["token"]
        status = queue.get("/api/status", params={"roomId": rig.room, "token": token}).json()
    assert status["state"] == "waiting"
    with visitor() as c:
        cookie = {**json_only, "Cookie": f"qm_{rig.room}={token}"}
        placed = _gated_wait(c.get(rig.url("express", "/api/cart"), headers=cookie))
    assert placed["state"] == "waiting" and placed["reason"] == "waiting", placed
    assert placed["position"] == status["position"] and placed["etaSec"] is None  # a rate of 0: no estimate
    assert placed["roomState"] == "active"
    # wantsJson is exported with the rest
    probe = (
        f"const c = require({json.dumps(str(rig.modules / PACKAGE))});"
        "const r = (h) => ({ headers: h });"
        "process.stdout.write(JSON.stringify([c.wantsJson(r({ accept: 'application/json' })),"
        " c.wantsJson(r({ accept: 'text/html,*/*;q=0.8' })), c.wantsJson(r({ accept: 'application/json, text/html' })),"
        " c.wantsJson(r({ 'x-qm-accept': 'JSON' })),"
        " c.isNavigation(r({ accept: 'text/html', 'x-requested-with': 'XMLHttpRequest' }))]))"
    )
    done = subprocess.run([NODE, "-e", probe], capture_output=True, text=True, timeout=20, check=False)
    assert json.loads(done.stdout or "null") == [True, False, False, True, False], done.stderr


def test_queue_cookies_survive_an_app_that_replaces_set_cookie(rig: Rig) -> None:
    """node:http with gate(): the app's res.setHeader('Set-Cookie', …) does not drop the relayed door key."""
    with rig.live.client(headers={"User-Agent": UA}) as queue, rig.live.admin() as admin:
        assert admin.post(f"/api/admin/rooms/{rig.room}/rate", json={"ratePerMinute": 600}).status_code == 200
        page = rig.url("http", "/orders")
        token = queue.post("/api/join", json={"roomId": rig.room, "returnUrl": page}).json()["token"]

        def admitted() -> str | None:
            s = queue.get("/api/status", params={"roomId": rig.room, "token": token}).json()
            return s.get("redirectUrl") if s.get("state") in ("passed", "admitted") else None

        back = wait_until(admitted, 10, 0.1, "the visitor's turn")
    with visitor() as c:
        # a fetch() carrying the pass is not a navigation: no hand-off redirect, straight to the app
        r = c.get(back, headers=API)
        assert r.status_code == 200, r.text
        assert r.text.startswith("APP http GET /orders?")
        lines = cookie_lines(r)
        assert lines["app_session"] == "app_session=h1; Path=/"
        assert f"qm_dk_{rig.room}" in lines, r.headers.get_list("set-cookie")
        assert "x-qm-failover" not in r.headers


def test_unreachable_timeout_http_and_invalid_fail_open_marked(rig: Rig) -> None:
    with visitor() as c:
        t0 = time.monotonic()
        r = c.get(rig.url("hole", "/p"), headers=NAV)
        took = time.monotonic() - t0
        assert r.status_code == 200 and r.text == "APP hole GET /p"
        assert r.headers["x-qm-failover"] == "timeout"
        assert 1.8 <= took < 5, took  # the 2 s default
        assert "app_session=h1; Path=/" in r.headers.get_list("set-cookie")

        r = c.get(rig.url("e500", "/p"), headers=NAV)
        assert r.status_code == 200 and r.headers["x-qm-failover"] == "http-500"

        r = c.get(rig.url("wrongkey", "/p"), headers=NAV)  # the live server refuses the key
        assert r.status_code == 200 and r.text == "APP wrongkey GET /p"
        assert r.headers["x-qm-failover"] == "http-401"

        r = c.post(rig.url("bogus", "/api/buy"), headers=API)
        assert r.status_code == 200 and r.text == "APP bogus POST /api/buy"
        assert r.headers["x-qm-failover"] == "invalid-response"
        assert "app_session=e1; Path=/" in r.headers.get_list("set-cookie")

        static = c.get(rig.url("hole", "/logo.svg"), headers={"User-Agent": UA, "Sec-Fetch-Dest": "image"})
        assert static.status_code == 200 and "x-qm-failover" not in static.headers  # skipped: no check at all

    seen = wait_until(lambda: len(rig.fail_opens()) >= 4 and rig.fail_opens(), 5, 0.05, "onFailOpen calls")
    assert {(e["site"], e["reason"], e["roomId"]) for e in seen} >= {
        ("hole", "timeout", "shop"),
        ("e500", "http-500", "shop"),
        ("bogus", "invalid-response", "shop"),
        ("wrongkey", "http-401", rig.room),
    }


def test_429_goes_to_the_waiting_room_then_a_stopped_queue_is_unreachable(rig: Rig) -> None:
    page = rig.url("limited", "/drop")
    use_store(rig.store)  # on valkey a budget may count per wall-clock minute: both checks in one minute
    try:
        clear_of_the_minute_turn(5)
    finally:
        use_store(None)
    with visitor() as c:
        first = c.get(page, headers=NAV)
        assert first.status_code == 200 and first.text == "APP limited GET /drop"  # bypass room: a pass
        assert "x-qm-failover" not in first.headers
        second = c.get(page, headers=NAV)
        assert second.status_code == 302, second.text
        assert "x-qm-failover" not in second.headers
        wait = second.headers["location"]
        assert wait.startswith(f"{rig.limited.base_url}/w/{rig.limited_room}?qm_return=")
        assert parse_qs(urlsplit(wait).query)["qm_return"] == [page]
        api = c.get(rig.url("limited", "/api/x"), headers=API)
        assert api.status_code == 503 and api.headers["x-qm-queued"] == "1" and "x-qm-failover" not in api.headers
        shed = _gated_wait(api)  # the queue described nothing: the connector says what it knows
        assert shed["state"] == "rate_limited" and shed["reason"] == "rate_limited" and shed["position"] is None
        assert shed["waitingUrl"].startswith(f"{rig.limited.base_url}/w/{rig.limited_room}?qm_return=")
        assert not any(e["site"] == "limited" for e in rig.fail_opens())

        rig.limited.stop()
        down = c.get(page, headers=NAV)
        assert down.status_code == 200 and down.text == "APP limited GET /drop"
        assert down.headers["x-qm-failover"] == "unreachable"
    assert wait_until(
        lambda: any(e["site"] == "limited" and e["reason"] == "unreachable" for e in rig.fail_opens()), 5, 0.05
    )
    assert rig.stderr().count("429") == 1, rig.stderr()


def test_the_check_is_made_for_the_visitor(rig: Rig) -> None:
    """What the fake queues received: the key in the header only, the visitor's address, agent, URL and
    the room's cookies (no other cookie of the site's), with X-Forwarded-* believed only with trustProxy."""
    headers = {
        **API,
        "Host": "shop.example:8443",
        "X-Forwarded-For": "203.0.113.9, 198.51.100.7",
        "X-Forwarded-Proto": "https",
        "X-Forwarded-Host": "www.shop.example",
        "Cookie": "app=private; qm_shop=tok; qm_dk_shop=dk1; qm_other=x; qms_shop=s1",
    }
    with visitor() as c:
        for site in ("bogus", "e500"):
            rig.seen[site].clear()
            r = c.get(rig.url(site, "/cart?a=1&qm_token=pass1&b=2"), headers=headers)
            assert r.status_code == 200 and "x-qm-failover" in r.headers
    # the door checks; a new origin also brings one background GET /api/verify (the return-origin question)
    (proxied,) = [s for s in rig.seen["bogus"] if urlsplit(s["path"]).path == "/api/check"]
    (direct,) = [s for s in rig.seen["e500"] if urlsplit(s["path"]).path == "/api/check"]
    for seen in (proxied, direct):
        path = urlsplit(seen["path"])
        assert path.path == "/api/check"
        query = parse_qs(path.query)
        assert "key" not in query and "pass1" not in query["url"][0]
        assert query["roomId"] == ["shop"] and query["agent"] == [UA] and query["qm_token"] == ["pass1"]
        h = {k.lower(): v for k, v in seen["headers"].items()}
        assert h["authorization"] == "Bearer k"
        assert h["cookie"] == "qm_shop=tok; qm_dk_shop=dk1; qms_shop=s1"
    q = parse_qs(urlsplit(proxied["path"]).query)
    assert q["ip"] == ["198.51.100.7"] and q["url"] == ["https://www.shop.example/cart?a=1&b=2"]
    q = parse_qs(urlsplit(direct["path"]).query)
    assert q["ip"] == ["127.0.0.1"] and q["url"] == ["http://shop.example:8443/cart?a=1&b=2"]


def test_warns_once_at_start_when_the_room_does_not_send_visitors_back_here(rig: Rig) -> None:
    """The README's first mistake: a room whose targetUrl is another site. The waiting room then sends every
    admitted visitor to that site, not back to this app; the connector asks the queue about its own origin
    when it starts (GET /api/verify?roomId=&origin=) and says so once."""
    stray = f"http://127.0.0.1:{rig.ports['stray']}"
    with visitor() as c:
        for path in ("/", "/cart", "/checkout"):
            r = c.get(stray + path, headers=NAV)
            assert r.status_code == 302 and "/w/" in r.headers["location"], r.text  # the room has a line
        for site in ("express", "http"):  # rooms that do send visitors back to them
            c.get(rig.url(site, "/"), headers=API)
    what = f"the queue does not send visitors back to {stray}"
    wait_until(lambda: what in rig.stderr(), 10, 0.05, "the return-origin warning")
    log = rig.stderr()
    assert log.count(what) == 1, log  # once, not once per request
    line = next(x for x in log.splitlines() if what in x)
    assert f"[qm] {rig.stray_room}:" in line and "https://shop.example/" in line and "returnOrigins" in line, line
    for site in ("express", "http"):
        assert f"back to http://127.0.0.1:{rig.ports[site]}" not in log, log


def test_unconfigured_continues_unmarked_with_one_warning(rig: Rig) -> None:
    with visitor() as c:
        for path in ("/a", "/b", "/api/c"):
            r = c.get(rig.url("bare", path), headers=NAV)
            assert r.status_code == 200 and r.text == f"APP bare GET {path}"
            assert "x-qm-failover" not in r.headers
    assert rig.stderr().count("not configured") == 1, rig.stderr()
    assert not any(e["site"] == "bare" for e in rig.fail_opens())


# ---------------------------------------------------------------------- edge passes (the last: stops rig.edge)


class Browser:
    """A visitor's cookies on the site, kept by hand so a test can put any pass in them."""

    def __init__(self, rig: Rig) -> None:
        self.rig = rig
        self.jar: dict[str, str] = {}

    def get(self, path: str, headers: dict[str, str] = NAV) -> httpx.Response:
        cookie = "; ".join(f"{k}={v}" for k, v in self.jar.items())
        r = httpx.get(self.rig.url("edge", path), headers={**headers, "Cookie": cookie}, timeout=10)
        for line in r.headers.get_list("set-cookie"):
            name, _, rest = line.partition("=")
            value = rest.split(";", 1)[0]
            if "Max-Age=0" in line:
                self.jar.pop(name.strip(), None)
            else:
                self.jar[name.strip()] = value
        return r


def gate_stats(rig: Rig) -> dict[str, Any]:
    stats: dict[str, Any] = httpx.get(rig.url("edge", "/__gate-stats"), timeout=10).json()
    return stats


def admitted_browser(rig: Rig, page: str) -> Browser:
    """A visitor who queued, was sent back with qm_token and handed off: holding the pass, the door key
    and the edge pass in the site's cookies."""
    with rig.edge.client(headers={"User-Agent": UA}) as queue:
        token = queue.post("/api/join", json={"roomId": rig.edge_room, "returnUrl": rig.url("edge", page)}).json()[
            "token"
        ]

        def back() -> str | None:
            s = queue.get("/api/status", params={"roomId": rig.edge_room, "token": token}).json()
            return s.get("redirectUrl") if s.get("state") in ("passed", "admitted") else None

        url = wait_until(back, 15, 0.1, "the visitor's turn")
    b = Browser(rig)
    handoff = b.get(url[len(rig.url("edge", "")) :])
    assert handoff.status_code == 303, handoff.text
    assert {f"qm_{rig.edge_room}", f"qm_dk_{rig.edge_room}", f"qmp_{rig.edge_room}"} <= set(b.jar), b.jar
    return b


def test_an_invitation_goes_to_the_waiting_page_and_never_to_the_app(rig: Rig) -> None:
    """?qm_token=<JWS> (an invitation the site signed): carried to the waiting page, kept from the app."""
    with rig.edge.admin() as admin:
        invite = invitation(admin, rig.edge_room)
    with visitor() as c:
        r = c.get(rig.url("edge", f"/members?a=1&qm_token={invite}"), headers=NAV)
        assert r.status_code == 302, r.text
        query = parse_qs(urlsplit(r.headers["location"]).query)
        assert query["qm_token"] == [invite] and query["qm_return"] == [rig.url("edge", "/members?a=1")]
        api = c.get(rig.url("edge", f"/api/x?qm_token={invite}"), headers=API)
        assert api.status_code == 503
        assert parse_qs(urlsplit(api.json()["waitingUrl"]).query)["qm_token"] == [invite]
    inside = admitted_browser(rig, "/members")
    page = inside.get(f"/members?a=1&qm_token={invite}")
    assert page.status_code == 303 and page.headers["location"] == "/members?a=1"
    api = inside.get(f"/api/x?b=2&qm_token={invite}", headers=API)
    assert api.status_code == 200 and api.text == "APP edge GET /api/x?b=2"


def test_a_closed_room_sends_visitors_to_its_closed_page(rig: Rig) -> None:
    """queueing reject: the connector follows the check's answer (room_closed) to the room's closed page."""
    with rig.live.admin() as admin:
        admin.post("/api/admin/rooms", json={"id": rig.room, "queueing": "reject"}).raise_for_status()
        try:
            with visitor() as c:
                r = c.get(rig.url("express", "/shop/closed"), headers=NAV)
                assert r.status_code == 302 and "x-qm-failover" not in r.headers, r.text
                page = c.get(r.headers["location"], headers=NAV)
                assert page.status_code == 503 and page.headers["x-qm-closed"] == "1"
                assert "This waiting room is closed" in page.text
                api = c.get(rig.url("express", "/api/cart"), headers=API)
                assert api.status_code == 503 and api.json()["reason"] == "room_closed"
        finally:
            admin.post("/api/admin/rooms", json={"id": rig.room, "queueing": "fifo"}).raise_for_status()


def test_an_access_rule_block_is_answered_by_the_connector(rig: Rig) -> None:
    """A block access rule: the check answers 403 access_blocked and the connector refuses the request itself
    (a short page, or the JSON refusal), never a fail-open and never the app; a bypass rule lets it through."""
    rules = [
        {"id": "closed-path", "action": "block", "match": {"pathPrefix": "/shop/blocked"}},
        {"id": "open-path", "action": "bypass", "match": {"pathPrefix": "/shop/open"}},
    ]
    with rig.live.admin() as admin:
        admin.post("/api/admin/rooms", json={"id": rig.room, "accessRules": rules}).raise_for_status()
        try:
            with visitor() as c:
                page = c.get(rig.url("express", "/shop/blocked/1"), headers=NAV)
                assert page.status_code == 403 and "Access not allowed" in page.text, page.text
                assert "x-qm-failover" not in page.headers
                api = c.get(rig.url("express", "/shop/blocked/2"), headers=API)
                assert api.status_code == 403 and api.json()["code"] == "access_blocked"
                opened = c.get(rig.url("express", "/shop/open/1"), headers=NAV)
                assert opened.status_code == 200 and "x-qm-failover" not in opened.headers
        finally:
            admin.post("/api/admin/rooms", json={"id": rig.room, "accessRules": []}).raise_for_status()


def test_revoke_session_ends_the_visit_at_the_queue_and_in_the_connector(rig: Rig) -> None:
    """The app calls gate.revokeSession(req) once the visitor is done: the queue ends the session (counted),
    the visitor's edge pass admits nothing more in the connector (no wait for the list's refresh), their next
    page is the waiting room, and a second call finds no session."""
    room = rig.edge_room
    one = admitted_browser(rig, "/one")
    wait_until(lambda: one.get("/one").status_code == 200 and gate_stats(rig)["local"] > 0, 10, 0.05, "a local pass")
    with rig.edge.admin() as admin:
        before = admin.get(f"/api/admin/rooms/{room}").json()["room"]["sessionsRevoked"]
    r = one.get("/__thanks")
    assert r.status_code == 200 and r.json() == {"revoked": True}, r.text
    with rig.edge.admin() as admin:
        assert admin.get(f"/api/admin/rooms/{room}").json()["room"]["sessionsRevoked"] == before + 1
    sent = one.get("/one")
    assert sent.status_code == 302 and sent.headers["location"].startswith(f"{rig.edge.base_url}/w/{room}")
    again = one.get("/__thanks")  # the gate sends them to the line first: no session left to end
    assert again.status_code == 302
    with httpx.Client(timeout=10) as c:
        assert c.get(rig.url("express", "/__has-revoke")).json() == {"revokeSession": "function"}


def test_a_flush_reaches_the_connector_through_the_revocation_list(rig: Rig) -> None:
    """A flush revokes every pass issued before it with one cutoff (revokedBefore): a pass the connector
    would have let in alone until it expired is refused within its refresh, and the queue, asked instead,
    sends its holder to the line."""
    room = rig.edge_room
    one = admitted_browser(rig, "/one")
    wait_until(lambda: one.get("/one").status_code == 200 and gate_stats(rig)["local"] > 0, 10, 0.05, "a local pass")
    seen = gate_stats(rig)["refused"].get("revoked", 0)
    with rig.edge.admin() as admin:
        rate = admin.get(f"/api/admin/rooms/{room}").json()["room"]["ratePerMinute"]
        # no outflow while the flushed visitor is looked at: they stay in the line
        assert admin.post(f"/api/admin/rooms/{room}/rate", json={"ratePerMinute": 0}).status_code == 200
        r = admin.post(f"/api/admin/rooms/{room}/flush")
        assert r.status_code == 200 and r.json()["flushed"] >= 1, r.text
        try:
            refused = wait_until(
                lambda: (r := one.get("/one")).status_code == 302 and r, 10, 0.05, "the flushed visitor sent back"
            )
        finally:
            assert admin.post(f"/api/admin/rooms/{room}/rate", json={"ratePerMinute": rate}).status_code == 200
    assert refused.headers["location"].startswith(f"{rig.edge.base_url}/w/{room}")
    assert gate_stats(rig)["refused"].get("revoked", 0) > seen


def test_edge_passes_are_checked_in_the_connector(rig: Rig) -> None:
    """A valid pass costs the queue nothing; every bad one (expired, another room, another key, tampered,
    bound to another door key, revoked) is refused here and the queue asked; a revocation reaches the
    connector within its refresh; with the queue stopped a valid pass still admits, unmarked."""
    room, pass_cookie = rig.edge_room, f"qmp_{rig.edge_room}"
    one = admitted_browser(rig, "/one")
    two = admitted_browser(rig, "/two")
    # the key set and the revocation list load in the background: the first pages may still ask the queue
    wait_until(lambda: one.get("/one").status_code == 200 and gate_stats(rig)["local"] > 0, 10, 0.05, "a local pass")
    before = gate_stats(rig)
    for i in range(20):
        r = one.get(f"/one?i={i}")
        assert r.status_code == 200 and r.text == f"APP edge GET /one?i={i}" and "x-qm-failover" not in r.headers
    after = gate_stats(rig)
    assert after["local"] == before["local"] + 20 and after["checks"] == before["checks"]  # no queue request

    good = one.jar[pass_cookie]
    header, claims = (json.loads(base64.urlsafe_b64decode(p + "==")) for p in good.split(".")[:2])
    own, stranger = key_of(rig.edge.env["SECRET"]), Ed25519PrivateKey.generate()
    h, _, sig = good.split(".")
    forged_claims = b64(json.dumps({**claims, "exp": claims["exp"] + 600}).encode())
    bad = {
        "expired": sign(own, {**claims, "iat": claims["iat"] - 600, "exp": claims["iat"] - 300}),
        "wrong_room": sign(own, {**claims, "room": room + "x"}),
        "unknown_kid": sign(stranger, claims),
        "bad_signature": f"{h}.{forged_claims}.{sig}",
        "unbound": two.jar[pass_cookie],  # another visitor's pass: bound to their door key
        "revoked": sign(own, {**claims, "gen": claims["gen"] + 1}),
    }
    assert header["kid"] == kid_of(own)
    for reason, token in bad.items():
        seen = gate_stats(rig)
        one.jar[pass_cookie] = token
        r = one.get("/one")
        assert r.status_code == 200 and "x-qm-failover" not in r.headers, (reason, r.text)
        now = gate_stats(rig)
        assert now["refused"].get(reason, 0) == seen["refused"].get(reason, 0) + 1, (reason, now)
        assert now["checks"] == seen["checks"] + 1 and now["local"] == seen["local"], reason
        assert one.jar[pass_cookie] != token, reason  # the queue's answer brought a fresh pass

    # an eject reaches the connector through the revocation list, within its refresh
    ticket = json.loads(base64.urlsafe_b64decode(one.jar[f"qm_{room}"].split(".")[0] + "=="))["n"]
    with rig.edge.admin() as admin:  # no outflow: the ejected visitor stays at the back of the line
        assert admin.post(f"/api/admin/rooms/{room}/rate", json={"ratePerMinute": 0}).status_code == 200
        assert admin.post(f"/api/admin/rooms/{room}/eject", json={"ticket": ticket}).status_code == 200
    refused = wait_until(
        lambda: (r := one.get("/one")).status_code == 302 and r, 10, 0.05, "the ejected visitor sent to the line"
    )
    assert refused.headers["location"].startswith(f"{rig.edge.base_url}/w/{room}")
    assert gate_stats(rig)["refused"].get("revoked", 0) >= 2

    # the queue stopped: the other visitor's valid pass still admits, without a round trip to fail
    wait_until(lambda: two.get("/two").status_code == 200 and gate_stats(rig)["local"] > after["local"], 10, 0.05)
    rig.edge.stop()
    r = two.get("/two?after=stop")
    assert r.status_code == 200 and r.text == "APP edge GET /two?after=stop" and "x-qm-failover" not in r.headers
