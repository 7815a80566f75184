"""The console's install verifier, black-box: POST /api/admin/rooms/<room>/install-check fetches a page of a
real site (``page_site.py``, in this test's process) and says whether the room's tag is on it, whether it
names the room, whether the page's origin is answered (tagOrigins) and returned to (returnOrigins), and how
many refusals were counted for that origin; POST /api/admin/rooms/<room>/tag-origins is its one-click fix,
which writes tagOrigins and nothing else, audited. The fetch is held to the private-address rule: the site
is on a loopback address, so the servers that fetch it run with PROXY_ALLOW_PRIVATE=1, and one without it
must refuse before any request reaches the site.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from harness import Server, create_room, unique_id, wait_until
from page_site import PageSite, html, redirect, tag

ServerFactory = Callable[..., Server]


@pytest.fixture(scope="module")
def srv(make_module_server: ServerFactory) -> Server:
    return make_module_server({"PROXY_ALLOW_PRIVATE": "1"})


@pytest.fixture
def site() -> Iterator[PageSite]:
    s = PageSite()
    try:
        yield s
    finally:
        s.close()


def verify(admin: httpx.Client, room: str, url: str) -> dict[str, Any]:
    r = admin.post(f"/api/admin/rooms/{room}/install-check", json={"url": url})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def test_a_page_on_the_target_origin_carrying_the_rooms_tag_is_all_good(srv: Server, site: PageSite) -> None:
    with srv.admin() as admin:
        room = create_room(admin, targetUrl=site.origin + "/")["id"]
        site.pages["/checkout"] = html(tag(srv.base_url, room))
        out = verify(admin, room, site.origin + "/checkout")
    assert out["ok"] is True and out["problems"] == [] and out["notes"] == []
    assert out["origin"] == site.origin and out["url"] == site.origin + "/checkout"
    assert out["fetch"]["ok"] is True and out["fetch"]["status"] == 200 and out["fetch"]["redirects"] == []
    assert out["tag"] == {"found": True, "namesRoom": True, "tags": [{"src": f"{srv.base_url}/qm.js", "room": room}]}
    assert out["tagAllowed"] is True and out["tagAllowedBy"] == "targetUrl" and out["refusing"] is False
    assert out["returnAllowed"] is True and out["refusedChecks"] == 0 and out["fix"] is None
    assert [r["path"] for r in site.requests] == ["/checkout"]
    assert site.requests[0]["userAgent"].startswith("queue-manager-verifier/")
    assert site.requests[0]["host"] == f"127.0.0.1:{site.port}"  # the URL's Host, though the address was pinned


def test_an_unlisted_origin_is_refused_counted_and_fixed_in_tag_origins_only(srv: Server, site: PageSite) -> None:
    with srv.admin() as admin:
        room = create_room(admin, targetUrl="https://www.shop.example/", returnOrigins=["https://m.shop.example"])["id"]
        site.pages["/landing"] = html(tag(srv.base_url, room))
        page = site.origin + "/landing"

        before = verify(admin, room, page)
        assert before["tag"]["namesRoom"] is True
        assert before["tagAllowed"] is False and before["tagAllowedBy"] is None and before["refusing"] is True
        assert before["refusedChecks"] == 0 and before["ok"] is False
        assert before["fix"] == {"addTagOrigin": site.origin}
        assert any("is not in the room's tagOrigins (returnOrigins while it is blank)" in p for p in before["problems"])

        # the tag on that page calls the door check: refused, and counted for (room, origin)
        with srv.client() as browser:
            for _ in range(2):
                r = browser.get("/api/check", params={"roomId": room, "url": page}, headers={"Origin": site.origin})
                assert r.status_code == 403 and r.json()["code"] == "origin_not_allowed"
        counted = wait_until(
            lambda: (o := verify(admin, room, page))["refusedChecks"] == 2 and o, what="two refusals counted"
        )
        assert any("2 refused so far" in p for p in counted["problems"])

        r = admin.post(f"/api/admin/rooms/{room}/tag-origins", json={"origin": counted["fix"]["addTagOrigin"]})
        assert r.status_code == 200, r.text
        assert r.json() == {
            "ok": True,
            "added": True,
            "origin": site.origin,
            "tagOrigins": ["https://m.shop.example", site.origin],  # returnOrigins (what blank meant) plus it
        }
        saved = admin.get(f"/api/admin/rooms/{room}").json()["room"]
        assert saved["returnOrigins"] == ["https://m.shop.example"]  # never widened by the fix
        assert saved["tagOrigins"] == ["https://m.shop.example", site.origin]

        after = verify(admin, room, page)
        assert after["tagAllowed"] is True and after["tagAllowedBy"] == "tagOrigins" and after["refusing"] is False
        assert after["fix"] is None and after["ok"] is True and after["refusedChecks"] == 2
        # the page's visitors are answered now, but admitted ones land on the target, not back here: said so
        assert after["returnAllowed"] is False
        assert len(after["notes"]) == 1 and "https://www.shop.example/" in after["notes"][0]
        assert "connector" in after["notes"][0] and f"Add {site.origin} to returnOrigins" in after["notes"][0]
        with srv.client() as browser:
            r = browser.get("/api/check", params={"roomId": room, "url": page}, headers={"Origin": site.origin})
            assert r.status_code == 200 and r.headers["access-control-allow-origin"] == site.origin

        again = admin.post(f"/api/admin/rooms/{room}/tag-origins", json={"origin": site.origin})
        assert again.status_code == 200 and again.json()["added"] is False

        rows = admin.get("/api/admin/audit", params={"roomId": room}).json()["audit"]
        fixes = [row for row in rows if row["action"] == "room.update" and row["detail"].get("tagOriginAdded")]
    assert len(fixes) == 1
    assert fixes[0]["detail"]["tagOriginAdded"] == site.origin and fixes[0]["detail"]["fields"] == ["tagOrigins"]
    assert fixes[0]["ok"] is True


def test_a_missing_tag_and_a_tag_naming_another_room_are_told_apart(srv: Server, site: PageSite) -> None:
    with srv.admin() as admin:
        room = create_room(admin, targetUrl=site.origin + "/")["id"]
        site.pages["/bare"] = html()
        site.pages["/other"] = html(tag(srv.base_url, room.upper()))
        bare = verify(admin, room, site.origin + "/bare")
        other = verify(admin, room, site.origin + "/other")
    assert bare["tag"] == {"found": False, "namesRoom": False, "tags": []} and bare["ok"] is False
    assert any(p.startswith("No qm.js script tag.") and f'data-room="{room}"' in p for p in bare["problems"])
    assert other["tag"]["found"] is True and other["tag"]["namesRoom"] is False
    assert any(f"names {room.upper()!r}, not {room!r}" in p for p in other["problems"])
    assert bare["tagAllowed"] is True and other["tagAllowed"] is True  # the origin is fine: the page is not


def test_an_inline_rooms_page_needs_no_tag(srv: Server, site: PageSite) -> None:
    with srv.admin() as admin:
        room_id = unique_id("inl")
        room = create_room(admin, room_id, targetUrl=f"https://{room_id}.shop.test/", proxyOrigin=site.origin)["id"]
        site.pages["/"] = html()
        out = verify(admin, room, site.origin + "/")
    assert out["inline"] is True and out["tag"]["found"] is False
    assert not any("No qm.js script tag" in p for p in out["problems"])
    assert out["notes"][0].startswith("This room is served inline: the queue answers for its host itself")


def test_redirects_are_followed_to_the_page_and_gzip_is_read(srv: Server, site: PageSite) -> None:
    with srv.admin() as admin:
        room = create_room(admin, targetUrl=site.origin + "/")["id"]
        body = html(tag(srv.base_url, room))[2]
        site.pages["/old"] = redirect("/older", 301)
        site.pages["/older"] = redirect(site.origin + "/new#frag", 307)
        site.pages["/new"] = (200, {"content-type": "text/html", "content-encoding": "gzip"}, gzip.compress(body))
        out = verify(admin, room, site.origin + "/old")
    assert out["ok"] is True and out["tag"]["namesRoom"] is True
    assert out["fetch"]["finalUrl"] == site.origin + "/new"
    assert out["fetch"]["redirects"] == [
        {"status": 301, "location": "/older"},
        {"status": 307, "location": site.origin + "/new#frag"},
    ]
    assert [r["path"] for r in site.requests] == ["/old", "/older", "/new"]


def test_a_redirect_loop_and_a_redirect_off_http_end_the_fetch(srv: Server, site: PageSite) -> None:
    with srv.admin() as admin:
        room = create_room(admin, targetUrl=site.origin + "/")["id"]
        site.pages["/loop"] = redirect("/loop")
        site.pages["/ftp"] = redirect("ftp://files.example/page")
        loop = verify(admin, room, site.origin + "/loop")
        ftp = verify(admin, room, site.origin + "/ftp")
    assert loop["fetch"]["ok"] is False and loop["fetch"]["error"] == "more than 5 redirects" and loop["tag"] is None
    assert len([r for r in site.requests if r["path"] == "/loop"]) == 6  # the page and five redirects, no more
    assert "ftp://files.example/page" in ftp["fetch"]["error"] and ftp["tag"] is None
    assert any(p.startswith("The page was not fetched:") for p in ftp["problems"])
    assert loop["tagAllowed"] is True  # the origin's answers do not need the page


def test_only_the_first_megabyte_is_read(srv: Server, site: PageSite) -> None:
    with srv.admin() as admin:
        room = create_room(admin, targetUrl=site.origin + "/")["id"]
        filler = "<p>" + "x" * (1536 * 1024) + "</p>"
        site.pages["/huge"] = html(body=filler + tag(srv.base_url, room))
        out = verify(admin, room, site.origin + "/huge")
    assert out["fetch"]["truncated"] is True and out["fetch"]["bytes"] == 1024 * 1024
    assert out["tag"]["found"] is False
    assert any("No qm.js script tag in the first megabyte of the page." in p for p in out["problems"])


def test_an_error_page_and_a_page_that_is_not_html_are_named(srv: Server, site: PageSite) -> None:
    with srv.admin() as admin:
        room = create_room(admin, targetUrl=site.origin + "/")["id"]
        site.pages["/api"] = (200, {"content-type": "application/json"}, b'{"qm.js": 1}')
        missing = verify(admin, room, site.origin + "/gone")
        data = verify(admin, room, site.origin + "/api")
    assert missing["fetch"]["status"] == 404 and missing["tag"] is None
    assert "The page answered HTTP 404, so it could not be read for the tag." in missing["problems"]
    assert data["tag"] is None and any("application/json, not HTML" in p for p in data["problems"])


def test_a_private_address_is_refused_before_anything_is_sent(server: Server, site: PageSite) -> None:
    with server.admin() as admin:  # the module's default server: PROXY_ALLOW_PRIVATE unset
        room = create_room(admin, targetUrl="https://www.shop.example/")["id"]
        site.pages["/"] = html(tag(server.base_url, room))
        out = verify(admin, room, site.origin + "/")
    assert out["fetch"]["ok"] is False and out["fetch"]["status"] is None
    assert "127.0.0.1" in out["fetch"]["refused"] and "PROXY_ALLOW_PRIVATE=1" in out["fetch"]["refused"]
    assert out["tag"] is None and site.requests == []
    assert out["tagAllowed"] is False and out["fix"] == {"addTagOrigin": site.origin}  # still answered


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({}, "invalid_page_url"),
        ({"url": ""}, "invalid_page_url"),
        ({"url": 42}, "invalid_page_url"),
        ({"url": "/checkout"}, "invalid_page_url"),
        ({"url": "ftp://shop.example/"}, "invalid_page_url"),
        ({"url": "javascript:alert(1)"}, "invalid_page_url"),
        ({"url": "https://user:pw@shop.example/"}, "invalid_page_url"),
        ({"url": "https://shop.example/" + "a" * 2100}, "invalid_page_url"),
        ({"url": "https://shop.example/", "origin": "https://shop.example"}, "unknown_field"),
    ],
)
def test_bad_input_to_the_verifier_is_a_400_with_its_code(admin: httpx.Client, body: dict[str, Any], code: str) -> None:
    room = create_room(admin)["id"]
    r = admin.post(f"/api/admin/rooms/{room}/install-check", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["code"] == code


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"origin": None},
        {"origin": "https://*.shop.example"},
        {"origin": "https://shop.example/path"},
        {"origin": "ftp://shop.example"},
        {"origin": "https://user@shop.example"},
        {"origin": "https://shop.example", "returnOrigins": ["https://shop.example"]},
    ],
)
def test_bad_input_to_the_fix_is_a_400_and_changes_nothing(admin: httpx.Client, body: dict[str, Any]) -> None:
    room = create_room(admin)["id"]
    r = admin.post(f"/api/admin/rooms/{room}/tag-origins", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["code"] == ("unknown_field" if "returnOrigins" in body else "invalid_origin")
    assert admin.get(f"/api/admin/rooms/{room}").json()["room"]["tagOrigins"] is None


def test_an_unknown_room_is_a_404_and_a_viewer_may_neither_fetch_nor_fix(server: Server, admin: httpx.Client) -> None:
    missing = unique_id("gone")
    for path, body in (
        ("install-check", {"url": "https://shop.example/"}),
        ("tag-origins", {"origin": "https://a.example"}),
    ):
        r = admin.post(f"/api/admin/rooms/{missing}/{path}", json=body)
        assert r.status_code == 404 and r.json()["code"] == "no_room"
    room = create_room(admin)["id"]
    key = admin.post("/api/admin/operators", json={"name": unique_id("viewer"), "role": "viewer"}).json()["key"]
    with server.client(headers={"Authorization": f"Bearer {key}"}) as viewer:
        for path, body in (
            ("install-check", {"url": "https://shop.example/"}),
            ("tag-origins", {"origin": "https://a.example"}),
        ):
            r = viewer.post(f"/api/admin/rooms/{room}/{path}", json=body)
            assert r.status_code == 403 and r.json()["code"] == "insufficient_role"
    assert admin.get(f"/api/admin/rooms/{room}").json()["room"]["tagOrigins"] is None
