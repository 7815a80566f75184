"""A real SMTP server for the turn-e-mail tests: aiosmtpd on a free loopback port, in a thread of the test
process, keeping every message it accepts. Plain by default (the server under test reaches it as
smtp+plain://); ``MailSink(tls_dir=…, login=(user, password))`` requires STARTTLS with a certificate from a
private CA written to that directory (``ca_file``) and AUTH before any mail.

    with MailSink() as sink:
        env = {"SMTP_URL": sink.url, ...}
        ...
        [mail] = sink.wait_for("visitor@example.com")
"""

from __future__ import annotations

import ipaddress
import ssl
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email import message_from_bytes, policy
from email.message import EmailMessage
from pathlib import Path
from typing import Any
from urllib.parse import quote

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from harness import free_port


@dataclass
class Mail:
    sender: str  # the envelope's MAIL FROM
    recipients: list[str]  # RCPT TO
    message: EmailMessage
    tls: bool = False  # the conversation was under TLS
    login: str | None = None  # who signed in with AUTH

    @property
    def text(self) -> str:
        body = self.message.get_body(preferencelist=("plain",))
        assert body is not None, self.message
        return str(body.get_content())


class _Keep:
    def __init__(self, sink: MailSink) -> None:
        self.sink = sink

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        raw = envelope.original_content or envelope.content
        parsed = message_from_bytes(raw, _class=EmailMessage, policy=policy.default)
        login = session.auth_data.decode() if isinstance(session.auth_data, bytes) else None
        mail = Mail(envelope.mail_from, list(envelope.rcpt_tos), parsed, session.ssl is not None, login)
        with self.sink.lock:
            self.sink.mails.append(mail)
        return "250 OK"


def _write_certificates(directory: Path) -> tuple[Path, ssl.SSLContext]:
    """A private CA and a certificate it signs for 127.0.0.1; returns the CA's PEM and the server's context."""
    now = datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Turn e-mail test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    ca_file, cert_file, key_file = directory / "ca.pem", directory / "smtp.pem", directory / "smtp.key"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_file.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    return ca_file, context


class MailSink:
    def __init__(self, tls_dir: Path | None = None, login: tuple[str, str] | None = None) -> None:
        self.port = free_port()
        self.mails: list[Mail] = []
        self.lock = threading.Lock()
        self.ca_file: Path | None = None
        self.login = login
        options: dict[str, Any] = {}
        if tls_dir is not None:
            self.ca_file, context = _write_certificates(tls_dir)
            options = {"tls_context": context, "require_starttls": True}
        if login is not None:
            options |= {"authenticator": self._authenticate, "auth_required": True, "auth_require_tls": True}
        self._controller = Controller(_Keep(self), hostname="127.0.0.1", port=self.port, **options)

    def _authenticate(self, server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
        user, password = self.login or ("", "")
        good = isinstance(data, LoginPassword) and (data.login, data.password) == (user.encode(), password.encode())
        return AuthResult(success=good, auth_data=data.login if good else None)

    @property
    def url(self) -> str:
        if self.ca_file is None:
            return f"smtp+plain://127.0.0.1:{self.port}"
        user, password = self.login or ("", "")
        credentials = f"{quote(user, safe='')}:{quote(password, safe='')}@" if self.login else ""
        return f"smtp://{credentials}127.0.0.1:{self.port}"

    def start(self) -> MailSink:
        self._controller.start()
        return self

    def stop(self) -> None:
        self._controller.stop()

    def __enter__(self) -> MailSink:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def to(self, address: str) -> list[Mail]:
        with self.lock:
            return [m for m in self.mails if address in m.recipients]

    def wait_for(self, address: str, count: int = 1, timeout: float = 15.0) -> list[Mail]:
        """The mails to ``address`` once there are ``count`` of them (fails after ``timeout``)."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.to(address)
            if len(found) >= count:
                return found
            if time.monotonic() >= deadline:
                raise AssertionError(f"{len(found)} e-mails to {address} after {timeout:g} s, expected {count}")
            time.sleep(0.1)
