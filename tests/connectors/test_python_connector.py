"""The Python connector (``queue-manager-gate``) in front of Django, Flask and FastAPI, against a live queue.

The package is the one the server hands out: ``pip install http://<server>/connectors/python/latest.tar.gz``
(with its ``edge`` extra), installed once per module with the tests' uv into a fresh virtual environment
beside Django, Flask, FastAPI and uvicorn at the versions uv.lock pins (the ones this environment runs),
cached outside the checkout under the archive's hash (``~/.cache/qm-connectors/python-<hash>``).

Each framework runs in a process of its own from that environment, serving three sites on three ports,
each behind its own gate:

* ``live``: a live server's room (waiting, admitted with the queue's cookies, static files);
* ``down``: a queue that is not there (fails open, marked ``X-QM-Failover: unreachable``);
* ``hole``: a queue that accepts the connection and never answers (``X-QM-Failover: timeout``, and the
  app's other requests answered meanwhile: the ASGI gate does not hold the event loop);
* ``e500``: a stand-in queue answering 500 that records what the gate asked (``X-QM-Failover: http-500``);
* ``edge``: a server with ``PASS_SIGNING=ed25519`` reached through a counting proxy: once admitted, the
  visitor's edge pass is checked in the app's process and no more ``/api/check`` is asked.

Django runs as WSGI (``wsgiref``) and as ASGI (uvicorn), Flask as WSGI, FastAPI as ASGI under uvicorn.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import version
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from harness import Server, create_room, free_port, reserved_port, start_server, stores_under_test, wait_until
from invites import invitation

from tests.connectors.workerd_runtime import CountingProxy

# one worker takes this module (make test: --dist loadgroup): one install, the servers started once
pytestmark = pytest.mark.xdist_group("python-connector")

UV = os.environ.get("QM_UV") or shutil.which("uv") or "uv"
UA = "qm-python-connector-test/1.0"
NAV = {"User-Agent": UA, "Accept": "text/html,application/xhtml+xml", "Sec-Fetch-Mode": "navigate"}
API = {"User-Agent": UA, "Accept": "application/json", "Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty"}
#: what the apps' environment installs beside the connector: the versions this environment runs (uv.lock's)
FRAMEWORKS = ("django", "flask", "fastapi", "uvicorn", "cryptography")

APPS_PY = r"""
import asyncio, json, os, sys, threading
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from qm_gate import QueueGateASGI, QueueGateWSGI

KIND = sys.argv[1]
SITES = json.loads(os.environ["QM_SITES"])


class Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass


class Threaded(ThreadingMixIn, WSGIServer):
    daemon_threads = True


def django_app(asgi):
    import django
    from django.conf import settings
    from django.http import HttpResponse
    from django.urls import re_path

    def asset(request):
        return HttpResponse("body{color:black}", content_type="text/css")

    def page(request):
        r = HttpResponse(f"APP {KIND} {request.method} {request.get_full_path()}", content_type="text/plain")
        r.set_cookie("app_session", "d1")
        return r

    def thanks(request):  # the order is complete: the visitor's slot goes to the next one
        revoked = request.META["qm_gate"].revoke_session(request)
        return HttpResponse(json.dumps({"revoked": revoked}), content_type="application/json")

    async def thanks_async(request):
        revoked = await request.scope["qm_gate"].revoke_session(request)
        return HttpResponse(json.dumps({"revoked": revoked}), content_type="application/json")

    if not settings.configured:
        settings.configure(
            DEBUG=False, SECRET_KEY="qm-test", ALLOWED_HOSTS=["*"], ROOT_URLCONF=__name__, MIDDLEWARE=[],
            INSTALLED_APPS=[],
        )
        django.setup()
        globals()["urlpatterns"] = [
            re_path(r"^assets/app\.css$", asset),
            re_path(r"^__thanks$", thanks_async if asgi else thanks),
            re_path(r"", page),
        ]
    if asgi:
        from django.core.asgi import get_asgi_application
        return get_asgi_application()
    from django.core.wsgi import get_wsgi_application
    return get_wsgi_application()


def flask_app(options):
    from flask import Flask, request, make_response

    app = Flask(__name__)

    @app.get("/assets/app.css")
    def asset():
        return "body{color:black}", 200, {"Content-Type": "text/css"}

    @app.get("/__thanks")
    def thanks():
        return {"revoked": request.environ["qm_gate"].revoke_session(request)}

    @app.route("/", defaults={"rest": ""}, methods=["GET", "POST", "HEAD"])
    @app.route("/<path:rest>", methods=["GET", "POST", "HEAD"])
    def page(rest):
        query = request.query_string.decode()
        r = make_response(f"APP flask {request.method} {request.path}" + (f"?{query}" if query else ""))
        r.content_type = "text/plain"
        r.set_cookie("app_session", "f1")
        return r

    app.wsgi_app = QueueGateWSGI(app.wsgi_app, **options)  # as the README says
    return app


def fastapi_app(options):
    from fastapi import FastAPI, Request
    from fastapi.responses import PlainTextResponse

    app = FastAPI()

    @app.get("/assets/app.css")
    def asset():
        return PlainTextResponse("body{color:black}", media_type="text/css")

    @app.get("/__thanks")
    async def thanks(request: Request):
        return {"revoked": await request.scope["qm_gate"].revoke_session(request)}

    @app.api_route("/{rest:path}", methods=["GET", "POST", "HEAD"])
    def page(rest: str, request: Request):
        query = request.url.query
        r = PlainTextResponse(f"APP fastapi {request.method} {request.url.path}" + (f"?{query}" if query else ""))
        r.set_cookie("app_session", "a1")
        return r

    app.add_middleware(QueueGateASGI, **options)  # as the README says
    return app


def serve_wsgi(apps):
    for port, app in apps:
        server = make_server("127.0.0.1", port, app, server_class=Threaded, handler_class=Quiet)
        threading.Thread(target=server.serve_forever, daemon=True).start()
    print("READY", flush=True)
    threading.Event().wait()


def serve_asgi(apps):
    import uvicorn

    async def main():
        servers = [uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                                 lifespan="off")) for port, app in apps]
        tasks = [asyncio.create_task(s.serve()) for s in servers]
        while not all(s.started for s in servers):
            await asyncio.sleep(0.02)
        print("READY", flush=True)
        await asyncio.gather(*tasks)

    asyncio.run(main())


if KIND == "django-wsgi":
    serve_wsgi([(s["port"], QueueGateWSGI(django_app(False), **s["options"])) for s in SITES])
elif KIND == "django-asgi":
    serve_asgi([(s["port"], QueueGateASGI(django_app(True), **s["options"])) for s in SITES])
elif KIND == "flask":
    serve_wsgi([(s["port"], flask_app(s["options"])) for s in SITES])
elif KIND == "fastapi":
    serve_asgi([(s["port"], fastapi_app(s["options"])) for s in SITES])
"""


def _cache_root() -> Path:
    """Where the connector tests keep what they install (``QM_CONNECTORS_CACHE``, as the other connectors')."""
    if os.environ.get("QM_CONNECTORS_CACHE"):
        return Path(os.environ["QM_CONNECTORS_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "qm-connectors"


def install(srv: Server) -> Path:
    """A fresh environment's python with the server's connector and the frameworks (once per archive)."""
    latest = f"{srv.base_url}/connectors/python/latest.tar.gz"  # what a site owner installs, as the README says
    sdist = httpx.get(latest, timeout=10)
    assert sdist.status_code == 200, sdist.text
    assert sdist.headers["content-type"] == "application/gzip"
    pins = [f"{name}=={version(name)}" for name in FRAMEWORKS]
    digest = hashlib.sha256(sdist.content + " ".join(pins).encode()).hexdigest()[:16]
    home = _cache_root() / f"python-{digest}"
    _cache_root().mkdir(parents=True, exist_ok=True)
    with open(_cache_root() / f"python-{digest}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker installing the same archive: wait for it
        return _install_into(home, latest, pins)


def _install_into(home: Path, latest: str, pins: list[str]) -> Path:
    python = home / "bin" / "python"
    if (home / ".installed").is_file():
        return python
    shutil.rmtree(home, ignore_errors=True)  # a broken earlier install
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    made = subprocess.run([UV, "venv", "-q", "--python", sys.executable, str(home)], env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert made.returncode == 0, made.stderr
    done = subprocess.run(
        [
            UV,
            "pip",
            "install",
            "-q",
            "--compile-bytecode",
            "--python",
            str(python),
            f"queue-manager-gate[edge] @ {latest}",
            *pins,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (home / ".installed").write_text(" ".join(pins))
    return python


class Failing(ThreadingHTTPServer):
    """A queue that answers 500 to everything and keeps what it was asked (path and headers)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, str]]] = []
        seen = self.seen

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                self.send_response(500)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        threading.Thread(target=self.serve_forever, daemon=True).start()


class Hole:
    """A queue that accepts connections and never answers; ``held`` counts the connections it holds."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def close(self) -> None:
        for conn in self.held:
            conn.close()
        self.sock.close()


@dataclass
class Rig:
    live: Server
    edge: Server
    proxy: CountingProxy
    failing: Failing
    hole: Hole
    python: Path
    tmp: Path


@pytest.fixture(scope="module", params=stores_under_test())
def rig(request: pytest.FixtureRequest) -> Iterator[Rig]:
    """The queues the apps talk to (a live one, an edge-pass one behind a counting proxy), once per store."""
    store: str = request.param
    started: list[Server] = []
    proxy: CountingProxy | None = None
    failing: Failing | None = None
    hole: Hole | None = None
    tmp = Path(tempfile.mkdtemp(prefix="qm-python-connector-"))
    try:
        live = start_server({"PUBLIC_API_KEY": "pk-live-py"}, store=store)
        started.append(live)
        edge = start_server({"PUBLIC_API_KEY": "pk-edge-py", "PASS_SIGNING": "ed25519"}, store=store)
        started.append(edge)
        python = install(live)
        proxy = CountingProxy(edge.base_url)
        failing = Failing()
        hole = Hole()
        (tmp / "apps.py").write_text(APPS_PY)
        yield Rig(live, edge, proxy, failing, hole, python, tmp)
    finally:
        if hole is not None:
            hole.close()
        if failing is not None:
            failing.shutdown()
            failing.server_close()
        if proxy is not None:
            proxy.close()
        for srv in reversed(started):
            srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)


@dataclass
class Site:
    """One framework's app process: its three sites and their rooms."""

    kind: str
    ports: dict[str, int]
    room: str
    edge_room: str
    proc: subprocess.Popen[str]
    out: list[str] = field(default_factory=list)

    def url(self, site: str, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.ports[site]}{path}"


@contextlib.contextmanager
def running(rig: Rig, kind: str) -> Iterator[Site]:
    ports = {name: reserved_port() for name in ("live", "down", "edge", "e500", "hole")}
    origin = f"http://127.0.0.1:{ports['live']}"
    with rig.live.admin() as admin:
        room = create_room(admin, targetUrl=origin + "/", ratePerMinute=0)["id"]
    with rig.edge.admin() as admin:
        edge_room = create_room(admin, targetUrl=f"http://127.0.0.1:{ports['edge']}/", ratePerMinute=600)["id"]
    sites = [
        {"port": ports["live"], "options": {"queue_url": rig.live.base_url, "room": room, "key": "pk-live-py"}},
        {"port": ports["down"], "options": {"queue_url": f"http://127.0.0.1:{free_port()}", "room": room, "key": "k"}},
        {"port": ports["edge"], "options": {"queue_url": rig.proxy.url, "room": edge_room, "key": "pk-edge-py",
                                            "revoked_refresh": 0.2}},
        {"port": ports["e500"], "options": {"queue_url": rig.failing.url, "room": "shop", "key": "k-500"}},
        {"port": ports["hole"], "options": {"queue_url": rig.hole.url, "room": "shop", "key": "k", "timeout": 3}},
    ]  # fmt: skip
    err = open(rig.tmp / f"{kind}.stderr", "wb")
    env = {**os.environ, "QM_SITES": json.dumps(sites), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPATH", None)
    proc = subprocess.Popen(
        [str(rig.python), str(rig.tmp / "apps.py"), kind], cwd=rig.tmp, env=env, stdout=subprocess.PIPE,
        stderr=err, text=True,
    )  # fmt: skip
    site = Site(kind, ports, room, edge_room, proc)

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            site.out.append(line.rstrip("\n"))

    threading.Thread(target=read, daemon=True).start()
    try:
        wait_until(lambda: "READY" in site.out or proc.poll() is not None, 30, 0.05, f"the {kind} apps listening")
        assert "READY" in site.out, (rig.tmp / f"{kind}.stderr").read_text(errors="replace")
        yield site
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        err.close()


class Browser:
    """A visitor's cookies on one site, kept by hand (the sites are plain http on 127.0.0.1)."""

    def __init__(self, site: Site, name: str) -> None:
        self.site, self.name = site, name
        self.jar: dict[str, str] = {}

    def get(self, path: str, headers: dict[str, str] = NAV) -> httpx.Response:
        cookie = "; ".join(f"{k}={v}" for k, v in self.jar.items())
        r = httpx.get(self.site.url(self.name, path), headers={**headers, "Cookie": cookie}, timeout=10)
        for line in r.headers.get_list("set-cookie"):
            name, _, rest = line.partition("=")
            self.jar[name.strip()] = rest.split(";", 1)[0]
        return r


def admitted(queue: Server, room: str, page: str) -> str:
    """A visitor joins for ``page`` and is let in: the address the waiting room sends them back to."""
    with queue.client(headers={"User-Agent": UA}) as c:
        joined = c.post("/api/join", json={"roomId": room, "returnUrl": page})
        assert joined.status_code == 200, joined.text
        token = joined.json()["token"]
        with queue.admin() as admin:
            assert admin.post(f"/api/admin/rooms/{room}/rate", json={"ratePerMinute": 600}).status_code == 200

        def back() -> str | None:
            s = c.get("/api/status", params={"roomId": room, "token": token}).json()
            return s.get("redirectUrl") if s.get("state") in ("passed", "admitted") else None

        url: str = wait_until(back, 15, 0.1, "the visitor's turn")
    return url


def scenario(rig: Rig, kind: str) -> None:
    """What every framework must show: queued, static files, admitted, fail-open, edge passes checked locally."""
    with running(rig, kind) as site:
        page = site.url("live", "/shop/item?x=1")
        wait_page = f"{rig.live.base_url}/w/{site.room}"
        # queued: a page goes to the waiting room, an API call gets the gated wait in JSON
        r = httpx.get(page, headers=NAV, timeout=10)
        assert r.status_code == 302, r.text
        assert r.headers["location"].startswith(f"{wait_page}?qm_return=")
        assert parse_qs(urlsplit(r.headers["location"]).query)["qm_return"] == [page]
        assert "x-qm-failover" not in r.headers
        api = httpx.get(site.url("live", "/api/cart"), headers=API, timeout=10)
        assert api.status_code == 503 and api.headers["x-qm-queued"] == "1", api.text
        assert api.headers["retry-after"] == str(api.json()["retryAfterSec"])
        assert api.json()["waitingUrl"].startswith(wait_page) and api.json()["roomId"] == site.room
        # a static subresource skips the gate; the same file opened as a page does not
        css = httpx.get(site.url("live", "/assets/app.css"), headers={"User-Agent": UA, "Sec-Fetch-Dest": "style"})
        assert css.status_code == 200 and css.text == "body{color:black}", css.text
        doc = httpx.get(site.url("live", "/assets/app.css"), headers={**NAV, "Sec-Fetch-Dest": "document"})
        assert doc.status_code == 302
        # admitted once the outflow opens: the hand-off keeps the pass in a cookie, then the app answers
        back = admitted(rig.live, site.room, page)
        assert back.startswith(page) and "qm_token=" in back
        b = Browser(site, "live")
        handoff = b.get(back.removeprefix(site.url("live", "")))
        assert handoff.status_code == 303, handoff.text
        assert handoff.headers["location"] == "/shop/item?x=1"
        assert {f"qm_{site.room}", f"qm_dk_{site.room}"} <= set(b.jar), b.jar
        inside = b.get("/shop/item?x=1")
        assert inside.status_code == 200, inside.text
        assert inside.text == f"APP {kind} GET /shop/item?x=1"
        assert "app_session" in b.jar and "x-qm-failover" not in inside.headers  # the app's cookie kept too
        assert b.get("/api/cart", API).text == f"APP {kind} GET /api/cart"
        # an access rule's block is answered by the gate, never the app
        rules = [{"id": "closed-path", "action": "block", "match": {"pathPrefix": "/shop/blocked"}}]
        with rig.live.admin() as admin:
            admin.post("/api/admin/rooms", json={"id": site.room, "accessRules": rules}).raise_for_status()
        blocked = httpx.get(site.url("live", "/shop/blocked/1"), headers=NAV, timeout=10)
        assert blocked.status_code == 403 and "Access not allowed" in blocked.text, blocked.text
        blocked = httpx.get(site.url("live", "/shop/blocked/2"), headers=API, timeout=10)
        assert blocked.status_code == 403 and blocked.json()["code"] == "access_blocked"
        assert "x-qm-failover" not in blocked.headers
        # the queue down: the app answers, marked
        down = httpx.get(site.url("down", "/shop"), headers=NAV, timeout=10)
        assert down.status_code == 200 and down.text == f"APP {kind} GET /shop", down.text
        assert down.headers["x-qm-failover"] == "unreachable"
        # the check is made for the visitor, names the connector, and a 500 fails open too
        before = len(rig.failing.seen)
        e500 = httpx.get(site.url("e500", "/p?q=1"), headers=NAV, timeout=10)
        assert e500.status_code == 200 and e500.headers["x-qm-failover"] == "http-500", e500.text
        path, headers = next(seen for seen in rig.failing.seen[before:] if seen[0].startswith("/api/check?"))
        assert parse_qs(urlsplit(path).query) == {
            "roomId": ["shop"],
            "url": [site.url("e500", "/p?q=1")],
            "ip": ["127.0.0.1"],
            "agent": [UA],
        }
        assert headers["authorization"] == "Bearer k-500" and headers["x-qm-connector"] == "python/1.0.0"
        # a queue that never answers: the request fails open after the timeout, and while it waits the app
        # answers its other requests (the ASGI gate's check does not hold the event loop)
        done: list[str] = []
        held = len(rig.hole.held)

        def slow() -> None:
            r = httpx.get(site.url("hole", "/slow"), headers=NAV, timeout=10)
            done.append(f"hole {r.status_code} {r.headers.get('x-qm-failover')}")

        waiting = threading.Thread(target=slow)
        waiting.start()
        wait_until(lambda: len(rig.hole.held) > held, 10, 0.02, "the gate's check reaching the silent queue")
        meanwhile = b.get("/api/cart", API)  # the admitted visitor: a check of its own, answered
        done.append(f"live {meanwhile.status_code}")
        waiting.join(15)
        assert done == ["live 200", "hole 200 timeout"], done
        # edge passes: checked in the app's process, no more /api/check once the key set and list are in
        back = admitted(rig.edge, site.edge_room, site.url("edge", "/one"))
        e = Browser(site, "edge")
        assert e.get(back.removeprefix(site.url("edge", ""))).status_code == 303
        assert f"qmp_{site.edge_room}" in e.jar, e.jar

        def local() -> bool:
            before = rig.proxy.count("/api/check")
            r = e.get("/one")
            return r.status_code == 200 and rig.proxy.count("/api/check") == before

        wait_until(local, 10, 0.05, "the edge pass admitted without asking the queue")
        before = rig.proxy.count("/api/check")
        for path in ("/one", "/two", "/api/x"):
            r = e.get(path, NAV if not path.startswith("/api") else API)
            assert r.status_code == 200 and r.text == f"APP {kind} GET {path}", r.text
        assert rig.proxy.count("/api/check") == before
        # an invitation followed by a visitor inside already: a page goes on without it, the app never sees it
        with rig.edge.admin() as admin:
            invite = invitation(admin, site.edge_room)
        sent_on = e.get(f"/members?a=1&qm_token={invite}")
        assert sent_on.status_code == 303 and sent_on.headers["location"] == "/members?a=1", sent_on.text
        api = e.get(f"/api/x?b=2&qm_token={invite}", API)
        assert api.status_code == 200 and api.text == f"APP {kind} GET /api/x?b=2", api.text
        # and to a visitor not in line it is carried to the waiting page
        r = httpx.get(site.url("edge", f"/members?a=1&qm_token={invite}"), headers=NAV, timeout=10)
        assert r.status_code == 302, r.text
        query = parse_qs(urlsplit(r.headers["location"]).query)
        assert query["qm_token"] == [invite] and query["qm_return"] == [site.url("edge", "/members?a=1")]
        before = rig.proxy.count("/api/check")
        stranger = httpx.get(site.url("edge", "/one"), headers=NAV, timeout=10)
        assert stranger.status_code == 302  # no pass: asked, and sent to the waiting room's line
        assert rig.proxy.count("/api/check") == before + 1
        # the order is complete: the app ends the session; the pass admits nothing more here at once
        with rig.edge.admin() as admin:
            ended = admin.get(f"/api/admin/rooms/{site.edge_room}").json()["room"]["sessionsRevoked"]
        thanks = e.get("/__thanks", API)
        assert thanks.status_code == 200 and thanks.json() == {"revoked": True}, thanks.text
        with rig.edge.admin() as admin:
            assert admin.get(f"/api/admin/rooms/{site.edge_room}").json()["room"]["sessionsRevoked"] == ended + 1
        sent = e.get("/one")
        assert sent.status_code == 302 and sent.headers["location"].startswith(f"{rig.edge.base_url}/w/")


def test_the_package_is_the_servers_build(rig: Rig) -> None:
    manifest = httpx.get(f"{rig.live.base_url}/connectors/manifest.json").json()
    entry = next(c for c in manifest["connectors"] if c["name"] == "python")
    assert entry["version"] == "1.0.0"
    archive = entry["downloads"]["archive"]
    assert archive["format"] == "tar.gz" and archive["latest"].endswith("/connectors/python/latest.tar.gz")
    assert archive["url"].endswith("/connectors/python/python-1.0.0.tar.gz")
    body = httpx.get(archive["url"]).content
    assert hashlib.sha256(body).hexdigest() == archive["sha256"]
    probe = "import qm_gate; print(qm_gate.VERSION, qm_gate.edge_passes_available())"
    done = subprocess.run([str(rig.python), "-c", probe], capture_output=True, text=True, timeout=30, check=False)
    assert done.stdout.split() == ["1.0.0", "True"], done.stderr


def test_django_wsgi(rig: Rig) -> None:
    scenario(rig, "django-wsgi")


def test_django_asgi(rig: Rig) -> None:
    scenario(rig, "django-asgi")


def test_flask(rig: Rig) -> None:
    scenario(rig, "flask")


def test_fastapi(rig: Rig) -> None:
    scenario(rig, "fastapi")
