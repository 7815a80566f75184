"""The backup and restore drill of the Operations guide, on real processes (valkey+pg only).

* The drill: an instance on its own schema and Valkey prefix gets rooms, joins, admissions and an
  ejection, and is stopped cleanly; its schema is dumped with the machine's ``pg_dump`` and restored
  into a NEW database; an instance on that database under an EMPTY Valkey prefix rebuilds every room
  from the journal: the per-room figures on ``/api/admin/rooms`` match the original's, and a ticket
  from before the backup holds its place (same SECRET).
  A room's logo, set once and kept through rate changes (journaled once, then by reference), comes
  back with the same bytes.
* Never restore under a newer Valkey: the same dump restored while Valkey has moved on (more joins
  after the backup), with the instance started on the SAME prefix. The rooms are not rebuilt from the
  older journal: ``/api/admin/health`` names them (an incident and ``backend.aheadOfJournal``), storage
  reads not ok, and the way out (a new VALKEY_PREFIX or flushing the prefix) is said.

Each restored database has a unique name ending in ``_test`` and is dropped at the end.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import struct
import subprocess
import uuid
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
from harness import Server, create_room, join, status, valkey_services, wait_until

ServerFactory = Callable[..., Server]

pytestmark = pytest.mark.stores("valkey")  # memory keeps nothing to back up: a restart starts empty

# the per-room figures a restore must bring back as they were (live counters such as joinsLastMinute,
# oldestWaitSec and estWaitSec move with the clock and are left out)
KEPT = ("effectiveState", "generation", "waiting", "passesTotal", "nextTicket", "ratePerMinute", "paused")


def logo_png() -> bytes:
    """A small PNG of distinct pixels (the logo the drill's empty room carries)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    raw = b"".join(b"\x00" + bytes((x * 7 + y * 13) % 256 for x in range(48)) for y in range(16))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 16, 16, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def _pg_tool(name: str) -> str:
    found = shutil.which(name) or (
        f"/usr/lib/postgresql/15/bin/{name}" if Path(f"/usr/lib/postgresql/15/bin/{name}").exists() else None
    )
    if found is None:
        pytest.skip(f"no {name} on this machine (PATH or /usr/lib/postgresql/15/bin): the drill needs it")
    return found


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def _psql(url: str, sql: str) -> str:
    done = subprocess.run(
        [_pg_tool("psql"), url, "-v", "ON_ERROR_STOP=1", "-AtXqc", sql],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return done.stdout.strip()


def dump_schema(url: str, schema: str) -> bytes:
    """``pg_dump --schema`` of one schema, plain SQL (what an operator keeps as a backup)."""
    done = subprocess.run(
        [_pg_tool("pg_dump"), f"--schema={schema}", "--no-owner", "--no-privileges", url],
        capture_output=True,
        timeout=60,
        check=True,
    )
    return done.stdout


@contextlib.contextmanager
def restored(dump: bytes) -> Iterator[str]:
    """``dump`` restored into a new database; yields its URL; the database is dropped afterwards."""
    base = valkey_services()["database"]
    name = f"qm_restore_{uuid.uuid4().hex[:10]}_test"
    admin_url = _with_database(base, "postgres")
    _psql(admin_url, f"CREATE DATABASE {name}")
    try:
        url = _with_database(base, name)
        subprocess.run(
            [_pg_tool("psql"), url, "-v", "ON_ERROR_STOP=1", "-qX"],
            input=dump,
            capture_output=True,
            timeout=60,
            check=True,
        )
        yield url
    finally:
        _psql(admin_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def stop_cleanly(srv: Server) -> None:
    """The guide's clean stop (POST /api/admin/shutdown), keeping the Valkey keys and the schema
    (``srv.stop()`` at the end of the test drops them)."""
    with srv.admin() as admin:
        assert admin.post("/api/admin/shutdown").json()["stopping"] is True
    srv.proc.wait(30)  # generous: a loaded machine stops slower than an idle one


def figures(srv: Server) -> dict[str, dict[str, Any]]:
    with srv.admin() as admin:
        rooms = admin.get("/api/admin/rooms").json()["rooms"]
    return {r["id"]: {k: r.get(k) for k in KEPT} for r in rooms}


def seed(srv: Server) -> tuple[list[str], dict[str, str]]:
    """Three rooms: one with a plain line and an ejection, one that admitted visitors and was then paused
    with a line behind them, one empty. Returns the rooms and a waiting visitor's token per room."""
    tokens: dict[str, str] = {}
    with srv.admin() as admin:
        line = create_room(admin, ratePerMinute=0, queueMaxPerIp=None)["id"]
        for _ in range(6):
            with srv.client() as c:
                r = join(c, line)
                assert r.status_code == 200, r.text
                tokens[line] = r.json()["token"]
        assert admin.post(f"/api/admin/rooms/{line}/eject", json={"ticket": 2}).status_code == 200
        flow = create_room(admin, ratePerMinute=6000, queueMaxPerIp=None, presenceSec=None)["id"]
        for _ in range(3):
            with srv.client() as c:
                assert join(c, flow).status_code == 200
        wait_until(
            lambda: admin.get(f"/api/admin/rooms/{flow}").json()["room"]["passesTotal"] >= 3,
            timeout=10,
            what="three visitors let through",
        )
        assert admin.post(f"/api/admin/rooms/{flow}/pause").status_code == 200
        for _ in range(4):
            with srv.client() as c:
                r = join(c, flow)
                assert r.status_code == 200, r.text
                tokens[flow] = r.json()["token"]
        empty = create_room(admin, ratePerMinute=30, queueMaxPerIp=None)["id"]
        set_logo = admin.post(
            f"/api/admin/rooms/{empty}/logo", content=logo_png(), headers={"content-type": "image/png"}
        )
        assert set_logo.status_code == 200, set_logo.text
        for rate in (31, 32, 33):  # room changes that keep the logo: journaled by reference
            assert admin.post("/api/admin/rooms", json={"id": empty, "ratePerMinute": rate}).status_code == 200
    return [line, flow, empty], tokens


def test_restore_drill_into_a_new_database_under_an_empty_prefix(make_server: ServerFactory) -> None:
    original = make_server({"RESYNC_MS": "300"})
    rooms, tokens = seed(original)
    before = figures(original)
    with original.client() as c:
        places = {room: status(c, room, token)["position"] for room, token in tokens.items()}
    assert sorted(before) == sorted(rooms)
    stop_cleanly(original)
    dump = dump_schema(original.env["DATABASE_URL"], original.env["PG_SCHEMA"])
    with restored(dump) as url:
        again = make_server(
            {
                "DATABASE_URL": url,
                "PG_SCHEMA": original.env["PG_SCHEMA"],  # the dump's schema; a VALKEY_PREFIX of its own
                "SECRET": original.secret,
                "ADMIN_KEY": original.admin_key,
                "RESYNC_MS": "300",
            }
        )
        assert again.env["VALKEY_PREFIX"] != original.env["VALKEY_PREFIX"]

        def rebuilt() -> dict[str, dict[str, Any]] | None:
            now = figures(again)
            return now if sorted(now) == sorted(rooms) else None

        after = wait_until(
            rebuilt,
            timeout=10,
            what="every room rebuilt from the restored journal",
        )
        assert after == before
        with again.client() as c:
            for room, token in tokens.items():
                s = status(c, room, token)
                assert s["state"] == "waiting" and s["position"] == places[room], (room, s)
        with again.admin() as admin:
            health = admin.get("/api/admin/health").json()
            logo = admin.get(f"/api/admin/rooms/{rooms[2]}").json()["room"]["brand"]["logo"]
        assert health["storage"]["ok"] is True
        assert health["backend"]["roomsAheadOfJournal"] == 0 and health["backend"]["aheadOfJournal"] == {}
        assert health["backend"]["recovery"]["logosLost"] == 0
        assert logo["sha256"] == hashlib.sha256(logo_png()).hexdigest()
        with again.client() as c:  # the bytes themselves, as the waiting page serves them
            served = c.get(f"/w/{rooms[2]}/logo-{logo['sha256'][:16]}.png", headers={"accept-encoding": "identity"})
        assert served.status_code == 200 and served.content == logo_png()
        again.stop()


def test_a_restore_under_a_newer_valkey_is_reported_and_not_rebuilt(make_server: ServerFactory) -> None:
    original = make_server({"RESYNC_MS": "300"})
    rooms, _tokens = seed(original)
    dump = dump_schema(original.env["DATABASE_URL"], original.env["PG_SCHEMA"])  # the backup
    line = rooms[0]
    with original.admin() as admin:  # Valkey and the journal move on after the backup
        for _ in range(5):
            with original.client() as c:
                assert join(c, line).status_code == 200
        newer = admin.get(f"/api/admin/rooms/{line}").json()["room"]["waiting"]
        late = create_room(admin, ratePerMinute=0, queueMaxPerIp=None)["id"]  # not in the backup at all
    stop_cleanly(original)
    with restored(dump) as url:
        again = make_server(
            {
                "DATABASE_URL": url,
                "PG_SCHEMA": original.env["PG_SCHEMA"],
                "VALKEY_PREFIX": original.env["VALKEY_PREFIX"],  # the SAME, newer, Valkey state
                "SECRET": original.secret,
                "ADMIN_KEY": original.admin_key,
                "RESYNC_MS": "300",
            }
        )

        def reported() -> dict[str, Any] | None:
            with again.admin() as admin:
                body: dict[str, Any] = admin.get("/api/admin/health").json()
            return body if body["backend"].get("aheadOfJournal") else None

        health = wait_until(reported, timeout=10, what="the rooms ahead of the journal reported")
        ahead = health["backend"]["aheadOfJournal"]
        assert line in ahead and late in ahead, ahead
        assert rooms[2] not in ahead, ahead  # untouched since the backup: its journal is whole
        assert ahead[line]["journal"][1] < ahead[line]["journalSeen"][1] <= ahead[line]["valkey"][1], ahead[line]
        assert ahead[late]["journal"] is None, ahead[late]  # the restored journal never heard of it
        text = " ".join(health["incidents"])
        assert line in text and "ahead of the events journal" in text and "VALKEY_PREFIX" in text, text
        assert health["storage"]["ok"] is False and health["status"] == "degraded"
        with again.admin() as admin:
            summary = admin.get(f"/api/admin/rooms/{line}").json()["room"]
            public = httpx.get(again.base_url + "/healthz", timeout=5).json()
        assert summary["waiting"] == newer  # Valkey's state, not silently replaced by the older journal's
        assert public["status"] == "degraded"
        assert health["backend"]["recovery"]["rebuilt"] == 0
        assert sorted(health["storage"]["roomsAheadOfJournal"]) == sorted(ahead)
        # new joins carry the journal past the old mark (with a gap in it): the room stays reported
        for _ in range(8):
            with again.client() as c:
                assert join(c, line).status_code == 200

        def past_the_mark() -> dict[str, Any] | None:
            body = reported()
            entry = body["backend"]["aheadOfJournal"].get(line) if body else None
            return body if entry and entry["journal"] > entry["journalSeen"] else None

        still = wait_until(past_the_mark, timeout=10, what="the journal past its old mark, the room still reported")
        assert line in " ".join(still["incidents"])
        again.stop()
