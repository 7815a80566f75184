"""Token signing contract: both forms, purposes, kid, rotation, clock checks, malformed input."""

from __future__ import annotations

import hashlib
import hmac
import itertools
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queue_manager.clock import FakeClock
from queue_manager.tokens import (
    PURPOSES,
    TokenError,
    TokenSigner,
    b64url_decode,
    b64url_encode,
    hkdf_key,
)

SECRET = "current-secret-0123456789"
OLD = "old-secret-abcdefghijklmn"
OTHER = "unrelated-secret-zyxwvuts"
DAY = 86400


# --- an independent RFC 5869 HKDF-SHA256, written out with hmac -------------------------------


def rfc5869_hkdf(ikm: bytes, info: bytes, length: int, salt: bytes = b"") -> bytes:
    # RFC 5869 §2.2: "if not provided, [salt] is set to a string of HashLen zeros".
    prk = hmac.new(salt or b"\x00" * 32, ikm, hashlib.sha256).digest()
    okm, block, counter = b"", b"", 1
    while len(okm) < length:
        block = hmac.new(prk, block + info + bytes([counter]), hashlib.sha256).digest()
        okm += block
        counter += 1
    return okm[:length]


def expected_kid(secret: str) -> str:
    return rfc5869_hkdf(secret.encode(), b"qm:kid", 4).hex()


def expected_key(secret: str, purpose: str) -> bytes:
    return rfc5869_hkdf(secret.encode(), f"qm:{purpose}".encode(), 32)


def mac_b64(key: bytes, body: str) -> str:
    return b64url_encode(hmac.new(key, body.encode(), hashlib.sha256).digest())


def forge(payload: Any, key: bytes, *, raw: bytes | None = None) -> str:
    """A correctly MACed token around any payload (or raw payload bytes)."""
    body = b64url_encode(orjson.dumps(payload) if raw is None else raw)
    return body + "." + mac_b64(key, body)


def split(token: str) -> tuple[dict[str, Any], str, str]:
    body, sig = token.split(".")
    return orjson.loads(b64url_decode(body)), body, sig


def make(secret: str = SECRET, *, clock: FakeClock | None = None, **kw: Any) -> TokenSigner:
    return TokenSigner(secret, clock or FakeClock(), **kw)


# --- helpers ------------------------------------------------------------------------------------


def test_rfc5869_vector_3_checks_both_hkdf_implementations() -> None:
    # RFC 5869 A.3: SHA-256, IKM = 0x0b * 22, salt and info empty, L = 42.
    okm = bytes.fromhex("8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8")
    assert rfc5869_hkdf(b"\x0b" * 22, b"", 42) == okm
    assert hkdf_key("\x0b" * 22, "", 42) == okm


def test_hkdf_key_matches_independent_hkdf() -> None:
    for info in ("qm:kid", "qm:visitor", "qm:operator"):
        assert hkdf_key(SECRET, info, 32) == rfc5869_hkdf(SECRET.encode(), info.encode(), 32)
    # Empty salt and HashLen zero bytes are the same HMAC key.
    assert rfc5869_hkdf(b"x", b"i", 32, salt=b"\x00" * 32) == rfc5869_hkdf(b"x", b"i", 32)


def test_b64url_round_trip_and_strictness() -> None:
    for n in range(0, 40):
        data = bytes(range(256))[n : n * 3 + 7]
        text = b64url_encode(data)
        assert "=" not in text and "+" not in text and "/" not in text
        assert b64url_decode(text) == data
    for bad in ["a=", "ab==", "+/+/", "abcde", "ab c", "AB", "é", "ab.c"]:
        with pytest.raises(ValueError):
            b64url_decode(bad)


# --- round trips and forms ----------------------------------------------------------------------


@pytest.mark.parametrize("v2", [False, True])
@pytest.mark.parametrize("purpose", PURPOSES)
def test_round_trip(v2: bool, purpose: Any) -> None:
    clock = FakeClock()
    signer = make(clock=clock, sign_v2=v2)
    token = signer.sign({"q": "main", "n": 7, "nested": {"a": [1, 2]}}, purpose)
    payload = signer.verify(token, purpose)
    assert payload["q"] == "main" and payload["n"] == 7 and payload["nested"] == {"a": [1, 2]}
    assert payload["iat"] == clock.wall_ms()
    assert ("kid" in payload) is v2
    assert token.count(".") == 1 and "=" not in token


def test_sign_copies_payload_and_sets_iat_from_clock() -> None:
    clock = FakeClock(wall_ms=1_800_000_000_123)
    signer = make(clock=clock)
    original = {"q": "main", "iat": 5, "kid": "caller"}
    token = signer.sign(original, "visitor")
    assert original == {"q": "main", "iat": 5, "kid": "caller"}
    payload, _, _ = split(token)
    assert payload["iat"] == 1_800_000_000_123
    assert "kid" not in payload  # legacy form never writes a kid, even a caller's


def test_legacy_form_is_hmac_with_secret_and_has_no_kid() -> None:
    token = make(sign_v2=False).sign({"q": "main"}, "visitor")
    payload, body, sig = split(token)
    assert "kid" not in payload
    assert sig == mac_b64(SECRET.encode(), body)


@pytest.mark.parametrize("purpose", PURPOSES)
def test_v2_form_uses_purpose_key_and_known_kid(purpose: Any) -> None:
    signer = make(sign_v2=True)
    payload, body, sig = split(signer.sign({"q": "main"}, purpose))
    kid = expected_kid(SECRET)
    assert len(kid) == 8 and kid == kid.lower()
    assert payload["kid"] == kid == signer.kid
    assert sig == mac_b64(expected_key(SECRET, purpose), body)


def test_kid_properties() -> None:
    assert make(sign_v2=False).kid == expected_kid(SECRET)
    assert make().previous_kid is None
    assert make(previous="").previous_kid is None
    assert make(previous=OLD).previous_kid == expected_kid(OLD)


@pytest.mark.parametrize(("signed_as", "checked_as"), list(itertools.product(PURPOSES, PURPOSES)))
def test_legacy_accepted_for_every_purpose(signed_as: Any, checked_as: Any) -> None:
    signer = make(sign_v2=False)
    assert signer.verify(signer.sign({"x": 1}, signed_as), checked_as)["x"] == 1


@pytest.mark.parametrize(
    ("signed_as", "checked_as"), [(a, b) for a, b in itertools.product(PURPOSES, PURPOSES) if a != b]
)
def test_v2_refused_under_another_purpose(signed_as: Any, checked_as: Any) -> None:
    signer = make(sign_v2=True)
    token = signer.sign({"x": 1}, signed_as)
    with pytest.raises(TokenError) as err:
        signer.verify(token, checked_as)
    assert err.value.reason == "wrong_purpose"


def test_both_forms_accepted_whatever_the_write_setting() -> None:
    clock = FakeClock()
    legacy, v2 = make(clock=clock), make(clock=clock, sign_v2=True)
    for writer, reader in itertools.product((legacy, v2), repeat=2):
        assert reader.verify(writer.sign({"x": 1}, "session"), "session")["x"] == 1


# --- rotation -----------------------------------------------------------------------------------


@pytest.mark.parametrize("v2", [False, True])
def test_rotation(v2: bool) -> None:
    clock = FakeClock()
    before = make(OLD, clock=clock, sign_v2=v2)
    old_token = before.sign({"x": 1}, "monitor")

    during = make(SECRET, clock=clock, previous=OLD, sign_v2=v2)
    assert during.verify(old_token, "monitor")["x"] == 1
    new_token = during.sign({"x": 2}, "monitor")
    assert during.verify(new_token, "monitor")["x"] == 2

    after = make(SECRET, clock=clock, sign_v2=v2)
    assert after.verify(new_token, "monitor")["x"] == 2
    with pytest.raises(TokenError) as err:
        after.verify(old_token, "monitor")
    assert err.value.reason == ("unknown_kid" if v2 else "bad_signature")


def test_rotation_keeps_purpose_separation_for_previous_key() -> None:
    clock = FakeClock()
    old_token = make(OLD, clock=clock, sign_v2=True).sign({"x": 1}, "visitor")
    with pytest.raises(TokenError) as err:
        make(SECRET, clock=clock, previous=OLD).verify(old_token, "operator")
    assert err.value.reason == "wrong_purpose"


def test_unknown_kid_refused() -> None:
    clock = FakeClock()
    foreign = make(OTHER, clock=clock, sign_v2=True).sign({"x": 1}, "visitor")
    signer = make(SECRET, clock=clock, previous=OLD)
    with pytest.raises(TokenError) as err:
        signer.verify(foreign, "visitor")
    assert err.value.reason == "unknown_kid"
    # A made-up kid, MACed with the real visitor key, is still refused on its kid.
    forged = forge({"iat": clock.wall_ms(), "kid": "deadbeef"}, expected_key(SECRET, "visitor"))
    with pytest.raises(TokenError) as err:
        signer.verify(forged, "visitor")
    assert err.value.reason == "unknown_kid"


def test_legacy_token_from_unrelated_secret_refused() -> None:
    clock = FakeClock()
    token = make(OTHER, clock=clock).sign({"x": 1}, "visitor")
    with pytest.raises(TokenError) as err:
        make(SECRET, clock=clock, previous=OLD).verify(token, "visitor")
    assert err.value.reason == "bad_signature"


def test_signed_with_previous() -> None:
    clock = FakeClock()
    signer = make(SECRET, clock=clock, previous=OLD)
    for v2 in (False, True):
        old_token = make(OLD, clock=clock, sign_v2=v2).sign({"x": 1}, "session")
        new_token = make(SECRET, clock=clock, sign_v2=v2).sign({"x": 1}, "session")
        assert signer.signed_with_previous(old_token) is True
        assert signer.signed_with_previous(new_token) is False
        assert make(SECRET, clock=clock).signed_with_previous(old_token) is False  # no previous
        payload, _, sig = split(old_token)
        tampered = b64url_encode(orjson.dumps({**payload, "x": 2})) + "." + sig
        assert signer.signed_with_previous(tampered) is False
    foreign = make(OTHER, clock=clock, sign_v2=True).sign({"x": 1}, "session")
    assert signer.signed_with_previous(foreign) is False
    for garbage in ["", "a.b", "x" * 5000, None, 42]:
        assert signer.signed_with_previous(garbage) is False  # type: ignore[arg-type]


# --- tampering ----------------------------------------------------------------------------------


def _flip_middle(text: str) -> str:
    i = len(text) // 2
    return text[:i] + ("A" if text[i] != "A" else "B") + text[i + 1 :]


@pytest.mark.parametrize("v2", [False, True])
def test_tampered_payload_or_signature_is_bad_signature(v2: bool) -> None:
    signer = make(previous=OLD, sign_v2=v2)
    token = signer.sign({"q": "main", "pos": 10}, "visitor")
    payload, body, sig = split(token)

    cheaper = b64url_encode(orjson.dumps({**payload, "pos": 1})) + "." + sig
    flipped_sig = body + "." + _flip_middle(sig)
    other_sig = body + "." + b64url_encode(b"\x00" * 32)
    for bad in (cheaper, flipped_sig, other_sig):
        with pytest.raises(TokenError) as err:
            signer.verify(bad, "visitor")
        assert err.value.reason == "bad_signature"


# --- clock --------------------------------------------------------------------------------------


def test_future_tokens() -> None:
    now = 1_800_000_000_000
    verifier = make(clock=FakeClock(wall_ms=now))
    ok = make(clock=FakeClock(wall_ms=now + 59_000)).sign({}, "visitor")
    edge = make(clock=FakeClock(wall_ms=now + 60_000)).sign({}, "visitor")
    bad = make(clock=FakeClock(wall_ms=now + 61_000)).sign({}, "visitor")
    assert verifier.verify(ok, "visitor")["iat"] == now + 59_000
    assert verifier.verify(edge, "visitor")["iat"] == now + 60_000
    with pytest.raises(TokenError) as err:
        verifier.verify(bad, "visitor")
    assert err.value.reason == "future"


@pytest.mark.parametrize("v2", [False, True])
def test_expiry_at_default_max_age(v2: bool) -> None:
    clock = FakeClock()
    signer = make(clock=clock, sign_v2=v2)
    token = signer.sign({}, "visitor")
    clock.advance(DAY)
    signer.verify(token, "visitor")
    clock.advance(1)
    with pytest.raises(TokenError) as err:
        signer.verify(token, "visitor")
    assert err.value.reason == "expired"


def test_constructor_max_age() -> None:
    clock = FakeClock()
    signer = make(clock=clock, max_age_sec=60)
    token = signer.sign({}, "visitor")
    clock.advance(60)
    signer.verify(token, "visitor")
    clock.advance(1)
    with pytest.raises(TokenError, match="expired"):
        signer.verify(token, "visitor")


def test_per_call_max_age_override() -> None:
    clock = FakeClock()
    signer = make(clock=clock, sign_v2=True)
    link = signer.sign({"q": "main"}, "monitor")
    cookie = signer.sign({"op": "alice"}, "session")

    clock.advance(13 * 3600)  # older than a console session, younger than the default
    signer.verify(cookie, "session")
    with pytest.raises(TokenError, match="expired"):
        signer.verify(cookie, "session", max_age_sec=12 * 3600)

    clock.advance(3 * DAY)  # past the default, within a monitor link's 7 days
    with pytest.raises(TokenError, match="expired"):
        signer.verify(link, "monitor")
    assert signer.verify(link, "monitor", max_age_sec=7 * DAY)["q"] == "main"
    clock.advance(4 * DAY)
    with pytest.raises(TokenError, match="expired"):
        signer.verify(link, "monitor", max_age_sec=7 * DAY)


def test_expired_check_uses_verified_signature_first() -> None:
    clock = FakeClock()
    signer = make(clock=clock)
    token = signer.sign({}, "visitor")
    clock.advance(2 * DAY)
    payload, _, sig = split(token)
    fresh = b64url_encode(orjson.dumps({**payload, "iat": clock.wall_ms()})) + "." + sig
    with pytest.raises(TokenError) as err:
        signer.verify(fresh, "visitor")
    assert err.value.reason == "bad_signature"


# --- malformed input ----------------------------------------------------------------------------

_NOW = FakeClock().wall_ms()
_LEGACY_KEY = SECRET.encode()
_VISITOR_KEY = expected_key(SECRET, "visitor")
_GOOD = forge({"iat": _NOW}, _LEGACY_KEY)
_GOOD_BODY, _GOOD_SIG = _GOOD.split(".")

MALFORMED: dict[str, Any] = {
    "empty": "",
    "dot only": ".",
    "no dot": _GOOD_BODY + _GOOD_SIG,
    "empty body": "." + _GOOD_SIG,
    "empty signature": _GOOD_BODY + ".",
    "two dots": _GOOD + ".",
    "three dots": "a.b.c.d",
    "bad base64 body": "!!!!." + _GOOD_SIG,
    "bad base64 signature": _GOOD_BODY + ".????",
    "padded base64": _GOOD_BODY + "." + _GOOD_SIG + "=",
    "standard alphabet": _GOOD_BODY + ".+/" + _GOOD_SIG[2:],
    "impossible base64 length": "abcde." + _GOOD_SIG,
    "short signature": _GOOD_BODY + "." + _GOOD_SIG[:20],
    "non-ascii": _GOOD_BODY + "é." + _GOOD_SIG,
    "non-ascii dot": _GOOD_BODY + "\u2024" + _GOOD_SIG,
    "invalid json": forge(None, _LEGACY_KEY, raw=b'{"iat": '),
    "invalid utf-8": forge(None, _LEGACY_KEY, raw=b'{"iat": 1, "x": "\xff"}'),
    "deep nesting": forge(None, _LEGACY_KEY, raw=b"[" * 2000 + b"]" * 2000),
    "json array payload": forge([_NOW], _LEGACY_KEY),
    "json string payload": forge("iat", _LEGACY_KEY),
    "json null payload": forge(None, _LEGACY_KEY, raw=b"null"),
    "missing iat": forge({"q": "main"}, _LEGACY_KEY),
    "iat string": forge({"iat": str(_NOW)}, _LEGACY_KEY),
    "iat float": forge({"iat": float(_NOW)}, _LEGACY_KEY),
    "iat bool": forge({"iat": True}, _LEGACY_KEY),
    "iat huge": forge(None, _LEGACY_KEY, raw=b'{"iat": 1' + b"0" * 40 + b"}"),
    "kid int": forge({"iat": _NOW, "kid": 12345678}, _VISITOR_KEY),
    "kid null": forge({"iat": _NOW, "kid": None}, _VISITOR_KEY),
    "kid list": forge({"iat": _NOW, "kid": ["a"]}, _VISITOR_KEY),
    "5000 chars": "a" * 2500 + "." + "b" * 2499,
    "validly signed but 4097+ chars": forge({"iat": _NOW, "pad": "x" * 3100}, _LEGACY_KEY),
    "not a str (None)": None,
    "not a str (bytes)": _GOOD.encode(),
    "not a str (int)": 42,
}


def test_good_reference_token_is_valid() -> None:
    assert make().verify(_GOOD, "visitor")["iat"] == _NOW
    assert len(MALFORMED["5000 chars"]) == 5000
    assert len(MALFORMED["validly signed but 4097+ chars"]) > 4096


@pytest.mark.parametrize("token", list(MALFORMED.values()), ids=list(MALFORMED))
@pytest.mark.parametrize("purpose", ["visitor", "operator"])
def test_malformed(token: Any, purpose: Any) -> None:
    signer = make(previous=OLD)
    with pytest.raises(TokenError) as err:
        signer.verify(token, purpose)
    assert err.value.reason == "malformed"
    assert str(err.value).startswith("malformed")
    assert signer.signed_with_previous(token) is False


def test_sign_refuses_oversized_token() -> None:
    with pytest.raises(ValueError):
        make().sign({"pad": "x" * 4000}, "visitor")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_fuzz_text_only_raises_token_error(text: str) -> None:
    signer = make(previous=OLD, sign_v2=True)
    for candidate in (text, _GOOD_BODY + "." + text, text + "." + _GOOD_SIG):
        with pytest.raises(TokenError):
            signer.verify(candidate, "visitor")
        assert signer.signed_with_previous(candidate) is False


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0), st.characters(codec="utf-8"))
def test_fuzz_single_char_edits_only_raise_token_error(pos: int, ch: str) -> None:
    signer = make(sign_v2=True)
    token = signer.sign({"q": "main"}, "visitor")
    i = pos % len(token)
    edited = token[:i] + ch + token[i + 1 :]
    if edited == token:
        return
    with pytest.raises(TokenError) as err:
        signer.verify(edited, "visitor")
    assert err.value.reason in {"malformed", "bad_signature", "unknown_kid"}


def test_token_error_reason() -> None:
    err = TokenError("expired")
    assert err.reason == "expired" and str(err) == "expired" and err.args == ("expired",)
    assert str(TokenError("malformed", "too long")) == "malformed: too long"
    with pytest.raises(ValueError):
        TokenError("nope")  # type: ignore[arg-type]


def test_constructor_validation() -> None:
    with pytest.raises(ValueError):
        TokenSigner("", FakeClock())
    with pytest.raises(ValueError):
        TokenSigner(SECRET, FakeClock(), max_age_sec=0)


def test_signed_with_previous_trusts_kid_and_key_together() -> None:
    clock = FakeClock()
    signer = make(SECRET, clock=clock, previous=OLD)
    # MACed with the previous visitor key but naming the current kid: neither valid nor "previous".
    mixed = forge({"iat": clock.wall_ms(), "kid": expected_kid(SECRET)}, expected_key(OLD, "visitor"))
    assert signer.signed_with_previous(mixed) is False
    with pytest.raises(TokenError) as err:
        signer.verify(mixed, "visitor")
    assert err.value.reason == "bad_signature"
