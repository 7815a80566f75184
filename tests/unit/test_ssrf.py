"""The private-address rule (ssrf.py) on every IPv6 form that carries an IPv4 address.

An address the rule refuses in IPv4 is refused in each of those forms too, and a public one is
accepted in each; the rule is the one every outbound connection uses (a proxy origin at save time,
after DNS and once connected, the target probe and the alert webhook through ``outbound.pin``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Any

import pytest

from queue_manager import outbound, ssrf

PRIVATE_V4 = ["127.0.0.1", "10.0.0.1", "169.254.169.254", "192.168.1.1", "172.16.0.1", "100.64.0.1", "0.0.0.0"]
PUBLIC_V4 = ["8.8.8.8", "1.1.1.1", "93.184.216.34", "203.0.113.10"]


def forms(v4: str) -> dict[str, str]:
    """Every IPv6 spelling of ``v4`` the rule reads an IPv4 address from."""
    n = int(ipaddress.IPv4Address(v4))
    hi, lo = n >> 16, n & 0xFFFF
    inv = n ^ 0xFFFFFFFF
    return {
        "ipv4-mapped": f"::ffff:{v4}",
        "ipv4-mapped, hex": f"::ffff:{hi:x}:{lo:x}",
        "ipv4-compatible": f"::{v4}",
        "ipv4-translated": f"::ffff:0:{v4}",
        "nat64 64:ff9b::/96": f"64:ff9b::{hi:x}:{lo:x}",
        "nat64, dotted": f"64:ff9b::{v4}",
        "6to4 2002::/16": f"2002:{hi:x}:{lo:x}::",
        "6to4 with a host part": f"2002:{hi:x}:{lo:x}:1::1",
        # Teredo: a public server (8.8.4.4) and the IPv4 address as the client (stored inverted)
        "teredo client": f"2001:0:808:404:0:0:{inv >> 16:x}:{inv & 0xFFFF:x}",
        # and as the server, with a public client (8.8.4.4 inverted is f7f7:fbfb)
        "teredo server": f"2001:0:{hi:x}:{lo:x}:0:0:f7f7:fbfb",
    }


CASES = [(v4, form, text) for v4 in PRIVATE_V4 for form, text in forms(v4).items()]


@pytest.mark.parametrize(("v4", "form", "address"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_every_ipv6_form_of_a_private_ipv4_address_is_private(v4: str, form: str, address: str) -> None:
    assert ssrf.is_private(v4)
    assert ssrf.is_private(address), f"{address} ({form} of {v4})"
    assert ipaddress.IPv4Address(v4) in ssrf.embedded_ipv4(ipaddress.IPv6Address(address))


PUBLIC_CASES = [(v4, form, text) for v4 in PUBLIC_V4 for form, text in forms(v4).items()]


@pytest.mark.parametrize(("v4", "form", "address"), PUBLIC_CASES, ids=[f"{c[0]}-{c[1]}" for c in PUBLIC_CASES])
def test_every_ipv6_form_of_a_public_ipv4_address_is_public(v4: str, form: str, address: str) -> None:
    assert not ssrf.is_private(v4)
    assert not ssrf.is_private(address), f"{address} ({form} of {v4})"


@pytest.mark.parametrize(
    ("address", "private"),
    [
        ("64:ff9b::7f00:1", True),  # 127.0.0.1 through a NAT64 gateway
        ("64:ff9b::808:808", False),  # 8.8.8.8
        ("2002:7f00:1::", True),
        ("2002:808:808::", False),
        # the NAT64 local-use prefix: every address in it, its IPv4 address can sit anywhere from bit 48
        ("64:ff9b:1::808:808", True),
        ("64:ff9b:1:7f00:0:100::", True),
        ("64:ff9b:2::808:808", False),  # outside both NAT64 prefixes: an ordinary global address
        ("2001:db8::1", False),
        ("2606:4700::1111", False),
        ("::1", True),
        ("::", True),
        ("::2", True),  # ::0.0.0.2, "this network"
    ],
)
def test_named_addresses(address: str, private: bool) -> None:
    assert ssrf.is_private(address) is private


def test_the_embedded_addresses_read() -> None:
    def read(text: str) -> list[str]:
        return [str(a) for a in ssrf.embedded_ipv4(ipaddress.IPv6Address(text))]

    assert read("::ffff:127.0.0.1") == ["127.0.0.1"]
    assert read("64:ff9b::a9fe:a9fe") == ["169.254.169.254"]
    assert read("2002:c0a8:101::") == ["192.168.1.1"]
    # RFC 4380's example: server 65.54.227.120, client 192.0.2.45
    assert read("2001:0:4136:e378:8000:63bf:3fff:fdd2") == ["65.54.227.120", "192.0.2.45"]
    assert read("2606:4700::1111") == []


def test_the_connect_time_check_refuses_a_nat64_peer() -> None:
    with pytest.raises(ssrf.OriginRefused):
        ssrf.check("app.example", "64:ff9b::a9fe:a9fe", allow_private=False)
    ssrf.check("app.example", "64:ff9b::a9fe:a9fe", allow_private=True)
    ssrf.check("app.example", "64:ff9b::808:808", allow_private=False)


def test_pin_refuses_a_name_resolving_to_a_nat64_form_of_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    """The alert webhook and the target probe go through ``pin``: a DNS64 answer for 127.0.0.1 is refused."""

    async def answer(self: Any, host: str, port: int, **_: Any) -> list[Any]:
        return [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("64:ff9b::7f00:1", port, 0, 0))]

    monkeypatch.setattr(asyncio.BaseEventLoop, "getaddrinfo", answer)

    async def go() -> None:
        with pytest.raises(outbound.Refused) as refused:
            await outbound.pin("http://hooks.example/x", allow_private=False, setting="ALERT_ALLOW_PRIVATE")
        assert refused.value.private and "ALERT_ALLOW_PRIVATE=1" in str(refused.value)
        pinned = await outbound.pin("http://hooks.example/x", allow_private=True)
        assert pinned.url == "http://[64:ff9b::7f00:1]/x"

    asyncio.run(go())


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("127.1", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("0", "0.0.0.0"),
        ("0x7f.1", "127.0.0.1"),
        ("8.8.8.8", "8.8.8.8"),
        ("example.com", None),
        ("beef.cafe", None),
        ("1.2.3.4.5", None),
    ],
)
def test_old_numeric_ipv4_spellings_are_read_as_the_address_a_resolver_would_use(
    host: str, address: str | None
) -> None:
    assert ssrf.numeric_ipv4(host) == address
