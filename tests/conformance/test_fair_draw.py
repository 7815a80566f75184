"""A drop's verifiable draw over HTTP: the commitment on /api/status and GET /api/rooms/<id>/draw, a
reschedule publishing a new one, the draw revealed at the opening and checked by scripts/verify_draw.py
(run as its own process, against the server and against tampered copies), and on STORE=valkey a room
rebuilt from the journal after the opening revealing the same seed and order.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import Server, create_room, join, status, sync_valkey, unique_id, wait_until

ROOT = Path(__file__).resolve().parents[2]
VERIFY = ROOT / "scripts" / "verify_draw.py"
HEX64 = set("0123456789abcdef")


def _verify(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(VERIFY), *args], capture_output=True, text=True, timeout=60)


def _draw(srv: Server, room: str) -> dict[str, Any]:
    with srv.client() as c:
        r = c.get(f"/api/rooms/{room}/draw")
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def _schedule(admin: httpx.Client, room: str, in_ms: int) -> int:
    at = int(time.time() * 1000) + in_ms
    r = admin.post(f"/api/admin/rooms/{room}/schedule", json={"opensAt": at})
    assert r.status_code == 200, r.text
    return at


@pytest.fixture(scope="module")
def proxied(make_module_server: Any) -> Server:
    """A server that believes X-Forwarded-For from this machine, so each test visitor can be an address."""
    srv: Server = make_module_server({"TRUST_PROXY": "1", "TRUST_PROXY_IPS": "127.0.0.1", "RESYNC_MS": "500"})
    return srv


def _drop(srv: Server, room: str) -> tuple[list[tuple[httpx.Client, str]], str]:
    """Seven visitors from three addresses join a drop opening in 10 minutes; the commitment they saw."""
    with srv.admin() as admin:
        create_room(admin, room, ratePerMinute=0, presenceSec=None)
        opens = _schedule(admin, room, 600_000)
    before = _draw(srv, room)
    assert before["state"] == "committed" and before["preCount"] == 0 and before["opensAt"] == opens
    assert before["algorithm"] == "qm-draw-v1" and "seed" not in before and "order" not in before
    commitment = before["commitment"]
    assert len(commitment) == 64 and set(commitment) <= HEX64
    visitors = []
    for i in range(7):
        c = srv.client(headers={"X-Forwarded-For": f"198.51.100.{i % 3 + 1}"})
        body = join(c, room).json()
        assert body["state"] == "scheduled" and body["drawCommitment"] == commitment, body
        assert isinstance(body["handle"], str) and body["handle"]
        visitors.append((c, body["token"]))
    s = status(visitors[0][0], room, visitors[0][1])
    assert s["drawCommitment"] == commitment and s["handle"] and s["preCount"] == 7
    committed = _draw(srv, room)
    assert committed["state"] == "committed" and committed["preCount"] == 7 and "seed" not in committed
    return visitors, commitment


def _open(srv: Server, room: str, visitors: list[tuple[httpx.Client, str]]) -> list[dict[str, Any]]:
    with srv.admin() as admin:
        _schedule(admin, room, 300)

    def all_waiting() -> list[dict[str, Any]] | None:
        views = [status(c, room, token) for c, token in visitors]
        return views if all(v["state"] == "waiting" for v in views) else None

    return wait_until(all_waiting, timeout=30, what="the drop drawn into the line")


def test_a_real_draw_checks_out_and_a_tampered_copy_does_not(proxied: Server, tmp_path: Path) -> None:
    room = unique_id("fair")
    visitors, first_commitment = _drop(proxied, room)
    handles = [status(c, room, token)["handle"] for c, token in visitors]
    # a reschedule publishes a new commitment and lists the one it replaced
    with proxied.admin() as admin:
        _schedule(admin, room, 900_000)
    moved = _draw(proxied, room)
    assert moved["commitment"] != first_commitment
    assert [p["commitment"] for p in moved["previousCommitments"]] == [first_commitment]
    assert status(visitors[0][0], room, visitors[0][1])["drawCommitment"] == moved["commitment"]
    views = _open(proxied, room, visitors)  # moved to a moment from now: a third commitment, drawn at once
    drawn = _draw(proxied, room)
    assert drawn["state"] == "drawn" and drawn["commitment"] not in (first_commitment, moved["commitment"])
    assert hashlib.sha256(bytes.fromhex(drawn["seed"])).hexdigest() == drawn["commitment"]
    assert drawn["handles"] == sorted(handles) and sorted(drawn["order"]) == sorted(handles)
    assert len(set(drawn["groups"])) == 3  # three addresses, never named
    assert not any(f"198.51.100.{i}" in json.dumps(drawn) for i in (1, 2, 3))
    assert [p["commitment"] for p in drawn["previousCommitments"]] == [first_commitment, moved["commitment"]]
    # each visitor is where the published order puts their handle
    for handle, view in zip(handles, views, strict=True):
        assert drawn["order"].index(handle) + 1 == view["position"]
        assert drawn["order"][view["ticket"] - drawn["firstTicket"]] == handle
        assert view["drawCommitment"] is None

    done = _verify(proxied.base_url, room, "--handle", handles[0])
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"OK: room '{room}': sha256(seed) is the commitment {drawn['commitment']}" in done.stdout
    assert f"was drawn at place {views[0]['position']} of 7, ticket {views[0]['ticket']}" in done.stdout

    def tampered(change: Any) -> subprocess.CompletedProcess[str]:
        doc = json.loads(json.dumps(drawn))
        change(doc)
        path = tmp_path / "draw.json"
        path.write_text(json.dumps(doc))
        return _verify("--file", str(path))

    def seed_byte(doc: dict[str, Any]) -> None:
        seed = bytearray(bytes.fromhex(doc["seed"]))
        seed[0] ^= 0x80
        doc["seed"] = seed.hex()

    def one_handle(doc: dict[str, Any]) -> None:
        # another handle listed in the 4th place (sorting and groups untouched: "0" appended keeps its place)
        doc["handles"][3] += "0"

    def swap(doc: dict[str, Any]) -> None:
        doc["order"][0], doc["order"][6] = doc["order"][6], doc["order"][0]

    for change, says in (
        (seed_byte, "MISMATCH: commitment mismatch"),
        (one_handle, "MISMATCH: the order is not the handles drawn: 7 entries for 7 handles; missing"),
        (swap, "MISMATCH: order mismatch: 2 of 7 places differ; the first is place 1"),
    ):
        result = tampered(change)
        assert result.returncode == 1 and says in result.stdout, (change.__name__, result.stdout)


def test_a_room_never_scheduled_has_no_draw(server: Server, admin: httpx.Client) -> None:
    room = create_room(admin)["id"]
    with server.client() as c:
        r = c.get(f"/api/rooms/{room}/draw")
        assert (r.status_code, r.json()["code"]) == (404, "no_draw"), r.text
        r = c.get("/api/rooms/no-such-room/draw")
        assert (r.status_code, r.json()["code"]) == (404, "no_room"), r.text
        r = c.get("/api/v1/rooms/no-such-room/draw")
        assert (r.status_code, r.json()["code"]) == (404, "no_room"), r.text
        r = c.post(f"/api/rooms/{room}/draw")
        assert r.status_code == 405
        body = join(c, room).json()
        assert body["drawCommitment"] is None and body["handle"] is None


def test_the_draw_route_is_charged_per_address(make_server: Any) -> None:
    srv = make_server({"WAITING_LIMIT_PER_MIN": "2"})
    with srv.admin() as admin:
        room = create_room(admin)["id"]
        _schedule(admin, room, 600_000)
    with srv.client() as c:
        answers = [c.get(f"/api/rooms/{room}/draw") for _ in range(3)]
    assert [r.status_code for r in answers] == [200, 200, 429]
    assert answers[1].headers["x-ratelimit-remaining"] == "0"
    assert answers[2].json()["code"] == "rate_limited" and "retry-after" in answers[2].headers


def test_the_waiting_page_has_the_commitments_place(server: Server, admin: httpx.Client) -> None:
    room = create_room(admin)["id"]
    with server.client() as c:
        page = c.get(f"/w/{room}", headers={"Accept-Language": "th"}).text
    assert 'id="draw-commitment"' in page and 'id="draw-handle"' in page
    assert 'data-i18n="drawCommitmentLabel"' in page and "{{" not in page


@pytest.mark.stores("valkey")
def test_a_room_rebuilt_from_the_journal_after_the_open_reveals_the_same_draw(proxied: Server) -> None:
    room = unique_id("rebuilt")
    visitors, _ = _drop(proxied, room)
    _open(proxied, room, visitors)
    before = _draw(proxied, room)
    assert before["state"] == "drawn"
    # Valkey loses the room's keys (a flush, or a restore of an empty copy): it is rebuilt from the journal
    client = sync_valkey(proxied.env["VALKEY_URL"])
    keys = list(client.scan_iter(match=f"{proxied.env['VALKEY_PREFIX']}{{{room}}}:*", count=1000))
    assert keys
    client.delete(*keys)
    client.close()

    def rebuilt() -> dict[str, Any] | None:
        with proxied.client() as c:
            r = c.get(f"/api/rooms/{room}/draw")
        if r.status_code == 503:
            return None
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body

    after = wait_until(rebuilt, timeout=30, what="the room rebuilt from the journal")
    assert after == before
    done = _verify(proxied.base_url, room)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.stores("valkey")
def test_a_drop_whose_sign_ups_went_to_shards_draws_and_rebuilds_as_one_room(proxied: Server) -> None:
    """``preQueueShards``: the sign-ups spread over hidden shard rooms, which nobody outside the store sees;
    the drop still draws everyone once, verifiably, and the room's journal alone rebuilds that draw."""
    room = unique_id("sharded")
    prefix = proxied.env["VALKEY_PREFIX"]
    with proxied.admin() as admin:
        create_room(admin, room, ratePerMinute=0, presenceSec=None, preQueueShards=3)
        _schedule(admin, room, 600_000)
    commitment = _draw(proxied, room)["commitment"]
    visitors = []
    for i in range(12):
        c = proxied.client(headers={"X-Forwarded-For": f"198.51.100.{i + 1}"})
        body = join(c, room).json()
        assert body["state"] == "scheduled" and body["handle"] and body["drawCommitment"] == commitment, body
        visitors.append((c, body["token"]))
    client = sync_valkey(proxied.env["VALKEY_URL"])
    shards = {k.decode().split("}")[0].split("{")[1] for k in client.scan_iter(match=f"{prefix}{{{room}~*", count=1000)}
    assert len(shards) == 2  # the room itself and two hidden shards
    held = sum(client.hlen(f"{prefix}{{{s}}}:pq") for s in shards)
    assert 0 < held < 12  # some sign-ups in the shards, some in the room
    time.sleep(1.1)  # the whole pre-queue's count is read again at most once a second
    handles = []
    for c, token in visitors:  # each answered from wherever their entry is, with the whole count
        s = status(c, room, token)
        assert s["state"] == "scheduled" and s["preCount"] == 12 and s["drawCommitment"] == commitment, s
        handles.append(s["handle"])
    with proxied.admin() as admin:
        listed = [r for r in admin.get("/api/admin/rooms").json()["rooms"] if r["id"].startswith(room)]
        assert [(r["id"], r["preQueue"], r["preQueueShards"]) for r in listed] == [(room, 12, 3)]
        hidden = admin.get(f"/api/admin/rooms/{sorted(shards)[0]}")
        assert hidden.status_code == 404, hidden.text
    views = _open(proxied, room, visitors)
    drawn = _draw(proxied, room)
    assert drawn["handles"] == sorted(handles) and drawn["state"] == "drawn"
    for handle, view in zip(handles, views, strict=True):
        assert drawn["order"][view["ticket"] - drawn["firstTicket"]] == handle
    done = _verify(proxied.base_url, room)
    assert done.returncode == 0, done.stdout + done.stderr

    def retired() -> bool:  # the shards are deleted once the room no longer wants them
        left = [k for s in shards for k in client.scan_iter(match=f"{prefix}{{{s}}}:*", count=1000)]
        return all(k.endswith(b":meta") for k in left)

    wait_until(retired, timeout=15, what="the shards retired")
    keys = list(client.scan_iter(match=f"{prefix}{{{room}}}:*", count=1000))
    client.delete(*keys)  # the room lost: rebuilt from its own journal, the shards' sign-ups included
    client.close()

    def rebuilt() -> dict[str, Any] | None:
        with proxied.client() as c:
            r = c.get(f"/api/rooms/{room}/draw")
        return None if r.status_code == 503 else r.json()

    assert wait_until(rebuilt, timeout=30, what="the room rebuilt from the journal") == drawn
    for (c, token), view in zip(visitors, views, strict=True):
        assert status(c, room, token)["ticket"] == view["ticket"]


@pytest.mark.stores("memory")
def test_pre_queue_shards_are_kept_and_change_nothing_on_the_memory_store(proxied: Server) -> None:
    room = unique_id("unsharded")
    with proxied.admin() as admin:
        made = create_room(admin, room, ratePerMinute=0, presenceSec=None, preQueueShards=4)
        assert made["preQueueShards"] == 4
        bad = admin.post("/api/admin/rooms", json={"id": room, "preQueueShards": 17})
        assert bad.status_code == 400 and bad.json()["code"] == "invalid_field"
        _schedule(admin, room, 600_000)
    visitors = [(c, join(c, room).json()["token"]) for c in (proxied.client() for _ in range(3))]
    views = _open(proxied, room, visitors)
    assert sorted(v["ticket"] for v in views) == [1, 2, 3]
