"""Origin lists and where a visitor may land (returnOrigins, tagOrigins).

An origin pattern is ``scheme://host[:port]`` or ``scheme://*.suffix[:port]``; the dot after the
``*`` is required so ``https://*.shop.example`` never matches ``evilshop.example``. Scheme and port
must match exactly (a missing port means the scheme's default).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

_DEFAULT_PORTS = {"http": 80, "https": 443}
# What a browser could read differently from us is refused outright: a backslash is a slash to a
# browser (https://evil.example\\.shop.example/ goes to evil.example), and so are tabs and newlines,
# which browsers strip.
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_HOST_RE = re.compile(rf"^(?:{_LABEL}\.)*{_LABEL}\.?$|^[0-9a-f:.]+$")


def url_host(host: str) -> str:
    """``host`` as a URL spells it: an IPv6 address in brackets (``[2001:db8::1]``), anything else as it is.

    ``urlsplit(...).hostname`` drops the brackets; a URL rebuilt from it without them reads the last
    group of the address as a port (``http://2001:db8::1:8080``)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _suspicious(text: str) -> bool:
    return "\\" in text or any(ord(c) <= 0x20 or ord(c) == 0x7F for c in text)


@dataclass(frozen=True, slots=True)
class OriginPattern:
    scheme: str
    host: str  # lowercase; for a wildcard, the suffix including its leading dot (".shop.example")
    port: int
    wildcard: bool

    def matches(self, scheme: str, host: str, port: int) -> bool:
        if scheme != self.scheme or port != self.port:
            return False
        if self.wildcard:
            return host.endswith(self.host) and len(host) > len(self.host)
        return host == self.host

    def __str__(self) -> str:
        host = ("*" + self.host) if self.wildcard else url_host(self.host)
        default = _DEFAULT_PORTS[self.scheme]
        return f"{self.scheme}://{host}" + ("" if self.port == default else f":{self.port}")


def _split(url: str) -> SplitResult | None:
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises on a bad port
    except ValueError:
        return None
    return parts


def parse_origin_pattern(text: str) -> OriginPattern | None:
    """A bare origin or ``scheme://*.suffix``; None when it is anything else."""
    if not isinstance(text, str) or len(text) > 300 or _suspicious(text.strip()):
        return None
    parts = _split(text.strip())
    if parts is None or parts.scheme not in _DEFAULT_PORTS:
        return None
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password:
        return None
    host = (parts.hostname or "").lower()
    if not host:
        return None
    port = parts.port or _DEFAULT_PORTS[parts.scheme]
    if host.startswith("*"):
        if not host.startswith("*.") or len(host) < 4 or "*" in host[1:] or not _HOST_RE.match(host[2:]):
            return None
        return OriginPattern(parts.scheme, host[1:], port, True)
    if not _HOST_RE.match(host):
        return None
    return OriginPattern(parts.scheme, host, port, False)


def origin_of(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an absolute http(s) URL without credentials; None otherwise."""
    if not isinstance(url, str) or len(url) > 4096 or _suspicious(url):
        return None
    parts = _split(url)
    if parts is None or parts.scheme not in _DEFAULT_PORTS:
        return None
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        return None
    host = (parts.hostname or "").lower()
    if not host or not _HOST_RE.match(host):
        return None
    return parts.scheme, host, parts.port or _DEFAULT_PORTS[parts.scheme]


def is_absolute_http_url(url: str) -> bool:
    return origin_of(url) is not None


def origin_allowed(url: str, target_url: str, patterns: tuple[OriginPattern, ...]) -> bool:
    """Whether ``url`` may be used: the target's own origin always, plus the listed patterns."""
    origin = origin_of(url)
    if origin is None:
        return False
    target = origin_of(target_url)
    if target is not None and origin == target:
        return True
    return any(p.matches(*origin) for p in patterns)
