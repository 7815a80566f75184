"""Journal marks (fleet/journal_marks.py): which rooms read as ahead of their events journal, and the
TLS context PG_CA_FILE builds (journal/database.py)."""

from __future__ import annotations

import ssl
from pathlib import Path

from queue_manager.fleet.journal_marks import JournalMarks
from queue_manager.journal.database import is_tls_verify_failure, tls_context


def test_a_journal_at_or_past_its_marks_is_not_ahead() -> None:
    marks = {"a": (1, 10), "b": (2, 5)}
    assert JournalMarks.ahead(marks, {}, {"a": (1, 10), "b": (3, 1)}) == {}


def test_a_journal_behind_its_mark_or_without_the_room_is_ahead() -> None:
    marks = {"a": (1, 10), "b": (2, 5), "c": (1, 1)}
    ahead = JournalMarks.ahead(marks, {}, {"a": (1, 7), "b": (1, 99)})
    assert ahead == {"a": ((1, 10), (1, 7)), "b": ((2, 5), (1, 99)), "c": ((1, 1), None)}


def test_a_flagged_room_stays_ahead_until_a_new_generation() -> None:
    flagged = {"a": ((1, 10), (1, 7))}
    assert JournalMarks.ahead({"a": (1, 10)}, flagged, {"a": (1, 30)}) == flagged  # past the mark: still
    assert JournalMarks.ahead({"a": (1, 10)}, flagged, {"a": (2, 1)}) == {}  # deleted and created again


def test_no_ca_file_no_context() -> None:
    assert tls_context(None) is None


def _self_signed_ca(path: Path) -> Path:
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "unit-ca")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def test_ca_file_context_verifies_and_checks_the_host_name(tmp_path: Path) -> None:
    ctx = tls_context(str(_self_signed_ca(tmp_path / "ca.pem")))
    assert ctx is not None
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname is True
    assert len(ctx.get_ca_certs()) == 1  # that CA alone, not the system store


def test_a_certificate_that_does_not_verify_is_recognised_through_causes() -> None:
    inner = ssl.SSLCertVerificationError("certificate verify failed: unable to get local issuer certificate")
    outer = RuntimeError("events journal unavailable at start")
    outer.__cause__ = inner
    assert is_tls_verify_failure(outer)
    assert not is_tls_verify_failure(ConnectionRefusedError("refused"))
