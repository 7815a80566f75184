"""The console's live stats stream: single-use tickets, full/delta frames, and revocation of open streams."""

from __future__ import annotations

import contextlib
import json
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
from harness import Server, create_room, iter_sse, set_cookies, unique_id, wait_until

ServerFactory = Callable[..., Server]

CSRF = {"X-QM-CSRF": "1"}
TEAM_ONLY = ("proxyOrigin", "returnOrigins", "tagOrigins")


class Stream:
    """GET /api/admin/events read on a thread; frames arrive on a queue so a test can wait with a deadline."""

    def __init__(self, srv: Server, ticket: str) -> None:
        self.items: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._stop = threading.Event()
        self._sock: socket.socket | None = None
        self._srv = srv
        self._ticket = ticket
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        kind, value = self._get(5.0)
        assert kind == "status", (kind, value)
        self.status: int = value

    def _run(self) -> None:
        try:
            with (
                httpx.Client(base_url=self._srv.base_url, timeout=httpx.Timeout(5.0, read=20.0)) as c,
                c.stream("GET", "/api/admin/events", params={"ticket": self._ticket}) as resp,
            ):
                self._sock = resp.extensions["network_stream"].get_extra_info("socket")
                self.items.put(("status", resp.status_code))
                if resp.status_code != 200:
                    resp.read()
                    self.items.put(("body", resp.text))
                    return
                for ev in iter_sse(resp):
                    if "comment" not in ev:
                        self.items.put(("event", ev))
                    if self._stop.is_set():
                        return
            self.items.put(("end", None))
        except Exception as exc:  # reported to the test through the queue
            if not self._stop.is_set():
                self.items.put(("error", repr(exc)))

    def _get(self, timeout: float) -> tuple[str, Any]:
        try:
            return self.items.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"nothing from the stream within {timeout:g} s") from None

    def event(self, timeout: float = 5.0) -> dict[str, str]:
        kind, value = self._get(timeout)
        assert kind == "event", (kind, value)
        ev: dict[str, str] = value
        return ev

    def frame(self, timeout: float = 5.0) -> dict[str, Any]:
        ev = self.event(timeout)
        assert ev["event"] == "message", ev
        data: dict[str, Any] = json.loads(ev["data"])
        return data

    def until_revoked(self, timeout: float) -> dict[str, str]:
        """Skip data frames until `event: revoked`; then the stream must end."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no 'event: revoked' within {timeout:g} s")
            ev = self.event(left)
            if ev["event"] == "revoked":
                kind, value = self._get(5.0)
                assert kind == "end", (kind, value)
                return ev

    def close(self) -> None:
        """Hang up now (shutting the socket down wakes the reader) rather than at the next 2 s frame."""
        self._stop.set()
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(5.0)


@contextlib.contextmanager
def stream(srv: Server, ticket: str) -> Iterator[Stream]:
    s = Stream(srv, ticket)
    try:
        yield s
    finally:
        s.close()


def ticket_for(client: httpx.Client, **headers: str) -> str:
    r = client.post("/api/admin/sse-ticket", headers=headers)
    assert r.status_code == 200, r.text
    t: str = r.json()["ticket"]
    assert t
    return t


def bearer(srv: Server, key: str) -> httpx.Client:
    return srv.client(headers={"Authorization": f"Bearer {key}"})


def mint_link(admin: httpx.Client) -> tuple[str, str]:
    r = admin.post("/api/admin/monitor-links")
    assert r.status_code == 201, r.text
    return r.json()["link"]["id"], r.json()["token"]


# ---------------------------------------------------------------------- tickets


def test_ticket_is_single_use(server: Server, admin: httpx.Client) -> None:
    t = ticket_for(admin)
    with stream(server, t) as s:
        assert s.status == 200
        s.frame()
        with server.client() as c:
            r = c.get("/api/admin/events", params={"ticket": t})
        assert r.status_code == 401, r.text
        assert r.json()["code"] == "unauthorized"


def test_stream_needs_a_ticket_not_a_query_key(server: Server) -> None:
    with server.client() as c:
        assert c.get("/api/admin/events").status_code == 401
        assert c.get("/api/admin/events", params={"ticket": "made-up"}).status_code == 401
        # a key is never a ticket
        assert c.get("/api/admin/events", params={"ticket": server.admin_key}).status_code == 401
        # a ticket opens only the stream
        t = ticket_for(server.admin())
        assert c.get("/api/admin/rooms", params={"ticket": t}).status_code == 401


def test_stream_sends_full_frames_then_a_delta(server: Server, admin: httpx.Client) -> None:
    create_room(admin)
    with stream(server, ticket_for(admin)) as s:
        first = s.frame()
        second = s.frame()
        third = s.frame()
    for full in (first, second):
        assert full.get("full") is True, full
        assert "delta" not in full or not full["delta"], full
        for total in ("waiting", "activeSessions", "passesOutstanding"):
            assert isinstance(full[total], int), (total, full)
        assert "rooms" in full
    assert third.get("delta") is True, third
    assert isinstance(third["removed"], list), third


def test_full_frame_lists_the_rooms(server: Server, admin: httpx.Client) -> None:
    rid = create_room(admin, name="listed-room")["id"]
    with stream(server, ticket_for(admin)) as s:
        first = s.frame()
    assert isinstance(first["rooms"], list), first
    assert rid in {r["id"] for r in first["rooms"]}


def test_monitor_stream_rooms_hide_team_only_fields(server: Server, admin: httpx.Client) -> None:
    rid = create_room(
        admin, returnOrigins=["https://hidden-origin.example"], proxyOrigin="http://app-9877.internal.test:80"
    )["id"]
    _, token = mint_link(admin)
    with bearer(server, token) as m, stream(server, ticket_for(m)) as s:
        first = s.frame()
    assert isinstance(first["rooms"], list), first
    rooms = {r["id"]: r for r in first["rooms"]}
    assert rid in rooms
    for field in TEAM_ONLY:
        assert rooms[rid].get(field) is None, (field, rooms[rid])
    assert "app-9877" not in json.dumps(first) and "hidden-origin" not in json.dumps(first)


# ---------------------------------------------------------------------- revocation reaches open streams

REVOKE_WITHIN = 4.0  # "at once"; the 2 s re-check is the backstop, so this is a generous bound


def test_revoking_a_monitor_link_ends_its_stream(server: Server, admin: httpx.Client) -> None:
    link_id, token = mint_link(admin)
    _, other = mint_link(admin)
    with bearer(server, token) as m, bearer(server, other) as o:
        t, t_other, t_unspent = ticket_for(m), ticket_for(o), ticket_for(m)
        with stream(server, t) as s, stream(server, t_other) as keep:
            s.frame()
            keep.frame()
            r = admin.delete(f"/api/admin/monitor-links/{link_id}")
            assert r.status_code == 200, r.text
            ev = s.until_revoked(REVOKE_WITHIN)
            assert json.loads(ev["data"]) == {"error": "unauthorized"}
            # a stream opened by another link is untouched: its next tick is a data frame
            keep.frame()
    # an unspent ticket minted by the revoked link is refused too
    with server.client() as c:
        assert c.get("/api/admin/events", params={"ticket": t_unspent}).status_code == 401


def test_signing_out_ends_the_sessions_stream(server: Server) -> None:
    with server.client() as c:
        r = c.post("/api/admin/session", json={"key": server.admin_key}, headers=CSRF)
        assert r.status_code == 200, r.text
        cookie = set_cookies(r)["qm_console"].split(";", 1)[0]
    with server.client(headers={"Cookie": cookie}) as c:
        t = ticket_for(c, **CSRF)
        with stream(server, t) as s:
            s.frame()
            assert c.delete("/api/admin/session", headers=CSRF).status_code == 200
            s.until_revoked(REVOKE_WITHIN)


def test_revoking_an_operator_ends_their_streams(server: Server, admin: httpx.Client) -> None:
    r = admin.post("/api/admin/operators", json={"name": unique_id("streamer"), "role": "viewer"})
    assert r.status_code == 201, r.text
    op_id, key = r.json()["operator"]["id"], r.json()["key"]
    with bearer(server, key) as op:
        t = ticket_for(op)
        with stream(server, t) as s, stream(server, ticket_for(admin)) as owner:
            s.frame()
            owner.frame()
            assert admin.delete(f"/api/admin/operators/{op_id}").status_code == 200
            s.until_revoked(REVOKE_WITHIN)
            owner.frame()  # ADMIN_KEY's stream stays open: its next tick is a data frame


# ---------------------------------------------------------------------- expiry


def test_monitor_link_expires_and_its_stream_ends(make_server: ServerFactory) -> None:
    srv = make_server({"MONITOR_TOKEN_TTL_SEC": "2"})
    with srv.admin() as a:
        link_id, token = mint_link(a)
        with bearer(srv, token) as m:
            assert m.get("/api/admin/rooms").status_code == 200
            with stream(srv, ticket_for(m)) as s:
                s.frame()
                s.until_revoked(12.0)  # the 2 s re-check catches expiry
            wait_until(lambda: m.get("/api/admin/rooms").status_code == 401, timeout=10, what="the link to expire")
        r = a.post(f"/api/admin/monitor-links/{link_id}/reveal")
        assert r.status_code == 404, r.text
        assert r.json()["code"] == "no_link"
