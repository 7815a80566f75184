"""The inline proxy's pure rules: the SSRF address ranges, the gate's skip rules, the forwarded headers."""

from __future__ import annotations

import asyncio

import pytest

from queue_manager.inline import forward, gate
from queue_manager.inline.client import Origin, Pool, UpstreamError
from queue_manager.inline.forward import downstream_headers, split_host, strip_console_cookie, upstream_headers
from queue_manager.services.identity import Identity
from queue_manager.ssrf import OriginRefused, is_private

# ---------------------------------------------------------------------- SSRF: every range the guide lists

PRIVATE = [
    ("loopback 127.0.0.0/8", "127.0.0.1"),
    ("loopback 127.0.0.0/8, far end", "127.255.255.254"),
    ("::1", "::1"),
    ("0.0.0.0/8", "0.0.0.0"),
    ("0.0.0.0/8, inside", "0.12.34.56"),
    ("RFC1918 10/8", "10.0.0.5"),
    ("RFC1918 172.16/12", "172.16.0.1"),
    ("RFC1918 172.16/12, far end", "172.31.255.255"),
    ("RFC1918 192.168/16", "192.168.1.1"),
    ("CGNAT 100.64/10", "100.64.0.1"),
    ("CGNAT 100.64/10, far end", "100.127.255.254"),
    ("link-local 169.254/16 (metadata)", "169.254.169.254"),
    ("link-local fe80::/10", "fe80::1"),
    ("link-local fe80::/10 with a scope", "fe80::1%eth0"),
    ("unique-local fc00::/7", "fc00::1"),
    ("unique-local fd00:ec2::254 (metadata)", "fd00:ec2::254"),
    ("unspecified ::", "::"),
    ("IPv4-mapped loopback", "::ffff:127.0.0.1"),
    ("IPv4-mapped RFC1918", "::ffff:10.1.2.3"),
    ("IPv4-mapped 172.16/12", "::ffff:172.20.0.1"),
    ("IPv4-mapped 192.168/16", "::ffff:192.168.0.10"),
    ("IPv4-mapped CGNAT", "::ffff:100.64.1.1"),
    ("IPv4-mapped metadata", "::ffff:169.254.169.254"),
    ("IPv4-mapped 0.0.0.0/8", "::ffff:0.0.0.0"),
    ("IPv4-compatible loopback", "::127.0.0.1"),
    ("not an address", "not-an-ip"),
]
PUBLIC = ["93.184.216.34", "1.1.1.1", "172.32.0.1", "100.128.0.1", "169.255.0.1", "2606:4700::1111", "::ffff:8.8.8.8"]


@pytest.mark.parametrize(("what", "address"), PRIVATE, ids=[p[0] for p in PRIVATE])
def test_every_private_range_is_refused(what: str, address: str) -> None:
    assert is_private(address), what


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_are_allowed(address: str) -> None:
    assert not is_private(address)


class SwitchingResolver:
    """A name that answers a public address first and a private one later (DNS rebinding)."""

    def __init__(self, answers: list[list[str]]) -> None:
        self.answers = answers
        self.calls = 0

    async def __call__(self, host: str, port: int) -> list[str]:
        answer = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        return answer


def test_dns_rebinding_is_refused_on_the_next_new_connection() -> None:
    async def run() -> None:
        pool = Pool(allow_private=False, connect_timeout=0.5)
        pool.resolver = SwitchingResolver([["192.0.2.10"], ["127.0.0.1"]])
        origin = Origin("http", "rebind.example", 80)
        # first connection: the public answer passes the rule (TEST-NET-1 then fails to connect, which is fine)
        with pytest.raises(UpstreamError) as first:
            await pool.connect(origin)
        assert first.value.phase in ("connect", "timeout")
        # the name now resolves to loopback: refused before any connection is made
        with pytest.raises(OriginRefused) as second:
            await pool.connect(origin)
        assert second.value.address == "127.0.0.1"
        with pytest.raises(OriginRefused):
            await pool.connect_socket(origin)  # the WebSocket relay's connections too

    asyncio.run(run())


def test_a_name_with_any_private_answer_is_refused_outright() -> None:
    async def run() -> None:
        pool = Pool(allow_private=False, connect_timeout=0.5)
        pool.resolver = SwitchingResolver([["192.0.2.10", "10.0.0.5"]])
        with pytest.raises(OriginRefused):
            await pool.connect(Origin("http", "mixed.example", 80))

    asyncio.run(run())


def test_proxy_allow_private_lets_a_lan_origin_through() -> None:
    async def run() -> None:
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        pool = Pool(allow_private=True, connect_timeout=2)
        conn = await pool.connect(Origin("http", "127.0.0.1", port))
        assert conn.peer == "127.0.0.1"
        conn.close()
        server.close()
        await server.wait_closed()

    asyncio.run(run())


# ---------------------------------------------------------------------- the gate


@pytest.mark.parametrize(
    ("method", "path", "dest", "skips"),
    [
        ("GET", b"/assets/app.js", None, True),
        ("HEAD", b"/assets/app.mjs", None, True),
        ("GET", b"/a/b/style.CSS", b"style", True),
        ("GET", b"/img/logo.webp", b"image", True),
        ("GET", b"/f/x.woff2", b"font", True),
        ("GET", b"/v/clip.mp4", b"video", True),
        ("GET", b"/app.js.map", b"empty", True),
        ("POST", b"/assets/app.js", None, False),
        ("GET", b"/api/stock.json", None, False),
        ("GET", b"/robots.txt", None, False),
        ("GET", b"/feed.xml", None, False),
        ("GET", b"/api/stock;.js", None, False),
        ("GET", b"/api/stock%3b.js", None, False),
        ("GET", b"/a%2fb.js", None, False),
        ("GET", b"/a%2e.js", None, False),
        ("GET", b"/a%20b.js", None, False),
        ("GET", b"/a\\b.js", None, False),
        ("GET", b"/static/../api/x.js", None, False),
        ("GET", b"/static/./x.js", None, False),
        ("GET", b"/.js", None, False),
        ("GET", b"/assets/app.js", b"document", False),
        ("GET", b"/assets/app.js", b"iframe", False),
        ("GET", b"/assets/app.js", b"object", False),
        ("GET", b"/assets/app.js", b"embed", False),
        ("GET", b"/checkout", None, False),
    ],
)
def test_the_four_skip_conditions(method: str, path: bytes, dest: bytes | None, skips: bool) -> None:
    assert gate.skips_gate(method, path, dest) is skips


@pytest.mark.parametrize(
    ("headers", "page"),
    [
        ({b"sec-fetch-mode": b"navigate"}, True),
        ({b"sec-fetch-mode": b"navigate", b"sec-fetch-dest": b"document"}, True),
        ({b"sec-fetch-mode": b"no-cors", b"sec-fetch-dest": b"iframe"}, True),
        ({b"sec-fetch-mode": b"cors", b"sec-fetch-dest": b"empty", b"accept": b"text/html"}, False),
        ({b"accept": b"text/html,application/xhtml+xml"}, True),
        ({b"accept": b"application/json"}, False),
        ({}, False),
    ],
)
def test_who_gets_the_page_and_who_gets_json(headers: dict[bytes, bytes], page: bool) -> None:
    assert gate.is_navigation(headers) is page


# ---------------------------------------------------------------------- headers


def _ident(trusted: bool = False, scheme: str = "http", ip: str = "203.0.113.9") -> Identity:
    return Identity(ip=ip, peer="198.51.100.1", scheme=scheme, trusted_peer=trusted, forwarded="", user_agent="t")


def _as_dict(headers: list[tuple[bytes, bytes]]) -> dict[bytes, list[bytes]]:
    out: dict[bytes, list[bytes]] = {}
    for k, v in headers:
        out.setdefault(k, []).append(v)
    return out


def test_forwarded_headers_describe_the_visitor_hop() -> None:
    sent = [
        (b"host", b"shop.example"),
        (b"x-forwarded-for", b"6.6.6.6"),
        (b"x-real-ip", b"6.6.6.6"),
        (b"connection", b"keep-alive, x-secret-hop"),
        (b"x-secret-hop", b"1"),
        (b"upgrade", b"h2c"),
        (b"proxy-authorization", b"Basic x"),
        (b"x-qm-edge", b"edge-secret-value"),
        (b"cookie", b"a=1; qm_console=op; qm_shop=t"),
        (b"accept", b"*/*"),
    ]
    out = _as_dict(upstream_headers(sent, _ident(scheme="https"), trusted=False))
    assert out[b"host"] == [b"shop.example"]
    assert out[b"x-forwarded-for"] == [b"203.0.113.9"]
    assert out[b"x-forwarded-proto"] == [b"https"] and out[b"x-forwarded-port"] == [b"443"]
    assert out[b"x-forwarded-host"] == [b"shop.example"]
    for gone in (b"x-real-ip", b"connection", b"x-secret-hop", b"upgrade", b"proxy-authorization", b"x-qm-edge"):
        assert gone not in out
    assert out[b"cookie"] == [b"a=1; qm_shop=t"]
    assert out[b"accept"] == [b"*/*"]


def test_a_listed_proxys_chain_is_kept_to_the_left() -> None:
    sent = [(b"host", b"shop.example:8080"), (b"x-forwarded-for", b"1.1.1.1, 2.2.2.2"), (b"x-real-ip", b"2.2.2.2")]
    out = _as_dict(upstream_headers(sent, _ident(trusted=True, ip="2.2.2.2"), trusted=True))
    assert out[b"x-forwarded-for"] == [b"1.1.1.1, 2.2.2.2, 2.2.2.2"]
    assert out[b"x-real-ip"] == [b"2.2.2.2"]
    assert out[b"x-forwarded-port"] == [b"8080"]


def test_the_console_cookie_alone_is_removed() -> None:
    assert strip_console_cookie(b"qm_console=x") == b""
    assert strip_console_cookie(b"a=1;qm_console=x; b=2") == b"a=1; b=2"
    assert strip_console_cookie(b"qm_console_not=1") == b"qm_console_not=1"


def test_response_headers_lose_hop_by_hop_and_the_console_cookie() -> None:
    got = [
        (b"content-type", b"text/html"),
        (b"connection", b"close, x-hop"),
        (b"x-hop", b"1"),
        (b"transfer-encoding", b"chunked"),
        (b"keep-alive", b"timeout=5"),
        (b"set-cookie", b"qm_console=evil; Path=/"),
        (b"set-cookie", b"cart=1; Path=/"),
        (b"content-encoding", b"gzip"),
    ]
    out = _as_dict(downstream_headers(got))
    assert out == {
        b"content-type": [b"text/html"],
        b"set-cookie": [b"cart=1; Path=/"],
        b"content-encoding": [b"gzip"],
    }


def test_every_connection_header_names_headers_that_never_cross_both_ways_every_time() -> None:
    # two Connection headers, mixed case and spacing: both lists count; asked twice (the second answer
    # comes from the remembered value) and in both directions
    sent = [
        (b"host", b"shop.example"),
        (b"connection", b"Keep-Alive , X-Hop-A"),
        (b"x-hop-a", b"1"),
        (b"connection", b"x-hop-b,,"),
        (b"x-hop-b", b"2"),
        (b"x-kept", b"3"),
    ]
    for _ in range(2):
        out = _as_dict(upstream_headers(sent, _ident(), trusted=False))
        assert b"x-hop-a" not in out and b"x-hop-b" not in out and b"connection" not in out
        assert out[b"x-kept"] == [b"3"]
        down = _as_dict(downstream_headers([(k, v) for k, v in sent if k != b"host"]))
        assert down == {b"x-kept": [b"3"]}
    # a Connection header naming only hop-by-hop headers removes nothing else
    assert _as_dict(downstream_headers([(b"connection", b"close"), (b"x-kept", b"3")])) == {b"x-kept": [b"3"]}
    # a long value is honoured the same, twice, and never remembered
    long_value = b"keep-alive, " + b", ".join(b"x-pad-%d" % i for i in range(20)) + b", x-long"
    for _ in range(2):
        got = _as_dict(downstream_headers([(b"connection", long_value), (b"x-long", b"1"), (b"x-kept", b"3")]))
        assert got == {b"x-kept": [b"3"]}
    assert long_value not in forward._NAMED


# ---------------------------------------------------------------------- the upstream client against raw peers


def _raw_origin(answer: bytes):  # type: ignore[no-untyped-def]
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        writer.close()

    return asyncio.start_server(handle, "127.0.0.1", 0)


def _exchange(answer: bytes, method: str = "GET") -> tuple[int, bytes, bool]:
    async def run() -> tuple[int, bytes, bool]:
        server = await _raw_origin(answer)
        port = server.sockets[0].getsockname()[1]
        pool = Pool(allow_private=True, connect_timeout=2)
        conn = await pool.connect(Origin("http", "127.0.0.1", port))
        conn.begin(f"{method} / HTTP/1.1\r\nhost: x\r\n\r\n".encode(), head_only=method == "HEAD")
        await conn.response_head()
        body = b""
        error = False
        try:
            while (chunk := await conn.read()) is not None:
                body += chunk
        except UpstreamError:
            error = True
        conn.close()
        server.close()
        await server.wait_closed()
        return conn.status, body, error

    return asyncio.run(run())


def test_a_body_delimited_by_the_connection_closing_is_complete() -> None:
    status, body, error = _exchange(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nhello, until close")
    assert (status, body, error) == (200, b"hello, until close", False)


def test_a_body_shorter_than_its_length_is_an_error() -> None:
    status, body, error = _exchange(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten..")
    assert status == 200 and body == b"only ten.." and error


def test_chunked_bodies_arrive_decoded_and_interim_answers_are_skipped() -> None:
    answer = b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    answer += b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    assert _exchange(answer) == (200, b"hello world", False)


def test_a_head_answer_has_no_body_whatever_its_length_says() -> None:
    assert _exchange(b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n", "HEAD") == (200, b"", False)


# ---------------------------------------------------------------------- the inline host index


def test_the_host_index_matches_hosts_as_visitors_send_them() -> None:
    from queue_manager.inline.hosts import HostIndex

    index = HostIndex()
    index.rebuild(
        [
            {"id": "shop", "targetUrl": "https://Shop.Example/", "proxyOrigin": "http://10.0.0.5:3000"},
            {"id": "dev", "targetUrl": "http://localhost:8080", "proxyOrigin": "http://127.0.0.1:3000"},
            {"id": "v6", "targetUrl": "http://[::1]:8081", "proxyOrigin": "http://127.0.0.1:3001"},
            {"id": "snippet", "targetUrl": "https://blog.example", "proxyOrigin": None},
            {"id": "aaa", "targetUrl": "https://shop.example/other", "proxyOrigin": "http://10.0.0.6:3000"},
        ]
    )
    found = {h: (r.room_id if (r := index.lookup(h.encode())) else None) for h in (
        "shop.example", "SHOP.EXAMPLE", "shop.example:443", "shop.example:80", "shop.example:8443",
        "localhost:8080", "localhost", "[::1]:8081", "blog.example",
    )}  # fmt: skip
    assert found == {
        "shop.example": "aaa",  # two rooms on one host: the first id in sort order
        "SHOP.EXAMPLE": "aaa",
        "shop.example:443": "aaa",
        "shop.example:80": "aaa",
        "shop.example:8443": None,
        "localhost:8080": "dev",
        "localhost": None,
        "[::1]:8081": "v6",
        "blog.example": None,  # a snippet room is not inline
    }
    assert index.by_room["shop"].origin.key == "http://10.0.0.5:3000"


def test_a_room_with_an_ipv6_proxy_origin_is_in_the_host_index() -> None:
    """The room's proxyOrigin as the admin API stores it (engine/model.py bare_origin) is in the index,
    and the origin it connects to is the IPv6 address, spelled with brackets wherever a URL names it."""
    from queue_manager.engine.model import bare_origin
    from queue_manager.inline.hosts import HostIndex

    stored = bare_origin("http://[2001:db8::1]:8080")
    assert stored == "http://[2001:db8::1]:8080"
    index = HostIndex()
    index.rebuild([{"id": "v6", "targetUrl": "https://shop.example/", "proxyOrigin": stored}])
    room = index.lookup(b"shop.example")
    assert room is not None and room.room_id == "v6"
    assert (room.origin.host, room.origin.port) == ("2001:db8::1", 8080)
    assert room.origin.authority == "[2001:db8::1]:8080"
    assert room.origin.key == "http://[2001:db8::1]:8080"


def test_the_console_host_rule_knows_an_ipv6_literal_with_a_port() -> None:
    from queue_manager.config import load_settings
    from queue_manager.inline.surface import console_host

    settings = load_settings({"ADMIN_HOST": "admin.example"})
    for host in (b"[::1]:8080", b"[::1]", b"[2001:db8::5]:443", b"127.0.0.1:8080", b"localhost:8080"):
        assert console_host(settings, host), host
    assert not console_host(settings, b"shop.example:8080")
    assert console_host(settings, b"Admin.Example:8443")


def test_a_host_port_in_other_scripts_digits_is_no_port() -> None:
    # "²" and "٣" are digits to str.isdigit but not to int(): the scheme's default port, never an error
    assert split_host("shop.example:²", "https") == ("shop.example", 443)
    assert split_host("[::1]:٣", "http") == ("[::1]", 80)
    assert split_host("Shop.Example:8443", "https") == ("shop.example", 8443)
