"""A proxyOrigin spelled as an IPv6 address that carries a private IPv4 address is refused when the room
is saved (400 proxy_origin_private), exactly as the IPv4 address itself is; its public counterpart is saved.
"""

from __future__ import annotations

import httpx
import pytest
from harness import unique_id

REFUSED = [
    "http://[64:ff9b::7f00:1]:8080",  # NAT64 of 127.0.0.1
    "http://[64:ff9b::a9fe:a9fe]",  # NAT64 of 169.254.169.254 (cloud metadata)
    "http://[2002:a00:1::]:8080",  # 6to4 of 10.0.0.1
    "http://[::ffff:0:c0a8:101]:8080",  # IPv4-translated 192.168.1.1
    "http://[2001:0:808:404::80ff:fffe]:8080",  # Teredo, client 127.0.0.1
    "http://127.0.0.1:8080",
]


@pytest.mark.parametrize("origin", REFUSED)
def test_an_ipv6_form_of_a_private_ipv4_origin_is_refused_when_saved(admin: httpx.Client, origin: str) -> None:
    room_id = unique_id("nat64")
    body = {"id": room_id, "targetUrl": f"https://{room_id}.shop.test/", "proxyOrigin": origin}
    r = admin.post("/api/admin/rooms", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["code"] == "proxy_origin_private"
    assert "PROXY_ALLOW_PRIVATE=1" in r.json()["error"]
    assert admin.get(f"/api/admin/rooms/{room_id}").status_code == 404  # nothing was created


def test_the_nat64_form_of_a_public_address_is_saved(admin: httpx.Client) -> None:
    origin = "http://[64:ff9b::808:808]:8080"  # 8.8.8.8
    room_id = unique_id("nat64")
    body = {"id": room_id, "targetUrl": f"https://{room_id}.shop.test/", "proxyOrigin": origin}
    r = admin.post("/api/admin/rooms", json=body)
    assert r.status_code == 201, r.text
    assert r.json()["room"]["proxyOrigin"] == origin
