"""A room's entry across two instances on STORE=valkey: the key made on one verifies on the other, a token
used on one is used on both, a user key has one place whichever instance it joins, a code is spent once for
the fleet; and the keys and codes survive a restart (PostgreSQL). Over HTTP only; memory keeps them in the
process, so these run on Valkey alone."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from harness import Server, create_room, join, peer_env, start_server
from invites import claims, entry_key, sign

pytestmark = pytest.mark.stores("valkey")

SHARED = ("VALKEY_PREFIX", "PG_SCHEMA", "SECRET", "ADMIN_KEY")


@contextmanager
def pair() -> Iterator[tuple[Server, Server]]:
    a = start_server()
    try:
        b = start_server(peer_env(a))
        try:
            yield a, b
        finally:
            b.stop()
    finally:
        a.stop()


def test_keys_tokens_places_and_codes_are_the_fleets() -> None:
    with pair() as (a, b), a.admin() as admin_a, b.admin() as admin_b:
        room = create_room(admin_a, ratePerMinute=0, entry="token")["id"]
        key = entry_key(admin_a, room)  # made on a
        token = sign(key["key"], key["kid"], claims(room, "dana"))
        with b.client() as on_b, a.client(headers={"User-Agent": "other/1"}) as on_a:
            first = join(on_b, room, token=token)  # verified on b
            assert first.status_code == 200, first.text
            again = join(on_a, room, token=token)  # spent for the fleet
            assert again.status_code == 403 and again.json()["code"] == "token_used"
            other_device = join(on_a, room, token=sign(key["key"], key["kid"], claims(room, "dana")))
            assert other_device.json()["ticket"] == first.json()["ticket"]  # one place per user key
        # a rotation on b: a's cached keys give way within their few seconds, the old key keeps working
        newer = entry_key(admin_b, room)
        assert newer["previousKid"] == key["kid"]
        with a.client() as v:
            assert join(v, room, token=sign(key["key"], key["kid"], claims(room))).status_code == 200

        admin_a.post("/api/admin/rooms", json={"id": room, "entry": "code"}).raise_for_status()
        (code,) = admin_b.post(f"/api/admin/rooms/{room}/codes", json={"count": 1}).json()["codes"]
        with a.client() as one, b.client(headers={"User-Agent": "two/1"}) as two:
            assert join(one, room, code=code).status_code == 200
            late = join(two, room, code=code)
            assert late.status_code == 403 and late.json()["code"] == "code_used_up"
        counts = admin_b.get(f"/api/admin/rooms/{room}").json()["room"]["entryCounts"]
        assert counts["tokensAccepted"] == 3 and counts["tokensRefused"] == {"token_used": 1}
        assert counts["codesRedeemed"] == 1 and counts["codesRefused"] == {"code_used_up": 1}


def test_keys_and_codes_survive_a_restart() -> None:
    srv = start_server()
    again: Server | None = None
    try:
        with srv.admin() as admin:
            room = create_room(admin, ratePerMinute=0, entry="code")["id"]
            key = entry_key(admin, room)
            codes = admin.post(f"/api/admin/rooms/{room}/codes", json={"count": 2}).json()["codes"]
        # a clean stop (SIGTERM), leaving the Valkey prefix and the schema in place
        srv.proc.send_signal(signal.SIGTERM)
        assert srv.wait() == 0, srv.stderr
        again = start_server({k: srv.env[k] for k in SHARED} | {"SPOOL_DIR": srv.env["SPOOL_DIR"] + "-2"})
        with again.client() as v, again.client(headers={"User-Agent": "w/1"}) as w:
            assert join(v, room, code=codes[0]).status_code == 200
            assert join(w, room, token=sign(key["key"], key["kid"], claims(room))).status_code == 200
    finally:
        if again is not None:
            again.stop()
        srv.stop()
