"""The inline proxy over real HTTP: a Queue Manager process in front of a real app process."""

from __future__ import annotations

import threading
import uuid

import httpx
import pytest

from tests.conformance.harness import Server, unique_id, wait_until
from tests.inline.conftest import Peer, admitted, inline_room, visitor


def _host() -> str:
    return f"{uuid.uuid4().hex[:8]}.shop.test"


def _headers(echo: httpx.Response) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for k, v in echo.json()["headers"]:
        out.setdefault(k, []).append(v)
    return out


# ---------------------------------------------------------------------- routing and the gate


def test_routing_inline_host_app_paths_and_the_queue_prefix(qm: Server, peer: Peer) -> None:
    _room_id, host = inline_room(qm, peer.url, host=_host())
    with visitor(qm, host) as c:
        # /healthz on the public host is the app's path, gated like any other: a monitor is never admitted
        r = c.get("/healthz")
        assert r.status_code == 503 and r.json()["code"] == "queued"
        # under the reserved prefix it is the queue's route again
        r = c.get("/__qm/healthz")
        assert r.status_code == 200 and r.json()["ready"] is True
        assert c.get("/__qm/api/version").json()["version"]
        assert c.head("/__qm/healthz").status_code == 200
        # the waiting page under the prefix finds its API, assets and fonts under the prefix too
        page = c.get(f"/__qm/w/{_room_id}")
        assert page.status_code == 200 and '"apiBase":"/__qm"' in page.text
        assert 'src="/__qm/assets/waiting-' in page.text or "/__qm/assets/waiting-" in page.text
    # a host no room fronts is the queue itself
    with httpx.Client(base_url=f"http://127.0.0.1:{qm.port}") as c:
        assert c.get("/healthz").json()["ready"] is True


def test_waiting_visitor_gets_the_page_at_their_url_or_the_json_envelope(qm: Server, peer: Peer) -> None:
    room_id, host = inline_room(qm, peer.url, host=_host(), state="paused")
    with visitor(qm, host) as c:
        page = c.get("/products/42?color=red", headers={"Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"})
        assert page.status_code == 503
        assert page.headers["x-qm-queued"]
        assert page.headers["content-type"].startswith("text/html")
        assert '"apiBase":"/__qm"' in page.text
        # a form post after the pass lapsed is a navigation too
        form = c.post("/checkout", data={"a": "1"}, headers={"Sec-Fetch-Mode": "navigate"})
        assert form.status_code == 503 and form.headers["content-type"].startswith("text/html")
        # no Fetch Metadata: Accept decides
        assert c.get("/x", headers={"Accept": "text/html"}).headers["content-type"].startswith("text/html")
        api = c.get("/api/cart", headers={"Accept": "application/json", "Sec-Fetch-Mode": "cors"})
        assert api.status_code == 503
        body = api.json()
        assert body["code"] == "queued" and body["roomId"] == room_id and body["reload"] is True
        assert body["reason"] and body["error"]
        assert api.headers["x-qm-queued"]
        assert "X-QM-Queued" in api.headers["access-control-expose-headers"]
    assert hits(peer, "/api/cart") == 0  # a queued request never reaches the app


def raw_status(port: int, host: str, target: str) -> int:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(f"GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    return int(data.split(b" ", 2)[1])


def hits(peer: Peer, path: str) -> int:
    return int(httpx.get(f"{peer.url}/hits", params={"p": path}, timeout=5).json()["count"])


def test_static_subresources_skip_the_gate_only_when_all_four_hold(qm: Server, peer: Peer) -> None:
    _room_id, host = inline_room(qm, peer.url, host=_host(), state="paused")
    with visitor(qm, host) as c:
        assert c.get("/static/app.js").text.startswith("/* asset")
        assert c.get("/static/logo.png", headers={"Sec-Fetch-Dest": "image"}).status_code == 200
        assert c.head("/static/app.js").status_code == 200
        gated = [
            c.post("/static/app.js"),  # not GET/HEAD
            c.get("/static/data.json"),  # not a static-media extension
            c.get("/static/notes.txt"),
            c.get("/api/stock;.js"),  # a ; the app strips before routing
            c.get("/api/stock%2f.js"),  # a percent-escape
            c.get("/static/a%20b.js"),
            c.get("/static/app.js", headers={"Sec-Fetch-Dest": "document"}),  # a browsing context
            c.get("/static/app.js", headers={"Sec-Fetch-Dest": "iframe"}),
        ]
        assert [r.status_code for r in gated] == [503] * len(gated), [r.text[:80] for r in gated]
        # a dot segment, sent raw (an HTTP client library would normalise it away)
        assert raw_status(qm.port, host, "/static/../api/x.js") == 503
        assert raw_status(qm.port, host, "/static/./app.js") == 503
        assert raw_status(qm.port, host, "/static\\app.js") == 503
        assert all(r.headers.get("x-qm-queued") for r in gated)
    with qm.admin() as admin:
        inline = admin.get("/api/admin/health").json()["inline"]
    assert inline["bypassedTotal"] >= 3 and inline["gatedTotal"] >= len(gated)


def test_admitted_requests_reach_the_app_with_the_visitor_hop_described(qm: Server, peer: Peer) -> None:
    room_id, host = inline_room(qm, peer.url, host=_host() + ":8443")
    with visitor(qm, host) as c:
        admitted(c, room_id)
        r = c.get(
            "/api/echo?x=1&y=%2F",
            headers={
                "X-Forwarded-For": "6.6.6.6",  # the caller's own words: dropped
                "X-Real-IP": "6.6.6.6",
                "CF-Connecting-IP": "6.6.6.6",
                "True-Client-IP": "6.6.6.6",
                "Forwarded": "for=6.6.6.6",
                "X-Forwarded-Proto": "https",
                "X-Forwarded-Host": "evil.example",
                "X-QM-Edge": "not-for-the-app",
                "Connection": "keep-alive, X-Drop-Me",
                "X-Drop-Me": "1",
                "Keep-Alive": "timeout=5",
                "TE": "trailers",
                "Cookie": "qm_console=operator-session; app_session=abc; other=1; "
                + "; ".join(f"{k}={v}" for k, v in c.cookies.items()),
            },
        )
        assert r.status_code == 200, r.text
        assert r.headers["x-app"] == "peer"
        seen = _headers(r)
        assert r.json()["target"] == "/api/echo?x=1&y=%2F"  # the request line verbatim
        assert seen["host"] == [host]
        assert seen["x-forwarded-for"] == ["127.0.0.1"]
        assert seen["x-forwarded-host"] == [host]
        assert seen["x-forwarded-proto"] == ["http"]
        assert seen["x-forwarded-port"] == ["8443"]
        for dropped in ("x-real-ip", "cf-connecting-ip", "true-client-ip", "forwarded", "x-qm-edge", "x-drop-me"):
            assert dropped not in seen, dropped
        assert "keep-alive" not in seen and "te" not in seen
        cookie = seen["cookie"][0]
        assert "qm_console" not in cookie and "app_session=abc" in cookie and "other=1" in cookie
        assert f"qm_{room_id}=" in cookie  # the queue's own cookies pass unchanged
        # the default port follows the scheme when the Host names none
    plain = _host()
    room2, _ = inline_room(qm, peer.url, host=plain)
    with visitor(qm, plain) as c:
        admitted(c, room2)
        assert _headers(c.get("/api/echo"))["x-forwarded-port"] == ["80"]


def test_a_listed_proxy_keeps_its_chain_and_headers(make_server, peer: Peer) -> None:  # type: ignore[no-untyped-def]
    srv = make_server({"TRUST_PROXY": "1", "TRUST_PROXY_IPS": "127.0.0.1"})
    host = _host()
    room_id, _ = inline_room(srv, peer.url, host=host)
    with visitor(srv, host, headers={"Host": host, "X-Forwarded-For": "1.2.3.4, 9.9.9.9"}) as c:
        admitted(c, room_id)
        r = c.get("/api/echo", headers={"X-Forwarded-Proto": "https", "X-Real-IP": "9.9.9.9"})
        seen = _headers(r)
        assert seen["x-forwarded-for"] == ["1.2.3.4, 9.9.9.9, 9.9.9.9"]  # chain kept, resolved client rightmost
        assert seen["x-forwarded-proto"] == ["https"] and seen["x-forwarded-port"] == ["443"]
        assert seen["x-real-ip"] == ["9.9.9.9"]


def test_qm_console_never_crosses_back_from_the_app(qm: Server, peer: Peer) -> None:
    room_id, host = inline_room(qm, peer.url, host=_host())
    with visitor(qm, host) as c:
        admitted(c, room_id)
        r = c.get("/cookies")
        lines = r.headers.get_list("set-cookie")
        assert any(line.startswith("app=1") for line in lines)
        assert not any(line.startswith("qm_console") for line in lines)


def test_the_pass_hand_off_redirects_to_the_clean_url(qm: Server, peer: Peer) -> None:
    room_id, host = inline_room(qm, peer.url, host=_host())
    with visitor(qm, host) as c:
        page = c.get("/page/shoes?size=9", headers={"Sec-Fetch-Mode": "navigate"})
        assert page.status_code == 503
        state = admitted(c, room_id)
        assert state["redirectUrl"].startswith(f"http://{host}/page/shoes?size=9&qm_token=")
        target = state["redirectUrl"].split(host, 1)[1]
        hop = c.get(target, headers={"Sec-Fetch-Mode": "navigate"})
        assert hop.status_code == 303 and hop.headers["location"] == "/page/shoes?size=9"
        assert f"qm_dk_{room_id}=" in hop.headers.get("set-cookie", "")
        landed = c.get("/page/shoes?size=9", headers={"Sec-Fetch-Mode": "navigate"})
        assert landed.status_code == 200 and "Peer app page /page/shoes" in landed.text


# ---------------------------------------------------------------------- streaming


def test_a_streamed_response_reaches_the_visitor_as_the_app_produces_it(qm: Server, peer: Peer) -> None:
    room_id, host = inline_room(qm, peer.url, host=_host())
    key = unique_id("s")
    with visitor(qm, host) as c:
        admitted(c, room_id)
        with c.stream("GET", "/api/stream", params={"id": key}) as r:
            parts = r.iter_raw()
            first = next(parts)
            assert first.startswith(b"first-part")  # arrived while the app still holds the rest back
            peer.release(key)
            rest = b"".join(parts)
        assert (first + rest) == b"first-part\nsecond-part\n"


def test_server_sent_events_pass_through_unbuffered(qm: Server, peer: Peer) -> None:
    room_id, host = inline_room(qm, peer.url, host=_host())
    key = unique_id("e")
    with visitor(qm, host) as c:
        admitted(c, room_id)
        with c.stream("GET", "/sse", params={"id": key}, headers={"Accept": "text/event-stream"}) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            lines = r.iter_lines()
            assert next(lines) == "data: one"
            peer.release(key)
            assert "data: two" in list(lines)


def _rss_peak_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_a_large_upload_streams_through_with_flat_memory(qm: Server, peer: Peer) -> None:
    """256 MiB through the proxy while its peak memory grows by less than 48 MiB: a proxy that buffered
    the body would grow by the whole of it. (Larger bodies only cost the suite CPU: the bound is the same.)"""
    import hashlib

    room_id, host = inline_room(qm, peer.url, host=_host())
    block = bytes(range(256)) * 4096  # 1 MiB
    total = 256
    digest = hashlib.sha256()
    for _ in range(total):
        digest.update(block)
    with visitor(qm, host, timeout=300) as c:
        admitted(c, room_id)
        c.get("/api/echo")  # warm: the session, the upstream pool
        before = _rss_peak_kib(qm.proc.pid)

        def body():  # type: ignore[no-untyped-def]
            for _ in range(total):
                yield block

        r = c.post("/upload", content=body(), headers={"Content-Type": "application/octet-stream"})
        assert r.status_code == 200, r.text
        assert r.json() == {"bytes": total << 20, "sha256": digest.hexdigest()}
        grown_mib = (_rss_peak_kib(qm.proc.pid) - before) / 1024
        assert grown_mib < 48, f"the proxy's peak memory grew {grown_mib:.0f} MiB for a {total} MiB upload"


def test_a_large_download_streams_through(qm: Server, peer: Peer) -> None:
    room_id, host = inline_room(qm, peer.url, host=_host())
    with visitor(qm, host, timeout=120) as c:
        admitted(c, room_id)
        size = 0
        with c.stream("GET", "/big", params={"mb": 256}) as r:
            assert r.headers["content-length"] == str(256 << 20)
            for chunk in r.iter_raw():
                size += len(chunk)
        assert size == 256 << 20


def test_an_upload_with_a_known_length_and_a_chunked_one(qm: Server, peer: Peer) -> None:
    room_id, host = inline_room(qm, peer.url, host=_host())
    with visitor(qm, host) as c:
        admitted(c, room_id)
        r = c.post("/api/echo", content=b"x" * 100_000)
        assert r.json()["bodyBytes"] == 100_000
        assert _headers(r)["content-length"] == ["100000"]
        r = c.post("/api/echo", content=iter([b"a" * 10, b"b" * 20]))
        assert r.json()["bodyBytes"] == 30


# ---------------------------------------------------------------------- when the site is down


def test_origin_down_answers_502_with_the_page_or_json_and_counts_it(qm: Server) -> None:
    from tests.conformance.harness import free_port

    room_id, host = inline_room(qm, f"http://127.0.0.1:{free_port()}", host=_host())
    with visitor(qm, host) as c:
        admitted(c, room_id)
        api = c.get("/api/cart", headers={"Accept": "application/json"})
        assert api.status_code == 502
        assert api.json()["code"] == "origin_down" and api.json()["roomId"] == room_id
        assert api.headers["x-qm-origin"] == "connect"
        assert "x-qm-queued" not in api.headers
        page = c.get("/", headers={"Sec-Fetch-Mode": "navigate"})
        assert page.status_code == 502 and page.headers["content-type"].startswith("text/html")
        assert page.headers["x-qm-origin"]
        # the origin-down page: one self-contained file that never says the visitor lost their place
        assert "noindex" in page.text and "<script src" not in page.text and "<link" not in page.text
    with qm.admin() as admin:
        health = admin.get("/api/admin/health").json()
        metrics = admin.get("/metrics").text
    assert health["inline"]["originErrors"][room_id]["connect"] == 2
    assert health["inline"]["originErrorsTotal"] >= 2
    assert health["ready"] is True  # a dead customer origin never makes this instance unready
    assert f'qm_proxy_origin_errors_total{{phase="connect",room="{room_id}"}} 2.0' in metrics


def test_the_origin_down_page_of_a_branded_room_carries_its_brand(qm: Server) -> None:
    from tests.conformance.harness import free_port

    brand = {"displayName": "Acme Outlet", "background": "#ffffff", "accent": "#1d4ed8", "message": {"en": "Back soon"}}
    room_id, host = inline_room(qm, f"http://127.0.0.1:{free_port()}", host=_host(), brand=brand)
    with visitor(qm, host) as c:
        admitted(c, room_id)
        page = c.get("/", headers={"Sec-Fetch-Mode": "navigate"})
    assert page.status_code == 502 and page.headers["x-qm-origin"]
    assert "Acme Outlet" in page.text and "Back soon" in page.text and "--accent: #1d4ed8" in page.text
    assert "<script src" not in page.text and "<link" not in page.text


def test_a_hung_origin_is_a_504_after_proxy_timeout(make_server, peer: Peer) -> None:  # type: ignore[no-untyped-def]
    srv = make_server({"PROXY_TIMEOUT_MS": "300"})
    room_id, host = inline_room(srv, peer.url, host=_host())
    key = unique_id("hang")
    try:
        with visitor(srv, host) as c:
            admitted(c, room_id)
            r = c.get("/slow", params={"id": key})
            assert r.status_code == 504 and r.json()["phase"] == "timeout"
            assert r.headers["x-qm-origin"] == "timeout"
    finally:
        peer.release(key)


def test_an_origin_failing_mid_body_cuts_the_response_and_is_counted(qm: Server, peer: Peer) -> None:
    room_id, host = inline_room(qm, peer.url, host=_host())
    with visitor(qm, host) as c:
        admitted(c, room_id)
        with pytest.raises(httpx.HTTPError):
            c.get("/broken")

    def counted() -> int:
        with qm.admin() as admin:
            errors = admin.get("/api/admin/health").json()["inline"]["originErrors"]
        return errors.get(room_id, {}).get("body", 0)

    assert wait_until(counted, 5, 0.1, "the mid-body failure counted") == 1


def test_a_visitor_leaving_is_counted_apart_from_origin_errors(qm: Server, peer: Peer) -> None:
    room_id, host = inline_room(qm, peer.url, host=_host())
    key = unique_id("gone")
    with visitor(qm, host) as c:
        admitted(c, room_id)
        with c.stream("GET", "/api/stream", params={"id": key}) as r:
            next(r.iter_raw())  # the visitor leaves while the app still streams
    peer.release(key)

    def gone() -> dict[str, object] | None:
        with qm.admin() as admin:
            inline = admin.get("/api/admin/health").json()["inline"]
        return inline if inline["visitorDisconnects"].get(room_id) else None

    inline = wait_until(gone, 5, 0.1, "the disconnect counted")
    assert room_id not in inline["originErrors"]  # type: ignore[operator]


# ---------------------------------------------------------------------- SSRF


def test_a_private_origin_is_refused_without_proxy_allow_private(make_server, peer: Peer) -> None:  # type: ignore[no-untyped-def]
    srv = make_server({"PROXY_ALLOW_PRIVATE": None})
    # an IP literal (127.0.0.1: loopback) is refused when saved (tests/inline/test_save_time_ssrf.py has the rest)
    with srv.admin() as admin:
        body = {"id": unique_id(), "targetUrl": f"http://{_host()}", "proxyOrigin": peer.url}
        r = admin.post("/api/admin/rooms", json=body)
    assert r.status_code == 400 and r.json()["code"] == "proxy_origin_private"
    # a name is saved, and refused on connection when an answer is private
    before = hits(peer, "/api/echo")
    room_id, host = inline_room(srv, f"http://localhost:{peer.port}", host=_host())
    with visitor(srv, host) as c:
        admitted(c, room_id)
        r = c.get("/api/echo")
        assert r.status_code == 502 and r.headers["x-qm-origin"] == "refused"
        assert c.get("/static/app.js").status_code == 502  # skipping the gate skips no SSRF rule
    assert hits(peer, "/api/echo") == before  # nothing reached the app


def test_proxy_origin_pointing_back_at_the_public_host_is_a_loop(qm: Server) -> None:
    with qm.admin() as admin:
        r = admin.post(
            "/api/admin/rooms",
            json={"id": unique_id(), "targetUrl": "https://shop.example", "proxyOrigin": "https://shop.example"},
        )
    assert r.status_code == 400 and r.json()["code"] == "proxy_origin_loop"


# ---------------------------------------------------------------------- the console's host rules


def test_console_host_rules_with_an_inline_room(make_server, peer: Peer) -> None:  # type: ignore[no-untyped-def]
    srv = make_server({"PUBLIC_URL": "http://qm.example"})
    auth = {"Authorization": f"Bearer {srv.admin_key}"}
    host = _host()
    with httpx.Client(base_url=f"http://127.0.0.1:{srv.port}", headers=auth) as c:
        r = c.post(
            "/api/admin/rooms",
            json={"id": unique_id(), "targetUrl": f"http://{host}", "proxyOrigin": peer.url},
            headers={"Host": "ops.example"},
        )
        assert r.status_code == 201
        # a hostname that fronts no room is withheld the console (bare 404), the visitor surface still answers
        r = c.get("/api/admin/rooms", headers={"Host": "ops.example"})
        assert r.status_code == 404 and r.json()["code"] == "not_found"
        assert c.get("/healthz", headers={"Host": "ops.example"}).status_code == 200
        # an address literal, localhost and the PUBLIC_URL host keep it
        assert c.get("/api/admin/rooms").status_code == 200
        assert c.get("/api/admin/rooms", headers={"Host": "localhost"}).status_code == 200
        assert c.get("/api/admin/rooms", headers={"Host": "qm.example"}).status_code == 200
        # on the inline host: only under /__qm (ADMIN_HOST unset), never shadowing the app's /api/admin
        assert c.get("/__qm/api/admin/rooms", headers={"Host": host}).status_code == 200
        app_path = c.get("/api/admin/rooms", headers={"Host": host, "Accept": "application/json"})
        assert app_path.status_code == 503 and app_path.json()["code"] == "queued"
        # a stale /__qm address on a host with no inline room names where the console went
        stale = c.get("/__qm/api/admin/rooms", headers={"Host": "old-shop.example"})
        assert stale.status_code == 404 and stale.json()["code"] == "not_inline_host"
        assert stale.json()["consoleUrl"] == "http://qm.example/"


def test_admin_host_withholds_the_console_from_the_customer_host(make_server, peer: Peer) -> None:  # type: ignore[no-untyped-def]
    srv = make_server({"ADMIN_HOST": "admin.example"})
    host = _host()
    room_id, _ = inline_room(srv, peer.url, host=host)
    auth = {"Authorization": f"Bearer {srv.admin_key}"}
    with httpx.Client(base_url=f"http://127.0.0.1:{srv.port}", headers=auth) as c:
        assert c.get("/__qm/api/admin/rooms", headers={"Host": host}).status_code == 404
        assert c.get("/__qm/healthz", headers={"Host": host}).status_code == 200  # visitor paths remain
        assert c.get("/api/admin/rooms", headers={"Host": "admin.example"}).status_code == 200
        stale = c.get("/__qm/x", headers={"Host": "gone.example"})
        assert stale.status_code == 404 and stale.json()["code"] == "not_found"
    assert room_id


def test_saving_the_first_inline_room_from_a_hostname_warns(make_server, peer: Peer) -> None:  # type: ignore[no-untyped-def]
    srv = make_server()
    auth = {"Authorization": f"Bearer {srv.admin_key}", "Host": "qm.weekday.example"}
    with httpx.Client(base_url=f"http://127.0.0.1:{srv.port}", headers=auth) as c:
        body = {"id": unique_id(), "targetUrl": f"http://{_host()}", "proxyOrigin": peer.url}
        r = c.post("/api/admin/rooms", json=body)
        assert r.status_code == 201
        warnings = r.json()["warnings"]
        assert warnings[0]["code"] == "console_host_withheld" and warnings[0]["host"] == "qm.weekday.example"
        assert c.get("/api/admin/rooms").status_code == 404
    with srv.admin() as admin:  # an address literal keeps the console, and health says why the name lost it
        warnings = admin.get("/api/admin/health").json()["configWarnings"]
    assert [w["code"] for w in warnings] == ["console_host_withheld"]


def test_saving_the_last_inline_room_back_to_snippet_from_its_host_names_where_the_console_went(  # type: ignore[no-untyped-def]
    make_server, peer: Peer
) -> None:
    srv = make_server({"PUBLIC_URL": "http://qm.example"})
    host, other = _host(), _host()
    room_id, _ = inline_room(srv, peer.url, host=host)
    second, _ = inline_room(srv, peer.url, host=other)
    auth = {"Authorization": f"Bearer {srv.admin_key}"}
    with visitor(srv, host, headers=auth) as c:
        # a save that keeps the host inline says nothing of the kind
        r = c.post("/__qm/api/admin/rooms", json={"id": room_id, "name": "Still inline"})
        assert r.status_code == 200, r.text
        assert "console_moved" not in [w["code"] for w in r.json().get("warnings", [])]
        # clearing proxyOrigin of the host's last inline room from the console under /__qm/ on that host
        r = c.post("/__qm/api/admin/rooms", json={"id": room_id, "proxyOrigin": None})
        assert r.status_code == 200, r.text
        assert r.json()["room"].get("proxyOrigin") is None
        moved = [w for w in r.json()["warnings"] if w["code"] == "console_moved"]
        assert len(moved) == 1 and moved[0]["host"] == host and moved[0]["consoleUrl"] == "http://qm.example/"
        assert "http://qm.example/" in moved[0]["message"] and "/__qm/" in moved[0]["message"]
        stale = c.get("/__qm/api/admin/rooms")
        assert stale.status_code == 404 and stale.json()["consoleUrl"] == "http://qm.example/"
    # the same change sent to the console's own address moves no console: no such warning
    with srv.admin() as admin:
        r = admin.post("/api/admin/rooms", json={"id": second, "proxyOrigin": None})
        assert r.status_code == 200 and "console_moved" not in [w["code"] for w in r.json().get("warnings", [])]


def test_a_console_session_opened_under_the_inline_prefix_is_scoped_to_it(qm: Server, peer: Peer) -> None:
    _room_id, host = inline_room(qm, peer.url, host=_host())
    with visitor(qm, host) as c:
        r = c.post("/__qm/api/admin/session", json={"key": qm.admin_key}, headers={"X-QM-CSRF": "1"})
        assert r.status_code == 200, r.text
        assert "Path=/__qm/api/admin;" in r.headers["set-cookie"]
        # the browser sends it back under the prefix, where the console's own calls go
        assert c.get("/__qm/api/admin/whoami").status_code == 200
        out = c.delete("/__qm/api/admin/session", headers={"X-QM-CSRF": "1"})
        assert out.status_code == 200 and out.json()["closed"] is True
        assert "Path=/__qm/api/admin;" in out.headers["set-cookie"] and "Max-Age=0" in out.headers["set-cookie"]
    with httpx.Client(base_url=f"http://127.0.0.1:{qm.port}") as c:  # on the server's own address: /api/admin
        r = c.post("/api/admin/session", json={"key": qm.admin_key}, headers={"X-QM-CSRF": "1"})
        assert r.status_code == 200 and "Path=/api/admin;" in r.headers["set-cookie"]


def test_without_public_url_the_move_warning_says_to_set_it(make_server, peer: Peer) -> None:  # type: ignore[no-untyped-def]
    srv = make_server()
    host = _host()
    room_id, _ = inline_room(srv, peer.url, host=host)
    with visitor(srv, host, headers={"Authorization": f"Bearer {srv.admin_key}"}) as c:
        r = c.post("/__qm/api/admin/rooms", json={"id": room_id, "proxyOrigin": None})
        assert r.status_code == 200, r.text
        moved = [w for w in r.json()["warnings"] if w["code"] == "console_moved"]
        assert len(moved) == 1 and moved[0]["consoleUrl"] is None and "Set PUBLIC_URL" in moved[0]["message"]


# ---------------------------------------------------------------------- limits


def test_past_max_connections_a_plain_503_sheds_and_ready_goes_false(make_server) -> None:  # type: ignore[no-untyped-def]
    import socket

    srv = make_server({"MAX_CONNECTIONS": "3", "CONNECTION_RESERVE": "4"})
    held = []
    try:
        for _ in range(3):  # requests in progress (their bodies still to come): a socket that sends nothing
            s = socket.create_connection(("127.0.0.1", srv.port))  # would be closed to make room instead
            s.sendall(b"POST /api/join HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n")
            held.append(s)
        with httpx.Client(base_url=f"http://127.0.0.1:{srv.port}") as c:

            def shed() -> httpx.Response | None:
                r = c.get("/api/version")
                return r if r.status_code == 503 else None

            r = wait_until(shed, 5, 0.1, "the ceiling")
            assert r.json()["code"] == "over_capacity"
            assert "x-qm-queued" not in r.headers
            health = c.get("/healthz")
            assert health.status_code == 503 and health.json()["ready"] is False
    finally:
        for s in held:
            s.close()
    with httpx.Client(base_url=f"http://127.0.0.1:{srv.port}") as c:
        assert wait_until(lambda: c.get("/healthz").status_code == 200, 5, 0.1, "back under the ceiling")


def test_a_stop_lets_proxied_responses_finish_within_the_drain(make_server, peer: Peer) -> None:  # type: ignore[no-untyped-def]
    import signal

    srv = make_server({"SHUTDOWN_DRAIN_MS": "8000"})
    room_id, host = inline_room(srv, peer.url, host=_host())
    key = unique_id("drain")
    result: dict[str, object] = {}
    with visitor(srv, host, timeout=20) as c:
        admitted(c, room_id)

        def slow() -> None:
            try:
                r = c.get("/slow", params={"id": key})
                result["status"], result["body"] = r.status_code, r.text
            except httpx.HTTPError as err:
                result["error"] = repr(err)

        t = threading.Thread(target=slow)
        t.start()
        wait_until(lambda: peer_saw_slow(peer, key), 5, 0.05, "the app holding the request")
        srv.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: not_ready(srv), 5, 0.05, "not ready")
        peer.release(key)
        t.join(15)
    assert result == {"status": 200, "body": "slow-done"}
    assert srv.wait(15) == 0, srv.stderr  # and the process then ends: a clean stop, exit 0


def peer_saw_slow(peer: Peer, key: str) -> bool:
    return bool(httpx.get(f"{peer.url}/hits", params={"slow": key}, timeout=5).json()["count"])


def not_ready(srv: Server) -> bool:
    try:
        r = httpx.get(f"http://127.0.0.1:{srv.port}/healthz", timeout=1)
    except httpx.HTTPError:
        return True
    return r.status_code == 503


# ---------------------------------------------------------------------- the origin health probe


def test_the_origin_probe_reports_a_live_origin(qm: Server, peer: Peer) -> None:
    room_id, _ = inline_room(qm, peer.url, host=_host())

    def probed() -> dict[str, object] | None:
        with qm.admin() as admin:
            return admin.get("/api/admin/health").json()["inline"]["origins"].get(room_id)  # type: ignore[no-any-return]

    result = wait_until(probed, 8, 0.2, "the first probe")
    assert result["ok"] is True and result["status"] == 200


def test_the_origin_probe_obeys_the_ssrf_rule(make_server, peer: Peer) -> None:  # type: ignore[no-untyped-def]
    srv = make_server({"PROXY_ALLOW_PRIVATE": None})
    room_id, host = inline_room(srv, f"http://localhost:{peer.port}", host=_host())  # a literal is refused at save

    def probed() -> dict[str, object] | None:
        with srv.admin() as admin:
            return admin.get("/api/admin/health").json()["inline"]["origins"].get(room_id)  # type: ignore[no-any-return]

    result = wait_until(probed, 8, 0.2, "the first probe")
    assert result["ok"] is False and result["phase"] == "refused"
    with srv.admin() as admin:
        health = admin.get("/api/admin/health").json()
    assert health["status"] == "degraded" and health["ready"] is True
    assert f"origin down — {room_id}" in health["incidents"]
    seen = httpx.get(f"{peer.url}/hits", params={"host": host}, timeout=5).json()["count"]
    assert seen == 0  # the probe never reached the private origin


# ---------------------------------------------------------------------- EDGE_SECRET on an inline host


def test_edge_secret_guards_inline_hosts_and_never_reaches_the_app(make_server, peer: Peer) -> None:  # type: ignore[no-untyped-def]
    secret = "edge-secret-value-0123456789"
    srv = make_server({"EDGE_SECRET": secret})
    host = _host()
    edge = {"X-QM-Edge": secret, "CF-Connecting-IP": "203.0.113.7"}
    with httpx.Client(
        base_url=f"http://127.0.0.1:{srv.port}", headers={"Authorization": f"Bearer {srv.admin_key}"}
    ) as a:
        body = {"id": unique_id(), "targetUrl": f"http://{host}", "proxyOrigin": peer.url, "ratePerMinute": 6000}
        room_id = a.post("/api/admin/rooms", json=body, headers=edge).json()["room"]["id"]
    with visitor(srv, host) as c:
        assert c.get("/static/app.js").status_code == 403  # even a path that skips the gate
        assert c.get("/healthz").status_code == 403  # /healthz is the app's path here, not the exemption
    with visitor(srv, host, headers=edge) as c:
        admitted(c, room_id)
        r = c.get("/api/echo", headers={"X-Forwarded-Host": "evil.example", "X-Forwarded-Proto": "https"})
        seen = _headers(r)
        assert "x-qm-edge" not in seen
        assert seen["x-forwarded-for"] == ["203.0.113.7"]  # cf-connecting-ip is the client
        assert seen["x-forwarded-host"] == [host]  # a client's own X-Forwarded-Host is not believed via the edge
        assert seen["x-forwarded-proto"] == ["https"]


def test_connections_to_the_app_are_kept_alive_and_reused(qm: Server, peer: Peer) -> None:
    room_id, host = inline_room(qm, peer.url, host=_host())
    with visitor(qm, host) as c:
        admitted(c, room_id)
        for i in range(30):
            assert c.get("/api/echo", params={"i": i}).status_code == 200
    conns = httpx.get(f"{peer.url}/hits", params={"conns": host}, timeout=5).json()["count"]
    assert conns <= 3, f"{conns} connections for 30 sequential requests (the origin probe may add its own)"


def test_the_apps_query_string_is_the_apps(qm: Server, peer: Peer) -> None:
    room_id, host = inline_room(qm, peer.url, host=_host())
    many = "&".join(f"f{i}=%E0%A4" for i in range(80))  # more fields than the queue's API takes, bad UTF-8
    with visitor(qm, host) as c:
        admitted(c, room_id)
        r = c.get(f"/api/echo?{many}")
        assert r.status_code == 200 and r.json()["target"] == f"/api/echo?{many}"
        # the hand-off strips only qm_token, leaving the rest byte for byte
        token = c.cookies.get(f"qm_{room_id}")
        hop = c.get(f"/page/a?x=a+b&qm_token={token}&y=%2F", headers={"Sec-Fetch-Mode": "navigate"})
        assert hop.status_code == 303 and hop.headers["location"] == "/page/a?x=a+b&y=%2F"


def test_shutdown_drain_ms_bounds_a_proxied_response_that_never_ends(make_server, peer: Peer) -> None:  # type: ignore[no-untyped-def]
    import signal

    srv = make_server({"SHUTDOWN_DRAIN_MS": "1000", "SHUTDOWN_GRACE_MS": "1000"})
    room_id, host = inline_room(srv, peer.url, host=_host())
    key = unique_id("never")
    result: dict[str, object] = {}
    try:
        with visitor(srv, host, timeout=30) as c:
            admitted(c, room_id)

            def slow() -> None:
                try:
                    r = c.get("/slow", params={"id": key})
                    result["status"] = r.status_code
                except httpx.HTTPError as err:
                    result["error"] = type(err).__name__

            t = threading.Thread(target=slow)
            t.start()
            wait_until(lambda: peer_saw_slow(peer, key), 5, 0.05, "the app holding the request")
            srv.proc.send_signal(signal.SIGTERM)
            srv.wait(15)  # the stop did not wait for the app: SHUTDOWN_DRAIN_MS is the ceiling
            t.join(15)
        assert "error" in result or result.get("status", 0) >= 500, result
    finally:
        peer.release(key)


def test_admission_maintenance_holds_a_pass_at_the_inline_gate_until_it_ends(qm: Server, peer: Peer) -> None:
    room_id, host = inline_room(qm, peer.url, host=_host())
    pop = "/api/v1/system/maintenance/pop"
    with visitor(qm, host) as c, qm.admin() as admin:
        assert admitted(c, room_id)["state"] == "passed"
        assert admin.post(pop, json={"enabled": True}).status_code == 200
        try:
            held = c.get("/api/echo", headers={"Accept": "application/json", "Sec-Fetch-Mode": "cors"})
            assert held.status_code == 503 and held.headers["x-qm-queued"], held.text
            assert held.json()["code"] == "queued" and held.json()["reason"] == "paused", held.text
        finally:
            assert admin.post(pop, json={"enabled": False}).status_code == 200
        r = c.get("/api/echo")
        assert r.status_code == 200 and r.headers["x-app"] == "peer", r.text
