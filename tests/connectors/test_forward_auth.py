"""The forward-auth gate (``GET /api/gate``) behind real nginx, Caddy and HAProxy, in front of a small local app,
against a live Queue Manager.

Each proxy runs the configuration shipped under ``connectors/<proxy>/`` with its placeholders filled (the
listening port set for the test), one room per proxy. For each: a visitor is sent to the waiting page, comes
back admitted with every door cookie, their session slides on every request, static files pass without a
check (counted at the queue: ``qm_gate_checks_total``), and a queue that cannot be reached is passed through
(the room fails open) or refused with the proxy's own page (the fail-closed variant the configuration names).

Debian's ``nginx``, ``caddy`` and ``haproxy`` are installed with apt-get when running as root and missing;
``CI=true`` turns a proxy that cannot be had into a failure, never a skip.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from harness import Server, create_room, metric, reserved_port, start_server, stores_under_test, unique_id, wait_until

pytestmark = pytest.mark.xdist_group("forward-auth")

ROOT = Path(__file__).resolve().parents[2]
CONNECTORS = ROOT / "connectors"
UA = "qm-forward-auth-test/1.0"
NAV = {"User-Agent": UA, "Accept": "text/html,application/xhtml+xml", "Sec-Fetch-Mode": "navigate"}
PACKAGES = {"nginx": "nginx", "caddy": "caddy", "haproxy": "haproxy"}


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _located(name: str) -> str | None:
    """The binary on PATH or where Debian puts it (/usr/sbin is not on every PATH)."""
    return shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if os.path.exists(p)), None)


def binary(name: str) -> str:
    """The proxy's binary, installed with apt-get when root and missing."""
    found = _located(name)
    if found is None and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        cmd = ["apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y", "--no-install-recommends", PACKAGES[name]]
        subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
        found = _located(name)
    if found is None:
        why = f"{name} is missing and cannot be installed here"
        if _in_ci():
            pytest.fail(why + "; CI=true never skips it")
        pytest.skip(why)
    return found


# ---------------------------------------------------------------------- the app behind the proxies


class App:
    """A small app: every path answers ``APP <method> <path>`` (a .css ``body{}``); it remembers what it served."""

    def __init__(self) -> None:
        served: list[str] = []
        self.served = served

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                served.append(self.path)
                css = self.path.split("?", 1)[0].endswith(".css")
                body = b"body{color:black}" if css else f"APP GET {self.path}".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/css" if css else "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# ---------------------------------------------------------------------- the proxies


def fill(text: str, queue_url: str, room: str, key: str, app: str) -> str:
    return text.replace("QUEUE_URL", queue_url).replace("ROOM", room).replace("KEY", key).replace("APP", app)


@dataclass
class Proxy:
    name: str
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def _listening(proxy: Proxy) -> bool:
    if proxy.proc.poll() is not None:
        raise AssertionError(f"{proxy.name} exited: {proxy.log.read_text(errors='replace')[-3000:]}")
    try:
        httpx.get(proxy.origin + "/__qm_probe.css", timeout=2)
    except httpx.TransportError:
        return False
    return True


def start_nginx(tmp: Path, queue_url: str, room: str, key: str, app: str, *, variant: str = "") -> Proxy:
    """The shipped nginx server block in a minimal nginx.conf of the test's own (pid, logs, temp paths)."""
    port = reserved_port()
    site = fill((CONNECTORS / "nginx" / "queue-manager.conf").read_text(), queue_url, room, key, app)
    site = site.replace("listen 80;", f"listen 127.0.0.1:{port};")
    if variant == "closed":  # the configuration's fail-closed choice for a queue that cannot be reached
        site = site.replace("error_page 500 502 504 = @qm_open;", "error_page 500 502 504 = @qm_offline;")
    home = tmp / f"nginx-{port}"
    for sub in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (home / sub).mkdir(parents=True, exist_ok=True)
        (home / sub).chmod(0o777)
    (home / "site.conf").write_text(site)
    temp = " ".join(f"{sub}_temp_path {home / sub};" for sub in ("fastcgi", "uwsgi", "scgi"))
    (home / "nginx.conf").write_text(
        f"worker_processes 1; daemon off; pid {home}/nginx.pid; error_log {home}/error.log warn;\n"
        "events { worker_connections 512; }\n"
        f"http {{ access_log off; client_body_temp_path {home}/body; proxy_temp_path {home}/proxy; {temp}\n"
        f"  include {home}/site.conf; }}\n"
    )
    log = home / "stderr.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([binary("nginx"), "-p", str(home), "-c", str(home / "nginx.conf")], stderr=out)
    proxy = Proxy("nginx", port, proc, home / "error.log")
    wait_until(lambda: _listening(proxy), 10, 0.05, "nginx listening")
    return proxy


CADDY_OPEN = "\t\treverse_proxy APP\n\t\t# respond "
CADDY_CLOSED = "\t\t# reverse_proxy APP\n\t\trespond "


def start_caddy(tmp: Path, queue_url: str, room: str, key: str, app: str, *, variant: str = "") -> Proxy:
    """The shipped Caddyfile with global options of the test's own (no admin endpoint, no HTTPS)."""
    port = reserved_port()
    text = (CONNECTORS / "caddy" / "Caddyfile").read_text()
    assert CADDY_OPEN in text
    if variant == "closed":  # the configuration's fail-closed choice for a queue that cannot be reached
        text = text.replace(CADDY_OPEN, CADDY_CLOSED)
    site = fill(text, queue_url, room, key, app.removeprefix("http://"))
    site = site.replace("\n:80 {", f"\nhttp://127.0.0.1:{port} {{")
    home = tmp / f"caddy-{port}"
    home.mkdir(parents=True)
    (home / "Caddyfile").write_text("{\n\tadmin off\n\tauto_https off\n}\n" + site)
    env = {**os.environ, "XDG_DATA_HOME": str(home), "XDG_CONFIG_HOME": str(home), "HOME": str(home)}
    log = home / "stderr.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [binary("caddy"), "run", "--config", str(home / "Caddyfile"), "--adapter", "caddyfile"],
            stderr=out,
            stdout=out,
            env=env,
        )
    proxy = Proxy("caddy", port, proc, log)
    wait_until(lambda: _listening(proxy), 15, 0.05, "caddy listening")
    return proxy


HAPROXY_CLOSED = "    # http-request return status 503"


def start_haproxy(tmp: Path, queue_url: str, room: str, key: str, app: str, *, variant: str = "") -> Proxy:
    """The shipped haproxy.cfg and queue-manager.lua, the Lua loaded from the test's folder."""
    port = reserved_port()
    home = tmp / f"haproxy-{port}"
    home.mkdir(parents=True)
    lua = fill((CONNECTORS / "haproxy" / "queue-manager.lua").read_text(), queue_url, room, key, app)
    (home / "queue-manager.lua").write_text(lua)
    cfg = fill((CONNECTORS / "haproxy" / "haproxy.cfg").read_text(), queue_url, room, key, app.removeprefix("http://"))
    assert HAPROXY_CLOSED in cfg
    if variant == "closed":  # the configuration's fail-closed choice for a queue that cannot be reached
        cfg = cfg.replace(HAPROXY_CLOSED, HAPROXY_CLOSED.replace("# ", ""))
    cfg = cfg.replace("/etc/haproxy/queue-manager.lua", str(home / "queue-manager.lua"))
    cfg = cfg.replace("    bind :80", f"    bind 127.0.0.1:{port}")
    (home / "haproxy.cfg").write_text(cfg)
    log = home / "stderr.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([binary("haproxy"), "-db", "-f", str(home / "haproxy.cfg")], stderr=out, stdout=out)
    proxy = Proxy("haproxy", port, proc, log)
    wait_until(lambda: _listening(proxy), 15, 0.05, "haproxy listening")
    return proxy


STARTERS: dict[str, Callable[..., Proxy]] = {"nginx": start_nginx, "caddy": start_caddy, "haproxy": start_haproxy}


# ---------------------------------------------------------------------- the rig


@dataclass
class Site:
    proxy: Proxy
    room: str


@dataclass
class Rig:
    live: Server
    app: App
    tmp: Path
    sites: dict[str, Site] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return self.live.env["PUBLIC_API_KEY"]

    def gate_checks(self) -> float:
        return metric(self.live, "qm_gate_checks_total") or 0.0


@pytest.fixture(scope="module", params=stores_under_test())
def rig(request: pytest.FixtureRequest) -> Iterator[Rig]:
    live = start_server({"PUBLIC_API_KEY": "pk-fwd-" + unique_id()}, store=request.param)
    app = App()
    tmp = Path(tempfile.mkdtemp(prefix="qm-forward-auth-"))
    rig = Rig(live, app, tmp)
    try:
        for name, start in STARTERS.items():
            room = unique_id("fa")
            # the room exists before the proxy asks about it; its returnOrigins name the proxy's origin
            port_holder = start(tmp, live.base_url, room, rig.key, app.url)
            with live.admin() as admin:
                create_room(
                    admin,
                    room,
                    targetUrl=port_holder.origin + "/",
                    returnOrigins=[port_holder.origin],
                    ratePerMinute=0,
                    presenceSec=None,
                )
            rig.sites[name] = Site(port_holder, room)
        yield rig
    finally:
        for site in rig.sites.values():
            site.proxy.stop()
        app.close()
        live.stop()
        shutil.rmtree(tmp, ignore_errors=True)


class Browser:
    """A visitor's browser on one site: a cookie jar (name -> value) and no redirect followed on its own."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.jar: dict[str, str] = {}
        self.client = httpx.Client(timeout=10, follow_redirects=False)

    def get(self, path_or_url: str, headers: dict[str, str] | None = None) -> httpx.Response:
        url = path_or_url if path_or_url.startswith("http") else self.origin + path_or_url
        cookie = "; ".join(f"{k}={v}" for k, v in self.jar.items())
        r = self.client.get(url, headers={**NAV, **(headers or {}), **({"Cookie": cookie} if cookie else {})})
        for line in r.headers.get_list("set-cookie"):
            name, _, rest = line.partition("=")
            self.jar[name.strip()] = rest.split(";", 1)[0]
        return r

    def close(self) -> None:
        self.client.close()


def set_cookies(r: httpx.Response) -> dict[str, str]:
    """The Set-Cookie lines of an answer, by cookie name (each name once)."""
    out: dict[str, str] = {}
    for line in r.headers.get_list("set-cookie"):
        name = line.split("=", 1)[0].strip()
        assert name not in out, f"{name} set twice: {r.headers.get_list('set-cookie')}"
        out[name] = line
    return out


def session_left(rig: Rig, room: str, ref: str) -> float:
    """How long the visitor's session has left, as the console's look-up shows it."""
    with rig.live.admin() as admin:
        r = admin.get(f"/api/admin/rooms/{room}/visitors/{ref}")
        assert r.status_code == 200, r.text
        left: float = r.json()["visitor"]["sessionExpiresInSec"]
        return left


# ---------------------------------------------------------------------- the tests


@pytest.mark.parametrize("proxy", list(STARTERS))
def test_a_visitor_waits_then_walks_in_with_every_door_cookie(rig: Rig, proxy: str) -> None:
    site = rig.sites[proxy]
    room, origin = site.room, site.proxy.origin
    item = f"/shop/{proxy}/item?x=1&y=two"  # one app behind every proxy: each asks for its own paths
    page = origin + item
    b = Browser(origin)
    try:
        r = b.get(page)
        assert r.status_code == 302, r.text
        wait = r.headers["location"]
        assert wait.startswith(f"{rig.live.base_url}/w/{room}?qm_return=")
        assert parse_qs(urlsplit(wait).query)["qm_return"] == [page]
        assert item not in rig.app.served  # the app never saw the queued visitor

        with rig.live.client(headers={"User-Agent": UA}) as queue:
            joined = queue.post("/api/join", json={"roomId": room, "returnUrl": page})
            assert joined.status_code == 200, joined.text
            token = joined.json()["token"]
            with rig.live.admin() as admin:
                assert admin.post(f"/api/admin/rooms/{room}/rate", json={"ratePerMinute": 600}).status_code == 200

            def turn() -> str | None:
                s = queue.get("/api/status", params={"roomId": room, "token": token}).json()
                return s.get("redirectUrl") if s.get("state") in ("passed", "admitted") else None

            back = wait_until(turn, 10, 0.1, "the visitor's turn")
        assert back.startswith(page) and "qm_token=" in back

        handoff = b.get(back)
        assert handoff.status_code in (302, 303), handoff.text
        assert handoff.headers["location"] in (item, page)
        cookies = set_cookies(handoff)
        # every door cookie, each in its own Set-Cookie (nginx passes on one unless told)
        assert {f"qm_{room}", f"qm_dk_{room}"} <= set(cookies), cookies
        assert all("HttpOnly" in line and "Path=/" in line for line in cookies.values()), cookies
        assert "qm_token" not in "".join(rig.app.served)  # the token never reached the app

        got = b.get(item)
        assert got.status_code == 200, got.text
        assert got.text == f"APP GET {item}"
        again = b.get("/cart")
        assert again.status_code == 200 and again.text == "APP GET /cart"

        # the session slides on every request: what it has left grows back after an idle moment
        ref = str(joined.json()["ref"])
        fresh = session_left(rig, room, ref)
        idle = wait_until(lambda: (s := session_left(rig, room, ref)) <= fresh - 0.3 and s, 10, 0.1, "an idle moment")
        assert b.get("/cart").status_code == 200
        assert session_left(rig, room, ref) > idle
    finally:
        b.close()


def passed_visitor(rig: Rig, room: str, page: str) -> str:
    """A visitor whose turn came (their pass not yet shown at the door): their token."""
    with rig.live.client(headers={"User-Agent": UA}) as queue:
        token: str = queue.post("/api/join", json={"roomId": room, "returnUrl": page}).json()["token"]

        def turn() -> bool:
            return queue.get("/api/status", params={"roomId": room, "token": token}).json()["state"] == "passed"

        with rig.live.admin() as admin:
            assert admin.post(f"/api/admin/rooms/{room}/rate", json={"ratePerMinute": 600}).status_code == 200
        wait_until(turn, 10, 0.1, "the visitor's turn")
    return token


@pytest.mark.parametrize("proxy", list(STARTERS))
def test_a_door_key_minted_on_a_let_through_reaches_the_visitor(rig: Rig, proxy: str) -> None:
    """A pass shown in its cookie (no hand-off in the address): the gate lets the request through with a 200 and
    a new door key, which the proxy must copy onto the app's answer (nginx: X-QM-Set-Cookie-1; Caddy:
    copy_response_headers)."""
    site = rig.sites[proxy]
    room = site.room
    path = f"/kept/{proxy}/page"
    token = passed_visitor(rig, room, site.proxy.origin + path)
    b = Browser(site.proxy.origin)
    try:
        b.jar[f"qm_{room}"] = token
        r = b.get(path)
        assert r.status_code == 200 and r.text == f"APP GET {path}", r.text
        cookies = set_cookies(r)
        assert set(cookies) == {f"qm_dk_{room}"}, cookies
        before = rig.gate_checks()
        again = b.get(path + "/next")  # the door key shown: the cheap replay, nothing new to set
        assert again.status_code == 200 and set_cookies(again) == {}
        assert rig.gate_checks() == before + 1
    finally:
        b.close()


@pytest.mark.parametrize("proxy", list(STARTERS))
def test_static_files_pass_without_a_check(rig: Rig, proxy: str) -> None:
    site = rig.sites[proxy]
    b = Browser(site.proxy.origin)
    try:
        before = rig.gate_checks()
        for _ in range(3):
            css = b.get("/assets/app.css", {"Sec-Fetch-Dest": "style", "Accept": "text/css"})
            assert css.status_code == 200 and css.text == "body{color:black}"
        page = b.get("/not-static")  # a page is checked: the count moves (so it would have moved above)
        assert page.status_code == 302
        assert rig.gate_checks() == before + 1
    finally:
        b.close()


def test_the_gate_itself(rig: Rig) -> None:
    """What the endpoint answers, asked directly as a proxy would (a static path at once, bad asks refused)."""
    room = next(iter(rig.sites.values())).room
    base = {
        "X-Original-URI": "/img/logo.png",
        "X-Forwarded-Host": "shop.example",
        "X-Forwarded-Proto": "https",
        "X-Real-IP": "203.0.113.9",
        "User-Agent": UA,
    }
    with rig.live.client() as c:
        r = c.get("/api/gate", params={"roomId": room}, headers=base)
        assert r.status_code == 401 and r.json()["code"] == "unauthorized"
        auth = {**base, "Authorization": f"Bearer {rig.key}"}
        r = c.get("/api/gate", params={"roomId": room}, headers={**auth, "Authorization": "Bearer wrong"})
        assert r.status_code == 401 and r.json()["code"] == "unauthorized"
        r = c.get("/api/gate", params={"roomId": room}, headers=auth)
        assert r.status_code == 200 and r.headers["x-qm-decision"] == "static" and r.content == b""
        # Caddy's and Traefik's names; deny=302 answers a redirect the proxy hands on as it is
        caddy = {**auth, "X-Forwarded-Uri": "/p?a=1", "X-Forwarded-Method": "GET"}
        del caddy["X-Original-URI"]
        r = c.get("/api/gate", params={"roomId": room, "deny": "302"}, headers=caddy)
        assert r.status_code == 302 and r.headers["x-qm-decision"] == "wait"
        assert parse_qs(urlsplit(r.headers["location"]).query)["qm_return"] == ["https://shop.example/p?a=1"]
        # an invitation in qm_token goes to the waiting page, out of the address to come back to
        invite = "eyJhbGciOiJIUzI1NiJ9.eyJyIjoieCJ9.c2ln"
        r = c.get("/api/gate", params={"roomId": room}, headers={**auth, "X-Original-URI": f"/p?a=1&qm_token={invite}"})
        assert r.status_code == 401 and r.headers["x-qm-decision"] == "wait"
        sent = parse_qs(urlsplit(r.headers["x-qm-redirect"]).query)
        assert sent == {"qm_return": ["https://shop.example/p?a=1"], "qm_token": [invite]}, sent
        for bad in ({"X-Original-URI": "p"}, {"X-Forwarded-Host": "a b"}, {"X-Real-IP": "nobody"}):
            r = c.get("/api/gate", params={"roomId": room}, headers={**auth, **bad})
            assert r.status_code == 400 and r.json()["code"] == "bad_request", (bad, r.text)
        r = c.get("/api/gate", params={"roomId": room, "deny": "500"}, headers=auth)
        assert r.status_code == 400 and r.json()["code"] == "bad_request"
        r = c.get("/api/gate", params={"roomId": "no-such-room"}, headers={**auth, "X-Original-URI": "/p"})
        assert r.status_code == 404 and r.json()["code"] == "no_room"


@pytest.mark.parametrize("proxy", list(STARTERS))
@pytest.mark.parametrize("mode", ["open", "closed"])
def test_a_queue_that_cannot_be_reached(rig: Rig, proxy: str, mode: str) -> None:
    """The queue stopped: the shipped configuration passes through (a room that fails open); its fail-closed
    variant answers the proxy's own page. (A proxy pointed at a port nobody listens on is a stopped queue.)"""
    dead = f"http://127.0.0.1:{reserved_port()}"
    room = rig.sites[proxy].room
    stopped = STARTERS[proxy](rig.tmp, dead, room, rig.key, rig.app.url, variant=mode)
    try:
        b = Browser(stopped.origin)
        path = f"/during-an-outage/{proxy}/{mode}"
        r = b.get(path)
        if mode == "open":
            assert r.status_code == 200 and r.text == f"APP GET {path}", r.text
        else:
            assert r.status_code == 503, r.text
            assert "cannot be reached" in r.text and path not in rig.app.served
        b.close()
    finally:
        stopped.stop()


def test_the_manifest_lists_each_proxys_configuration(rig: Rig) -> None:
    """Each proxy's folder is a download of the manifest, with its version, holding the files tested here."""
    with rig.live.client() as c:
        listed = {e["name"]: e for e in c.get("/connectors/manifest.json").json()["connectors"]}
        for name, top, main in (
            ("nginx", "qm-nginx", "queue-manager.conf"),
            ("caddy", "qm-caddy", "Caddyfile"),
            ("haproxy", "qm-haproxy", "haproxy.cfg"),
        ):
            entry = listed[name]
            assert f"# Version: {entry['version']}\n" in (CONNECTORS / name / main).read_text()
            archive = c.get(urlsplit(entry["downloads"]["archive"]["url"]).path)
            assert archive.status_code == 200
            with tarfile.open(fileobj=io.BytesIO(archive.content), mode="r:gz") as tar:
                packed = tar.extractfile(f"{top}/{main}")
                assert packed is not None and packed.read() == (CONNECTORS / name / main).read_bytes()
            assert c.get(urlsplit(entry["readme"]).path).text.startswith("# ")


@pytest.mark.parametrize("guide", ["docs/INTEGRATION.md", "docs/th/INTEGRATION.md"])
def test_the_guide_shows_each_configuration_whole(guide: str) -> None:
    """The integration guide (English and Thai) shows the very files tested here, each in full."""
    text = (ROOT / guide).read_text(encoding="utf-8")
    for rel in ("nginx/queue-manager.conf", "caddy/Caddyfile", "haproxy/haproxy.cfg", "haproxy/queue-manager.lua"):
        assert (CONNECTORS / rel).read_text().rstrip("\n") + "\n```" in text, f"{guide} shows an older {rel}"


@pytest.mark.parametrize("proxy", list(STARTERS))
def test_a_wrong_key_passes_through_like_a_queue_out_of_reach(rig: Rig, proxy: str) -> None:
    """A configuration with a key the queue refuses (401 unauthorized, not a gate decision): the visitor gets
    the app, as when the queue cannot be reached (the shipped choice), never a broken redirect."""
    site = rig.sites[proxy]
    wrong = STARTERS[proxy](rig.tmp, rig.live.base_url, site.room, "not-the-key", rig.app.url)
    b = Browser(wrong.origin)
    try:
        path = f"/with-a-wrong-key/{proxy}"
        r = b.get(path)
        assert r.status_code == 200 and r.text == f"APP GET {path}", r.text
    finally:
        b.close()
        wrong.stop()
