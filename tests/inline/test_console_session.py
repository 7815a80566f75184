"""The console's session on an inline host: qm_console is scoped to /__qm/api/admin there.

The console under /__qm/ on the customer's name calls /__qm/api/admin/*, so a cookie on Path=/api/admin would
never be sent back and signing in could not work. Every Set-Cookie of qm_console (sign-in, sign-out, the
clear on a refused session) names the path the request came in on; the console's former addresses
redirect to the console under the same prefix.
"""

from __future__ import annotations

import uuid

import httpx

from tests.conformance.harness import Server, set_cookies
from tests.inline.conftest import ServerFactory, inline_room, visitor
from tests.inline.peer import Peer

CSRF = {"X-QM-CSRF": "1"}


def _host() -> str:
    return f"{uuid.uuid4().hex[:8]}.shop.test"


def _attrs(line: str) -> dict[str, str]:
    out = {}
    for part in line.split(";")[1:]:
        name, _, value = part.strip().partition("=")
        out[name.lower()] = value
    return out


def _value(line: str) -> str:
    return line.split(";", 1)[0].split("=", 1)[1]


def test_sign_in_under_the_prefix_scopes_the_cookie_to_the_prefixed_admin_api(qm: Server, peer: Peer) -> None:
    room_id, host = inline_room(qm, peer.url, host=_host())
    with visitor(qm, host) as c:
        r = c.post("/__qm/api/admin/session", json={"key": qm.admin_key}, headers=CSRF)
        assert r.status_code == 200, r.text
        line = set_cookies(r)["qm_console"]
        attrs = _attrs(line)
        assert attrs["path"] == "/__qm/api/admin", line
        assert attrs["samesite"] == "Strict" and "httponly" in attrs and attrs["max-age"] == "43200", line
        session = _value(line)
        # the jar sends it back to the prefixed admin API: the console's calls work with the cookie alone
        rooms = c.get("/__qm/api/admin/rooms")
        assert rooms.status_code == 200, rooms.text
        assert room_id in {room["id"] for room in rooms.json()["rooms"]}
        paused = c.post(f"/__qm/api/admin/rooms/{room_id}/pause", headers=CSRF)
        assert paused.status_code == 200, paused.text
        # sign-out clears it on the same path (a clear on another path would leave it in the browser)
        out = c.delete("/__qm/api/admin/session", headers=CSRF)
        assert out.status_code == 200 and out.json()["closed"] is True, out.text
        cleared = set_cookies(out)["qm_console"]
        assert _value(cleared) == "" and _attrs(cleared)["max-age"] == "0", cleared
        assert _attrs(cleared)["path"] == "/__qm/api/admin", cleared
    # the ended session, still sent under the prefix: 401, and the clear names the prefixed path
    with visitor(qm, host, headers={"Cookie": f"qm_console={session}"}) as c:
        refused = c.get("/__qm/api/admin/rooms")
        assert refused.status_code == 401, refused.text
        assert _attrs(set_cookies(refused)["qm_console"])["path"] == "/__qm/api/admin"
    with qm.admin() as admin:
        assert admin.get(f"/api/admin/rooms/{room_id}").json()["room"]["state"] == "paused"


def test_off_the_inline_host_the_cookie_keeps_path_api_admin(qm: Server) -> None:
    with httpx.Client(base_url=f"http://127.0.0.1:{qm.port}", timeout=10) as c:
        r = c.post("/api/admin/session", json={"key": qm.admin_key}, headers=CSRF)
        assert r.status_code == 200, r.text
        assert _attrs(set_cookies(r)["qm_console"])["path"] == "/api/admin"
        out = c.delete("/api/admin/session", headers=CSRF)
        assert _attrs(set_cookies(out)["qm_console"])["path"] == "/api/admin"
        refused = c.get("/api/admin/rooms", headers={"Cookie": f"qm_console={_value(set_cookies(r)['qm_console'])}"})
        assert refused.status_code == 401
        assert _attrs(set_cookies(refused)["qm_console"])["path"] == "/api/admin"


def test_the_consoles_former_addresses_redirect_to_the_console(make_server: ServerFactory, peer: Peer) -> None:
    srv = make_server({"WAITING_LIMIT_PER_MIN": "5"})
    _room_id, host = inline_room(srv, peer.url, host=_host())
    with visitor(srv, host) as c:
        for path in ("/__qm/progress", "/__qm/public/admin.html"):
            r = c.get(path)
            assert r.status_code == 302 and r.headers["location"] == "/__qm/", (path, r.status_code)
            assert r.headers["x-ratelimit-limit"] == "5"  # the console page's guard: the "pages" budget
        # without the prefix they are the app's paths, gated like any other page of it
        gated = c.get("/progress", headers={"Accept": "application/json"})
        assert gated.status_code == 503 and gated.json()["code"] == "queued"
    with httpx.Client(base_url=f"http://127.0.0.1:{srv.port}", timeout=10) as c:
        for path in ("/progress", "/public/admin.html"):
            r = c.get(path)
            assert r.status_code == 302 and r.headers["location"] == "/", (path, r.status_code)
        # the same budget as the console page: its fifth load from this address is the last one allowed
        assert c.head("/").status_code == 200
        refused = c.get("/progress")
        assert refused.status_code == 429 and refused.headers["retry-after"], refused.status_code
        # they follow the console's host rule: a hostname with no room is withheld the console while
        # an inline room exists (ADMIN_HOST and PUBLIC_URL unset)
        assert c.get("/progress", headers={"Host": "elsewhere.example"}).status_code == 404
        assert c.get("/public/admin.html", headers={"Host": "elsewhere.example"}).status_code == 404
