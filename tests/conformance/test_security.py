"""The security probe as a suite: what an attacker on the network can try, judged on real servers over HTTP.

Black-box like the rest of the HTTP suite. The one thing it reads besides answers is the API's own
description, ``GET /api/openapi.json`` (with ``ADMIN_KEY``), as data: every operation, its parameters,
its body and, for an admin route, the grants it needs ("Needs the grants: …"). From it:

* **Authorization matrix**: every operation × every kind of credential (none, a wrong key,
  ``PUBLIC_API_KEY``, a monitor link, a viewer, an operator, an owner operator, ``ADMIN_KEY``, the
  console cookie opened with ``ADMIN_KEY`` with and without ``X-QM-CSRF``, and one opened with a viewer
  key). The call is built from the document (path and required query parameters filled, a minimal body
  of the documented media type, a room that exists; destructive calls on throwaway rooms, operators and
  links). Allowed → neither 401 nor 403; not allowed → 401 ``unauthorized`` (no admin credential) or 403
  ``insufficient_role`` (``csrf_required`` for a change made with the cookie alone); never a 5xx. A
  visitor route answers the same whatever admin credential comes with it. ``OPERATIONS`` lists every
  operation the document has: a new route fails ``test_the_matrix_knows_every_operation`` until it is
  listed, and a parameter the matrix cannot fill fails its cases, so coverage cannot lag silently.
  The other doors of each admin operation: ``HEAD``, the ``/api/v1`` alias and a cross-origin request.
* **CSRF**: every state-changing admin operation with the console cookie but no ``X-QM-CSRF`` header
  (a column of the matrix), or from another site (``Sec-Fetch-Site``), is 403 ``csrf_required``; so is
  signing in. The cookie is HttpOnly, SameSite=Strict and scoped to the admin API.
* **Return URLs**: ~50 classic open-redirect forms as a visitor's ``returnUrl``: the turn's
  ``redirectUrl`` is the room's target, never the other origin; on an inline host the hand-off redirect
  stays on the host.
* **SSRF**: private and internal addresses in every spelling as a ``proxyOrigin`` (refused when saved,
  or refused on every connection) and as a ``targetUrl`` (never probed).
* **Forged credentials**: visitor tickets (legacy and v2 signing), monitor links, console cookies,
  operator keys, stream tickets, ``ADMIN_KEY`` look-alikes and edge passes.
* **Traversal**: ``..`` in every encoding under the folders the server serves files from.
* **Injection into pages** and the headers every page promises (CSP and the rest).
* **Address spoofing** and **oversized bodies**.

The findings with a module of their own are tested there: URL-rule matching cost
(``tests/unit/test_targeting.py``), request-head limits and timeouts, monitor links and the audit trail
(``test_access_monitor.py``, ``test_access_console.py``), CSV formula injection (``test_access_audit.py``),
the console cookie's contents, IPv6 origins (``tests/inline/test_ipv6_origin.py``). A finding still open
is marked ``xfail(strict=True)`` here: it turns red (XPASS) the day it is fixed, and its mark goes then.

``POST /api/admin/shutdown`` is called with every credential that may not use it (refused before it
acts) but not with one that may: that would stop the module's server. Its allowed case is tested in
``test_access_operators.py`` and ``test_workers.py``.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import re
import secrets
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from harness import Server, create_room, join, tamper_signature, unique_id, wait_until
from passkit import PUBLIC_KEY, Visitor, admitted, b64, hkdf, key_of, kid_of, parts, unb64

ServerFactory = Callable[..., Server]

#: Three servers per store, and about 1,300 short tests on them: on one worker (``--dist loadgroup``, as
#: ``make test`` runs) they are started once each, instead of once per worker that draws a test.
pytestmark = pytest.mark.xdist_group("security")

# ---------------------------------------------------------------------- the servers

#: The module's main server: default (legacy) token signing, a PUBLIC_API_KEY, no target probe.
MAIN_ENV = {"PUBLIC_API_KEY": PUBLIC_KEY, "TARGET_PROBE": "0"}
#: v2 token signing and edge passes.
V2_ENV = {"PUBLIC_API_KEY": PUBLIC_KEY, "TARGET_PROBE": "0", "TOKEN_SIGN_V2": "1", "PASS_SIGNING": "ed25519"}
#: Outbound connections: the target probe every second (alert frames every 200 ms drive it), inline rooms.
OUTBOUND_ENV = {"TARGET_PROBE_EVERY_MS": "1000", "ALERT_EVERY_MS": "200"}


@pytest.fixture(scope="module")
def main(make_module_server: ServerFactory) -> Server:
    return make_module_server(MAIN_ENV)


@pytest.fixture(scope="module")
def signer_v2(make_module_server: ServerFactory) -> Server:
    return make_module_server(V2_ENV)


@pytest.fixture(scope="module")
def outbound(make_module_server: ServerFactory) -> Server:
    return make_module_server(OUTBOUND_ENV)


# ---------------------------------------------------------------------- clients

#: One TLS context for every client of the module: httpx builds a new one per client otherwise (about 30 ms
#: each, and this module opens thousands of clients; the servers speak plain HTTP).
TLS = ssl.create_default_context()


def http(srv: Server, **kwargs: Any) -> httpx.Client:
    """A fresh client (a cookie jar of its own: one browser)."""
    return srv.client(verify=TLS, **kwargs)


def adm(srv: Server) -> httpx.Client:
    return srv.admin(verify=TLS)


# ---------------------------------------------------------------------- raw HTTP


@dataclass
class Raw:
    status: int
    headers: dict[str, list[str]]
    body: bytes

    def header(self, name: str) -> str | None:
        values = self.headers.get(name.lower())
        return values[0] if values else None

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


def raw_request(srv: Server, target: str, *, host: str | None = None, headers: Mapping[str, str] | None = None) -> Raw:
    """One GET with the request target exactly as given (no client normalises ``..``, ``//`` or ``\\``)."""
    split = urlsplit(srv.base_url)
    lines = [f"GET {target} HTTP/1.1", f"Host: {host or split.netloc}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    with socket.create_connection((split.hostname or "127.0.0.1", split.port or 80), timeout=10) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    parsed: dict[str, list[str]] = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        parsed.setdefault(name.strip().lower(), []).append(value.strip())
    if "chunked" in (parsed.get("transfer-encoding") or [""])[0]:
        body = _unchunk(body)
    return Raw(int(status_line.split()[1]), parsed, body)


def _unchunk(body: bytes) -> bytes:
    out, rest = b"", body
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out, rest = out + rest[:size], rest[size + 2 :]
    return out


def code_of(r: httpx.Response) -> str | None:
    """The error ``code`` of a JSON answer, or None."""
    if not r.headers.get("content-type", "").startswith("application/json") or not r.content:
        return None
    try:
        body = r.json()
    except ValueError:
        return None
    return body.get("code") if isinstance(body, dict) else None


# ---------------------------------------------------------------------- the API's description, as data

#: Every operation of the document, and whether it is an admin route (signed in, grants) or a visitor one.
#: A route added to the server fails test_the_matrix_knows_every_operation until it is listed here; its
#: calls are then built from the document like every other.
OPERATIONS: dict[str, str] = {
    "POST /api/join": "visitor",
    "GET /api/status": "visitor",
    "GET /events": "visitor",
    "GET /api/rooms/{room}/draw": "visitor",
    "GET /api/check": "visitor",
    "GET /api/gate": "visitor",
    "GET /api/verify": "visitor",
    "POST /api/sessions/revoke": "visitor",
    "POST /api/notify": "visitor",
    "GET /api/notify": "visitor",
    "DELETE /api/notify": "visitor",
    "GET /.well-known/jwks.json": "visitor",
    "GET /api/passes/revoked": "visitor",
    "GET /qm.js": "visitor",
    "GET /connectors/manifest.json": "visitor",
    "GET /connectors/wordpress/update.json": "visitor",
    "GET /connectors/{file}": "visitor",
    "GET /healthz": "visitor",
    "GET /api/version": "visitor",
    "GET /": "visitor",
    "GET /index.html": "visitor",
    "GET /progress": "visitor",
    "GET /public/admin.html": "visitor",
    "GET /w/{room}": "visitor",
    "GET /assets/{file}": "visitor",
    "GET /fonts/{file}": "visitor",
    "GET /offline.html": "visitor",
    "GET /origin-down.html": "visitor",
    "GET /preview/{token}": "visitor",
    "GET /docs": "visitor",
    "GET /docs/{page}": "visitor",
    "POST /api/admin/session": "visitor",
    "DELETE /api/admin/session": "admin",
    "GET /api/admin/whoami": "admin",
    "GET /api/admin/health": "admin",
    "GET /metrics": "admin",
    "GET /api/admin/security": "admin",
    "GET /api/admin/alerts": "admin",
    "POST /api/admin/alerts": "admin",
    "GET /api/admin/events": "admin",
    "POST /api/admin/sse-ticket": "admin",
    "POST /api/admin/shutdown": "admin",
    "GET /api/admin/audit": "admin",
    "GET /api/openapi.json": "admin",
    "GET /api/admin/openapi.json": "admin",
    "GET /api/admin/rooms": "admin",
    "POST /api/admin/rooms": "admin",
    "GET /api/admin/rooms/{room}": "admin",
    "DELETE /api/admin/rooms/{room}": "admin",
    "POST /api/admin/rooms/{room}/pause": "admin",
    "POST /api/admin/rooms/{room}/resume": "admin",
    "POST /api/admin/rooms/{room}/rate": "admin",
    "POST /api/admin/rooms/{room}/logo": "admin",
    "DELETE /api/admin/rooms/{room}/logo": "admin",
    "POST /api/admin/rooms/{room}/schedule": "admin",
    "POST /api/admin/rooms/{room}/purge": "admin",
    "POST /api/admin/rooms/{room}/eject": "admin",
    "POST /api/admin/rooms/{room}/flush": "admin",
    "POST /api/admin/rooms/{room}/install-check": "admin",
    "POST /api/admin/rooms/{room}/tag-origins": "admin",
    "POST /api/admin/rooms/{room}/preview": "admin",
    "POST /api/admin/rooms/{room}/entry-key": "admin",
    "GET /api/admin/rooms/{room}/codes": "admin",
    "POST /api/admin/rooms/{room}/codes": "admin",
    "DELETE /api/admin/rooms/{room}/codes": "admin",
    "POST /api/admin/rooms/{room}/journal/void": "admin",
    "GET /api/admin/rooms/{room}/visitors/{visitor}": "admin",
    "GET /api/admin/rooms/{room}/events": "admin",
    "POST /api/admin/rooms/{room}/events": "admin",
    "GET /api/admin/rooms/{room}/events/{event}": "admin",
    "PUT /api/admin/rooms/{room}/events/{event}": "admin",
    "DELETE /api/admin/rooms/{room}/events/{event}": "admin",
    "GET /api/admin/rooms/{room}/rules": "admin",
    "POST /api/admin/rooms/{room}/rules/test": "admin",
    "GET /api/admin/series/{room}": "admin",
    "GET /api/admin/reports": "admin",
    "GET /api/admin/operators": "admin",
    "POST /api/admin/operators": "admin",
    "DELETE /api/admin/operators/{operator}": "admin",
    "GET /api/admin/monitor-links": "admin",
    "POST /api/admin/monitor-links": "admin",
    "POST /api/admin/monitor-links/revoke-all": "admin",
    "POST /api/admin/monitor-links/{link}/reveal": "admin",
    "DELETE /api/admin/monitor-links/{link}": "admin",
    "GET /api/system/maintenance": "admin",
    "POST /api/system/maintenance": "admin",
    "GET /api/status/buffers": "admin",
    "GET /api/system/maintenance/pop": "admin",
    "POST /api/system/maintenance/pop": "admin",
    "GET /api/system/shared-state": "admin",
    "POST /api/stats/refresh": "admin",
    "POST /internal/api/notify": "admin",
    "GET /internal/api/shared-state/stats": "admin",
    "GET /internal/api/inter-instance/stats": "admin",
}
ADMIN_OPS = [label for label, kind in OPERATIONS.items() if kind == "admin"]
CHANGES = [label for label in ADMIN_OPS if not label.startswith("GET ")]
#: Event streams (no HEAD; read as far as the status, then closed).
STREAMS = {"GET /events", "GET /api/admin/events"}
#: Stops the server under test; see the module's docstring.
SHUTDOWN = "POST /api/admin/shutdown"
#: Calls that revoke credentials of every kind the matrix holds: the matrix mints new ones after them.
REVOKING = {"POST /api/admin/monitor-links/revoke-all", "DELETE /api/admin/session"}


@dataclass(frozen=True)
class Op:
    label: str
    method: str
    path: str  # the document's path, {name} for each parameter
    spec: dict[str, Any]
    grants: frozenset[str] | None  # None: a visitor route
    aliases: tuple[str, ...]

    @property
    def security(self) -> set[str]:
        return {name for need in self.spec.get("security", []) for name in need}

    @property
    def stream(self) -> bool:
        return "An event stream" in self.spec.get("description", "")


_GRANTS_RE = re.compile(r"Needs the grants: ([^.]*)\.")


def read_operations(doc: Mapping[str, Any]) -> dict[str, Op]:
    ops: dict[str, Op] = {}
    for path, item in doc["paths"].items():
        aliases = tuple(item.get("x-aliases", ()))
        for method, spec in item.items():
            if method == "x-aliases":
                continue
            m = _GRANTS_RE.search(spec.get("description", ""))
            grants: frozenset[str] | None = None
            if m is not None:
                named = m.group(1)
                grants = frozenset() if named.startswith("none") else frozenset(g.strip() for g in named.split(","))
            label = f"{method.upper()} {path}"
            ops[label] = Op(label, method.upper(), path, spec, grants, aliases)
    return ops


@pytest.fixture(scope="module")
def document(main: Server) -> dict[str, Op]:
    with adm(main) as admin:
        r = admin.get("/api/openapi.json")
    assert r.status_code == 200, r.text
    return read_operations(r.json())


# ---------------------------------------------------------------------- credentials

#: The guide's roles table (docs/OPERATIONS.md, "Keys, operators and roles") as grants.
ROLE_GRANTS: dict[str, frozenset[str]] = {
    "monitor": frozenset({"read"}),
    "viewer": frozenset({"read", "team"}),
    "operator": frozenset({"read", "write", "team"}),
    "owner": frozenset({"read", "write", "team", "owner"}),
}
#: Every kind of credential the matrix presents, and the admin role it is (None: no admin credential).
CREDENTIALS: dict[str, str | None] = {
    "none": None,
    "wrong_key": None,
    "public_api_key": None,
    "monitor_link": "monitor",
    "viewer": "viewer",
    "operator": "operator",
    "owner_operator": "owner",
    "admin_key": "owner",
    "console_session": "owner",
    "console_session_no_csrf": "owner",
    "viewer_session": "viewer",
}
#: The console cookie without X-QM-CSRF: what a forged cross-site form would send.
NO_CSRF = "console_session_no_csrf"


class Keys:
    """One credential of every kind on one server, minted on first use and again after a revoking call."""

    def __init__(self, srv: Server) -> None:
        self.srv = srv
        self._cache: dict[str, dict[str, str]] = {}

    def reset(self) -> None:
        self._cache.clear()

    def headers(self, kind: str) -> dict[str, str]:
        if kind not in self._cache:
            self._cache[kind] = self._mint(kind)
        return dict(self._cache[kind])

    def _mint(self, kind: str) -> dict[str, str]:
        srv = self.srv
        if kind == "none":
            return {}
        if kind == "wrong_key":
            return bearer("qm-wrong-" + secrets.token_urlsafe(18))
        if kind == "public_api_key":
            return bearer(PUBLIC_KEY)
        if kind == "admin_key":
            return dict(srv.admin_headers)
        with adm(srv) as admin:
            if kind == "monitor_link":
                return bearer(mint_link(admin)["token"])
            if kind in ("viewer", "operator", "owner_operator"):
                return bearer(mint_operator(admin, kind.removesuffix("_operator"))["key"])
            if kind == "console_session":
                return console_cookie(srv, srv.admin_key)
            if kind == NO_CSRF:
                return {"Cookie": console_cookie(srv, srv.admin_key)["Cookie"]}
            if kind == "viewer_session":
                return console_cookie(srv, mint_operator(admin, "viewer")["key"])
        raise AssertionError(f"no credential kind {kind!r}")


def preview_token(admin: httpx.Client, room: str, state: str) -> str:
    r = admin.post(f"/api/admin/rooms/{quote(room, safe='')}/preview", json={"state": state, "lang": "th"})
    assert r.status_code == 200, r.text
    url: str = r.json()["url"]
    return url.rsplit("/", 1)[1]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def mint_operator(admin: httpx.Client, role: str) -> dict[str, Any]:
    r = admin.post("/api/admin/operators", json={"name": unique_id(role), "role": role})
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return {"id": body["operator"]["id"], "key": body["key"]}


def mint_link(admin: httpx.Client) -> dict[str, Any]:
    r = admin.post("/api/admin/monitor-links", json={})
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return {"id": body["link"]["id"], "token": body["token"]}


def session_value(srv: Server, key: str) -> str:
    with http(srv, headers={"X-QM-CSRF": "1"}) as c:
        r = c.post("/api/admin/session", json={"key": key})
    assert r.status_code == 200, r.text
    value = r.cookies.get("qm_console")
    assert value, r.headers
    return value


def console_cookie(srv: Server, key: str) -> dict[str, str]:
    """The console's cookie with the header its changes carry (sent on every path, as any client can)."""
    return {"Cookie": f"qm_console={session_value(srv, key)}", "X-QM-CSRF": "1"}


# ---------------------------------------------------------------------- the world the calls act on


@dataclass
class World:
    srv: Server
    keys: Keys
    room: str  # a room with one visitor (ticket 1), never changed by the matrix
    #: what a change that must be refused names: a room, an operator and a link kept for that (a change
    #: wrongly let through spoils these, never the world's room or another test's)
    decoy: dict[str, str]
    baseline: dict[str, int] = field(default_factory=dict)  # a visitor route's status without credential


def _world(srv: Server) -> World:
    with adm(srv) as admin:
        room = create_room(admin, unique_id("sec"), ratePerMinute=0)["id"]
        decoy = {
            "room": create_room(admin, unique_id("decoy"))["id"],
            "operator": mint_operator(admin, "viewer")["id"],
            "link": mint_link(admin)["id"],
        }
    with http(srv) as c:
        assert join(c, room).status_code == 200
    return World(srv, Keys(srv), room, decoy)


@pytest.fixture(scope="module")
def world(main: Server) -> World:
    return _world(main)


SVG = b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 4 4"><rect width="4" height="4" fill="#123456"/></svg>'
FILES = {"/assets/": "waiting-none.css", "/fonts/": "LICENSE.txt", "/connectors/": "cloudflare/latest.js"}


@dataclass
class Call:
    method: str
    path: str
    params: dict[str, str]
    headers: dict[str, str]
    content: bytes | None = None
    stream: bool = False


FAR = 4_000_000_000_000  # an instant long after any test (2096): a scheduled event that never starts


class CannotCall(AssertionError):
    """The matrix does not know how to call an operation: fails its case (coverage never lags silently)."""


def _json_body(op: Op, room: str) -> dict[str, Any]:
    """A minimal body: what the operation needs to act on ``room``, or an empty object."""
    bodies: dict[str, dict[str, Any]] = {
        "POST /api/join": {"roomId": room},
        "POST /api/notify": {"roomId": room},
        "POST /api/admin/session": {"key": "qm-not-a-key"},
        "POST /api/admin/rooms": {"id": unique_id("sec"), "targetUrl": "https://shop.example/"},
        "POST /api/admin/rooms/{room}/rate": {"ratePerMinute": 60},
        "POST /api/admin/rooms/{room}/schedule": {"preQueueMaxPerIp": 16},
        "POST /api/admin/rooms/{room}/eject": {"ticket": 1},
        # a loopback page: refused by the private-address rule before any connection is made
        "POST /api/admin/rooms/{room}/install-check": {"url": "http://127.0.0.1:9/"},
        "POST /api/admin/rooms/{room}/tag-origins": {"origin": "https://shop.example"},
        "POST /api/admin/rooms/{room}/preview": {"state": "waiting", "lang": "th"},
        "POST /api/admin/rooms/{room}/codes": {"count": 1},
        "POST /api/admin/rooms/{room}/rules/test": {"url": "https://shop.example/x"},
        "POST /api/admin/rooms/{room}/events": {"startsAt": FAR, "endsAt": FAR + 60_000},
        "PUT /api/admin/rooms/{room}/events/{event}": {"startsAt": FAR, "endsAt": FAR + 60_000},
        "POST /api/admin/operators": {"name": unique_id("made"), "role": "viewer"},
        "POST /api/system/maintenance": {"enabled": False},
        "POST /api/system/maintenance/pop": {"enabled": False},
        "POST /internal/api/notify": {"queue": room},
    }
    return bodies.get(op.label, {})


def build_call(world: World, op: Op, *, fresh: bool = True) -> Call:
    """The request for ``op``, from its description: parameters filled, a body of its media type.

    A change that may go through acts on a throwaway room, operator or link made for it (``fresh``); one that
    must be refused names the decoys; a read names the world's room."""
    srv = world.srv
    room = world.room
    path = op.path
    for name in re.findall(r"\{(\w+)\}", op.path):
        if name in world.decoy and op.method != "GET" and not fresh:
            value = world.decoy[name]
            if name == "room":
                room = value
        elif name == "room":
            if op.method != "GET":
                with adm(srv) as admin:
                    room = create_room(admin, unique_id("sec"))["id"]
            value = room
        elif name == "visitor":
            value = "1"
        elif name == "event":  # one event the room holds, made once per room
            with adm(srv) as admin:
                admin.post(f"/api/admin/rooms/{room}/events", json={"id": "sec-ev", "startsAt": FAR, "endsAt": FAR + 1})
            value = "sec-ev"
        elif name == "operator":
            with adm(srv) as admin:
                value = mint_operator(admin, "viewer")["id"]
        elif name == "link":
            with adm(srv) as admin:
                value = mint_link(admin)["id"]
        elif name == "file" and (prefix := next((p for p in FILES if op.path.startswith(p)), None)):
            value = FILES[prefix]
        elif name == "page" and op.path.startswith("/docs/"):
            value = "operations"
        elif name == "token" and op.path.startswith("/preview/"):
            with adm(srv) as admin:
                value = preview_token(admin, room, "waiting")
        else:
            raise CannotCall(f"{op.label}: the matrix does not know how to fill {{{name}}}; teach build_call")
        path = path.replace("{" + name + "}", value)
    params: dict[str, str] = {}
    for p in op.spec.get("parameters", []):
        if p["in"] != "query" or not p.get("required"):
            continue
        if p["name"] != "roomId":
            raise CannotCall(f"{op.label}: the matrix does not know how to fill the query parameter {p['name']}")
        params["roomId"] = room
    headers: dict[str, str] = {"X-QM-CSRF": "1"} if op.label == "POST /api/admin/session" else {}
    content: bytes | None = None
    if "requestBody" in op.spec:
        media = list(op.spec["requestBody"]["content"])
        if "application/json" in media:
            content = json.dumps(_json_body(op, room)).encode()
            headers["Content-Type"] = "application/json"
        elif "image/svg+xml" in media:
            content = SVG
            headers["Content-Type"] = "image/svg+xml"
        else:
            raise CannotCall(f"{op.label}: the matrix has no body of the media types {media}")
    return Call(op.method, path, params, headers, content, op.stream)


@dataclass
class Answer:
    status: int
    code: str | None
    headers: httpx.Headers
    text: str


def send(srv: Server, call: Call, headers: Mapping[str, str], *, method: str | None = None) -> Answer:
    """One call on a fresh client (no cookie jar carried over): an event stream is read to its status."""
    with http(srv) as c:
        merged = {**call.headers, **headers}
        kwargs: dict[str, Any] = {"params": call.params, "headers": merged, "content": call.content}
        if call.stream:
            with c.stream(method or call.method, call.path, **kwargs) as r:
                if r.status_code != 200:
                    r.read()
                    return Answer(r.status_code, code_of(r), r.headers, r.text)
                return Answer(r.status_code, None, r.headers, "")
        r = c.request(method or call.method, call.path, **kwargs)
        return Answer(r.status_code, code_of(r), r.headers, r.text)


def judge_admin(op: Op, kind: str, answer: Answer, what: str) -> None:
    """Exactly what the grant allows: see the module's docstring."""
    assert op.grants is not None
    role = CREDENTIALS[kind]
    seen = (what, answer.status, answer.text[:300])
    assert answer.status < 500, seen
    if kind == NO_CSRF and op.method not in ("GET", "HEAD"):
        assert answer.status == 403, seen
        if answer.text:
            assert answer.code == "csrf_required", seen
    elif role is None:
        assert answer.status == 401, seen
        if answer.text:
            assert answer.code == "unauthorized", seen
        assert answer.headers.get("www-authenticate", "").startswith("Bearer"), seen
    elif op.grants <= ROLE_GRANTS[role]:
        assert answer.status not in (401, 403), seen
        assert not (answer.status == 404 and answer.code == "not_found"), seen  # the route was reached
    else:
        assert answer.status == 403, seen
        if answer.text:
            assert answer.code == "insufficient_role", seen


def may_act(op: Op, kind: str) -> bool:
    """Whether ``kind`` may use ``op`` (a visitor route: anyone)."""
    role = CREDENTIALS[kind]
    if op.grants is None:
        return True
    if role is None or (kind == NO_CSRF and op.method not in ("GET", "HEAD")):
        return False
    return op.grants <= ROLE_GRANTS[role]


def _matrix_cases() -> Iterator[Any]:
    for label in OPERATIONS:
        for kind, role in CREDENTIALS.items():
            if label == SHUTDOWN and role is not None and ROLE_GRANTS[role] >= {"owner"} and kind != NO_CSRF:
                continue  # would stop the module's server: see the module's docstring
            yield pytest.param(label, kind, id=f"{label}-{kind}")


# ---------------------------------------------------------------------- the matrix


def test_the_matrix_knows_every_operation(document: dict[str, Op]) -> None:
    """A route the document lists and OPERATIONS does not is a route nobody probes: add it (one line)."""
    new = sorted(set(document) - set(OPERATIONS))
    gone = sorted(set(OPERATIONS) - set(document))
    assert not new, f"operations the security matrix does not know yet; add them to OPERATIONS: {new}"
    assert not gone, f"operations OPERATIONS lists that the server no longer has: {gone}"
    for label, kind in OPERATIONS.items():
        op = document[label]
        assert (op.grants is not None) == (kind == "admin"), f"{label}: the document says {op.grants}"
        assert op.stream == (label in STREAMS), label
        if op.path.startswith("/api/"):
            assert op.aliases == ("/api/v1" + op.path[len("/api") :],), label
    assert document[SHUTDOWN].grants == {"owner"}, "the matrix leaves out the shutdown's allowed callers: owners"


def test_the_document_names_a_monitor_link_exactly_where_it_may_go(document: dict[str, Op]) -> None:
    """The two ways the document describes access agree: the security schemes and the grants."""
    for op in document.values():
        if op.grants is None:
            continue
        assert ("monitorLink" in op.security) == (op.grants <= ROLE_GRANTS["monitor"]), op.label
        assert {"adminKey", "consoleSession"} <= op.security, op.label


@pytest.mark.parametrize(("kind", "role"), list(CREDENTIALS.items()))
def test_each_credential_is_the_role_the_guide_gives_it(world: World, kind: str, role: str | None) -> None:
    with http(world.srv, headers=world.keys.headers(kind)) as c:
        r = c.get("/api/admin/whoami")
    if role is None:
        assert r.status_code == 401 and r.json()["code"] == "unauthorized", r.text
        return
    assert r.status_code == 200, r.text
    principal = r.json()["principal"]
    assert principal["role"] == role
    assert set(principal["grants"]) == ROLE_GRANTS[role]


@pytest.mark.parametrize(("label", "kind"), list(_matrix_cases()))
def test_authorization_matrix(world: World, document: dict[str, Op], label: str, kind: str) -> None:
    op = document[label]
    call = build_call(world, op, fresh=may_act(op, kind))
    answer = send(world.srv, call, world.keys.headers(kind))
    if label in REVOKING:
        world.keys.reset()
    if op.grants is not None:
        judge_admin(op, kind, answer, f"{label} as {kind}")
        return
    seen = (label, kind, answer.status, answer.text[:300])
    assert answer.status < 500, seen
    vouching = "publicApiKey" in op.security and "Authorization" in world.keys.headers(kind)
    if vouching and kind not in ("public_api_key", "admin_key"):
        assert answer.status == 401 and answer.code == "unauthorized", seen
    elif not vouching:
        if label not in world.baseline:
            world.baseline[label] = send(world.srv, build_call(world, op), {}).status
        assert answer.status == world.baseline[label], seen  # an admin credential changes nothing here


def _door_cases() -> Iterator[Any]:
    for label in ADMIN_OPS:
        path = label.split(" ", 1)[1]
        if path.startswith("/api/"):
            yield pytest.param(label, "v1", id=f"{label}-v1")
        if label.startswith("GET ") and label not in STREAMS:
            yield pytest.param(label, "head", id=f"{label}-head")
        yield pytest.param(label, "cross_origin", id=f"{label}-cross_origin")


@pytest.mark.parametrize(("label", "door"), list(_door_cases()))
def test_every_admin_operation_by_its_other_doors(world: World, document: dict[str, Op], label: str, door: str) -> None:
    """HEAD, the /api/v1 alias and a request from another origin meet the same rule as the route itself, and
    the admin API never answers CORS (a page of another origin cannot read or preflight it)."""
    op = document[label]
    kinds = ["none", "monitor_link", "viewer", "operator", "admin_key"]
    if label == SHUTDOWN:
        kinds = [k for k in kinds if k != "admin_key"]
    # one resource for every credential: a change let through twice answers as it may the second time (a 404
    # for a link already revoked, …), never 401 or 403
    call = build_call(world, op, fresh=label != SHUTDOWN)
    if door == "v1":
        call.path = "/api/v1" + call.path[len("/api") :]
    for kind in kinds:
        headers = world.keys.headers(kind)
        method = None
        if door == "head":
            method = "HEAD"
        elif door == "cross_origin":
            headers["Origin"] = "https://evil.example"
            headers["Sec-Fetch-Site"] = "cross-site"
        answer = send(world.srv, call, headers, method=method)
        if label in REVOKING:
            world.keys.reset()
        judge_admin(op, kind, answer, f"{door} {label} as {kind}")
        if door == "head":
            assert answer.text == "", answer.text[:200]
        assert "access-control-allow-origin" not in answer.headers, (label, kind, dict(answer.headers))
    if door == "cross_origin":
        preflight = {
            "Origin": "https://evil.example",
            "Access-Control-Request-Method": op.method,
            "Access-Control-Request-Headers": "authorization, x-qm-csrf, content-type",
        }
        answer = send(world.srv, Call("OPTIONS", call.path, {}, {}), preflight)
        assert answer.status >= 400 and "access-control-allow-origin" not in answer.headers, (label, answer.status)


# ---------------------------------------------------------------------- CSRF

#: The header sent, but the browser says the request comes from another site (the cookie alone, without the
#: header, is a matrix column: console_session_no_csrf).
CSRF_VARIANTS = {
    "cross_site": {"X-QM-CSRF": "1", "Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"},
    "same_site": {"X-QM-CSRF": "1", "Sec-Fetch-Site": "same-site", "Origin": "https://sibling.example"},
}


@pytest.mark.parametrize("variant", list(CSRF_VARIANTS))
@pytest.mark.parametrize("label", CHANGES)
def test_a_change_made_with_the_console_cookie_from_another_site_is_refused(
    world: World, document: dict[str, Op], label: str, variant: str
) -> None:
    """X-QM-CSRF alone is not enough when the browser says the request comes from another site."""
    op = document[label]
    call = build_call(world, op, fresh=False)
    call.headers.pop("X-QM-CSRF", None)
    cookie = world.keys.headers("console_session")["Cookie"]
    answer = send(world.srv, call, {"Cookie": cookie, **CSRF_VARIANTS[variant]})
    assert answer.status == 403 and answer.code == "csrf_required", (label, variant, answer.status, answer.text)


@pytest.mark.parametrize("variant", ["no_header", *CSRF_VARIANTS])
def test_signing_in_needs_the_csrf_header_too(main: Server, variant: str) -> None:
    """Login CSRF: another site cannot sign a browser in to the console with a key of its own."""
    with http(main, headers=CSRF_VARIANTS.get(variant, {})) as c:
        r = c.post("/api/admin/session", json={"key": main.admin_key})
    assert r.status_code == 403 and r.json()["code"] == "csrf_required", r.text
    assert "qm_console" not in r.headers.get("set-cookie", "")


def test_the_console_cookie_is_httponly_strict_and_scoped_to_the_admin_api(main: Server) -> None:
    with http(main, headers={"X-QM-CSRF": "1"}) as c:
        r = c.post("/api/admin/session", json={"key": main.admin_key})
    assert r.status_code == 200, r.text
    line = next(v for v in r.headers.get_list("set-cookie") if v.startswith("qm_console="))
    attributes = {part.strip().lower() for part in line.split(";")[1:]}
    assert {"httponly", "samesite=strict", "path=/api/admin"} <= attributes, line
    assert main.admin_key not in line


# ---------------------------------------------------------------------- return URLs (open redirect)

TARGET = "https://shop.example/"
#: (returnUrl, where the visitor must land): allowed forms first, then the tricks, which land on the target.
RETURN_ALLOWED = {
    "https://shop.example/checkout?step=1": "https://shop.example/checkout?step=1",
    "https://eu.shop.example/cart": "https://eu.shop.example/cart",
}
RETURN_TRICKS = [
    "//evil.example/",
    "///evil.example/",
    "////evil.example/",
    "/\\evil.example/",
    "\\\\evil.example/",
    "\\/evil.example/",
    "https:evil.example/",
    "https:/evil.example/",
    "https:\\\\evil.example/",
    "https:/\\evil.example/",
    "javascript:alert(document.domain)",
    "JaVaScRiPt:alert(1)",
    " javascript:alert(1)",
    "java\tscript:alert(1)",
    "java\nscript:alert(1)",
    "javascript://shop.example/%0aalert(1)",
    "data:text/html,<script>alert(1)</script>",
    "data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==",
    "vbscript:msgbox(1)",
    "https://shop.example@evil.example/",
    "https://shop.example:443@evil.example/",
    "https://user:pass@shop.example/",
    "https://shop.example%40evil.example/",
    "https://shop.example.evil.example/",
    "https://evil.example/shop.example",
    "https://evil.example/?https://shop.example/",
    "https://evil.example/#https://shop.example/",
    "https://evil.example#@shop.example/",
    "https://evil.example\\@shop.example/",
    "https://evil.example\\.shop.example/",
    "https://shop.example%2F@evil.example/",
    "https://evil.example%2F.shop.example/",
    "https://evil.example%2f%2f.shop.example/",
    "https://evil.example%23.shop.example/",
    "https://evil.example%00.shop.example/",
    "https://evil.example\t.shop.example/",
    "ht\ttps://evil.example/",
    "https://ev\nil.example/",
    "  https://evil.example/",
    "https://evilshop.example/",
    "https://shop.exampl\u0435/",  # a Cyrillic е: an IDN homograph
    "https://xn--shop-7ve.example/",
    "https://sh\u00adop.example/",  # a soft hyphen, which IDNA drops
    "https://shop\u3002example/",  # an ideographic full stop, which IDNA reads as a dot
    "https://evil.example\u2215shop.example/",  # a division slash
    "https://shop.example./",
    "http://shop.example/",
    "https://shop.example:8443/",
    "https://[::1]/",
    "https://*.shop.example/",
    "/checkout",
    "checkout",
]


@dataclass
class Turn:
    redirect: str
    token: str


def _turns(srv: Server, room: str, urls: list[str]) -> dict[str, Turn]:
    """Every URL joined by a visitor of its own at once, then each visitor's turn awaited."""
    clients: dict[str, httpx.Client] = {}
    try:
        for url in urls:
            c = http(srv)
            clients[url] = c
            r = join(c, room, returnUrl=url)
            assert r.status_code == 200, (url, r.text)
        out: dict[str, Turn] = {}

        def all_passed() -> bool:
            for url, c in clients.items():
                if url in out:
                    continue
                r = c.get("/api/status", params={"roomId": room})
                assert r.status_code == 200, r.text
                body = r.json()
                if body["state"] in ("passed", "admitted"):
                    out[url] = Turn(body["redirectUrl"], body["token"])
            return len(out) == len(clients)

        wait_until(all_passed, timeout=20, what="every visitor's turn")
        return out
    finally:
        for c in clients.values():
            c.close()


@pytest.fixture(scope="module")
def return_room(main: Server) -> str:
    with adm(main) as admin:
        room: str = create_room(
            admin,
            unique_id("ret"),
            targetUrl=TARGET,
            ratePerMinute=1_000_000,
            queueMaxPerIp=None,
            returnOrigins=["https://*.shop.example"],
        )["id"]
    return room


@pytest.fixture(scope="module")
def turns(main: Server, return_room: str) -> dict[str, Turn]:
    return _turns(main, return_room, [*RETURN_ALLOWED, *RETURN_TRICKS])


@pytest.mark.parametrize("url", list(RETURN_ALLOWED))
def test_an_allowed_return_url_is_where_the_turn_goes(turns: dict[str, Turn], url: str) -> None:
    turn = turns[url]
    sep = "&" if "?" in url else "?"
    assert turn.redirect == f"{RETURN_ALLOWED[url]}{sep}qm_token={turn.token}", turn.redirect


@pytest.mark.parametrize("url", RETURN_TRICKS, ids=[repr(u)[1:-1] for u in RETURN_TRICKS])
def test_a_return_url_trick_lands_on_the_rooms_target(
    main: Server, return_room: str, turns: dict[str, Turn], url: str
) -> None:
    turn = turns[url]
    assert turn.redirect == f"{TARGET}?qm_token={turn.token}", (url, turn.redirect)
    # the door check hands the page URL to the waiting page, on this server, never as a link elsewhere
    with http(main) as c:
        r = c.get("/api/check", params={"roomId": return_room, "url": url})
    assert r.status_code in (200, 400), r.text
    if r.status_code == 200:
        assert r.json()["waitUrl"].startswith(f"{main.base_url}/w/{return_room}"), r.text
    else:
        assert r.json()["code"] == "invalid_url", r.text


# -- the inline hand-off: ?qm_token= is turned into the cookie and redirected away (303) on the app's host

HANDOFF_PATHS = {
    "/account/orders": None,
    "/%2F%2Fevil.example/": None,
    "/%5Cevil.example/": None,
    "//evil.example/": None,
    "///evil.example/": None,
    "/\\evil.example/": None,
}
NAVIGATION = {"Accept": "text/html", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}


@dataclass
class InlineRoom:
    room: str
    host: str


def inline_room(srv: Server, **fields: Any) -> InlineRoom:
    host = f"{unique_id('app')}.test"
    body = {"targetUrl": f"http://{host}/", "proxyOrigin": "http://app.invalid:3000", **fields}
    with adm(srv) as admin:
        room: str = create_room(admin, unique_id("inl"), **body)["id"]
    return InlineRoom(room, host)


@dataclass
class HandOff:
    host: str
    visitors: dict[str, tuple[str, str]]  # path -> (the visitor's pass, its cookies)


@pytest.fixture(scope="module")
def handoff(outbound: Server) -> HandOff:
    """One visitor per path, all in line at once, each awaited to its turn."""
    app = inline_room(outbound, ratePerMinute=1_000_000, queueMaxPerIp=None)
    clients = {path: http(outbound, headers={"Host": app.host}) for path in HANDOFF_PATHS}
    try:
        for c in clients.values():
            assert c.post("/__qm/api/join", json={"roomId": app.room}).status_code == 200
        out: dict[str, tuple[str, str]] = {}

        def all_passed() -> bool:
            for path, c in clients.items():
                body = c.get("/__qm/api/status", params={"roomId": app.room}).json()
                if path not in out and body["state"] == "passed":
                    out[path] = (body["token"], "; ".join(f"{k}={v}" for k, v in c.cookies.items()))
            return len(out) == len(clients)

        wait_until(all_passed, timeout=20, what="every visitor's turn")
        return HandOff(app.host, out)
    finally:
        for c in clients.values():
            c.close()


def _handoff_cases() -> Iterator[Any]:
    for path, finding in HANDOFF_PATHS.items():
        marks = [pytest.mark.xfail(strict=True, reason=finding)] if finding else []
        yield pytest.param(path, marks=marks, id=repr(path)[1:-1])


@pytest.mark.parametrize("path", list(_handoff_cases()))
def test_the_inline_hand_off_redirect_stays_on_the_host(outbound: Server, handoff: HandOff, path: str) -> None:
    """A visitor's own pass on a crafted path (``/w/<room>?qm_return=https://shop.example//evil.example/`` is
    a permitted return URL: its origin is the target's): the hand-off must not send the browser elsewhere."""
    token, cookies = handoff.visitors[path]
    headers = {**NAVIGATION, "Cookie": cookies}
    answer = raw_request(outbound, f"{path}?qm_token={token}", host=handoff.host, headers=headers)
    assert answer.status == 303, (answer.status, answer.text[:200])
    location = answer.header("location") or ""
    assert location.startswith("/") and location[1:2] not in ("/", "\\"), location
    assert "qm_token" not in location


# ---------------------------------------------------------------------- SSRF

#: proxyOrigin hosts that are private or internal address literals: 400 proxy_origin_private when saved.
PRIVATE_ORIGINS: dict[str, str | None] = {
    "127.0.0.1": None,
    "127.255.255.254": None,
    "[::1]": None,
    "[0:0:0:0:0:0:0:1]": None,
    "[::ffff:127.0.0.1]": None,
    "[::ffff:7f00:1]": None,
    "[::127.0.0.1]": None,
    "0.0.0.0": None,
    "[::]": None,
    "169.254.169.254": None,
    "[::ffff:169.254.169.254]": None,
    "[fd00:ec2::254]": None,
    "10.0.0.1": None,
    "10.255.255.255": None,
    "172.16.0.1": None,
    "172.31.255.255": None,
    "192.168.0.1": None,
    "[::ffff:192.168.0.1]": None,
    "100.64.0.1": None,
    "[fd00::1]": None,
    "[fc00::1]": None,
    "[fe80::1]": None,
    "[fe80::1%25eth0]": None,
    "[64:ff9b::7f00:1]": None,
    "[64:ff9b::a9fe:a9fe]": None,
    "[2002:7f00:1::]": None,
    "[2002:a9fe:a9fe::]": None,
    "127.1": None,
    "0x7f000001": None,
    "2130706433": None,
    "0177.0.0.1": None,
    "0": None,
}
#: proxyOrigin hosts a save may accept as names: every connection to what they resolve to is refused.
RESOLVED_ORIGINS = ["localhost", "127.1", "0x7f000001", "2130706433", "0177.0.0.1", "0", "127.000.000.001"]
#: targetUrl hosts the target probe must never contact.
PRIVATE_TARGETS: dict[str, str | None] = {
    "127.0.0.1": None,
    "127.1": None,
    "0x7f000001": None,
    "2130706433": None,
    "localhost": None,
    "[::1]": None,
    "[::ffff:127.0.0.1]": None,
    "0.0.0.0": None,
    "169.254.169.254": None,
    "10.0.0.1": None,
    "192.168.0.1": None,
    "[fd00::1]": None,
    "[64:ff9b::7f00:1]": None,
    "[2002:7f00:1::]": None,
}


def _cases(table: Mapping[str, str | None]) -> list[Any]:
    return [
        pytest.param(host, marks=[pytest.mark.xfail(strict=True, reason=why)] if why else [], id=host)
        for host, why in table.items()
    ]


class Listener:
    """A TCP server on 127.0.0.1 that counts connections: the address the private forms all point at."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = int(self.sock.getsockname()[1])
        self.hits = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.hits += 1
            with contextlib.suppress(OSError):
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi")
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def listener() -> Iterator[Listener]:
    lst = Listener()
    try:
        yield lst
    finally:
        lst.close()


def _save_inline(srv: Server, host: str) -> httpx.Response:
    """Save a room whose proxyOrigin names ``host``, with an invalid rate beside it: the private-address rule is
    judged before the room's fields, so its refusal is ``proxy_origin_private`` and a miss is ``invalid_rate``,
    and nothing is ever stored (a stored IPv6 proxyOrigin would meet the open bracket finding)."""
    body = {"targetUrl": f"http://{unique_id('app')}.test/", "proxyOrigin": f"http://{host}:3000", "ratePerMinute": -1}
    with adm(srv) as admin:
        return admin.post("/api/admin/rooms", json={"id": unique_id("ssrf"), **body})


@pytest.mark.parametrize("host", ["8.8.8.8", "app.example", "[2001:4860:4860::8888]"])
def test_a_public_proxy_origin_meets_the_rooms_own_rules(outbound: Server, host: str) -> None:
    """The control of the next test: a public address passes the private-address rule."""
    r = _save_inline(outbound, host)
    assert r.status_code == 400 and r.json()["code"] == "invalid_rate", r.text


@pytest.mark.parametrize("host", _cases(PRIVATE_ORIGINS))
def test_a_private_proxy_origin_is_refused_when_saved(outbound: Server, host: str) -> None:
    r = _save_inline(outbound, host)
    assert r.status_code == 400, (host, r.status_code, r.text)
    assert r.json()["code"] == "proxy_origin_private", r.text


@pytest.mark.parametrize("host", RESOLVED_ORIGINS)
def test_a_proxy_origin_that_resolves_privately_is_refused_on_every_connection(
    outbound: Server, listener: Listener, host: str
) -> None:
    before = listener.hits
    body = {"targetUrl": f"http://{unique_id('app')}.test/", "proxyOrigin": f"http://{host}:{listener.port}"}
    with adm(outbound) as admin:
        r = admin.post("/api/admin/rooms", json={"id": unique_id("ssrf"), "state": "bypass", **body})
    if r.status_code == 400:  # refused when saved: earlier still
        assert r.json()["code"] == "proxy_origin_private", r.text
        return
    assert r.status_code == 201, r.text
    app_host = urlsplit(body["targetUrl"]).netloc
    for _ in range(2):  # the second request: no connection is ever pooled for it
        with http(outbound, headers={"Host": app_host, **NAVIGATION}) as c:
            answer = c.get("/account")
        assert answer.status_code == 502, (host, answer.status_code, answer.text[:200])
        assert answer.headers.get("x-qm-origin") == "refused", dict(answer.headers)
    assert listener.hits == before, f"{host}: the server connected to a private address"


@pytest.fixture(scope="module")
def probed(outbound: Server, listener: Listener) -> dict[str, str]:
    """host -> the room whose targetUrl names it (all made at once: one probe round covers them)."""
    rooms: dict[str, str] = {}
    with adm(outbound) as admin:
        for host in PRIVATE_TARGETS:
            rooms[host] = create_room(admin, unique_id("probe"), targetUrl=f"http://{host}:{listener.port}/")["id"]
    return rooms


@pytest.mark.parametrize("host", _cases(PRIVATE_TARGETS))
def test_a_private_target_url_is_never_probed(
    outbound: Server, listener: Listener, probed: dict[str, str], host: str
) -> None:
    room = probed[host]

    def result() -> dict[str, Any] | None:
        with adm(outbound) as admin:
            found: dict[str, Any] | None = admin.get("/api/admin/health").json()["targets"].get(room)
        return found

    seen = wait_until(result, timeout=20, what=f"the probe of {host}")
    assert seen["refused"], seen
    assert seen["ok"] is False and seen["status"] is None, seen
    assert listener.hits == 0, f"the target probe connected to {host}"


# ---------------------------------------------------------------------- forged credentials: visitor tickets


def sign_token(payload: Mapping[str, Any], secret: str, form: str, purpose: str = "visitor") -> str:
    """A token as the server writes it (docs: base64url JSON, a dot, base64url HMAC-SHA256)."""
    data = dict(payload)
    if form == "v2":
        data["kid"] = hkdf(secret, "qm:kid", 4).hex()
        key = hkdf(secret, f"qm:{purpose}", 32)
    else:
        data.pop("kid", None)
        key = secret.encode()
    body = b64(json.dumps(data, separators=(",", ":")).encode())
    return f"{body}.{b64(hmac.new(key, body.encode(), hashlib.sha256).digest())}"


def payload_of(token: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(unb64(token.split(".", 1)[0]))
    return data


def _swap_payload(token: str, **changes: Any) -> str:
    sig = token.partition(".")[2]
    data = {**payload_of(token), **changes}
    data = {k: v for k, v in data.items() if v is not None}
    return f"{b64(json.dumps(data, separators=(',', ':')).encode())}.{sig}"


def _non_canonical(token: str) -> str:
    """The same signature bytes spelt another way (its last character's two unused bits set)."""
    body, _, sig = token.partition(".")
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = alphabet[alphabet.index(sig[-1]) ^ 1]
    assert base64.urlsafe_b64decode(sig[:-1] + last + "=") == base64.urlsafe_b64decode(sig + "=")
    return f"{body}.{sig[:-1]}{last}"


def _std_alphabet(token: str) -> str:
    body, _, sig = token.partition(".")
    return f"{body}.{sig[:5]}{'+' if sig[5] != '+' else '/'}{sig[6:]}"


@dataclass
class Forge:
    """What a forgery is made from: the victim's token, the server's secret and form, other genuine tokens."""

    token: str
    secret: str
    form: str
    other_room: str
    monitor: str


def now_ms() -> int:
    return int(time.time() * 1000)


TICKET_FORGERIES: dict[str, Callable[[Forge], str]] = {
    "tampered_signature": lambda f: tamper_signature(f.token),
    "tampered_payload": lambda f: _swap_payload(f.token, n=payload_of(f.token)["n"] + 1),
    "truncated_signature": lambda f: f.token[:-2],
    "truncated_payload": lambda f: f.token[4:],
    "no_signature": lambda f: f.token.split(".")[0] + ".",
    "payload_only": lambda f: f.token.split(".")[0],
    "jwt_alg_none": lambda f: b64(b'{"alg":"none","typ":"JWT"}') + "." + f.token.split(".")[0] + ".",
    "jwt_hs256_header": lambda f: b64(b'{"alg":"HS256","typ":"JWT"}') + "." + f.token,
    "padded_base64": lambda f: f.token + "=",
    "standard_base64_alphabet": lambda f: _std_alphabet(f.token),
    "non_canonical_base64": lambda f: _non_canonical(f.token),
    "nul_byte": lambda f: f.token + "\x00",
    "too_long": lambda f: f.token + "A" * 5000,
    "another_rooms_ticket": lambda f: f.other_room,
    "another_secret": lambda f: sign_token(payload_of(f.token), secrets.token_urlsafe(36), f.form),
    "version_swap": lambda f: _swap_payload(
        f.token, kid=None if "kid" in payload_of(f.token) else hkdf(f.secret, "qm:kid", 4).hex()
    ),
    "unknown_kid": lambda f: _swap_payload(f.token, kid="00c0ffee"),
    "expired": lambda f: sign_token({**payload_of(f.token), "iat": now_ms() - 90_000_000}, f.secret, f.form),
    "from_the_future": lambda f: sign_token({**payload_of(f.token), "iat": now_ms() + 600_000}, f.secret, f.form),
    "iat_as_text": lambda f: sign_token({**payload_of(f.token), "iat": str(now_ms())}, f.secret, f.form),
    "monitor_link_token": lambda f: f.monitor,
    "another_purpose": lambda f: sign_token(payload_of(f.token), f.secret, "v2", purpose="session"),
}
FORMS = ("legacy", "v2")


@dataclass
class Victim:
    client: httpx.Client
    room: str
    token: str
    ticket: int

    def only_the_binding_cookie(self) -> None:
        """Keep qms_<room> (the proof of ownership) and drop the ticket cookie: the token presented decides."""
        self.client.cookies.delete(f"qm_{self.room}")
        self.client.cookies.delete(f"qm_dk_{self.room}")


@dataclass
class TicketBench:
    srv: Server
    form: str
    victims: dict[str, Victim]
    forge: Callable[[str], Forge]


def _bench(srv: Server, form: str) -> Iterator[TicketBench]:
    with adm(srv) as admin:
        room = create_room(admin, unique_id("tok"), ratePerMinute=1_000_000, queueMaxPerIp=None)["id"]
        other = create_room(admin, unique_id("tok"), ratePerMinute=0)["id"]
        monitor = mint_link(admin)["token"]
    with http(srv) as c:
        other_token = join(c, other).json()["token"]
    victims: dict[str, Victim] = {}
    for name in ["genuine", "resigned_now", *TICKET_FORGERIES]:
        c = http(srv)
        body = join(c, room).json()
        victims[name] = Victim(c, room, body["token"], body["ticket"])
    wait_until(
        lambda: all(
            v.client.get("/api/status", params={"roomId": room}).json()["state"] == "passed" for v in victims.values()
        ),
        timeout=20,
        what="every victim's turn",
    )
    for v in victims.values():
        v.only_the_binding_cookie()

    def forge(name: str) -> Forge:
        return Forge(victims[name].token, srv.secret, form, other_token, monitor)

    try:
        yield TicketBench(srv, form, victims, forge)
    finally:
        for v in victims.values():
            v.client.close()


@pytest.fixture(scope="module")
def benches(main: Server, signer_v2: Server) -> Iterator[dict[str, TicketBench]]:
    with contextlib.ExitStack() as stack:
        yield {
            "legacy": stack.enter_context(contextlib.contextmanager(_bench)(main, "legacy")),
            "v2": stack.enter_context(contextlib.contextmanager(_bench)(signer_v2, "v2")),
        }


def _door(v: Victim, token: str) -> dict[str, Any]:
    """The door check with ``token`` as the pass; a query the server will not parse is refused (no admission)."""
    r = v.client.get("/api/check", params={"roomId": v.room, "url": "https://shop.example/p", "qm_token": token})
    if r.status_code == 400:
        assert r.json()["code"] == "bad_request", r.text
        return {"admit": False}
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


@pytest.mark.parametrize("form", FORMS)
def test_the_genuine_ticket_is_the_control(benches: dict[str, TicketBench], form: str) -> None:
    """The victim's own token, and the same payload signed anew the way the server signs, are accepted: so
    the forgeries below are refused for what was forged, not for how they were presented."""
    bench = benches[form]
    for name in ("genuine", "resigned_now"):
        v = bench.victims[name]
        token = v.token
        if name == "resigned_now":
            token = sign_token({**payload_of(v.token), "iat": now_ms()}, bench.srv.secret, form)
        assert ("kid" in payload_of(v.token)) == (form == "v2"), v.token
        assert _door(v, token)["admit"] is True, name
        v.only_the_binding_cookie()
        r = join(v.client, v.room, token=token)
        assert r.status_code == 200 and r.json()["ticket"] == v.ticket, (name, r.text)


@pytest.mark.parametrize("forgery", list(TICKET_FORGERIES))
@pytest.mark.parametrize("form", FORMS)
def test_a_forged_ticket_is_no_ticket(benches: dict[str, TicketBench], form: str, forgery: str) -> None:
    bench = benches[form]
    v = bench.victims[forgery]
    forged = TICKET_FORGERIES[forgery](bench.forge(forgery))
    assert forged != v.token
    door = _door(v, forged)
    assert door["admit"] is False, door
    v.only_the_binding_cookie()
    r = v.client.post("/api/join", json={"roomId": v.room, "token": forged})
    if r.status_code == 400:  # a body the server will not read (a NUL character): refused whole
        assert r.json()["code"] == "bad_request", r.text
        return
    assert r.status_code == 200, r.text  # a bad ticket is not an error: a fresh place at the back
    fresh = r.json()
    assert fresh["ticket"] != v.ticket and fresh["token"] != forged, fresh
    status = v.client.get("/api/status", params={"roomId": v.room, "token": forged})
    assert status.status_code == 200 and status.json()["ticket"] in (None, fresh["ticket"]), status.text


@pytest.mark.parametrize("value", [1, True, ["t"], {"t": "x"}, ""], ids=repr)
def test_a_ticket_that_is_no_string_is_a_bad_request_or_nothing(main: Server, world: World, value: object) -> None:
    with http(main) as c:
        r = c.post("/api/join", json={"roomId": world.room, "token": value})
    assert r.status_code in (200, 400), r.text
    if r.status_code == 400:
        assert r.json()["code"] == "bad_request"


# ---------------------------------------------------------------------- forged credentials: the admin API


@dataclass
class Admin:
    srv: Server
    admin_key: str
    link: dict[str, Any]
    other_link: dict[str, Any]
    revoked_link: str
    operator: dict[str, Any]
    other_operator: dict[str, Any]
    revoked_operator: str
    session: str
    ended_session: str
    visitor_token: str


@pytest.fixture(scope="module")
def admin_bench(main: Server, world: World) -> Admin:
    with adm(main) as admin:
        link, other_link, revoked = mint_link(admin), mint_link(admin), mint_link(admin)
        assert admin.delete(f"/api/admin/monitor-links/{revoked['id']}").status_code == 200
        op, other_op, gone = (
            mint_operator(admin, "viewer"),
            mint_operator(admin, "viewer"),
            mint_operator(admin, "viewer"),
        )
        assert admin.delete(f"/api/admin/operators/{gone['id']}").status_code == 200
    ended = session_value(main, main.admin_key)
    with http(main, headers={"Cookie": f"qm_console={ended}", "X-QM-CSRF": "1"}) as c:
        assert c.delete("/api/admin/session").status_code == 200
    with http(main) as c:
        visitor = join(c, world.room).json()["token"]
    return Admin(
        main,
        main.admin_key,
        link,
        other_link,
        revoked["token"],
        op,
        other_op,
        gone["key"],
        session_value(main, main.admin_key),
        ended,
        visitor,
    )


def tamper_tail(key: str) -> str:
    """The same key with its last two characters changed."""
    return key[:-2] + ("AA" if key[-2:] != "AA" else "BB")


def _op_key(key: str, *, id_from: str | None = None, secret: str | None = None) -> str:
    _, op_id, rest = key.split("_", 2)
    return f"qmo_{id_from or op_id}_{secret if secret is not None else rest}"


#: name -> (headers, query) of a request that must be 401 on GET /api/admin/whoami.
ADMIN_FORGERIES: dict[str, Callable[[Admin], tuple[dict[str, str], dict[str, str]]]] = {
    "monitor_link_tampered": lambda a: (bearer(tamper_signature(a.link["token"])), {}),
    "monitor_link_truncated": lambda a: (bearer(a.link["token"][:-3]), {}),
    "monitor_link_other_id": lambda a: (bearer(_swap_payload(a.link["token"], id=a.other_link["id"])), {}),
    "monitor_link_revoked": lambda a: (bearer(a.revoked_link), {}),
    "monitor_link_resigned_with_the_secret": lambda a: (
        bearer(sign_token({**payload_of(a.link["token"]), "iat": now_ms()}, a.srv.secret, "legacy")),
        {},
    ),
    "monitor_link_expired": lambda a: (
        bearer(sign_token({**payload_of(a.link["token"]), "iat": now_ms() - 8 * 86_400_000}, a.srv.secret, "legacy")),
        {},
    ),
    "visitor_ticket_as_bearer": lambda a: (bearer(a.visitor_token), {}),
    "console_cookie_as_bearer": lambda a: (bearer(a.session), {}),
    "console_cookie_tampered": lambda a: ({"Cookie": f"qm_console={tamper_signature(a.session)}"}, {}),
    "console_cookie_signed_out": lambda a: ({"Cookie": f"qm_console={a.ended_session}"}, {}),
    "console_cookie_truncated": lambda a: ({"Cookie": f"qm_console={a.session[:-4]}"}, {}),
    "visitor_ticket_as_console_cookie": lambda a: ({"Cookie": f"qm_console={a.visitor_token}"}, {}),
    "monitor_link_as_console_cookie": lambda a: ({"Cookie": f"qm_console={a.link['token']}"}, {}),
    "operator_key_tampered": lambda a: (
        bearer(a.operator["key"][:-2] + ("AA" if a.operator["key"][-2:] != "AA" else "BB")),
        {},
    ),
    "operator_key_of_another_id": lambda a: (bearer(_op_key(a.operator["key"], id_from=a.other_operator["id"])), {}),
    "operator_key_without_secret": lambda a: (bearer(_op_key(a.operator["key"], secret="")), {}),
    "operator_key_revoked": lambda a: (bearer(a.revoked_operator), {}),
    "operator_prefix_only": lambda a: (bearer("qmo_"), {}),
    "admin_key_prefix": lambda a: (bearer(a.admin_key[:-1]), {}),
    "admin_key_longer": lambda a: (bearer(a.admin_key + "x"), {}),
    "admin_key_other_case": lambda a: (bearer(a.admin_key.upper()), {}),
    "admin_key_as_basic": lambda a: (
        {"Authorization": "Basic " + base64.b64encode(f"admin:{a.admin_key}".encode()).decode()},
        {},
    ),
    "admin_key_as_token_scheme": lambda a: ({"Authorization": f"Token {a.admin_key}"}, {}),
    "bearer_without_a_key": lambda a: ({"Authorization": "Bearer"}, {}),
    "admin_key_in_the_query": lambda a: ({}, {"key": a.admin_key}),
    "admin_key_as_access_token": lambda a: ({}, {"access_token": a.admin_key}),
    "public_api_key": lambda a: (bearer(PUBLIC_KEY), {}),
}


@pytest.mark.parametrize("forgery", list(ADMIN_FORGERIES))
def test_a_forged_admin_credential_is_401(admin_bench: Admin, forgery: str) -> None:
    headers, query = ADMIN_FORGERIES[forgery](admin_bench)
    with http(admin_bench.srv, headers=headers) as c:
        r = c.get("/api/admin/whoami", params=query)
    assert r.status_code == 401, (forgery, r.status_code, r.text)
    assert r.json()["code"] == "unauthorized", r.text


def test_a_stream_ticket_is_single_use_and_for_the_stream_only(main: Server) -> None:
    with adm(main) as admin:
        ticket = admin.post("/api/admin/sse-ticket", json={}).json()["ticket"]
        other = admin.post("/api/admin/sse-ticket", json={}).json()["ticket"]
    with http(main) as c:
        r = c.get("/api/admin/rooms", params={"ticket": other})
        assert r.status_code == 401, "a ticket signs in the event stream only"
        for made_up in ("", secrets.token_urlsafe(24), ticket[:-1] + ("A" if ticket[-1] != "A" else "B")):
            with c.stream("GET", "/api/admin/events", params={"ticket": made_up}) as s:
                assert s.status_code == 401, made_up
        with c.stream("GET", "/api/admin/events", params={"ticket": ticket}) as s:
            assert s.status_code == 200
        with c.stream("GET", "/api/admin/events", params={"ticket": ticket}) as s:
            assert s.status_code == 401, "a spent ticket"


# ---------------------------------------------------------------------- forged credentials: edge passes


@pytest.fixture(scope="module")
def edge(signer_v2: Server) -> dict[str, Any]:
    """An admitted visitor (through a connector) on the edge-pass server, its genuine pass, another room's."""
    v = admitted(signer_v2, sessionTtlSec=600)
    good = v.check().json()["edgePass"]
    other = admitted(signer_v2, sessionTtlSec=600)
    return {"visitor": v, "pass": good, "other_room": other.check().json()["edgePass"]}


def _jws(header: Mapping[str, Any], claims: Mapping[str, Any], sign: Callable[[bytes], bytes]) -> str:
    h = b64(json.dumps(header).encode())
    c = b64(json.dumps(claims).encode())
    return f"{h}.{c}.{b64(sign(f'{h}.{c}'.encode()))}"


def _public_x(srv: Server) -> bytes:
    return key_of(srv.secret).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


EDGE_FORGERIES: dict[str, Callable[[Server, str, str], str]] = {
    "alg_none": lambda s, good, other: _jws({**parts(good)[0], "alg": "none"}, parts(good)[1], lambda _: b""),
    "alg_hs256_with_the_public_key": lambda s, good, other: _jws(
        {**parts(good)[0], "alg": "HS256"},
        parts(good)[1],
        lambda data: hmac.new(_public_x(s), data, hashlib.sha256).digest(),
    ),
    "embedded_jwk": lambda s, good, other: _embedded(good),
    "jku_elsewhere": lambda s, good, other: _stranger(good, jku="https://evil.example/.well-known/jwks.json"),
    "kid_path": lambda s, good, other: _stranger(good, kid="../../../../dev/null"),
    "typ_swapped": lambda s, good, other: _jws(
        {**parts(good)[0], "typ": "JWT"}, parts(good)[1], lambda data: parts(good)[2]
    ),
    "claims_tampered": lambda s, good, other: _jws(
        parts(good)[0], {**parts(good)[1], "exp": parts(good)[1]["exp"] + 3600}, lambda data: parts(good)[2]
    ),
    "another_rooms_pass": lambda s, good, other: other,
    "truncated": lambda s, good, other: good[:-6],
    "two_parts": lambda s, good, other: good.rsplit(".", 1)[0],
    "four_parts": lambda s, good, other: good + ".e30",
    "padded": lambda s, good, other: good + "==",
    "huge": lambda s, good, other: good + "A" * 4000,
}


def _stranger(good: str, **header: Any) -> str:
    key = Ed25519PrivateKey.generate()
    return _jws({**parts(good)[0], "kid": kid_of(key), **header}, parts(good)[1], key.sign)


def _embedded(good: str) -> str:
    key = Ed25519PrivateKey.generate()
    x = b64(key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))
    return _stranger(good, jwk={"kty": "OKP", "crv": "Ed25519", "x": x})


@pytest.mark.parametrize("forgery", list(EDGE_FORGERIES))
def test_a_forged_edge_pass_is_named_and_refused(signer_v2: Server, edge: dict[str, Any], forgery: str) -> None:
    v: Visitor = edge["visitor"]
    forged = EDGE_FORGERIES[forgery](signer_v2, edge["pass"], edge["other_room"])
    body = v.check(qm_pass=forged).json()
    reasons = {"malformed", "unknown_kid", "bad_signature", "wrong_room", "expired", "revoked", "unbound"}
    assert body.get("edgePassRefused") in reasons, (forgery, body)
    assert body.get("edgePass") != forged
    # a pass alone never admits anybody at the queue
    headers = {"Authorization": f"Bearer {PUBLIC_KEY}", "Cookie": f"qmp_{v.room_id}={forged}"}
    with http(signer_v2, headers=headers) as c:
        r = c.get("/api/check", params={"roomId": v.room_id, "ip": "198.51.100.7", "agent": "stranger"})
    assert r.status_code == 200 and r.json()["admit"] is False, r.text


# ---------------------------------------------------------------------- traversal

TRAVERSALS = [
    "/assets/../../etc/passwd",
    "/assets/..%2f..%2fetc%2fpasswd",
    "/assets/%2e%2e/%2e%2e/etc/passwd",
    "/assets/..%252f..%252fetc%252fpasswd",
    "/assets/waiting-x/../../../../etc/passwd",
    "/assets//etc/passwd",
    "/fonts/../../../etc/passwd",
    "/fonts/..%2f..%2fetc%2fpasswd",
    "/fonts/..%252f..%252fetc%252fpasswd",
    "/fonts/..\\..\\etc\\passwd",
    "/fonts/%2e%2e%5c%2e%2e%5cetc%5cpasswd",
    "/fonts/....//....//etc/passwd",
    "/fonts/.%2e/.%2e/etc/passwd",
    "/fonts/..;/..;/etc/passwd",
    "/fonts/%2fetc%2fpasswd",
    "/fonts//etc/passwd",
    "/fonts/%00../../etc/passwd",
    "/fonts/LICENSE.txt%00.woff2",
    "/fonts/LICENSE.txt/..%2f..%2f..%2fpyproject.toml",
    "/docs/..",
    "/docs/..%2f..",
    "/docs/../../pyproject.toml",
    "/docs/..%2f..%2fpyproject.toml",
    "/docs/%2e%2e/%2e%2e/pyproject.toml",
    "/docs/..%252f..%252fpyproject.toml",
    "/docs/....//....//pyproject.toml",
    "/docs/operations/../../../../etc/passwd",
    "/docs/../queue_manager/__init__.py",
    "/docs//etc/passwd",
    "/connectors/../../pyproject.toml",
    "/connectors/..%2f..%2fpyproject.toml",
    "/connectors/%2e%2e%2f%2e%2e%2fpyproject.toml",
    "/connectors/..%252f..%252fpyproject.toml",
    "/connectors/node/../../../pyproject.toml",
    "/connectors/wordpress/../../../../etc/passwd",
    "/connectors/%c0%ae%c0%ae/%c0%ae%c0%ae/pyproject.toml",
    "/connectors/../queue_manager/__init__.py",
    "/connectors//etc/passwd",
    "/w/{room}/..%2f..%2fetc%2fpasswd",
    "/w/{room}/../../../etc/passwd",
    "/w/{room}/logo-../../../../etc/passwd",
]
#: What a file outside the served folders would show.
LEAKS = ("root:x:0:0", "[project]", "__version__", "import ", "PRIVATE KEY")


@pytest.mark.parametrize("target", TRAVERSALS)
def test_a_path_out_of_the_served_folders_is_404(main: Server, world: World, target: str) -> None:
    answer = raw_request(main, target.replace("{room}", world.room))
    assert answer.status == 404, (target, answer.status, answer.text[:200])
    assert not any(mark in answer.text for mark in LEAKS), answer.text[:300]


# ---------------------------------------------------------------------- injection into pages, headers

PAYLOAD = '"><img src=x onerror=alert(1)><script>alert(2)</script>'
RAW_MARKS = ("<img src=x", "<script>alert")
#: The waiting page's policy, word for word (docs/INTEGRATION.md, "Content-Security-Policy").
WAITING_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; font-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


def _hostile_room(srv: Server) -> str:
    brand = {"displayName": PAYLOAD[:80], "message": {"en": PAYLOAD, "th": PAYLOAD}}
    brand["helpUrl"] = 'https://help.example/"><script>alert(3)</script>'
    with adm(srv) as admin:
        room: str = create_room(admin, unique_id("xss"), name=PAYLOAD, brand=brand)["id"]
    return room


@pytest.fixture(scope="module")
def hostile(main: Server) -> str:
    return _hostile_room(main)


def assert_inert(text: str, what: str) -> None:
    for mark in RAW_MARKS:
        assert mark not in text, f"{what}: {mark!r} is in the page unescaped"
    for block in re.findall(r'<script type="application/json"[^>]*>(.*?)</script>', text, re.S | re.I):
        assert "<" not in block, f"{what}: a JSON block holds a raw '<': {block[:200]}"


@pytest.mark.parametrize("page", ["/w/{room}", "/offline.html?room={room}", "/origin-down.html?room={room}"])
def test_a_hostile_room_name_and_brand_are_escaped_on_every_page(main: Server, hostile: str, page: str) -> None:
    with http(main) as c:
        r = c.get(page.format(room=hostile), headers={"Accept-Language": "th"})
    assert r.status_code == 200, r.text[:200]
    assert r.headers["content-type"].startswith("text/html")
    assert_inert(r.text, page)
    assert "&lt;img src=x onerror=alert(1)&gt;" in r.text  # it is there, as text


@pytest.mark.parametrize("state", ["waiting", "full", "origin_down", "offline"])
def test_a_hostile_room_name_and_brand_are_escaped_on_its_preview(main: Server, hostile: str, state: str) -> None:
    with adm(main) as admin:
        token = preview_token(admin, hostile, state)
    with http(main) as c:
        r = c.get(f"/preview/{token}")
    assert r.status_code == 200, r.text[:200]
    assert r.headers["content-type"].startswith("text/html")
    assert_inert(r.text, state)
    assert "&lt;img src=x onerror=alert(1)&gt;" in r.text  # it is there, as text
    policy = _policy(r.headers.get("content-security-policy"))
    assert policy.get("frame-ancestors") == "'none'" and policy.get("base-uri") == "'none'", policy
    assert "'unsafe-inline'" not in " ".join(policy.values()), policy


def test_the_consoles_data_is_json_never_a_page(main: Server, hostile: str) -> None:
    with adm(main) as admin:
        for path, params in (
            ("/api/admin/rooms", {}),
            (f"/api/admin/rooms/{hostile}", {}),
            ("/api/admin/audit", {"roomId": hostile}),
            ("/api/admin/reports", {"roomId": hostile}),
        ):
            r = admin.get(path, params=params)
            assert r.status_code == 200, r.text
            assert r.headers["content-type"].startswith("application/json"), (path, r.headers["content-type"])
        with admin.stream("GET", "/api/admin/events") as s:
            assert s.headers["content-type"].startswith("text/event-stream")


@pytest.fixture(scope="module")
def hostile_inline(outbound: Server) -> InlineRoom:
    return inline_room(outbound, ratePerMinute=0)


def test_a_hostile_path_on_an_inline_host_is_inert_on_its_waiting_page(
    outbound: Server, hostile_inline: InlineRoom
) -> None:
    target = "/" + quote(PAYLOAD, safe="") + "?next=" + quote(PAYLOAD, safe="")
    for path in (target, '/"><script>alert(1)</script>'):
        answer = raw_request(outbound, path, host=hostile_inline.host, headers=NAVIGATION)
        assert answer.status == 503 and answer.header("x-qm-queued") == "1", answer.status
        assert_inert(answer.text, path)
        for cookie in answer.headers.get("set-cookie", []):
            assert not re.search(r"[<>\"\s]", cookie.split(";")[0]), cookie


REFLECTED = [
    "/w/" + quote(PAYLOAD, safe=""),
    "/docs/" + quote(PAYLOAD, safe=""),
    "/docs?lang=" + quote(PAYLOAD, safe=""),
    "/docs/operations?q=" + quote(PAYLOAD, safe=""),
    "/offline.html?room=" + quote(PAYLOAD, safe=""),
    "/origin-down.html?room=" + quote(PAYLOAD, safe=""),
    "/connectors/" + quote(PAYLOAD, safe=""),
    "/fonts/" + quote(PAYLOAD, safe=""),
    "/assets/" + quote(PAYLOAD, safe=""),
    "/" + quote(PAYLOAD, safe=""),
    "/?" + quote(PAYLOAD, safe=""),
    "/api/status?roomId=" + quote(PAYLOAD, safe=""),
    "/api/check?roomId=" + quote(PAYLOAD, safe=""),
]


@pytest.mark.parametrize("target", REFLECTED)
def test_a_payload_in_the_address_never_reaches_a_page_raw(main: Server, target: str) -> None:
    answer = raw_request(main, target, headers={"Accept": "text/html"})
    assert answer.status < 500, answer.status
    if (answer.header("content-type") or "").startswith("text/html"):
        assert_inert(answer.text, target)


@pytest.mark.parametrize("page", ["/", "/docs", "/docs/operations", "/docs/api", "/w/{room}", "/offline.html"])
def test_a_hostile_host_header_never_reaches_a_page_raw(main: Server, world: World, page: str) -> None:
    answer = raw_request(main, page.format(room=world.room), host='evil.example"><script>alert(1)</script>')
    assert answer.status < 500
    assert_inert(answer.text, page)


def _policy(header: str | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in (header or "").split(";"):
        name, _, value = part.strip().partition(" ")
        if name:
            out[name] = value
    return out


@pytest.mark.parametrize(
    "page",
    ["/", "/index.html", "/docs", "/docs/operations", "/docs/nope", "/w/{room}", "/offline.html", "/origin-down.html"],
)
def test_every_page_sends_the_headers_the_guide_promises(main: Server, world: World, page: str) -> None:
    with http(main) as c:
        r = c.get(page.format(room=world.room))
    assert r.headers["content-type"].startswith("text/html"), r.headers
    assert r.headers.get("x-content-type-options") == "nosniff"
    policy = _policy(r.headers.get("content-security-policy"))
    assert policy.get("frame-ancestors") == "'none'", policy
    assert policy.get("base-uri") == "'none'", policy
    sources = " ".join(policy.values())
    assert "'unsafe-inline'" not in sources and "'unsafe-eval'" not in sources, policy
    assert "http:" not in sources and "https:" not in sources and "*" not in sources.split(), policy
    if page.startswith("/w/"):
        assert r.headers["content-security-policy"] == WAITING_CSP
        assert r.headers.get("referrer-policy") == "no-referrer"
    elif page.startswith("/docs"):
        assert "script-src" not in policy and policy["default-src"] == "'none'", policy  # no script at all
    elif page in ("/offline.html", "/origin-down.html"):
        assert policy["default-src"] == "'none'", policy
        assert all(s.startswith("'sha256-") for s in policy["script-src"].split()), policy  # its own code only
    else:  # the console
        assert r.headers.get("x-frame-options") == "DENY"
        assert r.headers.get("referrer-policy") == "no-referrer"
        assert policy["script-src"] == "'self'", policy


# ---------------------------------------------------------------------- address spoofing, oversized bodies

SPOOFS = {
    "x_forwarded_for": {"X-Forwarded-For": "198.51.100.1"},
    "x_forwarded_for_chain": {"X-Forwarded-For": "198.51.100.2, 203.0.113.9"},
    "x_real_ip": {"X-Real-IP": "198.51.100.3"},
    "cf_connecting_ip": {"CF-Connecting-IP": "198.51.100.4"},
    "true_client_ip": {"True-Client-IP": "198.51.100.5"},
    "forwarded": {"Forwarded": "for=198.51.100.6;proto=https"},
    "x_client_ip": {"X-Client-IP": "198.51.100.7"},
    "fastly_client_ip": {"Fastly-Client-IP": "198.51.100.8"},
}


@pytest.mark.parametrize("spoof", list(SPOOFS))
def test_a_forwarded_address_from_an_unlisted_peer_buys_no_second_place(main: Server, spoof: str) -> None:
    """queueMaxPerIp 1: the socket's address holds its one place, whatever address the headers claim."""
    with adm(main) as admin:
        room = create_room(admin, unique_id("ip"), ratePerMinute=0, queueMaxPerIp=1)["id"]
    with http(main) as first:
        assert join(first, room).status_code == 200
    with http(main, headers=SPOOFS[spoof]) as second:
        r = join(second, room)
    assert r.status_code == 429 and r.json()["code"] == "queue_identity_limit", r.text


@pytest.mark.parametrize("label", [label for label in OPERATIONS if not label.startswith(("GET ", "DELETE "))])
def test_an_oversized_body_is_refused_before_it_is_read(world: World, document: dict[str, Op], label: str) -> None:
    op = document[label]
    if label == SHUTDOWN:
        headers = world.keys.headers("viewer")  # refused: see the module's docstring
    else:
        headers = world.keys.headers("admin_key") if op.grants is not None else {}
    call = build_call(world, op, fresh=False)  # refused before it is read: nothing acts
    if call.content is None:  # it reads no body: one sent anyway changes nothing
        call.content = b'{"pad":"' + b"a" * (32 * 1024) + b'"}'
        call.headers["Content-Type"] = "application/json"
        assert send(world.srv, call, headers).status < 500
        return
    limit = 64 * 1024 if call.headers.get("Content-Type", "").startswith("image/") else 16 * 1024
    call.content = b'{"pad":"' + b"a" * (limit + 1024) + b'"}'
    if call.headers.get("Content-Type", "").startswith("image/"):
        call.content = SVG.replace(b"</svg>", b"<!--" + b"a" * (limit + 1024) + b"--></svg>")
    answer = send(world.srv, call, headers)
    documented = {
        code
        for status, response in op.spec["responses"].items()
        if status.startswith("4")
        for code in response.get("x-codes", [])
    }
    assert answer.status < 500, answer.text[:200]
    if answer.status != 413:  # refused earlier, for a reason the document names
        assert answer.status in (403, 404) and answer.code in documented, (label, answer.status, answer.text)
    else:
        assert answer.code == "payload_too_large", answer.text
