"""Which upstream addresses the inline proxy may connect to (SSRF and DNS-rebinding guard).

A room's ``proxyOrigin`` is chosen by whoever may edit the room, so without a rule this server
could be made to fetch its own network. Unless ``PROXY_ALLOW_PRIVATE=1``, every address a name
resolves to is checked before connecting, and the address actually connected to is checked again,
on every new connection: a name that later starts resolving to 127.0.0.1 is refused then.
"""

from __future__ import annotations

import ipaddress

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: Every range the Operations Guide names, IPv4 and IPv6. IPv4-mapped (::ffff:a.b.c.d) and the other
#: IPv6 forms that carry an IPv4 address are unwrapped and judged by that address.
PRIVATE_RANGES: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = tuple(
    ipaddress.ip_network(n)
    for n in (
        "127.0.0.0/8",  # loopback
        "0.0.0.0/8",  # "this network"
        "10.0.0.0/8",  # RFC 1918
        "172.16.0.0/12",
        "192.168.0.0/16",
        "100.64.0.0/10",  # CGNAT
        "169.254.0.0/16",  # link-local, holds 169.254.169.254 (cloud metadata)
        "::1/128",  # loopback
        "::/128",  # unspecified
        "fe80::/10",  # link-local
        "fc00::/7",  # unique-local, holds fd00:ec2::254
    )
)


class OriginRefused(Exception):
    """The origin resolved to (or connected to) an address the SSRF rule refuses."""

    def __init__(self, host: str, address: str, *, setting: str = "PROXY_ALLOW_PRIVATE", what: str = "the app") -> None:
        """``setting``: the variable that would allow it; ``what``: what is said to be on this network."""
        super().__init__(
            f"{host} resolves to {address}, a private or internal address; set {setting}=1 "
            f"if {what} really is on this network"
        )
        self.host = host
        self.address = address


def _unwrap(addr: IPAddress) -> IPAddress:
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.ipv4_mapped is not None:
            return addr.ipv4_mapped
        # ::a.b.c.d (IPv4-compatible, deprecated but still routable on some stacks)
        if int(addr) >> 32 == 0 and int(addr) > 1:
            return ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
    return addr


def is_private(address: str) -> bool:
    """True for every address the guide lists as private or internal (and for anything unparsable)."""
    text = address.split("%", 1)[0]  # a scope id (fe80::1%eth0)
    try:
        addr = _unwrap(ipaddress.ip_address(text))
    except ValueError:
        return True
    return any(addr in net for net in PRIVATE_RANGES if net.version == addr.version)


def check(host: str, address: str, allow_private: bool) -> None:
    """Raise OriginRefused when ``address`` may not be connected to."""
    if not allow_private and is_private(address):
        raise OriginRefused(host, address)
