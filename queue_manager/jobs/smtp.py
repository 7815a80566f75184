"""The operator's SMTP server, as SMTP_URL names it, and one message sent through it.

=================  ======================================  ============
SMTP_URL scheme    connection                               default port
=================  ======================================  ============
``smtp://``        plain TCP, then STARTTLS (required)      587
``smtps://``       TLS from the first byte                  465
``smtp+plain://``  no TLS at all (a relay on this host/LAN) 25
=================  ======================================  ============

A user and password in the URL (percent-encoded) sign in with AUTH after TLS is up. The certificate is
checked against the system's trust store (or SMTP_CA_FILE's CA) and the URL's host name. The SMTP
server is the operator's own setting, not something a room or a visitor can name, so it is not held to
the private-address rule the webhook follows (a relay on the LAN is the common case).
"""

from __future__ import annotations

from dataclasses import dataclass
from email.message import EmailMessage
from typing import Literal
from urllib.parse import unquote, urlsplit

import aiosmtplib

TIMEOUT_SEC = 10.0

Security = Literal["starttls", "tls", "none"]

_SCHEMES: dict[str, tuple[Security, int]] = {
    "smtp": ("starttls", 587),
    "smtps": ("tls", 465),
    "smtp+plain": ("none", 25),
}


@dataclass(frozen=True)
class SmtpServer:
    host: str
    port: int
    security: Security
    username: str | None = None
    password: str | None = None
    ca_file: str | None = None  # SMTP_CA_FILE: trust this CA instead of the system's store

    def describe(self) -> str:
        """Where mail goes, without the credentials (for health and the start line)."""
        return f"{self.security} {self.host}:{self.port}" + (" with AUTH" if self.username else "")


def parse(url: str, ca_file: str | None = None) -> SmtpServer:
    """SMTP_URL as config/declare/urls.py accepted it (scheme, host, optional port and credentials)."""
    parts = urlsplit(url.strip())
    security, default_port = _SCHEMES[parts.scheme]
    if not parts.hostname:
        raise ValueError("SMTP_URL names no host")
    return SmtpServer(
        host=parts.hostname,
        port=parts.port or default_port,
        security=security,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password is not None else None,
        ca_file=ca_file,
    )


async def send(server: SmtpServer, message: EmailMessage) -> None:
    """Deliver ``message`` to the SMTP server (raises aiosmtplib's errors or OSError on failure)."""
    await aiosmtplib.send(
        message,
        hostname=server.host,
        port=server.port,
        username=server.username,
        password=server.password,
        use_tls=server.security == "tls",
        start_tls=server.security == "starttls",
        cert_bundle=server.ca_file,
        timeout=TIMEOUT_SEC,
    )
