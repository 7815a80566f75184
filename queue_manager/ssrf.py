"""Which upstream addresses the inline proxy may connect to (SSRF and DNS-rebinding guard).

A room's ``proxyOrigin`` is chosen by whoever may edit the room, so without a rule this server
could be made to fetch its own network. Unless ``PROXY_ALLOW_PRIVATE=1``, every address a name
resolves to is checked before connecting, and the address actually connected to is checked again,
on every new connection: a name that later starts resolving to 127.0.0.1 is refused then.
"""

from __future__ import annotations

import ipaddress
import re
import socket

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: Every range the Operations Guide names, IPv4 and IPv6. An IPv6 address that carries an IPv4 address
#: (``embedded_ipv4``) is also judged by each IPv4 address it carries.
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
        # the NAT64 local-use prefix (RFC 8215): a translator of the network's own, which cuts it to any
        # length from /48 to /96, so where an address carries its IPv4 address is not written in it
        "64:ff9b:1::/48",
    )
)

_V4 = 0xFFFFFFFF
_COMPATIBLE = ipaddress.IPv6Network("::/96")  # ::a.b.c.d, IPv4-compatible (deprecated)
_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")  # ::ffff:0:a.b.c.d, IPv4-translated (SIIT)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # the NAT64 well-known prefix (RFC 6052)


def embedded_ipv4(addr: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ...]:
    """Every IPv4 address ``addr`` carries, in every IPv6 form that embeds one.

    IPv4-mapped ``::ffff:a.b.c.d``, IPv4-compatible ``::a.b.c.d`` (deprecated), IPv4-translated
    ``::ffff:0:a.b.c.d``, NAT64 ``64:ff9b::a.b.c.d`` (the well-known /96), 6to4 ``2002:AABB:CCDD::/48``
    and Teredo ``2001:0:SSSS:SSSS:…:~CCCC:~CCCC`` (its server and its client, whose address is stored
    inverted). The NAT64 local-use prefix is not read here: ``PRIVATE_RANGES`` holds all of it.
    """
    value = int(addr)
    found: list[int] = []
    if addr.ipv4_mapped is not None:
        found.append(int(addr.ipv4_mapped))
    if addr in _COMPATIBLE or addr in _TRANSLATED or addr in _NAT64:
        found.append(value & _V4)
    if addr.sixtofour is not None:
        found.append(int(addr.sixtofour))
    if addr.teredo is not None:
        server, client = addr.teredo
        found.extend((int(server), int(client)))
    return tuple(ipaddress.IPv4Address(v) for v in found)


def _private(addr: IPAddress) -> bool:
    return any(addr in net for net in PRIVATE_RANGES if net.version == addr.version)


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


_NUMERIC_HOST = re.compile(r"^(?:0[xX][0-9a-fA-F]*|[0-9]+)(?:\.(?:0[xX][0-9a-fA-F]*|[0-9]+)){0,3}$")


def numeric_ipv4(host: str) -> str | None:
    """The dotted IPv4 address a host written in one of the old numeric forms names, as a resolver reads it
    (``127.1``, ``0x7f000001``, ``2130706433``, ``0177.0.0.1``, ``0``), else None. Such a host is an address
    literal, not a name, and is judged like one."""
    if not _NUMERIC_HOST.match(host):
        return None
    try:
        return socket.inet_ntoa(socket.inet_aton(host))
    except OSError:
        return None


def is_private(address: str) -> bool:
    """True for every address the guide lists as private or internal (and for anything unparsable).

    The one rule every outbound connection is held to (a proxy origin, the target probe, the alert
    webhook), at save time, after DNS and on the address actually connected to. An IPv6 address that
    carries an IPv4 address is private when it is in an IPv6 range or any IPv4 address it carries is
    (``embedded_ipv4``): ``64:ff9b::7f00:1`` is 127.0.0.1 through a NAT64 gateway.
    """
    text = address.split("%", 1)[0]  # a scope id (fe80::1%eth0)
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return True
    if _private(addr):
        return True
    return isinstance(addr, ipaddress.IPv6Address) and any(_private(v4) for v4 in embedded_ipv4(addr))


def check(host: str, address: str, allow_private: bool) -> None:
    """Raise OriginRefused when ``address`` may not be connected to."""
    if not allow_private and is_private(address):
        raise OriginRefused(host, address)
