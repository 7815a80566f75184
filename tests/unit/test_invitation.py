"""Invitation tokens and entry codes, pure: a token signed as a site signs it verifies, and each way it can be
wrong has its refusal code; a key sealed under SECRET opens under it (or SECRET_PREVIOUS) only; codes are
made, read loosely and hashed; an uploaded CSV's rows are checked."""

from __future__ import annotations

import pytest

from queue_manager import entrycode
from queue_manager.invitation import (
    InvitationError,
    looks_like_invitation,
    new_key,
    seal,
    sign,
    unseal,
    verify,
)
from queue_manager.routes.csvout import read

NOW = 1_800_000_000
KID, KEY = "a1b2c3d4e5f6", "k" * 43


def claims(**extra: object) -> dict[str, object]:
    return {"room": "shop", "sub": "u-1", "exp": NOW + 600, "jti": "j-1", **extra}


def check(token: str, key: str | None = KEY, ip: str = "203.0.113.5") -> object:
    return verify(token, key, room_id="shop", now_sec=NOW, client_ip=ip)


def refused(token: str, code: str, key: str | None = KEY, ip: str = "203.0.113.5") -> None:
    with pytest.raises(InvitationError) as err:
        check(token, key, ip)
    assert err.value.code == code, err.value.message


def test_a_token_signed_as_a_site_signs_it_verifies() -> None:
    found = verify(
        sign(KEY, KID, claims(lane="vip", ip="203.0.113.5", iat=NOW)),
        KEY,
        room_id="shop",
        now_sec=NOW,
        client_ip="::ffff:203.0.113.5",  # the same address, as an IPv4-mapped one
    )
    assert (found.sub, found.jti, found.kid, found.lane, found.exp) == ("u-1", "j-1", KID, "vip", NOW + 600)


@pytest.mark.parametrize(
    ("token", "code"),
    [
        (sign(KEY, KID, claims())[:-2] + "AA", "token_invalid"),  # tampered
        (sign("another-key", KID, claims()), "token_invalid"),
        (sign(KEY, KID, claims(exp=NOW + 24 * 3600 + 1)), "token_invalid"),
        (sign(KEY, KID, claims(iat=NOW - 10, exp=NOW + 24 * 3600)), "token_invalid"),  # 24 h and 10 s
        (sign(KEY, KID, claims(exp=NOW)), "token_expired"),
        (sign(KEY, KID, claims(exp="soon")), "token_invalid"),
        (sign(KEY, KID, claims(exp=True)), "token_invalid"),
        (sign(KEY, KID, {**claims(), "sub": ""}), "token_invalid"),
        (sign(KEY, KID, {k: v for k, v in claims().items() if k != "jti"}), "token_invalid"),
        (sign(KEY, KID, claims(lane="Not a lane")), "token_invalid"),
        (sign(KEY, KID, claims(ip="not-an-address")), "token_invalid"),
        (sign(KEY, KID, claims(ip="198.51.100.1")), "token_ip_mismatch"),
        (sign(KEY, KID, claims(room="other")), "token_wrong_room"),
        ("eyJhbGciOiJub25lIn0.e30.", "token_invalid"),
        ("not a token", "token_invalid"),
    ],
)
def test_each_wrong_token_has_its_code(token: str, code: str) -> None:
    refused(token, code)


def test_a_kid_the_room_does_not_have() -> None:
    refused(sign(KEY, KID, claims()), "token_invalid", key=None)
    refused(sign(KEY, KID, claims(room="other")), "token_wrong_room", key=None)


def test_only_hs256() -> None:
    import base64
    import json

    head = base64.urlsafe_b64encode(json.dumps({"alg": "HS512", "kid": KID}).encode()).rstrip(b"=").decode()
    body = sign(KEY, KID, claims()).split(".", 1)[1]
    refused(f"{head}.{body}", "token_invalid")


def test_what_looks_like_an_invitation() -> None:
    assert looks_like_invitation(sign(KEY, KID, claims()))
    assert not looks_like_invitation("eyJwYXlsb2Fk.c2ln")  # a ticket or a pass: two parts
    assert not looks_like_invitation(".eyJ.c2ln") and not looks_like_invitation("a.b.c")


def test_a_sealed_key_opens_under_its_secret_room_and_kid_only() -> None:
    kid, key = new_key()
    assert len(kid) == 12 and len(key) == 43
    sealed = seal("secret-now", "shop", kid, key)
    assert key.encode() not in sealed
    assert unseal(("secret-now",), "shop", kid, sealed) == key
    assert unseal(("rotated", "secret-now"), "shop", kid, sealed) == key  # SECRET_PREVIOUS still opens it
    assert unseal(("another",), "shop", kid, sealed) is None
    assert unseal(("secret-now",), "other", kid, sealed) is None  # moved to another room: refused
    assert unseal(("secret-now",), "shop", "other-kid", sealed) is None


def test_codes_are_made_read_loosely_and_hashed() -> None:
    made = entrycode.generate(50)
    assert len(set(made)) == 50
    assert all(len(c) == 11 and c[5] == "-" and set(c.replace("-", "")) <= set(entrycode.ALPHABET) for c in made)
    assert entrycode.normalise("7kq2m-x9d4b") == entrycode.normalise(" 7KQ2M X9D4B ") == "7KQ2MX9D4B"
    assert entrycode.normalise("OIL0-1") == "01101"  # Crockford's look-alikes
    assert entrycode.normalise("ab") is None and entrycode.normalise("a" * 65) is None
    assert entrycode.normalise("bad!code") is None
    salt = b"s" * 16
    assert entrycode.hashed(salt, "ABCD") != entrycode.hashed(b"t" * 16, "ABCD")
    assert len(entrycode.hashed(salt, "ABCD")) == 32


def test_an_uploaded_csv_is_checked_row_by_row() -> None:
    text = "Code , Lane,USES\nspring-1,vip,3\nsummer-2,,\nx,,\nautumn-3,Bad,1\nwinter-4,,0\nspring-5,,abc\n"
    rows, rejected = entrycode.parse_rows(*read(text))
    assert [(r.code, r.lane, r.uses) for r in rows] == [("SPR1NG1", "vip", 3), ("SUMMER2", None, 1)]
    assert [r["line"] for r in rejected] == [4, 5, 6, 7]
    assert entrycode.parse_rows(*read("name\nx\n")) == ([], [{"line": 1, "reason": "no code column"}])
