"""Edge passes: signing, every refusal, rotation between SECRET and SECRET_PREVIOUS, the key set."""

from __future__ import annotations

import asyncio
import hashlib

import orjson
import pytest

from queue_manager.clock import FakeClock
from queue_manager.edgepass import PassError, PassSigner, binding_of
from queue_manager.sidestores.revocations.memory import MemoryRevocations
from queue_manager.tokens import b64url_decode, b64url_encode

SECRET = "current-secret-0123456789"
OLD = "old-secret-abcdefghijklmn"
DOOR = bytes(range(16))


def signer(secret: str = SECRET, clock: FakeClock | None = None, previous: str | None = None) -> PassSigner:
    return PassSigner(secret, clock or FakeClock(), previous=previous)


def claims_of(token: str) -> dict[str, object]:
    data = orjson.loads(b64url_decode(token.split(".")[1]))
    assert isinstance(data, dict)
    return data


def test_a_pass_verifies_for_its_room_and_door_until_it_expires() -> None:
    clock = FakeClock()
    s = signer(clock=clock)
    exp = clock.wall_ms() // 1000 + 60
    token = s.sign("shop", 3, 17, DOOR, exp)
    got = s.verify(token, "shop", door_hash=DOOR)
    assert (got.room, got.gen, got.bnd, got.exp, got.kid) == ("shop", 3, binding_of(DOOR), exp, s.kid)
    assert got.sub == s.pass_ids("shop", 3, 17)[0] and len(got.sub) == 16
    with pytest.raises(PassError) as err:
        s.verify(token, "other")
    assert err.value.reason == "wrong_room"
    with pytest.raises(PassError) as err:
        s.verify(token, "shop", door_hash=bytes(16))
    assert err.value.reason == "unbound"
    with pytest.raises(PassError) as err:
        s.verify(token, "shop", revoked=[got.sub])
    assert err.value.reason == "revoked"
    with pytest.raises(PassError) as err:
        s.verify(token, "shop", generation=4)
    assert err.value.reason == "revoked"
    clock.advance(59.9)
    s.verify(token, "shop")
    clock.advance(0.1)
    with pytest.raises(PassError) as err:
        s.verify(token, "shop")
    assert err.value.reason == "expired"


@pytest.mark.parametrize(
    ("mangle", "reason"),
    [
        (lambda t: t.rsplit(".", 1)[0], "malformed"),
        (lambda t: "x" + t, "malformed"),
        (lambda t: t.replace(".", "..", 1), "malformed"),
        (lambda t: 5, "malformed"),
    ],
)
def test_a_mangled_pass_is_refused(mangle: object, reason: str) -> None:
    s = signer()
    token = s.sign("shop", 1, 1, DOOR, FakeClock().wall_ms() // 1000 + 60)
    with pytest.raises(PassError) as err:
        s.verify(mangle(token), "shop")  # type: ignore[operator]
    assert err.value.reason == reason


def test_changed_claims_break_the_signature() -> None:
    s = signer()
    token = s.sign("shop", 1, 1, DOOR, FakeClock().wall_ms() // 1000 + 60)
    h, _, sig = token.split(".")
    forged = {**claims_of(token), "exp": 9_999_999_999}
    with pytest.raises(PassError) as err:
        s.verify(f"{h}.{b64url_encode(orjson.dumps(forged))}.{sig}", "shop")
    assert err.value.reason == "bad_signature"


def test_rotation_accepts_the_previous_key_only_while_it_is_set() -> None:
    clock = FakeClock()
    exp = clock.wall_ms() // 1000 + 60
    old = signer(OLD, clock)
    new = signer(SECRET, clock, previous=OLD)
    after = signer(SECRET, clock)
    old_pass, new_pass = old.sign("shop", 1, 9, DOOR, exp), new.sign("shop", 1, 9, DOOR, exp)
    assert new.verify(old_pass, "shop").kid == old.kid != new.kid
    assert new.verify(new_pass, "shop").kid == new.kid
    assert [k["kid"] for k in new.jwks()["keys"]] == [new.kid, old.kid]
    assert new.pass_ids("shop", 1, 9) == [after.pass_ids("shop", 1, 9)[0], old.pass_ids("shop", 1, 9)[0]]
    with pytest.raises(PassError) as err:
        after.verify(old_pass, "shop")
    assert err.value.reason == "unknown_kid"
    assert after.verify(new_pass, "shop").kid == after.kid
    assert [k["kid"] for k in after.jwks()["keys"]] == [after.kid]


def test_the_same_secret_gives_every_instance_the_same_key() -> None:
    a, b = signer(), signer()
    assert a.jwks() == b.jwks()
    thumbprint = orjson.dumps({"crv": "Ed25519", "kty": "OKP", "x": a.jwks()["keys"][0]["x"]})
    assert a.kid == b64url_encode(hashlib.sha256(thumbprint).digest())
    assert signer(OLD).kid != a.kid


def test_the_memory_revocation_list_forgets_an_entry_when_its_passes_are_gone() -> None:
    clock = FakeClock()
    revs = MemoryRevocations(clock)

    async def run() -> None:
        await revs.revoke("shop", ["b", "a"], clock.wall_ms() + 1000)
        await revs.revoke("shop", ["c"], clock.wall_ms() + 3000)
        assert await revs.revoked("shop") == ["a", "b", "c"]
        assert await revs.revoked("other") == []
        clock.advance(1)
        assert await revs.revoked("shop") == ["c"]
        clock.advance(2)
        assert await revs.revoked("shop") == []

    asyncio.run(run())
