"""A seq nobody can recover, and the operator's way out (Valkey-only: memory keeps no journal).

An event lost with its writer *and* with Valkey (the writer killed before its commit, then Valkey lost
before the leader could commit it from the room's outbox — or a gap from a build without the outbox)
leaves the room's journal with a hole: a rebuild fences the room (503 everywhere). Made here by deleting
one join's row from the journal and the fleet's Valkey keys behind the servers' backs. Health names the
room and the way out; ``POST /api/admin/rooms/<room>/journal/void`` refuses what is no gap and closes
the hole, and the room is rebuilt with every other visitor in place.
"""

from __future__ import annotations

import subprocess

import pytest
from harness import create_room, join, start_server, sync_valkey, valkey_services, wait_until

pytestmark = pytest.mark.stores("valkey")


def _psql(sql: str) -> str:
    done = subprocess.run(
        ["psql", valkey_services()["database"], "-qtA", "-c", sql], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_lost_seq_fences_the_room_until_an_operator_voids_it() -> None:
    srv = start_server({"RESYNC_MS": "300"})
    try:
        with srv.admin() as admin, srv.client() as c:
            room = create_room(admin, ratePerMinute=0, queueMaxPerIp=None)["id"]
            tickets = [join(srv.client(), room).json()["ticket"] for _ in range(5)]
            assert tickets == [1, 2, 3, 4, 5]
            schema, prefix = srv.env["PG_SCHEMA"], srv.env["VALKEY_PREFIX"]
            lost = int(
                _psql(
                    f"SELECT seq FROM \"{schema}\".events WHERE room = '{room}' AND type = 'join' "
                    "AND (data->>'n')::int = 3"
                )
            )
            # nothing to void while the journal is whole
            r = admin.post(f"/api/admin/rooms/{room}/journal/void", json={"seqs": [lost]})
            assert r.status_code == 409 and r.json()["code"] == "not_missing", r.text
            # the third join's event is lost with its writer, and then Valkey loses the room
            _psql(f"DELETE FROM \"{schema}\".events WHERE room = '{room}' AND seq = {lost}")
            valkey = sync_valkey(srv.env["VALKEY_URL"])
            keys = list(valkey.scan_iter(match=f"{prefix}*"))
            valkey.delete(*keys)
            valkey.close()

            def fenced() -> dict[str, object] | None:
                h = admin.get("/api/admin/health").json()
                return h if h["backend"]["recovery"]["unrebuildable"].get(room) == "gap" else None

            health = wait_until(fenced, timeout=30, what="the rebuild fenced on the gap")
            assert join(c, room).status_code == 503
            assert any(room in i for i in health["incidents"]), health["incidents"]
            # what is no gap, or not a list of seqs, is refused
            for body, status, code in (
                ({"seqs": [lost + 1]}, 409, "not_missing"),
                ({"seqs": [10_000]}, 409, "not_missing"),
                ({"seqs": []}, 400, "bad_request"),
                ({"seqs": ["4"]}, 400, "bad_request"),
                ({"seq": [lost]}, 400, "bad_request"),
            ):
                r = admin.post(f"/api/admin/rooms/{room}/journal/void", json=body)
                assert (r.status_code, r.json()["code"]) == (status, code), (body, r.text)
            r = admin.post(f"/api/admin/rooms/{room}/journal/void", json={"seqs": [lost]})
            assert r.status_code == 200, r.text
            assert r.json()["voided"] == [lost] and r.json()["rebuilding"] is True

            def rebuilt() -> dict[str, object] | None:
                got = admin.get(f"/api/admin/rooms/{room}")
                return got.json()["room"] if got.status_code == 200 else None

            summary = wait_until(rebuilt, timeout=30, what="the room rebuilt from the journal")
            assert summary["waiting"] == 4
            for n in (1, 2, 4, 5):
                v = admin.get(f"/api/admin/rooms/{room}/visitors/{n}").json()["visitor"]
                assert v["state"] == "waiting", v
            assert admin.get(f"/api/admin/rooms/{room}/visitors/3").status_code == 404
            assert _psql(f"SELECT type FROM \"{schema}\".events WHERE room = '{room}' AND seq = {lost}") == "seq.void"
            audit = admin.get("/api/admin/audit", params={"roomId": room}).json()["audit"]
            voids = [e for e in audit if e["action"] == "journal.void"]
            assert voids and voids[0]["detail"]["seqs"] == [lost], audit
            assert join(c, room).status_code == 200  # and the room takes joins again
    finally:
        srv.stop()


def test_void_needs_a_journal() -> None:
    """On STORE=memory there is nothing to void: a clear 409, not a 500."""
    srv = start_server(store="memory")
    try:
        with srv.admin() as admin:
            room = create_room(admin)["id"]
            r = admin.post(f"/api/admin/rooms/{room}/journal/void", json={"seqs": [1]})
            assert r.status_code == 409 and r.json()["code"] == "no_journal", r.text
    finally:
        srv.stop()
