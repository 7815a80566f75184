"""One Valkey round trip per /api/check of an admitted visitor, counted on the Valkey server (MONITOR):
from the page's tag, and vouched for by an edge connector with the PUBLIC_API_KEY (whose key check,
with ADMIN_AUTH_FAIL_PER_MIN on, asks nothing of Valkey: the lockouts are in every instance's memory).

Valkey-only. The test watches every command the server process sends (its connections are the ones
whose commands carry its key prefix), learns what the server sends on its own while idle (tick, leader
lease, resync), then brackets each door check between two ECHO markers of its own and counts the
commands in between: exactly one that is not background, always the same EVALSHA.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import pytest
from harness import Server, create_room, iter_sse, join, start_server, wait_for_state

pytestmark = pytest.mark.stores("valkey")  # memory keeps nothing across a restart and has no Valkey to cut
# deselected on a Valkey cluster (TEST_VALKEY_CLUSTER_URL): it counts one server's commands
pytestmark = [pytestmark, pytest.mark.single_valkey("one Valkey server")]

CHECKS = 60
PAGE = "https://shop.example/p/1"
PUBLIC_KEY = "pk-" + secrets.token_urlsafe(24)
LINE = re.compile(r"^\d+\.\d+ \[(\d+) ([^\]]*)\] (.*)$", re.S)
ARG = re.compile(r'"((?:[^"\\]|\\.)*)"')


class Monitor:
    """Every command Valkey executes, in order, as (client, [args]); Lua's inner commands dropped."""

    def __init__(self, url: str) -> None:
        import redis

        self.client = redis.Redis.from_url(url)
        self.conn = self.client.connection_pool.get_connection()
        self.conn.send_command("MONITOR")
        assert self.conn.read_response() in (b"OK", "OK")
        self.lines: list[tuple[str, list[str]]] = []
        self.marks: dict[str, int] = {}
        self._stop = f"qm-rt-stop-{uuid.uuid4().hex}"
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        self.marker = redis.Redis.from_url(url)

    def _read(self) -> None:
        while True:
            raw = self.conn.read_response()
            text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
            m = LINE.match(text)
            if m is None:
                continue
            who, rest = m.group(2), m.group(3)
            if who == "lua":
                continue
            args = ARG.findall(rest)
            if len(args) == 2 and args[0].upper() == "ECHO" and args[1].startswith("qm-rt-"):
                if args[1] == self._stop:
                    return
                self.marks[args[1]] = len(self.lines)
                continue
            self.lines.append((who, args))

    def mark(self) -> str:
        name = f"qm-rt-{uuid.uuid4().hex}"
        self.marker.echo(name)
        return name

    def between(self, start: str, end: str) -> list[tuple[str, list[str]]]:
        deadline = time.monotonic() + 10
        while end not in self.marks and time.monotonic() < deadline:
            time.sleep(0.01)
        assert end in self.marks, "the MONITOR stream lost a marker"
        return self.lines[self.marks[start] : self.marks[end]]

    def close(self) -> None:
        self.marker.echo(self._stop)
        self._thread.join(10)
        self.conn.disconnect()
        self.client.close()
        self.marker.close()


def signature(args: list[str]) -> str:
    name = args[0].upper() if args else ""
    if name in ("EVALSHA", "EVALSHA_RO") and len(args) > 1:
        return f"{name} {args[1]}"
    first = re.sub(r"\d+", "#", args[1]) if len(args) > 1 else ""
    return f"{name} {first}"


@pytest.fixture
def server() -> Iterator[Server]:
    # background work made frequent enough that an idle window of ~2.5 s sees every kind of it
    # (and the wrong-key allowance on, as in production: the connector's key is checked on every request)
    srv = start_server(
        {"RESYNC_MS": "500", "LEADER_LEASE_MS": "1500", "PUBLIC_API_KEY": PUBLIC_KEY, "ADMIN_AUTH_FAIL_PER_MIN": "20"}
    )
    try:
        yield srv
    finally:
        srv.stop()


def _admitted(via: str, r: Any) -> bool:
    if via == "gate":  # a reverse proxy's forward-auth check: 200 with the decision in a header
        return r.status_code == 200 and r.headers["x-qm-decision"] == "admit"
    return r.status_code == 200 and r.json()["admit"] is True


@pytest.mark.parametrize("via", ["tag", "connector", "gate"])
def test_an_admitted_visitors_door_check_is_one_valkey_command(server: Server, via: str) -> None:
    prefix = server.env["VALKEY_PREFIX"]
    with server.admin() as admin:
        rid = create_room(admin, ratePerMinute=6000, queueMaxPerIp=None, presenceSec=None)["id"]
    with server.client() as visitor:
        token = join(visitor, rid).json()["token"]
        wait_for_state(visitor, rid, None, ("passed",), timeout=10)
        first = visitor.get("/api/check", params={"roomId": rid, "url": PAGE, "qm_token": token})
        assert first.status_code == 200 and first.json()["admit"] is True, first.text
        door_key = first.json()["doorKey"]
        agent = visitor.headers["user-agent"]
    path, params = "/api/check", {"roomId": rid, "url": PAGE, "qm_token": token, "dk": door_key}
    headers = {"Origin": "https://shop.example"}
    if via == "connector":  # the edge speaks for the visitor, its key checked on every request
        params |= {"ip": "127.0.0.1", "agent": agent}
        headers = {"Authorization": f"Bearer {PUBLIC_KEY}"}
    if via == "gate":  # nginx's auth_request: the original request in headers, the visitor's cookies as sent
        path, params = "/api/gate", {"roomId": rid}
        headers = {
            "Authorization": f"Bearer {PUBLIC_KEY}",
            "X-Original-URI": "/p/1",
            "X-Forwarded-Host": "shop.example",
            "X-Forwarded-Proto": "https",
            "X-Real-IP": "127.0.0.1",
            "User-Agent": agent,
            "Cookie": f"qm_{rid}={token}; qm_dk_{rid}={door_key}",
        }
    monitor = Monitor(server.env["VALKEY_URL"])
    try:
        with server.client(headers=headers) as tag:
            for _ in range(5):  # warm: every connection the hot path uses is open
                assert _admitted(via, tag.get(path, params=params))
            idle_start = monitor.mark()
            time.sleep(2.5)  # not a timed assertion: a window to learn the server's own background commands
            idle_end = monitor.mark()
            windows: list[list[tuple[str, list[str]]]] = []
            marks: list[tuple[str, str]] = []
            for _ in range(CHECKS):
                a = monitor.mark()
                r = tag.get(path, params=params)
                b = monitor.mark()
                assert _admitted(via, r), r.text
                marks.append((a, b))
            idle = monitor.between(idle_start, idle_end)
            windows = [monitor.between(a, b) for a, b in marks]
    finally:
        monitor.close()

    everything = monitor.lines
    ours = {who for who, args in everything if any(prefix in a for a in args)}
    assert ours, "no command of the server was seen"
    background = {signature(args) for who, args in idle if who in ours}
    assert background, "the idle window saw none of the server's own commands (tick, lease)"

    sent_in = [[signature(args) for who, args in window if who in ours] for window in windows]
    # a background job that slipped past the idle window on a busy machine shows in a few windows only;
    # the check's own command is in every one
    seen = Counter(s for sent in sent_in for s in set(sent))
    background |= {s for s, windows_with in seen.items() if windows_with < CHECKS // 4}
    per_check: list[list[str]] = []
    with_background = 0
    for sent in sent_in:
        per_check.append([s for s in sent if s not in background])
        with_background += any(s in background for s in sent)
    hot = {s for found in per_check for s in found}
    report: dict[str, Any] = {"per_check": [len(f) for f in per_check], "hot": hot, "background": background}
    assert all(len(found) == 1 for found in per_check), report
    assert len(hot) == 1 and next(iter(hot)).startswith("EVALSHA "), report
    # a background-looking command in every window would be the check's own: it stays occasional
    assert with_background < CHECKS // 2, report


def test_a_waiting_visitors_stream_frames_read_no_status_from_valkey(server: Server) -> None:
    """Once an instance's replica of the line is in sync, a waiting visitor's frames (positions moving as
    those ahead leave) are answered in the server: no status_many script call reaches Valkey, only the
    presence marks, batched (lua/seen.lua)."""
    from queue_manager.store.valkey.scripts import build

    status_many = f"EVALSHA {build('status_many').sha}"
    prefix = server.env["VALKEY_PREFIX"]
    with server.admin() as admin:
        rid = create_room(admin, ratePerMinute=0, queueMaxPerIp=None, presenceSec=8)["id"]
        with ExitStack() as stack:
            tickets = [join(stack.enter_context(server.client()), rid).json() for _ in range(3)]
            watcher = stack.enter_context(server.client())
            mine = join(watcher, rid).json()
            assert mine["position"] == 4
            request = watcher.build_request(
                "GET", "/events", params={"roomId": rid, "token": mine["token"]}, timeout=httpx.Timeout(5.0, read=5.0)
            )
            r = watcher.send(request, stream=True)
            try:
                frames = (json.loads(f["data"]) for f in iter_sse(r) if f.get("event") == "message" and "data" in f)
                assert next(frames)["position"] == 4  # the stream's first frame (a status read)
                assert next(frames)["position"] == 4  # a round's batched read: the replica answers from here on
                monitor = Monitor(server.env["VALKEY_URL"])
                try:
                    start = monitor.mark()
                    for left, t in enumerate(tickets, start=1):
                        # to the back of the line: the watcher moves up, each frame from the replica
                        assert (
                            admin.post(f"/api/admin/rooms/{rid}/eject", json={"ticket": t["ticket"]}).status_code == 200
                        )
                        frame = next(frames)
                        while frame["position"] != 4 - left:
                            frame = next(frames)
                        assert frame["ticket"] == mine["ticket"] and frame["state"] == "waiting"
                    end = monitor.mark()
                    window = monitor.between(start, end)
                finally:
                    monitor.close()
            finally:
                r.close()
    ours = {who for who, args in monitor.lines if any(prefix in a for a in args)}
    sent = [signature(args) for who, args in window if who in ours]
    assert sent, "no command of the server was seen"
    assert status_many not in sent, Counter(sent)
