"""A room's brand over HTTP: the logo upload and every refusal with its code, the branded waiting page,
its stylesheet and logo under /w/<room>/, and the page's cache following a brand change."""

from __future__ import annotations

import re
import struct
import zlib
from typing import Any

import httpx
import pytest
from harness import Server, create_room, unique_id

HTML = {"accept": "text/html", "accept-encoding": "identity"}
SVG = {"content-type": "image/svg+xml"}
PNG = {"content-type": "image/png"}
GOOD_SVG = (
    b'<?xml version="1.0"?>\n<!-- made by hand -->\n'
    b'<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" '
    b'xmlns:inkscape="http://www.inkscape.org/namespaces/inkscape" viewBox="0 0 40 40" inkscape:version="1">'
    b'<defs><linearGradient id="g"><stop offset="0" stop-color="#ffd166"/></linearGradient></defs>'
    b'<circle cx="20" cy="20" r="18" fill="url(#g)"/><use xlink:href="#g"/><title>Acme</title></svg>'
)
BRAND = {
    "displayName": "Acme Outlet",
    "background": "#0b1f3a",
    "accent": "#ffd166",
    "message": {"en": "Doors at 9: <b>bring</b> your {{lead}} receipt", "th": "เปิด 9 โมง"},
    "helpUrl": "https://help.acme.example/queue",
}


def png(width: int = 4, height: int = 2, extra: bytes = b"") -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    raw = b"".join(b"\x00" + b"\x10\x20\x30" * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + extra
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def _room(admin: httpx.Client, **fields: Any) -> str:
    room = unique_id("brand")
    create_room(admin, room, **fields)
    return room


def _refused(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body: dict[str, Any] = r.json()
    assert body["code"] == code, body
    return body


def test_a_brand_is_set_read_back_and_survives_a_read_posted_back(admin: httpx.Client) -> None:
    room = _room(admin, brand=BRAND)
    r = admin.post(f"/api/admin/rooms/{room}/logo", content=GOOD_SVG, headers=SVG)
    assert r.status_code == 200, r.text
    logo = r.json()["logo"]
    assert logo["type"] == "image/svg+xml" and len(logo["sha256"]) == 64 and "data" not in logo
    read = admin.get(f"/api/admin/rooms/{room}").json()["room"]
    assert read["brand"] == {**BRAND, "logo": logo}
    # the read POSTed straight back changes nothing, the logo included
    again = admin.post("/api/admin/rooms", json=read)
    assert again.status_code == 200, again.text
    assert again.json()["room"]["brand"] == read["brand"]
    # a change merges: only the accent moves
    moved = admin.post("/api/admin/rooms", json={"id": room, "brand": {"accent": "#ffffff"}})
    assert moved.json()["room"]["brand"] == {**read["brand"], "accent": "#ffffff"}
    cleared = admin.post("/api/admin/rooms", json={"id": room, "brand": None})
    assert cleared.json()["room"]["brand"] is None


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>', "<script>"),
        (b'<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"><rect width="1" height="1"/></svg>', "onload"),
        (b'<svg xmlns="http://www.w3.org/2000/svg"><use href="https://evil.example/x.svg#a"/></svg>', "evil.example"),
        (
            b'<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink">'
            b'<use xlink:href="//evil.example/x.svg#a"/></svg>',
            "evil.example",
        ),
        (
            b'<svg xmlns="http://www.w3.org/2000/svg"><foreignObject><p xmlns="http://www.w3.org/1999/xhtml">x</p>'
            b"</foreignObject></svg>",
            "<foreignObject>",
        ),
        (b'<svg xmlns="http://www.w3.org/2000/svg"><rect style="fill:url(https://evil.example/p)"/></svg>', "url("),
        (b'<svg xmlns="http://www.w3.org/2000/svg"><style>@import "https://evil.example/a.css";</style></svg>', "CSS"),
        (b'<!DOCTYPE svg [<!ENTITY a "b">]><svg xmlns="http://www.w3.org/2000/svg">&a;</svg>', "DTD"),
        (b"<svg><rect/></svg>", "xmlns"),
        (b'<svg xmlns="http://www.w3.org/2000/svg"><rect', "well-formed"),
    ],
)
def test_a_hostile_or_broken_svg_is_refused_with_bad_logo(admin: httpx.Client, body: bytes, why: str) -> None:
    room = _room(admin)
    refused = _refused(admin.post(f"/api/admin/rooms/{room}/logo", content=body, headers=SVG), 400, "bad_logo")
    assert why in refused["error"]
    assert admin.get(f"/api/admin/rooms/{room}").json()["room"]["brand"] is None


def test_pngs_are_checked_by_signature_chunks_and_size(admin: httpx.Client) -> None:
    room = _room(admin)
    text = struct.pack(">I", 5) + b"tEXtkey\x00x" + struct.pack(">I", zlib.crc32(b"tEXtkey\x00x"))
    ok = admin.post(f"/api/admin/rooms/{room}/logo", content=png(extra=text), headers=PNG)
    assert ok.status_code == 200, ok.text
    assert ok.json()["logo"]["bytes"] == len(png())  # the text chunk is not kept
    for body, why in (
        (b"GIF89a" + b"\x00" * 40, "signature"),
        (png(width=4096), "4096"),
        (png()[:-12], "IEND"),
        (png()[:20] + b"\xff" + png()[21:], "checksum"),
    ):
        assert (
            why
            in _refused(admin.post(f"/api/admin/rooms/{room}/logo", content=body, headers=PNG), 400, "bad_logo")[
                "error"
            ]
        )
    _refused(
        admin.post(f"/api/admin/rooms/{room}/logo", content=b"GIF89a", headers={"content-type": "image/gif"}),
        415,
        "bad_logo",
    )
    big = b'<svg xmlns="http://www.w3.org/2000/svg">' + b"<g/>" * 17_000 + b"</svg>"
    _refused(admin.post(f"/api/admin/rooms/{room}/logo", content=big, headers=SVG), 413, "payload_too_large")
    # the good logo stayed through every refusal
    assert admin.get(f"/api/admin/rooms/{room}").json()["room"]["brand"]["logo"]["bytes"] == len(png())
    gone = admin.delete(f"/api/admin/rooms/{room}/logo")
    assert gone.status_code == 200 and gone.json()["room"]["brand"] is None


@pytest.mark.parametrize(
    ("brand", "status", "code"),
    [
        ({"background": "#fff", "accent": "#000000"}, 400, "invalid_color"),
        ({"background": "#ffffff"}, 400, "invalid_color"),
        ({"background": "#0b1f3a", "accent": "#52607a"}, 400, "low_contrast"),
        ({"background": "#f4f0e6", "accent": "#f2a900"}, 400, "low_contrast"),
        ({"message": {"en": "line one\nline two"}}, 400, "brand_control_char"),
        ({"message": {"en": "abc\u202eevil"}}, 400, "brand_control_char"),
        ({"message": {"en": "x" * 281}}, 400, "brand_text_too_long"),
        ({"message": {"xx": "bonjour"}}, 400, "invalid_brand"),
        ({"displayName": "A\x07B"}, 400, "brand_control_char"),  # a NUL is refused at the door (bad_request)
        ({"helpUrl": "http://help.acme.example/"}, 400, "invalid_help_url"),
        ({"helpUrl": "javascript:alert(1)"}, 400, "invalid_help_url"),
        ({"helpUrl": "https://user:pw@help.acme.example/"}, 400, "invalid_help_url"),
        ({"logo": {"type": "image/png", "sha256": "0" * 64}}, 400, "bad_logo"),
        ({"font": "Comic Sans"}, 400, "invalid_brand"),
    ],
)
def test_bad_brand_fields_are_refused_with_their_code(
    admin: httpx.Client, brand: dict[str, Any], status: int, code: str
) -> None:
    room = _room(admin)
    body = _refused(admin.post("/api/admin/rooms", json={"id": room, "brand": brand}), status, code)
    if code == "low_contrast":
        assert body["ratio"] < 4.5 and body["pair"][0] == brand["accent"]
        assert brand["accent"] in body["error"] and f"{body['ratio']:.2f}:1" in body["error"]
    assert admin.get(f"/api/admin/rooms/{room}").json()["room"]["brand"] is None


def test_the_branded_page_names_its_files_and_changes_with_the_brand(server: Server, admin: httpx.Client) -> None:
    room = _room(admin, name="Internal name", brand=BRAND)
    assert admin.post(f"/api/admin/rooms/{room}/logo", content=GOOD_SVG, headers=SVG).status_code == 200
    with server.client() as c:
        r = c.get(f"/w/{room}", headers=HTML)
        assert r.status_code == 200
        page = r.text
        assert "<title>Acme Outlet · Waiting room</title>" in page and "Internal name" not in page
        # the operator's text is escaped, and nothing in it is taken for a placeholder
        assert "Doors at 9: &lt;b&gt;bring&lt;/b&gt; your {{lead}} receipt" in page
        assert 'href="https://help.acme.example/queue"' in page
        assert r.headers["content-security-policy"].startswith("default-src 'none'; script-src 'self'")
        css_path = re.search(r'href="(/w/[^"]+/brand-[0-9a-f]{16}\.css)"', page)
        logo_path = re.search(r'src="(/w/[^"]+/logo-[0-9a-f]{16}\.svg)"', page)
        assert css_path and logo_path
        css = c.get(css_path.group(1))
        assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
        assert css.headers["cache-control"] == "public, max-age=31536000, immutable"
        assert "--bg: #0b1f3a" in css.text and "--accent: #ffd166" in css.text and "--text: #ffffff" in css.text
        logo = c.get(logo_path.group(1), headers={"accept-encoding": "identity"})
        assert logo.status_code == 200 and logo.headers["content-type"] == "image/svg+xml"
        assert "sandbox" in logo.headers["content-security-policy"]
        assert logo.content.startswith(b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 40 40">')
        assert b"inkscape" not in logo.content and b"<!--" not in logo.content and b'href="#g"' in logo.content
        assert c.get(f"/w/{room}/logo-0000000000000000.svg").status_code == 404
        assert c.get(f"/w/{room}/secrets.txt").status_code == 404
        thai = c.get(f"/w/{room}", headers={**HTML, "accept-language": "th"}).text
        assert "เปิด 9 โมง" in thai
        german = c.get(f"/w/{room}", headers={**HTML, "accept-language": "de"}).text
        assert "Doors at 9" in german  # no German message: the English one
        etag = r.headers["etag"]
        assert c.get(f"/w/{room}", headers={**HTML, "if-none-match": etag}).status_code == 304
        admin.post("/api/admin/rooms", json={"id": room, "brand": {"accent": "#ffffff"}})
        changed = c.get(f"/w/{room}", headers={**HTML, "if-none-match": etag})
        assert changed.status_code == 200 and changed.headers["etag"] != etag
        assert css_path.group(1) not in changed.text
        assert c.get(css_path.group(1)).status_code == 404  # the old colours' file is gone with them
        admin.post("/api/admin/rooms", json={"id": room, "brand": None})
        plain = c.get(f"/w/{room}", headers=HTML).text
        assert f"/w/{room}/" not in plain
        assert "<title>Internal name · Waiting room</title>" in plain


@pytest.mark.parametrize("path", ["/offline.html", "/origin-down.html"])
def test_the_outage_pages_carry_the_brand_and_stay_self_contained(
    server: Server, admin: httpx.Client, path: str
) -> None:
    room = _room(admin, brand=BRAND)
    assert admin.post(f"/api/admin/rooms/{room}/logo", content=png(), headers=PNG).status_code == 200
    with server.client() as c:
        plain = c.get(path)
        branded = c.get(path, params={"room": room})
        unknown = c.get(path, params={"room": "no-such-room"})
    assert unknown.content == plain.content and "Acme Outlet" not in plain.text
    page = branded.text
    assert branded.status_code == 200 and "Acme Outlet" in page
    assert "Doors at 9: &lt;b&gt;bring&lt;/b&gt; your {{lead}} receipt" in page
    assert 'src="data:image/png;base64,' in page and 'href="https://help.acme.example/queue"' in page
    assert "--bg: #0b1f3a" in page and "--accent: #ffd166" in page
    # nothing loads from anywhere: every src is a data: image, and the CSP still names only hashes
    assert re.findall(r'src="([a-z]+):', page) == ["data"]
    csp = branded.headers["content-security-policy"]
    assert csp.startswith("default-src 'none'; script-src 'sha256-") and "img-src data:;" in csp
    assert csp.count("'sha256-") == 3  # the page's script, its style, and the brand's colours
    assert "unsafe-inline" not in csp and "http" not in csp
