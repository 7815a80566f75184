"""The settings that are URLs: an http(s) address, an SMTP server. A value that is not one warns and
is not used."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from queue_manager.config.declare.base import Declaration

if TYPE_CHECKING:
    from queue_manager.config.declare.reader import Reader


def _is_http_url(value: str) -> bool:
    try:
        parts = urlsplit(value.strip())
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


@dataclass(frozen=True, kw_only=True)
class HttpUrl(Declaration[str | None]):
    """An http(s) URL with a host (whitespace trimmed); anything else warns and is not used."""

    #: What follows '... is not an http(s) URL with a host, so '.
    otherwise: str

    def read(self, r: Reader, earlier: Mapping[str, Any]) -> str | None:
        value = r.raw(self.env)
        if value is None:
            return None
        if _is_http_url(value):
            return value.strip()
        named = self.env if self.sensitive else f'{self.env}="{value}"'
        r.warn(self.env, None, f"{named} is not an http(s) URL with a host, so {self.otherwise}")
        return None

    def unset(self, earlier: Mapping[str, Any]) -> str | None:
        return None


#: The schemes SMTP_URL accepts: STARTTLS (required), implicit TLS, and no TLS for a local relay.
SMTP_SCHEMES = ("smtp", "smtps", "smtp+plain")


def _is_smtp_url(value: str) -> bool:
    try:
        parts = urlsplit(value.strip())
        parts.port  # noqa: B018 - a port out of range raises here
    except ValueError:
        return False
    return parts.scheme in SMTP_SCHEMES and bool(parts.hostname) and parts.path in ("", "/") and not parts.query


@dataclass(frozen=True, kw_only=True)
class SmtpUrl(Declaration[str | None]):
    """smtp://, smtps:// or smtp+plain:// with a host and nothing after it (whitespace trimmed); anything
    else warns (never quoting the value: it may carry a password) and is not used."""

    otherwise: str

    def read(self, r: Reader, earlier: Mapping[str, Any]) -> str | None:
        value = r.raw(self.env)
        if value is None:
            return None
        if _is_smtp_url(value):
            return value.strip()
        r.warn(
            self.env,
            None,
            f"{self.env} is not an smtp://, smtps:// or smtp+plain:// URL with a host and no path, so {self.otherwise}",
        )
        return None

    def unset(self, earlier: Mapping[str, Any]) -> str | None:
        return None
