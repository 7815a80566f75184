"""A request's ``Host``: its name and port, its key, and whether it is an address literal."""

from __future__ import annotations

import ipaddress


def split_host(host: str, scheme: str) -> tuple[str, int]:
    """``example.com:8443`` → (example.com, 8443); no port → the scheme's default."""
    host = host.strip()
    name, port = host, 0
    if host.startswith("["):
        end = host.find("]")
        name = host[: end + 1] if end > 0 else host
        rest = host[end + 1 :] if end > 0 else ""
        if rest.startswith(":") and rest[1:].isascii() and rest[1:].isdigit():
            port = int(rest[1:])
    elif host.count(":") == 1:
        name, _, p = host.partition(":")
        if p.isascii() and p.isdigit():  # "²" is a digit to isdigit, not to int
            port = int(p)
    return name.lower(), port or (443 if scheme == "https" else 80)


def request_host_key(host: str) -> str:
    """A Host header's key: ``:80`` and ``:443`` are the defaults of the two schemes a visitor can use."""
    name, port = split_host(host, "http")
    return name if port in (80, 443) else f"{name}:{port}"


def host_name(host: bytes | None) -> str:
    """A Host header's name without its port (an IPv6 address keeps its brackets: ``[::1]``)."""
    if not host:
        return ""
    return split_host(host.decode("latin-1"), "http")[0]


def host_key(host: bytes | None) -> str:
    """:func:`request_host_key` of a Host header as sent ("" when there is none)."""
    return request_host_key(host.decode("latin-1")) if host else ""


def is_address_literal(host: str) -> bool:
    name = host.strip("[]")
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True
