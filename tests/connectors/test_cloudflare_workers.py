"""The two Cloudflare Workers on Cloudflare's own runtime (workerd), loaded from what the server serves.

One workerd process runs every case's worker on a socket of its own: the edge gate in front of a real
local origin, asking a live Queue Manager, a rate-limited one (CHECK_LIMIT_PER_MIN=1), one that is not
running, one that never answers, and a fake that answers what the test says; the failover Worker in
front of the live queue, a stopped one, a fake and a black hole. The scripts are the served
``/connectors/<name>/latest.js``, so the build (version and offline page filled in) is what runs.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from harness import (
    Server,
    create_room,
    join,
    scrape,
    start_server,
    stores_under_test,
    unique_id,
    wait_for_state,
    wait_until,
)
from invites import invitation
from passkit import b64, key_of, sign

from queue_manager.web import asset
from tests.connectors.workerd_runtime import (
    BlackHole,
    CountingProxy,
    FakeQueue,
    Origin,
    Workerd,
    WorkerSpec,
    dead_url,
)

# one worker takes this module (make test: --dist loadgroup): one workerd process
pytestmark = pytest.mark.xdist_group("workerd")

KEY = "qm-test-public-key-" + "7" * 24
EDGE_SECRET = "edge-secret-" + "c0ffee42" * 3
UA = "Mozilla/5.0 (X11; Linux x86_64) qm-connector-test"
PROBE = "probe-secret-" + "5" * 12
PAGE = {"Accept": "text/html,application/xhtml+xml", "User-Agent": UA}
NAV = {**PAGE, "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}


class Rig:
    qm: Server
    limited: Server
    edge: Server
    passes: Server  # PASS_SIGNING=ed25519, behind ``counted``
    counted: CountingProxy
    origin: Origin
    fake: FakeQueue
    fake_fo: FakeQueue
    hole: BlackHole
    workerd: Workerd
    gate_js: bytes
    failover_js: bytes
    room: str

    def __init__(self) -> None:
        self.stack: list[Any] = []

    def close(self) -> None:
        for thing in reversed(self.stack):
            try:
                thing.stop() if hasattr(thing, "stop") else thing.close()
            except Exception:
                pass


@pytest.fixture(scope="module", params=stores_under_test())
def rig(request: pytest.FixtureRequest) -> Iterator[Rig]:
    """Everything, once per store under test (QM_TEST_STORES): the queue's door check runs on each."""
    store = request.param
    r = Rig()
    try:
        r.qm = start_server({"PUBLIC_API_KEY": KEY}, store=store)
        r.stack.append(r.qm)
        r.limited = start_server({"PUBLIC_API_KEY": KEY, "CHECK_LIMIT_PER_MIN": "1"}, store=store)
        r.stack.append(r.limited)
        r.edge = start_server({"PUBLIC_API_KEY": KEY, "EDGE_SECRET": EDGE_SECRET}, store=store)
        r.stack.append(r.edge)
        r.passes = start_server({"PUBLIC_API_KEY": KEY, "PASS_SIGNING": "ed25519"}, store=store)
        r.stack.append(r.passes)
        r.counted = CountingProxy(r.passes.base_url)
        r.stack.append(r.counted)
        r.origin = Origin()
        r.fake = FakeQueue()
        r.fake_fo = FakeQueue()
        r.hole = BlackHole()
        r.stack += [r.origin, r.fake, r.fake_fo, r.hole]
        gate = httpx.get(r.qm.base_url + "/connectors/cloudflare/latest.js")
        failover = httpx.get(r.qm.base_url + "/connectors/cloudflare-failover/latest.js")
        assert gate.status_code == 200 and failover.status_code == 200
        r.gate_js, r.failover_js = gate.content, failover.content
        r.room = unique_id("edge")
        base = {"QM_ROOM": r.room, "QM_KEY": KEY, "ORIGIN_URL": r.origin.url}

        def gate_spec(name: str, analytics: bool = True, **vars: str) -> WorkerSpec:
            merged = {**base, **vars}
            return WorkerSpec(name, r.gate_js, {k: v for k, v in merged.items() if v}, analytics)

        specs = [
            gate_spec("gate-live", QM_URL=r.qm.base_url),
            gate_spec("gate-down", QM_URL=dead_url()),
            gate_spec("gate-down-bare", analytics=False, QM_URL=dead_url()),
            gate_spec("gate-hole", QM_URL=r.hole.url),
            gate_spec("gate-fake", QM_URL=r.fake.url),
            gate_spec("gate-limited", QM_URL=r.limited.base_url),
            gate_spec("gate-noconfig", QM_URL=""),
            gate_spec("gate-nokey", QM_URL=r.qm.base_url, QM_KEY=""),
            gate_spec("gate-edge", QM_URL=r.edge.base_url, QM_EDGE_SECRET=EDGE_SECRET),
            gate_spec("gate-edge-missing", QM_URL=r.edge.base_url),
            gate_spec("gate-pass", QM_URL=r.counted.url, QM_REVOKED_REFRESH_MS="1000"),
            gate_spec("gate-stray", QM_URL=r.qm.base_url, QM_ROOM=r.room + "-stray"),
            gate_spec("gate-access", QM_URL=r.qm.base_url, QM_ROOM=r.room + "-acc", QM_ACCESS_HEADERS="X-Probe"),
            WorkerSpec("fo-live", r.failover_js, {"ORIGIN_URL": r.qm.base_url}),
            WorkerSpec("fo-down", r.failover_js, {"ORIGIN_URL": dead_url()}),
            WorkerSpec("fo-fake", r.failover_js, {"ORIGIN_URL": r.fake_fo.url}),
            WorkerSpec("fo-hole", r.failover_js, {"ORIGIN_URL": r.hole.url, "QM_TIMEOUT_MS": "1500"}),
        ]
        r.workerd = Workerd(specs)
        r.stack.append(r.workerd)
        with r.qm.admin() as admin:
            create_room(admin, r.room, targetUrl=r.workerd.url("gate-live") + "/", ratePerMinute=0)
            # the README's first mistake: the room's target is another site, and this Worker is not a return origin
            create_room(admin, r.room + "-stray", targetUrl="https://shop.example/", ratePerMinute=0)
            create_room(
                admin,
                r.room + "-acc",
                targetUrl=r.workerd.url("gate-access") + "/",
                ratePerMinute=0,
                accessRules=[
                    {"id": "probe", "action": "bypass", "match": {"header": {"name": "X-Probe", "value": PROBE}}},
                    {"id": "bad", "action": "block", "match": {"cidrs": ["203.0.113.66/32"]}},
                    {"id": "geo", "action": "block", "match": {"countries": ["DE"]}},
                    {"id": "health", "action": "bypass", "match": {"pathPrefix": "/health"}},
                ],
            )
        with r.limited.admin() as admin:
            create_room(admin, r.room, targetUrl=r.workerd.url("gate-limited") + "/", ratePerMinute=0)
        with r.passes.admin() as admin:
            create_room(admin, r.room, targetUrl=r.workerd.url("gate-pass") + "/", ratePerMinute=600)
        with r.edge.admin(headers={"X-QM-Edge": EDGE_SECRET}) as admin:
            create_room(admin, r.room, targetUrl=r.workerd.url("gate-edge") + "/", ratePerMinute=0)
        yield r
    finally:
        r.close()


def get(rig: Rig, worker: str, path: str = "/", **kwargs: Any) -> httpx.Response:
    kwargs.setdefault("headers", PAGE)
    kwargs.setdefault("timeout", 10)
    try:
        return httpx.get(rig.workerd.url(worker) + path, **kwargs)
    except httpx.ConnectError as exc:  # say whether workerd is gone, and what it said last
        proc = rig.workerd.proc
        code = None if proc is None else proc.poll()
        state = "not started" if proc is None else "running" if code is None else f"exited with {code}"
        raise AssertionError(f"workerd {state}; {worker} refused: {exc}\n{rig.workerd.log[-4000:]}") from exc


def points(rig: Rig, worker: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = httpx.get(rig.workerd.url(worker) + "/__test/points").json()
    return out


def assert_counted(rig: Rig, worker: str, reason: str) -> None:
    point = {"blobs": [rig.room, reason], "doubles": [1], "indexes": [rig.room]}
    assert point in points(rig, worker), points(rig, worker)


# ------------------------------------------------------------------ the edge gate


def test_served_scripts_are_the_build(rig: Rig) -> None:
    assert b"__QM_CONNECTOR_VERSION__" not in rig.gate_js and b"1.5.0" in rig.gate_js
    assert b"__QM_OFFLINE_HTML__" not in rig.failover_js


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        if os.environ.get("CI"):
            pytest.fail("node is required in CI to run the Workers' pre-deploy checks (apt-get install nodejs)")
        pytest.skip("no node: apt-get install nodejs")
    return node


@pytest.mark.parametrize(("name", "top"), [("cloudflare", "qm-edge-gate"), ("cloudflare-failover", "qm-failover")])
def test_downloads_are_wrangler_projects_with_a_pre_deploy_check(rig: Rig, name: str, top: str, tmp_path: Path) -> None:
    manifest = httpx.get(rig.qm.base_url + "/connectors/manifest.json").json()
    entry = next(c for c in manifest["connectors"] if c["name"] == name)
    assert entry["version"] == {"cloudflare": "1.5.0", "cloudflare-failover": "1.3.0"}[name]
    tgz = httpx.get(entry["downloads"]["archive"]["latest"]).content
    with tarfile.open(fileobj=io.BytesIO(tgz)) as tar:
        names = sorted(tar.getnames())
        assert names == [
            f"{top}/{f}" for f in ("README.md", "package.json", "scripts/check.mjs", "src/worker.js", "wrangler.toml")
        ]
        tar.extractall(tmp_path, filter="data")
    project = tmp_path / top
    package = json.loads((project / "package.json").read_text())
    assert (
        package["scripts"]["predeploy"] == "node scripts/check.mjs"
        and package["scripts"]["deploy"] == "wrangler deploy"
    )
    toml = (project / "wrangler.toml").read_text()
    assert 'main = "src/worker.js"' in toml
    assert (project / "src" / "worker.js").read_bytes() == (rig.gate_js if name == "cloudflare" else rig.failover_js)
    node = _node()
    check = subprocess.run([node, "scripts/check.mjs"], cwd=project, capture_output=True, text=True, timeout=60)
    if name == "cloudflare-failover":
        assert check.returncode == 0, check.stderr
        assert "offline page inlined" in check.stdout
        return
    assert '# binding = "QM_ANALYTICS"' in toml  # the Analytics Engine block ships commented
    assert check.returncode == 1 and "QM_URL is not set" in check.stderr and "QM_ROOM is not set" in check.stderr
    (project / "wrangler.toml").write_text(
        toml.replace("https://QUEUE-HOST.example", "http://queue.example.com").replace("YOUR-ROOM-ID", "shop")
    )
    check = subprocess.run([node, "scripts/check.mjs"], cwd=project, capture_output=True, text=True, timeout=60)
    assert check.returncode == 1 and "QM_URL must be https" in check.stderr
    (project / "wrangler.toml").write_text(
        toml.replace("QUEUE-HOST.example", "queue.example.com").replace("YOUR-ROOM-ID", "shop")
    )
    check = subprocess.run([node, "scripts/check.mjs"], cwd=project, capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stderr
    assert "QM_KEY" in check.stdout  # it says what it could not check


def test_waiting_visitor_is_sent_to_the_waiting_room(rig: Rig) -> None:
    r = get(rig, "gate-live", "/checkout?size=9", headers=NAV)
    assert r.status_code == 302, r.text
    assert "x-qm-failover" not in r.headers
    to = urlsplit(r.headers["location"])
    assert f"{to.scheme}://{to.netloc}" == rig.qm.base_url and to.path == f"/w/{rig.room}"
    assert parse_qs(to.query)["qm_return"] == [rig.workerd.url("gate-live") + "/checkout?size=9"]
    assert not any(p == "/checkout?size=9" for _m, p, _h in rig.origin.requests)
    # a fetch() is not shown to a person: JSON 503 marked X-QM-Queued, never a redirect
    api = get(rig, "gate-live", "/api/cart", headers={"Accept": "application/json", "Sec-Fetch-Mode": "cors"})
    assert api.status_code == 503 and api.headers["x-qm-queued"] == "1"
    assert api.json()["code"] == "queued" and api.json()["roomId"] == rig.room
    assert points(rig, "gate-live") == []


def test_a_closed_room_sends_visitors_to_its_closed_page(rig: Rig) -> None:
    """queueing reject: the Worker follows the check's answer (room_closed) to the room's closed page."""
    with rig.qm.admin() as admin:
        admin.post("/api/admin/rooms", json={"id": rig.room, "queueing": "reject"}).raise_for_status()
        try:
            r = get(rig, "gate-live", "/closed", headers=NAV)
            assert r.status_code == 302 and "x-qm-failover" not in r.headers, r.text
            page = httpx.get(r.headers["location"], headers=NAV)
            assert page.status_code == 503 and page.headers["x-qm-closed"] == "1"
            assert "This waiting room is closed" in page.text
            api = get(rig, "gate-live", "/api/cart", headers={"Accept": "application/json", "Sec-Fetch-Mode": "cors"})
            assert api.status_code == 503 and api.json()["reason"] == "room_closed"
            # the failover Worker in front of the queue lets the closed page (503, X-QM-Closed) through
            through = get(rig, "fo-live", f"/w/{rig.room}", headers=NAV)
            assert through.status_code == 503 and "x-qm-failover" not in through.headers
            assert "This waiting room is closed" in through.text
        finally:
            admin.post("/api/admin/rooms", json={"id": rig.room, "queueing": "fifo"}).raise_for_status()


WAIT_FIELDS = {"roomId", "state", "position", "etaSec", "retryAfterSec", "waitingUrl", "reason", "code"}


def _gated_wait(r: httpx.Response) -> dict[str, Any]:
    """The edge gate's JSON answer: 503, X-QM-Queued, Retry-After as retryAfterSec, no-store, Vary: Accept."""
    assert r.status_code == 503, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert r.headers["x-qm-queued"] == "1" and "x-qm-failover" not in r.headers
    assert r.headers["cache-control"] == "no-store" and "Accept" in r.headers["vary"]
    body: dict[str, Any] = r.json()
    assert WAIT_FIELDS <= body.keys(), body
    assert r.headers["retry-after"] == str(body["retryAfterSec"]) == "5"
    return body


def test_a_request_asking_for_json_gets_the_gated_wait(rig: Rig) -> None:
    worker = rig.workerd.url("gate-live")
    wait_page = f"{rig.qm.base_url}/w/{rig.room}?qm_return="
    # no place yet: the wait says so, and where to take one
    first = _gated_wait(get(rig, "gate-live", "/api/cart", headers={"Accept": "application/json", "User-Agent": UA}))
    assert first["roomId"] == rig.room and first["state"] == "not_in_line" and first["reason"] == "no_ticket"
    assert first["position"] is None and first["etaSec"] is None
    assert first["waitingUrl"].startswith(wait_page)
    assert parse_qs(urlsplit(first["waitingUrl"]).query)["qm_return"] == [worker + "/api/cart"]
    # the documented headers ask for JSON even on what would be a navigation
    for ask in ({"X-QM-Accept": "json"}, {"X-Requested-With": "XMLHttpRequest"}):
        _gated_wait(get(rig, "gate-live", "/orders", headers={**NAV, **ask}))
    # with a place in line (the app presents its token): the place and the room's state
    with rig.qm.client(headers={"User-Agent": UA}) as queue:
        token = join(queue, rig.room).json()["token"]
        status = queue.get("/api/status", params={"roomId": rig.room, "token": token}).json()
    assert status["state"] == "waiting"
    headers = {"Accept": "application/json", "User-Agent": UA, "CF-Connecting-IP": "127.0.0.1"}
    placed = _gated_wait(get(rig, "gate-live", f"/api/cart?qm_token={token}", headers=headers))
    assert placed["state"] == "waiting" and placed["reason"] == "waiting", placed
    assert placed["position"] == status["position"] and placed["etaSec"] is None  # a rate of 0: no estimate
    assert placed["roomState"] == "active"
    # HEAD: the same head, no body
    head = httpx.head(worker + "/api/cart", headers={"Accept": "application/json"}, timeout=10)
    assert head.status_code == 503 and head.headers["x-qm-queued"] == "1" and head.content == b""
    # a browser still goes to the waiting room
    page = get(rig, "gate-live", "/orders", headers=NAV)
    assert page.status_code == 302 and page.headers["location"].startswith(wait_page)
    assert "Accept" in page.headers["vary"]


def test_an_invitation_goes_to_the_waiting_page_and_never_to_the_origin(rig: Rig) -> None:
    """?qm_token=<JWS> (an invitation the site signed): carried to the waiting page, kept from the origin."""
    with rig.qm.admin() as admin:
        invite = invitation(admin, rig.room)
    r = get(rig, "gate-live", f"/members?a=1&qm_token={invite}", headers=NAV)
    assert r.status_code == 302, r.text
    query = parse_qs(urlsplit(r.headers["location"]).query)
    assert query["qm_token"] == [invite]
    assert query["qm_return"] == [rig.workerd.url("gate-live") + "/members?a=1"]
    api = get(rig, "gate-live", f"/api/x?qm_token={invite}", headers={"Accept": "application/json"})
    assert api.status_code == 503
    assert parse_qs(urlsplit(api.json()["waitingUrl"]).query)["qm_token"] == [invite]
    # a visitor inside already: the origin gets the address without it
    inside = pass_browser(rig, "/members")
    landed = inside.get(f"/members?b=2&qm_token={invite}")
    assert landed.status_code == 200 and "origin served /members" in landed.text
    assert not any("qm_token" in p for _m, p, _h in rig.origin.requests if p.startswith(("/members", "/api/x")))


def test_static_subresource_skips_the_check(rig: Rig) -> None:
    r = get(rig, "gate-live", "/assets/app.css", headers={"Sec-Fetch-Dest": "style", "User-Agent": UA})
    assert r.status_code == 200 and "origin served /assets/app.css" in r.text
    assert "x-qm-failover" not in r.headers
    # the same file asked for as a page, or a path the app may route elsewhere, is checked
    assert get(rig, "gate-live", "/assets/app.css", headers=NAV).status_code == 302
    assert get(rig, "gate-live", "/api/stock;.js", headers=NAV).status_code == 302
    assert get(rig, "gate-live", "/data.json", headers=NAV).status_code == 302


def test_admitted_after_the_outflow_opens(rig: Rig) -> None:
    with rig.qm.client(headers={"User-Agent": UA}) as visitor, rig.qm.admin() as admin:
        page = rig.workerd.url("gate-live") + "/checkout"
        joined = join(visitor, rig.room, returnUrl=page)
        assert joined.status_code == 200, joined.text
        token = joined.json()["token"]
        admin.post(f"/api/admin/rooms/{rig.room}/rate", json={"ratePerMinute": 600}).raise_for_status()
        try:
            admitted = wait_for_state(visitor, rig.room, token, ("passed",), timeout=15)
        finally:
            admin.post(f"/api/admin/rooms/{rig.room}/rate", json={"ratePerMinute": 0}).raise_for_status()
    back = admitted["redirectUrl"]
    assert "qm_token=" in back and back.startswith(page)
    with httpx.Client(headers=NAV, timeout=10) as browser:
        first = browser.get(back)
        # the pass is kept in a cookie and taken out of the address bar, before the origin sees it
        assert first.status_code == 302 and first.headers["location"] == page
        names = {line.split("=", 1)[0] for line in first.headers.get_list("set-cookie")}
        assert {f"qm_{rig.room}", f"qm_dk_{rig.room}"} <= names
        landed = browser.get(page)
        assert landed.status_code == 200 and "origin served /checkout" in landed.text
        assert "x-qm-failover" not in landed.headers
        again = browser.get(rig.workerd.url("gate-live") + "/cart")  # the door key keeps the visitor in
        assert again.status_code == 200 and "origin served /cart" in again.text
    seen = [h for _m, p, h in rig.origin.requests if p == "/checkout"]
    assert seen and "qm_token" not in json.dumps(seen)
    assert points(rig, "gate-live") == []


class PassBrowser:
    """A visitor's cookies on the gate-pass site, kept by hand so a test can put any pass in them."""

    def __init__(self, rig: Rig) -> None:
        self.rig = rig
        self.jar: dict[str, str] = {}

    def get(self, path: str) -> httpx.Response:
        cookie = "; ".join(f"{k}={v}" for k, v in self.jar.items())
        r = httpx.get(rig_url(self.rig, path), headers={**NAV, "Cookie": cookie}, timeout=10)
        for line in r.headers.get_list("set-cookie"):
            name, _, rest = line.partition("=")
            if "Max-Age=0" in line:
                self.jar.pop(name.strip(), None)
            else:
                self.jar[name.strip()] = rest.split(";", 1)[0]
        return r

    def local(self, path: str) -> bool:
        """Was this request let in by the Worker alone (no door check reached the queue)?"""
        before = self.rig.counted.count("/api/check")
        r = self.get(path)
        return (
            r.status_code == 200 and "x-qm-failover" not in r.headers and self.rig.counted.count("/api/check") == before
        )


def rig_url(rig: Rig, path: str) -> str:
    return rig.workerd.url("gate-pass") + path


def pass_browser(rig: Rig, path: str) -> PassBrowser:
    with rig.passes.client(headers={"User-Agent": UA}) as visitor:
        token = join(visitor, rig.room, returnUrl=rig_url(rig, path)).json()["token"]
        back = wait_for_state(visitor, rig.room, token, ("passed",), timeout=15)["redirectUrl"]
    b = PassBrowser(rig)
    first = b.get(back[len(rig_url(rig, "")) :])
    assert first.status_code == 302, first.text
    assert {f"qm_{rig.room}", f"qm_dk_{rig.room}", f"qmp_{rig.room}"} <= set(b.jar), b.jar
    return b


def test_edge_passes_are_checked_in_the_worker(rig: Rig) -> None:
    """Counted at a proxy in front of the queue: a valid pass makes no door check; an expired one, one for
    another room, one of an unknown key, a tampered one, another visitor's and a revoked one each make
    exactly one (and the queue's answer brings a fresh pass); an eject reaches the Worker within its
    QM_REVOKED_REFRESH_MS."""
    room, cookie = rig.room, f"qmp_{rig.room}"
    one, two = pass_browser(rig, "/one"), pass_browser(rig, "/two")
    wait_until(lambda: one.local("/one"), 10, 0.05, "a pass let in by the Worker alone")
    checks = rig.counted.count("/api/check")
    for i in range(20):
        r = one.get(f"/one?i={i}")
        assert r.status_code == 200 and f"origin served /one?i={i}" in r.text and "x-qm-failover" not in r.headers
    assert rig.counted.count("/api/check") == checks
    assert rig.counted.count("/.well-known/jwks.json") >= 1

    good = one.jar[cookie]
    claims = json.loads(base64.urlsafe_b64decode(good.split(".")[1] + "=="))
    own, stranger = key_of(rig.passes.env["SECRET"]), Ed25519PrivateKey.generate()
    h, _, sig = good.split(".")
    bad = {
        "expired": sign(own, {**claims, "iat": claims["iat"] - 600, "exp": claims["iat"] - 300}),
        "wrong_room": sign(own, {**claims, "room": room + "x"}),
        "unknown_kid": sign(stranger, claims),
        "bad_signature": f"{h}.{b64(json.dumps({**claims, 'exp': claims['exp'] + 600}).encode())}.{sig}",
        "unbound": two.jar[cookie],
        "revoked": sign(own, {**claims, "gen": claims["gen"] + 1}),
    }
    for reason, token in bad.items():
        before = rig.counted.count("/api/check")
        one.jar[cookie] = token
        r = one.get("/one")
        assert r.status_code == 200 and "x-qm-failover" not in r.headers, (reason, r.text)
        assert rig.counted.count("/api/check") == before + 1, reason
        assert one.jar[cookie] != token, reason
    assert one.local("/one")  # the fresh pass is good again

    ticket = json.loads(base64.urlsafe_b64decode(one.jar[f"qm_{room}"].split(".")[0] + "=="))["n"]
    with rig.passes.admin() as admin:  # no outflow: the ejected visitor stays at the back of the line
        assert admin.post(f"/api/admin/rooms/{room}/rate", json={"ratePerMinute": 0}).status_code == 200
        assert admin.post(f"/api/admin/rooms/{room}/eject", json={"ticket": ticket}).status_code == 200
    refused = wait_until(lambda: (r := one.get("/one")).status_code == 302 and r, 10, 0.05, "the eject seen")
    assert refused.headers["location"].startswith(f"{rig.counted.url}/w/{room}")
    assert two.local("/two")


def test_a_flush_reaches_the_worker_through_the_revocation_list(rig: Rig) -> None:
    """A flush revokes every pass issued before it with one cutoff (revokedBefore): passes the Worker would
    have let in alone until they expire are refused within QM_REVOKED_REFRESH_MS, and the queue, asked
    instead, sends their holders to the line."""
    room = rig.room
    with rig.passes.admin() as admin:
        assert admin.post(f"/api/admin/rooms/{room}/rate", json={"ratePerMinute": 600}).status_code == 200
    one, two = pass_browser(rig, "/one"), pass_browser(rig, "/two")
    wait_until(lambda: one.local("/one") and two.local("/two"), 10, 0.05, "passes let in by the Worker alone")
    with rig.passes.admin() as admin:  # no outflow: the flushed visitors stay in the line
        assert admin.post(f"/api/admin/rooms/{room}/rate", json={"ratePerMinute": 0}).status_code == 200
        r = admin.post(f"/api/admin/rooms/{room}/flush")
        assert r.status_code == 200 and r.json()["flushed"] >= 2, r.text
    for b, path in ((one, "/one"), (two, "/two")):

        def sent_back(b: PassBrowser = b, path: str = path) -> httpx.Response | None:
            r = b.get(path)
            return r if r.status_code == 302 else None

        refused = wait_until(sent_back, 10, 0.05, "the flush seen")
        assert refused.headers["location"].startswith(f"{rig.counted.url}/w/{room}")


def test_the_origins_revoke_command_ends_the_session_at_the_queue(rig: Rig) -> None:
    """The origin answers a visitor's thank-you page with X-QM-Command: revoke: the visitor gets the page
    without the header, the queue ends their session (counted in sessionsRevoked), the Worker stops
    admitting their pass at once, and their next page sends them to the line."""
    room = rig.room
    with rig.passes.admin() as admin:
        assert admin.post(f"/api/admin/rooms/{room}/rate", json={"ratePerMinute": 600}).status_code == 200
    one = pass_browser(rig, "/one")
    wait_until(lambda: one.local("/one"), 10, 0.05, "a pass let in by the Worker alone")
    with rig.passes.admin() as admin:
        before = admin.get(f"/api/admin/rooms/{room}").json()["room"]["sessionsRevoked"]
        # no outflow from here: the visitor sent back stays in the line
        assert admin.post(f"/api/admin/rooms/{room}/rate", json={"ratePerMinute": 0}).status_code == 200
    thanks = one.get("/thanks")
    assert thanks.status_code == 200 and "origin served /thanks" in thanks.text
    assert "x-qm-command" not in thanks.headers

    def counted() -> int | None:
        with rig.passes.admin() as admin:
            n = int(admin.get(f"/api/admin/rooms/{room}").json()["room"]["sessionsRevoked"])
        return n if n > before else None

    assert wait_until(counted, 10, 0.05, "the session ended at the queue") == before + 1
    sent = one.get("/one")  # refused in the Worker at once, and the queue sends the visitor to the line
    assert sent.status_code == 302 and sent.headers["location"].startswith(f"{rig.counted.url}/w/{room}")


def test_access_rules_reach_the_edge(rig: Rig) -> None:
    """The Worker's vouched check carries what the queue cannot see (the probe's header as X-QM-Visitor-X-Probe,
    Cloudflare's country); the queue judges the room's access rules; a block is answered at the edge (403,
    never a fail-open) and the origin never sees the request."""
    seen = len(rig.origin.requests)
    ok = get(rig, "gate-access", "/status", headers={**NAV, "X-Probe": PROBE})
    assert ok.status_code == 200 and "x-qm-failover" not in ok.headers, ok.text
    assert get(rig, "gate-access", "/health/deep", headers=NAV).status_code == 200
    assert get(rig, "gate-access", "/status", headers={**NAV, "X-Probe": "wrong-" + PROBE}).status_code == 302
    page = get(rig, "gate-access", "/shop", headers={**NAV, "CF-Connecting-IP": "203.0.113.66"})
    assert page.status_code == 403 and "not allowed" in page.text and "x-qm-failover" not in page.headers
    api = get(rig, "gate-access", "/api/cart", headers={"Accept": "application/json", "CF-IPCountry": "DE"})
    assert api.status_code == 403 and api.json()["code"] == "access_blocked"
    assert [p for _m, p, _h in rig.origin.requests[seen:]] == ["/status", "/health/deep"]
    assert points(rig, "gate-access") == []
    with rig.qm.admin() as admin:
        rules = admin.get(f"/api/admin/rooms/{rig.room}-acc").json()["room"]["accessRules"]
    assert [r["matchCount"] for r in rules] == [1, 1, 1, 1]


def test_queue_not_running_fails_open_unreachable(rig: Rig) -> None:
    r = get(rig, "gate-down", "/shoes", headers=NAV)
    assert r.status_code == 200 and "origin served /shoes" in r.text
    assert r.headers["x-qm-failover"] == "unreachable"
    assert_counted(rig, "gate-down", "unreachable")


def test_without_analytics_engine_it_still_works(rig: Rig) -> None:
    r = get(rig, "gate-down-bare", "/shoes", headers=NAV)
    assert r.status_code == 200 and r.headers["x-qm-failover"] == "unreachable"
    assert points(rig, "gate-down-bare") == []


def test_black_holed_queue_fails_open_timeout(rig: Rig) -> None:
    """Waits out the Worker's 2 s check timeout (a constant of the shipped script, not a setting)."""
    started = time.monotonic()
    r = get(rig, "gate-hole", "/slow", headers=NAV)
    took = time.monotonic() - started
    assert r.status_code == 200 and r.headers["x-qm-failover"] == "timeout"
    assert took >= 1.8, took  # it waited for its timeout, not an error
    assert_counted(rig, "gate-hole", "timeout")


def test_error_status_fails_open_http_status(rig: Rig) -> None:
    rig.fake.status, rig.fake.body = 500, b'{"error":"boom"}'
    r = get(rig, "gate-fake", "/p", headers=NAV)
    assert r.status_code == 200 and r.headers["x-qm-failover"] == "http-500"
    assert_counted(rig, "gate-fake", "http-500")
    # the last door check (a new origin also brings one background GET /api/verify, the return-origin question)
    path, headers = [(p, h) for p, h in rig.fake.requests if urlsplit(p).path == "/api/check"][-1]
    query = parse_qs(urlsplit(path).query)
    # the key travels as Bearer, never in the URL; the visitor is named
    assert headers["authorization"] == f"Bearer {KEY}" and KEY not in path
    assert query["roomId"] == [rig.room] and query["ip"] == ["127.0.0.1"] and query["agent"] == [UA]
    assert headers["x-qm-connector"] == "cloudflare/1.5.0"


def test_a_queue_that_does_not_describe_the_wait_still_gets_a_gated_wait(rig: Rig) -> None:
    """A queue answering a refusal without ``wait`` (one from before wait=1): the Worker names the state
    from the reason, and asks for the description only when the answer is JSON."""
    wait_url = "https://queue.example/w/shop?qm_return=x"
    rig.fake.status, rig.fake.body = (
        200,
        json.dumps({"admit": False, "reason": "at_capacity", "waitUrl": wait_url}).encode(),
    )
    before = len(rig.fake.requests)
    body = _gated_wait(get(rig, "gate-fake", "/api/q", headers={"Accept": "application/json", "User-Agent": UA}))
    assert body["state"] == "passed" and body["reason"] == "at_capacity" and body["position"] is None
    assert body["roomId"] == rig.room and "/w/" in body["waitingUrl"]
    rig.fake.body = json.dumps({"admit": False, "reason": "__proto__", "waitUrl": wait_url}).encode()
    assert _gated_wait(get(rig, "gate-fake", "/api/q", headers={"X-QM-Accept": "json"}))["state"] == "not_in_line"
    assert get(rig, "gate-fake", "/q", headers=NAV).status_code == 302
    asked = [urlsplit(path).query for path, _h in rig.fake.requests[before:] if path.startswith("/api/check")]
    assert [("wait=1" in q) for q in asked] == [True, True, False], asked


def test_unusable_200_fails_open_invalid_response(rig: Rig) -> None:
    for body in (b'{"hello": "world"}', b"<html>not json</html>", b'{"admit": false}'):
        rig.fake.status, rig.fake.body = 200, body
        r = get(rig, "gate-fake", "/q", headers=NAV)
        assert r.status_code == 200 and r.headers["x-qm-failover"] == "invalid-response", body
    assert_counted(rig, "gate-fake", "invalid-response")


def _rate_limited(srv: Server) -> float:
    """Door checks the server answered 429 (qm_rate_limited_checks_*)."""
    return sum(v for n, _labels, v in scrape(srv) if n.startswith("qm_rate_limited_checks"))


def test_rate_limited_check_sends_to_the_waiting_room_unmarked(rig: Rig) -> None:
    headers = {**NAV, "CF-Connecting-IP": "198.51.100.77"}
    before = _rate_limited(rig.limited)
    for _ in range(3):  # the first spends the visitor's one check a minute, the rest are 429
        r = get(rig, "gate-limited", "/drop", headers=headers)
        assert r.status_code == 302 and "x-qm-failover" not in r.headers
        assert urlsplit(r.headers["location"]).path == f"/w/{rig.room}"
    # asked for JSON: the wait says the queue shed the check (it described nothing more)
    shed = _gated_wait(get(rig, "gate-limited", "/api/x", headers={**headers, "Accept": "application/json"}))
    assert shed["state"] == "rate_limited" and shed["reason"] == "rate_limited" and shed["position"] is None
    assert urlsplit(shed["waitingUrl"]).path == f"/w/{rig.room}"
    assert _rate_limited(rig.limited) >= before + 2
    assert points(rig, "gate-limited") == []
    log = wait_until(lambda: rig.workerd.log if "429" in rig.workerd.log else None, timeout=3, what="the 429 log line")
    assert log.count("the queue answered 429") == 1  # once per isolate, not once per request


def test_warns_once_when_the_room_does_not_send_visitors_back_here(rig: Rig) -> None:
    """The Worker asks the queue about its own origin (GET /api/verify?roomId=&origin=) on its first request:
    a room whose targetUrl and returnOrigins leave it out sends every admitted visitor elsewhere. Once."""
    stray = rig.workerd.url("gate-stray")
    for path in ("/", "/cart", "/checkout"):
        r = get(rig, "gate-stray", path, headers=NAV)
        assert r.status_code == 302 and urlsplit(r.headers["location"]).path == f"/w/{rig.room}-stray", r.text
    get(rig, "gate-live", "/", headers=NAV)  # a room that does send visitors back to its Worker
    what = f"the queue does not send visitors back to {stray}"
    log = wait_until(lambda: rig.workerd.log if what in rig.workerd.log else None, timeout=10, what="the warning")
    assert log.count(what) == 1, log  # once per isolate, not once per request
    line = next(x for x in log.splitlines() if what in x)
    assert f"[qm-edge-gate] {rig.room}-stray:" in line and "lands on https://shop.example/" in line, line
    assert "returnOrigins" in line
    assert f"back to {rig.workerd.url('gate-live')}" not in log


def test_unconfigured_forwards_unmarked(rig: Rig) -> None:
    for worker in ("gate-noconfig", "gate-nokey"):
        r = get(rig, worker, "/home", headers=NAV)
        assert r.status_code == 200 and "origin served /home" in r.text, worker
        assert "x-qm-failover" not in r.headers
        assert points(rig, worker) == []
    get(rig, "gate-nokey", "/again", headers=NAV)
    log = rig.workerd.log
    assert log.count("QM_URL or QM_ROOM is not set") == 1 and log.count("QM_KEY secret is not set") == 1


def test_edge_secret_is_sent_when_the_queue_enforces_it(rig: Rig) -> None:
    r = get(rig, "gate-edge", "/vip", headers=NAV)
    assert r.status_code == 302 and urlsplit(r.headers["location"]).path == f"/w/{rig.room}"
    assert "x-qm-failover" not in r.headers
    # without QM_EDGE_SECRET the queue refuses the check (403 edge_required): a marked fail-open
    r = get(rig, "gate-edge-missing", "/vip", headers=NAV)
    assert r.status_code == 200 and r.headers["x-qm-failover"] == "http-403"
    assert_counted(rig, "gate-edge-missing", "http-403")


# ------------------------------------------------------------------ the failover Worker


def test_failover_passes_a_live_queue_through(rig: Rig) -> None:
    r = get(rig, "fo-live", "/healthz", headers=NAV)
    assert r.status_code == 200 and "x-qm-failover" not in r.headers
    assert get(rig, "fo-live", "/offline.html", headers=NAV).content == asset.offline_page()


def _assert_offline(r: httpx.Response, reason: str) -> None:
    assert r.status_code == 503
    assert r.headers["x-qm-failover"] == reason
    assert r.headers["retry-after"].isdigit()
    assert r.headers["cache-control"] == "no-store"
    assert r.headers["x-robots-tag"] == "noindex"
    assert r.headers["content-type"] == "text/html; charset=utf-8"
    assert r.content == asset.offline_page()  # the shipped page, byte for byte
    assert b"noindex" in r.content


def test_failover_serves_the_offline_page_when_the_queue_is_down(rig: Rig) -> None:
    _assert_offline(get(rig, "fo-down", "/sale", headers=NAV), "unreachable")
    _assert_offline(get(rig, "fo-down", "/sale", headers={"Accept": "text/html"}), "unreachable")
    # not a document: no HTML, still a 503
    img = get(rig, "fo-down", "/favicon.ico", headers={"Sec-Fetch-Dest": "image", "Accept": "image/*"})
    assert img.status_code == 503 and b"<html" not in img.content.lower()
    assert img.headers["x-qm-failover"] == "unreachable" and "html" not in img.headers["content-type"]


def test_failover_acts_on_a_503_only_without_x_qm_queued(rig: Rig) -> None:
    rig.fake_fo.status, rig.fake_fo.headers, rig.fake_fo.body = 503, {}, b'{"error":"shed"}'
    _assert_offline(get(rig, "fo-fake", "/", headers=NAV), "http-503")
    rig.fake_fo.headers = {"X-QM-Queued": "1"}
    r = get(rig, "fo-fake", "/", headers=NAV)
    assert r.status_code == 503 and r.content == b'{"error":"shed"}' and "x-qm-failover" not in r.headers
    rig.fake_fo.headers = {}
    for status in (502, 504, 500, 404):
        rig.fake_fo.status = status
        r = get(rig, "fo-fake", "/", headers=NAV)
        assert r.status_code == status and r.content == b'{"error":"shed"}' and "x-qm-failover" not in r.headers
    rig.fake_fo.status = 503
    api = get(rig, "fo-fake", "/api/status", headers={"Accept": "application/json", "Sec-Fetch-Mode": "cors"})
    assert api.status_code == 503 and b"<html" not in api.content.lower()


def test_failover_timeout(rig: Rig) -> None:
    """Waits out QM_TIMEOUT_MS, shortened to 1.5 s for this worker (35 s by default)."""
    started = time.monotonic()
    r = get(rig, "fo-hole", "/", headers=NAV)
    assert time.monotonic() - started >= 1.3  # it waited for its timeout, not an error
    _assert_offline(r, "timeout")
