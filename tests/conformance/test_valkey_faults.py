"""Faults on STORE=valkey + SIDESTORE=pg, over HTTP only (Valkey-only: memory keeps nothing across a restart).

* kill -9 in the middle of a join surge: after a restart on the same Valkey and PostgreSQL, every
  acknowledged join is still in line, in order;
* PostgreSQL unreachable: joins answer 503 storage_unavailable (nothing acknowledged that is not
  journaled), and service comes back by itself when it returns.

PostgreSQL is cut without touching the shared server: the test server reaches it through a small TCP
relay the test owns, and the test closes the relay.
"""

from __future__ import annotations

import contextlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from harness import create_room, join, peer_env, start_server, status, sync_valkey, valkey_services, wait_until
from relay import Relay, relayed

pytestmark = pytest.mark.stores("valkey")  # memory keeps nothing across a restart and has no Valkey to cut


def relayed_database() -> contextlib.AbstractContextManager[tuple[Relay, str]]:
    return relayed(valkey_services()["database"], 5432)


def test_kill_9_mid_surge_keeps_every_acknowledged_join_in_order() -> None:
    srv = start_server()
    try:
        with srv.admin() as admin:
            room = create_room(admin, ratePerMinute=0, queueMaxPerIp=None)["id"]
        acknowledged: list[int] = []
        lock = threading.Lock()

        def one(_: int) -> None:
            try:
                with srv.client() as c:
                    r = join(c, room)
            except httpx.HTTPError:
                return  # in flight when the process died: never acknowledged
            if r.status_code == 200:
                with lock:
                    acknowledged.append(r.json()["ticket"])

        with ThreadPoolExecutor(16) as pool:
            futures = [pool.submit(one, i) for i in range(400)]
            wait_until(lambda: len(acknowledged) >= 100, timeout=30, what="100 acknowledged joins")
            srv.kill()  # SIGKILL: no clean stop, no final commit
            for f in futures:
                f.result()
        assert len(acknowledged) >= 100
        env = {k: srv.env[k] for k in ("VALKEY_PREFIX", "PG_SCHEMA", "SPOOL_DIR", "SECRET", "ADMIN_KEY")}
        again = start_server(env)  # the same Valkey prefix and schema: the same fleet state
        try:
            with again.admin() as admin:
                summary = admin.get(f"/api/admin/rooms/{room}").json()["room"]
                assert summary["waiting"] >= len(acknowledged)
                positions = []
                for n in sorted(acknowledged):
                    v = admin.get(f"/api/admin/rooms/{room}/visitors/{n}")
                    assert v.status_code == 200, (n, v.text)
                    body = v.json()["visitor"]
                    assert body["state"] == "waiting", body
                    positions.append(body["position"])
                assert positions == sorted(positions)  # in ticket order, none lost
        finally:
            again.stop()
    finally:
        srv.stop()


def test_postgres_unreachable_answers_503_then_recovers_by_itself() -> None:
    with relayed_database() as (relay, url):
        srv = start_server({"DATABASE_URL": url, "ALERT_EVERY_MS": "300"})
        try:
            with srv.admin() as admin, srv.client() as c:
                room = create_room(admin, ratePerMinute=0, queueMaxPerIp=None)["id"]
                first = join(c, room)
                assert first.status_code == 200
                token = first.json()["token"]
                relay.cut()
                refused = wait_until(
                    lambda: (r := join(srv.client(), room)).status_code == 503 and r,
                    timeout=30,
                    what="a join answered 503 while PostgreSQL is unreachable",
                )
                assert refused.json()["code"] == "storage_unavailable"
                assert "retry-after" in refused.headers
                assert "set-cookie" not in refused.headers  # nothing handed out
                waiting_during = admin.get(f"/api/admin/rooms/{room}").json()["room"]["waiting"]
                assert waiting_during == 1  # the refused joins were taken back
                # a fleet of one: the shared PostgreSQL is down for everybody, so the instance stays ready
                # (degraded), even after alert frames that each saw a failure of their own probe
                wait_until(
                    lambda: admin.get("/api/admin/health").json()["storage"]["journal"]["probeErrors"] >= 3,
                    timeout=30,
                    what="three alert frames probing the failing journal",
                )
                h = c.get("/healthz")
                assert h.status_code == 200 and h.json()["ready"] is True and h.json()["status"] == "degraded"
                incidents = admin.get("/api/admin/health").json()["incidents"]
                assert any(i.startswith("storage is degraded: events journal commit failed") for i in incidents)
                relay.restore()
                wait_until(
                    lambda: join(srv.client(), room).status_code == 200,
                    timeout=60,
                    what="joins succeed again once PostgreSQL is back",
                )
                mine = status(c, room, token)
                assert mine["state"] == "waiting" and mine["position"] == 1  # the acknowledged join kept its place
        finally:
            srv.stop()


def test_two_instances_round_robin_one_line_one_rate_one_numbering() -> None:
    a = start_server()
    try:
        b = start_server(peer_env(a))
        try:
            servers = [a, b]
            with a.admin() as admin:
                room = create_room(admin, ratePerMinute=0, queueMaxPerIp=None, presenceSec=None)["id"]
            tickets: list[tuple[int, str, int]] = []  # (ticket, token, instance that issued it)
            for i in range(40):
                with servers[i % 2].client() as c:
                    r = join(c, room)
                    assert r.status_code == 200, r.text
                    tickets.append((r.json()["ticket"], r.json()["token"], i % 2))
            numbers = [t for t, _, _ in tickets]
            assert numbers == list(range(1, 41))  # one set of ticket numbers across both instances
            for n, token, issued_by in tickets[::7]:  # either instance answers for a place the other issued
                other = servers[1 - issued_by]
                with other.client() as c:
                    assert status(c, room, token)["position"] == n
            # one rate: 60/min with both instances ticking lets ~1 a second through, not 2
            with b.admin() as admin_b:
                admin_b.post(f"/api/admin/rooms/{room}/rate", json={"ratePerMinute": 60}).raise_for_status()
            with a.admin() as admin:
                start = admin.get(f"/api/admin/rooms/{room}").json()["room"]["passesTotal"]
                wait_until(
                    lambda: admin.get(f"/api/admin/rooms/{room}").json()["room"]["passesTotal"] >= start + 6,
                    timeout=30,
                    what="six promotions",
                )
                t0 = time.monotonic()
                p0 = admin.get(f"/api/admin/rooms/{room}").json()["room"]["passesTotal"]
                time.sleep(6)
                p1 = admin.get(f"/api/admin/rooms/{room}").json()["room"]["passesTotal"]
                elapsed = time.monotonic() - t0
                # a count bound, not a timing one: at 60/min the room earns one slot per second of elapsed
                # time however the ticks fall; two tickers crediting independently would make it two
                assert p1 - p0 <= elapsed + 2, (p1 - p0, elapsed)
                assert p1 - p0 >= elapsed - 3, (p1 - p0, elapsed)
        finally:
            b.stop()
    finally:
        a.stop()


def test_valkey_flushed_rooms_are_rebuilt_from_the_journal_with_the_same_positions() -> None:
    srv = start_server({"RESYNC_MS": "500"})
    try:
        with srv.admin() as admin:
            room = create_room(admin, ratePerMinute=0, queueMaxPerIp=None, presenceSec=None)["id"]
            tokens = []
            for _ in range(12):
                with srv.client() as c:
                    r = join(c, room)
                    assert r.status_code == 200
                    tokens.append(r.json()["token"])
            eject = admin.post(f"/api/admin/rooms/{room}/eject", json={"ticket": 3})
            assert eject.status_code == 200
            before = []
            with srv.client() as c:
                for token in tokens:
                    before.append(status(c, room, token)["position"])
            # Valkey loses everything under this server's prefix (a flush, or a restore of an empty copy)
            client = sync_valkey(srv.env["VALKEY_URL"])
            keys = list(client.scan_iter(match=f"{srv.env['VALKEY_PREFIX']}*", count=1000))
            client.delete(*keys)
            client.close()
            # meanwhile the room answers 503 with Retry-After (never no_room), then it is back, the same
            seen_503 = False

            def rebuilt() -> bool:
                nonlocal seen_503
                with srv.client() as c:
                    r = c.get("/api/status", params={"roomId": room, "token": tokens[0]})
                if r.status_code == 503:
                    assert r.json()["code"] == "storage_unavailable" and "retry-after" in r.headers
                    seen_503 = True
                    return False
                assert r.status_code == 200, r.text  # never 404 no_room
                return r.json()["position"] is not None

            wait_until(rebuilt, timeout=30, what="the room rebuilt from the journal")
            after = []
            with srv.client() as c:
                for token in tokens:
                    after.append(status(c, room, token)["position"])
            assert after == before
            summary = admin.get(f"/api/admin/rooms/{room}").json()["room"]
            assert summary["waiting"] == 12
            assert summary["nextTicket"] == 13  # numbering continues where it stopped
    finally:
        srv.stop()


def _room_keys(client, srv, room: str) -> list[bytes]:
    return list(client.scan_iter(match=f"{srv.env['VALKEY_PREFIX']}{{{room}}}:*", count=1000))


def _save_room(client, srv, room: str) -> dict[bytes, tuple[bytes, int]]:
    """An older copy of the room's keys (DUMP), as a Valkey backup taken now would hold them."""
    saved = {}
    for key in _room_keys(client, srv, room):
        value = client.dump(key)
        if value is not None:
            saved[key] = (value, max(0, client.pttl(key)))
    return saved


def _restore_room(client, srv, room: str, saved: dict[bytes, tuple[bytes, int]]) -> None:
    """Valkey restored from that copy: keys made since are gone, the others hold their old values."""
    for key in _room_keys(client, srv, room):
        if key not in saved:
            client.delete(key)
    for key, (value, ttl) in saved.items():
        client.restore(key, ttl, value, replace=True)


def _joined(srv, room: str, count: int) -> list[str]:
    tokens = []
    for _ in range(count):
        with srv.client() as c:
            r = join(c, room)
            assert r.status_code == 200, r.text
            tokens.append(r.json()["token"])
    return tokens


def _positions(srv, room: str, tokens: list[str]) -> list[int | None]:
    with srv.client() as c:
        return [status(c, room, token)["position"] for token in tokens]


def test_valkey_rolled_back_a_change_on_the_old_state_answers_503_and_the_room_is_rebuilt() -> None:
    """Valkey restored from an older copy; the first change made on that old state reuses a seq the
    journal already holds: it is refused (503 storage_unavailable, Retry-After, never acknowledged), the
    room is fenced and rebuilt from the journal at once (RESYNC_MS is far away here)."""
    srv = start_server({"RESYNC_MS": "600000"})
    try:
        client = sync_valkey(srv.env["VALKEY_URL"])
        with srv.admin() as admin:
            room = create_room(admin, ratePerMinute=0, queueMaxPerIp=None, presenceSec=None)["id"]
            early = _joined(srv, room, 5)
            saved = _save_room(client, srv, room)  # the backup
            late = _joined(srv, room, 7)
            assert admin.post(f"/api/admin/rooms/{room}/eject", json={"ticket": 2}).status_code == 200
            before = _positions(srv, room, early + late)
            _restore_room(client, srv, room, saved)
            with srv.client() as c:
                refused = join(c, room)
            assert refused.status_code == 503, refused.text  # ticket 6 again, at a seq the journal holds
            assert refused.json()["code"] == "storage_unavailable" and "retry-after" in refused.headers
            assert "set-cookie" not in refused.headers

            def rebuilt() -> bool:
                with srv.client() as c:
                    r = c.get("/api/status", params={"roomId": room, "token": late[-1]})
                if r.status_code == 503:
                    assert r.json()["code"] == "storage_unavailable" and "retry-after" in r.headers
                    return False
                assert r.status_code == 200, r.text  # never no_room
                return r.json()["position"] is not None

            wait_until(rebuilt, timeout=30, what="the rolled-back room rebuilt from the journal")
            assert _positions(srv, room, early + late) == before
            summary = admin.get(f"/api/admin/rooms/{room}").json()["room"]
            assert summary["waiting"] == 12 and summary["nextTicket"] == 13
            with srv.client() as c:
                again = join(c, room)
            assert again.status_code == 200 and again.json()["ticket"] == 13
        client.close()
    finally:
        srv.stop()


def test_valkey_rolled_back_with_no_traffic_is_found_within_resync_and_rebuilt() -> None:
    """The same restore with nobody changing anything: the periodic check (every RESYNC_MS) sees the
    room's seq behind the journal's, fences it and rebuilds it; every acknowledged join is back in place."""
    srv = start_server({"RESYNC_MS": "500"})
    try:
        client = sync_valkey(srv.env["VALKEY_URL"])
        with srv.admin() as admin:
            room = create_room(admin, ratePerMinute=0, queueMaxPerIp=None, presenceSec=None)["id"]
            early = _joined(srv, room, 4)
            saved = _save_room(client, srv, room)
            late = _joined(srv, room, 6)
            before = _positions(srv, room, early + late)
            _restore_room(client, srv, room, saved)

            def rebuilt() -> bool:
                with srv.client() as c:
                    r = c.get("/api/status", params={"roomId": room, "token": late[-1]})
                if r.status_code == 503:
                    assert r.json()["code"] == "storage_unavailable" and "retry-after" in r.headers
                    return False
                assert r.status_code == 200, r.text
                return r.json()["position"] is not None

            wait_until(rebuilt, timeout=30, what="the rolled-back room found and rebuilt")
            assert _positions(srv, room, early + late) == before
            summary = admin.get(f"/api/admin/rooms/{room}").json()["room"]
            assert summary["waiting"] == 10 and summary["nextTicket"] == 11
        client.close()
    finally:
        srv.stop()


def _pair(a_env: dict[str, str], b_env: dict[str, str]):
    a = start_server(a_env)
    try:
        b = start_server({**peer_env(a), **b_env})
    except BaseException:
        a.stop()
        raise
    return a, b


def _operator_key(srv) -> tuple[str, str]:
    with srv.admin() as admin:
        r = admin.post("/api/admin/operators", json={"name": "night-ops", "role": "operator"})
        assert r.status_code == 201, r.text
        return r.json()["operator"]["id"], r.json()["key"]


def _as_key(srv, key: str) -> int:
    with srv.client(headers={"Authorization": f"Bearer {key}"}) as c:
        return c.get("/api/admin/rooms").status_code


def test_an_operator_revoked_on_one_instance_is_refused_by_the_other_at_the_hint() -> None:
    # RESYNC_MS far beyond the test: only the <prefix>ctl hint can make B drop its copy in time
    a, b = _pair({"RESYNC_MS": "600000"}, {"RESYNC_MS": "600000"})
    try:
        op_id, key = _operator_key(a)
        assert _as_key(b, key) == 200  # B reads the operators (its copy now holds this one)
        assert _as_key(b, key) == 200
        with a.admin() as admin:
            assert admin.delete(f"/api/admin/operators/{op_id}").status_code == 200
        wait_until(lambda: _as_key(b, key) == 401, timeout=5, what="B refuses the key revoked on A (hint)")
        assert _as_key(a, key) == 401
    finally:
        b.stop()
        a.stop()


def test_without_the_hint_the_other_instance_refuses_the_key_within_resync() -> None:
    # B does not subscribe to <prefix>ctl (as if every hint were lost): its RESYNC_MS re-read repairs it
    a, b = _pair({"RESYNC_MS": "600000"}, {"RESYNC_MS": "1500", "CTL_HINTS": "0"})
    try:
        op_id, key = _operator_key(a)
        assert _as_key(b, key) == 200
        with a.admin() as admin:
            assert admin.delete(f"/api/admin/operators/{op_id}").status_code == 200
        wait_until(lambda: _as_key(b, key) == 401, timeout=20, what="B refuses the revoked key after its re-read")
    finally:
        b.stop()
        a.stop()


def relayed_valkey() -> contextlib.AbstractContextManager[tuple[Relay, str]]:
    return relayed(valkey_services()["valkey"], 6379)


@pytest.mark.single_valkey("a relay cannot stall a cluster: its client reaches each node")
def test_valkey_unreachable_answers_503_at_once_instead_of_a_command_timeout_each() -> None:
    """Valkey stops answering (a black-holed link): after the first failure the server answers 503
    storage_unavailable at once, not after a command timeout per request; it recovers by itself."""
    with relayed_valkey() as (relay, url):
        srv = start_server({"VALKEY_URL": url, "RESYNC_MS": "600000"})
        try:
            with srv.admin() as admin, srv.client() as c:
                room = create_room(admin, ratePerMinute=0, queueMaxPerIp=None)["id"]
                first = join(c, room)
                assert first.status_code == 200
                token = first.json()["token"]
                relay.stall()
                with srv.client(timeout=60) as slow:  # the first failure may wait for its command timeout
                    r = slow.get("/api/status", params={"roomId": room, "token": token})
                assert r.status_code == 503 and r.json()["code"] == "storage_unavailable", r.text
                # Every request now would wait the command timeout (2 s) without the fast answer, so none
                # could answer within 1.5 s. With it, all do but a probe (one per 5 s hold).
                answered = []
                for _ in range(6):
                    try:
                        with srv.client(timeout=1.5) as quick:
                            answered.append(quick.get("/api/status", params={"roomId": room, "token": token}))
                    except httpx.TimeoutException:
                        continue  # that one was the probe
                assert len(answered) >= 4, len(answered)
                for r in answered:
                    assert r.status_code == 503 and r.json()["code"] == "storage_unavailable", r.text
                    assert int(r.headers["retry-after"]) >= 1
                with srv.client(timeout=10) as h:
                    assert h.get("/healthz").json()["backend"]["valkey"] == "down"
                relay.restore()

                def back() -> bool:
                    with srv.client(timeout=10) as c2:
                        r = c2.get("/api/status", params={"roomId": room, "token": token})
                    return r.status_code == 200 and r.json()["position"] == 1  # the place survived the outage

                wait_until(back, timeout=30, what="the room answers again once Valkey is back")
                with srv.client(timeout=10) as h:
                    wait_until(lambda: h.get("/healthz").json()["backend"]["valkey"] == "up", timeout=15)
        finally:
            relay.restore()
            srv.stop()


@pytest.mark.single_valkey("a relay cannot stall a cluster: its client reaches each node")
def test_on_backend_down_for_snippet_rooms_open_lets_through_closed_says_wait() -> None:
    """Valkey unreachable: /api/check answers 503 storage_unavailable at once (clients that fail open on
    a 5xx still do) and says what the room's onBackendDown wants: open admits, closed sends to wait."""
    with relayed_valkey() as (relay, url):
        srv = start_server({"VALKEY_URL": url, "RESYNC_MS": "600000"})
        try:
            with srv.admin() as admin, srv.client() as c:
                opened = create_room(admin, onBackendDown="open")["id"]
                closed = create_room(admin, onBackendDown="closed")["id"]
                for room in (opened, closed):  # this instance has seen both rooms' config
                    assert c.get("/api/check", params={"roomId": room}).status_code == 200
                relay.stall()
                with srv.client(timeout=60) as slow:  # the first failure (its command timeout)
                    assert slow.get("/api/status", params={"roomId": opened}).status_code == 503
                origin = {"Origin": "https://shop.example"}
                page = "https://shop.example/checkout"
                with srv.client(timeout=10) as quick:
                    r_open = quick.get("/api/check", params={"roomId": opened, "url": page}, headers=origin)
                    r_closed = quick.get("/api/check", params={"roomId": closed, "url": page}, headers=origin)
                for r in (r_open, r_closed):
                    assert r.status_code == 503 and r.json()["code"] == "storage_unavailable", r.text
                    assert int(r.headers["retry-after"]) >= 1
                    assert r.headers["access-control-allow-origin"] == "https://shop.example"  # the tag can read it
                assert r_open.json()["onBackendDown"] == "open" and r_open.json()["admit"] is True
                body = r_closed.json()
                assert body["onBackendDown"] == "closed" and body["admit"] is False
                assert body["reason"] == "backend_down"
                assert body["waitUrl"].endswith(f"/w/{closed}?qm_return=https%3A%2F%2Fshop.example%2Fcheckout")
                relay.restore()

                def back() -> bool:
                    with srv.client(timeout=10) as c2:
                        return c2.get("/api/check", params={"roomId": closed}).status_code == 200

                wait_until(back, timeout=30, what="door checks answered normally once Valkey is back")
        finally:
            relay.restore()
            srv.stop()


def test_the_forward_auth_gate_answers_per_on_backend_down_while_valkey_is_unreachable() -> None:
    """Valkey unreachable: GET /api/gate lets a proxy's request through for a room that fails open (200
    ``open``) and refuses it for one that fails closed: 403 for nginx (deny=401), a 503 page otherwise."""
    key = "pk-gate-faults-0123456789"
    with relayed_valkey() as (relay, url):
        srv = start_server({"VALKEY_URL": url, "RESYNC_MS": "600000", "PUBLIC_API_KEY": key})
        try:
            proxy = {
                "Authorization": f"Bearer {key}",
                "X-Original-URI": "/checkout",
                "X-Forwarded-Host": "shop.example",
                "X-Forwarded-Proto": "https",
                "X-Real-IP": "198.51.100.20",
            }
            with srv.admin() as admin, srv.client(headers=proxy) as c:
                opened = create_room(admin, onBackendDown="open")["id"]
                closed = create_room(admin, onBackendDown="closed")["id"]
                for room in (opened, closed):  # this instance has seen both rooms' config
                    assert c.get("/api/gate", params={"roomId": room}).headers["x-qm-decision"] == "wait"
                relay.stall()
                with srv.client(timeout=60) as slow:  # the first failure (its command timeout)
                    assert slow.get("/api/status", params={"roomId": opened}).status_code == 503
                with srv.client(timeout=10, headers=proxy) as quick:
                    r_open = quick.get("/api/gate", params={"roomId": opened})
                    r_nginx = quick.get("/api/gate", params={"roomId": closed})
                    r_caddy = quick.get("/api/gate", params={"roomId": closed, "deny": "302"})
                assert r_open.status_code == 200 and r_open.headers["x-qm-decision"] == "open", r_open.text
                assert r_nginx.status_code == 403 and r_nginx.headers["x-qm-decision"] == "closed"
                assert r_caddy.status_code == 503 and r_caddy.headers["x-qm-decision"] == "closed"
                assert int(r_caddy.headers["retry-after"]) >= 1 and "cannot be reached" in r_caddy.text
        finally:
            relay.restore()
            srv.stop()


def test_a_journal_failing_on_one_instance_only_takes_that_instance_out_of_rotation() -> None:
    """B reaches PostgreSQL through a relay that is cut; A reaches it directly and its storage is ok. After
    two alert frames that each saw a new failure, B is not ready (503 /healthz) and A still is; B comes
    back at the first probe that lands once PostgreSQL is reachable again."""
    with relayed_database() as (relay, url):
        a, b = _pair({"ALERT_EVERY_MS": "300"}, {"ALERT_EVERY_MS": "300", "DATABASE_URL": url})
        try:
            with a.admin() as admin:
                room = create_room(admin, ratePerMinute=0, queueMaxPerIp=None)["id"]
            with b.client() as c:
                assert join(c, room).status_code == 200
                assert c.get("/healthz").status_code == 200
                relay.cut()
                wait_until(lambda: join(b.client(), room).status_code == 503, timeout=30, what="B's join refused")

                def b_out() -> bool:
                    r = c.get("/healthz")
                    return r.status_code == 503 and r.json()["ready"] is False

                wait_until(b_out, timeout=30, what="B out of rotation")
                assert c.get("/healthz").json()["status"] == "degraded"
                with b.admin() as admin_b:
                    assert (
                        "storage is degraded on this instance only"
                        in admin_b.get("/api/admin/health").json()["incidents"]
                    )
            with a.client() as ca:
                r = ca.get("/healthz")
                assert r.status_code == 200 and r.json()["ready"] is True  # A's journal is fine
                assert join(ca, room).status_code == 200
            relay.restore()
            with b.client() as c:
                wait_until(lambda: c.get("/healthz").status_code == 200, timeout=30, what="B back in rotation")
                assert join(c, room).status_code == 200
        finally:
            b.stop()
            a.stop()


def test_the_leader_checkpoints_busy_rooms_so_a_rebuild_replays_a_bounded_tail() -> None:
    srv = start_server({"RESYNC_MS": "300", "CHECKPOINT_EVERY_EVENTS": "10", "CHECKPOINT_EVERY_MS": "3600000"})
    try:
        with srv.admin() as admin:
            room = create_room(admin, ratePerMinute=0, queueMaxPerIp=None, presenceSec=None)["id"]
            tokens = _joined(srv, room, 34)  # 35 events with room.create

            def checkpointed() -> int | None:
                last = admin.get("/api/admin/health").json()["backend"]["recovery"]["lastCheckpoint"]
                return last["seq"] if last and last["roomId"] == room and last["seq"] > 35 - 10 else None

            # every 10 events, checked every 300 ms: the newest checkpoint leaves fewer than 10 events after it
            base = wait_until(checkpointed, timeout=30, what="a checkpoint of the busy room")
            before = _positions(srv, room, tokens)
            client = sync_valkey(srv.env["VALKEY_URL"])
            keys = list(client.scan_iter(match=f"{srv.env['VALKEY_PREFIX']}*", count=1000))
            client.delete(*keys)
            client.close()

            def rebuilt() -> dict | None:
                r = admin.get("/api/admin/health")
                if r.status_code == 503 and r.json().get("code") == "storage_unavailable":
                    return None  # a store read met the room while it was being rebuilt: asked again
                assert r.status_code == 200, (r.status_code, r.text)
                last = r.json()["backend"]["recovery"]["lastRebuild"]
                return last if last and last["roomId"] == room else None

            last = wait_until(rebuilt, timeout=30, what="the room rebuilt")
            assert last["why"] == "lost"
            assert last["fromCheckpointSeq"] == base  # the newest checkpoint, not room.create
            assert last["events"] == 35 - base < 10  # and only the tail after it
            assert _positions(srv, room, tokens) == before
    finally:
        srv.stop()


def test_a_room_created_just_before_valkey_lost_it_answers_503_never_no_room_on_any_instance() -> None:
    """RESYNC_MS far beyond the test: the room is known as recovering from its own journaled creation
    (and, on the other instance, from the rooms hint), not from a periodic re-read."""
    a, b = _pair({"RESYNC_MS": "600000"}, {"RESYNC_MS": "600000"})
    try:
        with a.admin() as admin:
            room = create_room(admin, ratePerMinute=0, queueMaxPerIp=None)["id"]
        token = _joined(a, room, 1)[0]
        with b.client() as c:
            assert status(c, room, token)["position"] == 1
        client = sync_valkey(a.env["VALKEY_URL"])
        client.delete(*client.scan_iter(match=f"{a.env['VALKEY_PREFIX']}*", count=1000))
        client.close()
        asks = (("/api/status", {"roomId": room, "token": token}), ("/api/check", {"roomId": room}))
        for srv in (a, b):
            with srv.client() as c:
                for path, params in asks:
                    r = c.get(path, params=params)
                    assert r.status_code == 503, (srv, path, r.status_code, r.text)
                    assert r.json()["code"] == "storage_unavailable" and "retry-after" in r.headers
    finally:
        b.stop()
        a.stop()


@pytest.mark.single_valkey("a relay cannot stall a cluster: its client reaches each node")
def test_during_an_outage_an_instance_answers_per_the_newest_on_backend_down_it_saw() -> None:
    """B saw the room as closed; A switches it to open and B reads the room again (the guide: make the
    change ahead of the outage); when B's Valkey link then fails, B answers per the new value, from its
    own copy of the config."""
    with relayed_valkey() as (relay, url):
        a, b = _pair({"RESYNC_MS": "600000"}, {"RESYNC_MS": "600000", "VALKEY_URL": url})
        try:
            with a.admin() as admin:
                room = create_room(admin, onBackendDown="closed")["id"]
            with b.client() as c:
                assert c.get("/api/check", params={"roomId": room}).status_code == 200  # B's copy: closed
            with a.admin() as admin:
                r = admin.post("/api/admin/rooms", json={"id": room, "onBackendDown": "open"})
                assert r.status_code == 200, r.text

            with b.admin() as admin_b:
                assert admin_b.get(f"/api/admin/rooms/{room}").json()["room"]["onBackendDown"] == "open"
            relay.stall()
            with b.client(timeout=60) as slow:  # the first failure (its command timeout)
                assert slow.get("/api/status", params={"roomId": room}).status_code == 503
            with b.client(timeout=10) as quick:
                r = quick.get("/api/check", params={"roomId": room})
            assert r.status_code == 503 and r.json()["onBackendDown"] == "open" and r.json()["admit"] is True
        finally:
            relay.restore()
            b.stop()
            a.stop()


def test_a_room_whose_journal_this_build_cannot_read_stays_fenced_and_is_reported() -> None:
    """A journal event from a newer build (lv above ours) and Valkey flushed: the rebuild fences instead of
    skipping the event; the room answers 503 storage_unavailable (never no_room) and /healthz counts it in
    recoveringRooms (status degraded, still ready); /api/admin/health names it."""
    import asyncio

    import asyncpg

    srv = start_server({"RESYNC_MS": "300"})
    try:
        with srv.admin() as admin:
            room = create_room(admin, ratePerMinute=0, queueMaxPerIp=None)["id"]
        token = _joined(srv, room, 1)[0]

        async def newer_event() -> None:
            conn = await asyncpg.connect(srv.env["DATABASE_URL"])
            try:
                schema = srv.env["PG_SCHEMA"]
                head = await conn.fetchval(f'SELECT max(seq) FROM "{schema}".events WHERE room = $1', room)
                await conn.execute(
                    f'INSERT INTO "{schema}".events (room, gen, seq, type, lv, ts, data, instance) '
                    "VALUES ($1, 1, $2, 'join', 99, 1, '{}'::jsonb, 'a-newer-build')",
                    room,
                    head + 1,
                )
            finally:
                await conn.close()

        asyncio.run(newer_event())
        client = sync_valkey(srv.env["VALKEY_URL"])
        client.delete(*client.scan_iter(match=f"{srv.env['VALKEY_PREFIX']}*", count=1000))
        client.close()
        with srv.client() as c:
            wait_until(lambda: c.get("/healthz").json()["backend"]["recoveringRooms"] == 1, timeout=30)
            h = c.get("/healthz")
            assert h.status_code == 200 and h.json()["ready"] is True and h.json()["status"] == "degraded"
            r = c.get("/api/status", params={"roomId": room, "token": token})
            assert r.status_code == 503 and r.json()["code"] == "storage_unavailable" and "retry-after" in r.headers
        with srv.admin() as admin:
            health = admin.get("/api/admin/health").json()
        assert health["backend"]["recovering"] == [room]
        assert health["backend"]["recovery"]["unrebuildable"] == {room: "newer_lv"}
        assert f"rooms being rebuilt from the journal: {room}" in health["incidents"]
    finally:
        srv.stop()
