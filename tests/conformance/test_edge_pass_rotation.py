"""Edge-pass keys across a SECRET rotation, on two instances sharing Valkey and PostgreSQL (STORE=valkey).

A (SECRET=old) and B (SECRET=new, SECRET_PREVIOUS=old) serve the same rooms: B publishes both keys and
accepts passes of both; an instance without SECRET_PREVIOUS (the rotation over) refuses the old key's
passes as signed by an unknown key, and its key set holds the new key alone.
"""

from __future__ import annotations

import httpx
import pytest
from harness import Server, create_room, random_secret, start_server
from passkit import PUBLIC_KEY, Visitor, key_of, kid_of, parts

pytestmark = pytest.mark.stores("valkey")


def kids(srv: Server) -> list[str]:
    return [k["kid"] for k in httpx.get(f"{srv.base_url}/.well-known/jwks.json").json()["keys"]]


def test_both_keys_are_accepted_during_the_overlap_and_the_old_one_refused_after() -> None:
    old, new = random_secret(), random_secret()
    base = {"PASS_SIGNING": "ed25519", "PUBLIC_API_KEY": PUBLIC_KEY}
    a = start_server({**base, "SECRET": old})
    started = [a]
    try:
        shared = {k: a.env[k] for k in ("VALKEY_PREFIX", "PG_SCHEMA", "ADMIN_KEY")}
        b = start_server(
            {**base, **shared, "SECRET": new, "SECRET_PREVIOUS": old, "SPOOL_DIR": a.env["SPOOL_DIR"] + "-b"}
        )
        started.append(b)
        old_kid, new_kid = kid_of(key_of(old)), kid_of(key_of(new))
        assert kids(a) == [old_kid]
        assert kids(b) == [new_kid, old_kid]
        with a.admin() as admin:
            room_id = create_room(admin, ratePerMinute=600, sessionTtlSec=600)["id"]
        on_a = Visitor(a, room_id)
        first = on_a.check().json()
        assert first["admit"] is True
        old_pass = first["edgePass"]
        assert parts(old_pass)[0]["kid"] == old_kid
        on_b = Visitor(b, room_id)  # the same room, through the other instance
        on_b.srv = b
        new_pass = on_b.check().json()["edgePass"]
        assert parts(new_pass)[0]["kid"] == new_kid
        on_a.srv = b  # A's visitor now reaches B: B accepts the pass A signed
        assert "edgePassRefused" not in on_a.check(qm_pass=old_pass).json()
        assert "edgePassRefused" not in on_b.check(qm_pass=new_pass).json()
        on_b.srv = a  # and A, which never heard of the new key, names it unknown
        assert on_b.check(qm_pass=new_pass).json()["edgePassRefused"] == "unknown_kid"

        # the rotation is over: an instance without SECRET_PREVIOUS (started beside the others, since a
        # stopped test server takes its Valkey keys with it)
        after = start_server({**base, **shared, "SECRET": new, "SPOOL_DIR": a.env["SPOOL_DIR"] + "-c"})
        started.append(after)
        assert kids(after) == [new_kid]
        on_a.srv = on_b.srv = after
        assert on_a.check(qm_pass=old_pass).json()["edgePassRefused"] == "unknown_kid"
        assert "edgePassRefused" not in on_b.check(qm_pass=new_pass).json()
    finally:
        for srv in reversed(started):
            srv.stop()
