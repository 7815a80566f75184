"""The visitor's pages over HTTP: the waiting page, its hashed assets, the fonts, offline.html and origin-down.html."""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path
from typing import Any

import pytest
from harness import Server, create_room, join, status, unique_id

FONTS_DIR = Path(__file__).resolve().parents[2] / "queue_manager" / "web" / "fonts"
FONT_FILES = (
    "Geist-Regular-Latin.woff2",
    "Geist-Medium-Latin.woff2",
    "Geist-SemiBold-Latin.woff2",
    "GeistMono-Regular-Latin.woff2",
)
LANG_NAMES = ("English", "ไทย", "Español", "日本語", "Deutsch", "Français", "العربية", "עברית", "繁體中文", "हिन्दी")
HTML = {"accept": "text/html"}
IDENTITY = {"accept-encoding": "identity"}


def _room(srv: Server, **fields: Any) -> str:
    room = unique_id("page")
    with srv.admin() as admin:
        create_room(admin, room, **fields)
    return room


def _asset_names(page: str) -> dict[str, str]:
    found = dict(re.findall(r'/assets/waiting-([A-Za-z0-9_-]{22})\.(css|js)"', page))
    return {ext: h for h, ext in found.items()}


def _b64sha(body: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(body).digest()).decode()[:22]


def test_waiting_page_is_cached_privately_with_an_etag_and_revalidates_to_304(server: Server) -> None:
    room = _room(server, name="Autumn drop")
    with server.client() as c:
        r = c.get(f"/w/{room}", headers=IDENTITY)
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/html")
        assert r.headers["cache-control"] == "private, no-cache"
        assert r.headers["x-robots-tag"] == "noindex"
        etag = r.headers["etag"]
        assert etag.startswith('"') and etag.endswith('"')
        assert "Autumn drop" in r.text
        again = c.get(f"/w/{room}", headers={**IDENTITY, "if-none-match": etag})
        assert again.status_code == 304
        assert again.content == b""
        assert again.headers["etag"] == etag
        other = c.get(f"/w/{room}", headers={**IDENTITY, "if-none-match": '"something-else"'})
        assert other.status_code == 200 and other.content == r.content


def test_waiting_page_sends_a_strict_csp_and_keeps_config_out_of_executable_script(server: Server) -> None:
    room = _room(server)
    with server.client() as c:
        r = c.get(f"/w/{room}")
    csp = r.headers["content-security-policy"]
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert "script-src 'self'" in csp and "default-src 'none'" in csp
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", r.text, re.S)
    inline = [(attrs, body) for attrs, body in scripts if "src=" not in attrs]
    assert inline, "the config block is missing"
    for attrs, body in inline:
        assert 'type="application/json"' in attrs, f"an executable inline script: {attrs!r}"
        assert f'"roomId":"{room}"' in body
    assert "<img" not in r.text
    assert "http://" not in r.text and "https://" not in r.text, "the page names another origin"


def test_waiting_page_is_compressed_and_every_encoding_carries_the_same_page(server: Server) -> None:
    room = _room(server)
    with server.client() as c:
        plain = c.get(f"/w/{room}", headers=IDENTITY)
        gz = c.get(f"/w/{room}", headers={"accept-encoding": "gzip"})
        br = c.get(f"/w/{room}", headers={"accept-encoding": "br, gzip"})
    assert "content-encoding" not in plain.headers
    assert gz.headers["content-encoding"] == "gzip"
    assert br.headers["content-encoding"] == "br"
    assert int(br.headers["content-length"]) < int(gz.headers["content-length"]) < len(plain.content)
    assert gz.content == plain.content == br.content  # httpx decoded both
    assert "Accept-Encoding" in plain.headers["vary"]


def test_page_is_rerendered_when_the_rooms_name_changes(server: Server) -> None:
    room = _room(server, name="First name")
    with server.client() as c, server.admin() as admin:
        before = c.get(f"/w/{room}")
        r = admin.post("/api/admin/rooms", json={"id": room, "name": "Second name"})
        assert r.status_code == 200, r.text
        after = c.get(f"/w/{room}", headers={"if-none-match": before.headers["etag"]})
    assert after.status_code == 200
    assert "Second name" in after.text and "First name" not in after.text
    assert after.headers["etag"] != before.headers["etag"]


def test_language_from_the_cookie_then_accept_language(server: Server) -> None:
    room = _room(server)
    with server.client() as c:
        thai = c.get(f"/w/{room}", headers={"accept-language": "th-TH,th;q=0.9,en;q=0.5"})
        weighted = c.get(f"/w/{room}", headers={"accept-language": "xx;q=1, ja;q=0.4, de;q=0.8"})
        unknown = c.get(f"/w/{room}", headers={"accept-language": "xx, yy"})
        c.cookies.set("qm_lang", "es")
        chosen = c.get(f"/w/{room}", headers={"accept-language": "th"})
        c.cookies.set("qm_lang", "xx")
        bogus = c.get(f"/w/{room}", headers={"accept-language": "ja"})
    assert '<html lang="th" dir="ltr">' in thai.text and "ห้องรอคิว" in thai.text
    assert '<html lang="de" dir="ltr">' in weighted.text
    assert '<html lang="en" dir="ltr">' in unknown.text
    assert '<html lang="es" dir="ltr">' in chosen.text and "Sala de espera" in chosen.text
    assert '<html lang="ja" dir="ltr">' in bogus.text
    assert thai.headers["etag"] != chosen.headers["etag"]
    for name in LANG_NAMES:
        assert name in thai.text, f"the picker lacks {name}"


@pytest.mark.parametrize(
    ("accept", "lang", "direction", "word"),
    [
        ("pt-PT,pt;q=0.9", "pt-BR", "ltr", "Sala de espera"),
        ("zh-TW", "zh-Hant", "ltr", "等候室"),
        ("zh-HK,en;q=0.5", "zh-Hant", "ltr", "請保持此頁面開啟"),
        ("zh-CN,zh;q=0.9", "zh-Hans", "ltr", "请保持此页面打开"),
        ("zh", "zh-Hans", "ltr", "请保持此页面打开"),
        ("ar-EG,ar;q=0.9,en;q=0.8", "ar", "rtl", "غرفة الانتظار"),
        ("iw-IL", "he", "rtl", "חדר המתנה"),
        ("fr-CA;q=0.8, de-AT;q=0.9", "de", "ltr", "Warteraum"),
        ("ko-KR", "ko", "ltr", "대기실"),
    ],
)
def test_accept_language_falls_back_across_regions_and_scripts(
    server: Server, accept: str, lang: str, direction: str, word: str
) -> None:
    room = _room(server)
    with server.client() as c:
        page = c.get(f"/w/{room}", headers={"accept-language": accept})
    assert f'<html lang="{lang}" dir="{direction}">' in page.text
    assert word in page.text


def test_a_room_limits_and_orders_its_languages(server: Server) -> None:
    room = _room(server)
    with server.admin() as admin:
        saved = admin.post("/api/admin/rooms", json={"id": room, "languages": ["de", "FR", "ar"]})
        assert saved.status_code == 200, saved.text
        assert saved.json()["room"]["languages"] == ["de", "fr", "ar"]
        for bad in (["xx"], ["de", "de"], "de", [1], ["en"] * 30):
            refused = admin.post("/api/admin/rooms", json={"id": room, "languages": bad})
            assert refused.status_code == 400 and refused.json()["code"] == "invalid_languages", (bad, refused.text)
        assert admin.get(f"/api/admin/rooms/{room}").json()["room"]["languages"] == ["de", "fr", "ar"]
    with server.client() as c:
        default = c.get(f"/w/{room}", headers={"accept-language": "ja, en;q=0.5"})
        french = c.get(f"/w/{room}", headers={"accept-language": "fr-BE"})
        c.cookies.set("qm_lang", "ja")  # a choice made on another room's page: not offered here
        remembered = c.get(f"/w/{room}", headers={"accept-language": "ar"})
    assert '<html lang="de" dir="ltr">' in default.text, "the room's first language is its default"
    assert '<html lang="fr" dir="ltr">' in french.text
    assert '<html lang="ar" dir="rtl">' in remembered.text
    options = re.findall(r'<option value="([^"]+)"', default.text)
    assert options == ["de", "fr", "ar"]
    with server.admin() as admin:
        assert admin.post("/api/admin/rooms", json={"id": room, "languages": []}).status_code == 200
    with server.client() as c:
        every = c.get(f"/w/{room}", headers={"accept-language": "ja"})
    assert '<html lang="ja" dir="ltr">' in every.text
    assert len(re.findall(r"<option value=", every.text)) >= 20


def test_assets_are_content_addressed_immutable_and_an_unknown_hash_is_404(server: Server) -> None:
    room = _room(server)
    with server.client() as c:
        page = c.get(f"/w/{room}").text
        names = _asset_names(page)
        assert set(names) == {"css", "js"}
        for ext, digest in names.items():
            r = c.get(f"/assets/waiting-{digest}.{ext}", headers=IDENTITY)
            assert r.status_code == 200
            assert _b64sha(r.content) == digest, "the name is not the SHA-256 of the body"
            assert r.headers["cache-control"] == "public, max-age=31536000, immutable"
            assert r.headers["content-type"].startswith("text/css" if ext == "css" else "text/javascript")
            zipped = c.get(f"/assets/waiting-{digest}.{ext}", headers={"accept-encoding": "gzip"})
            assert zipped.headers["content-encoding"] == "gzip" and zipped.content == r.content
            revalidated = c.get(f"/assets/waiting-{digest}.{ext}", headers={"if-none-match": r.headers["etag"]})
            assert revalidated.status_code == 304 and revalidated.content == b""
            head = c.head(f"/assets/waiting-{digest}.{ext}", headers=IDENTITY)
            assert head.status_code == 200 and head.content == b""
            assert head.headers["content-length"] == str(len(r.content))
        assert c.get("/assets/waiting-AAAAAAAAAAAAAAAAAAAAAA.css").status_code == 404
        assert c.get(f"/assets/waiting-{names['css']}.js").status_code == 404
        assert c.get("/assets/waiting-").status_code == 404


def test_unknown_room_is_a_404_page_and_head_matches_get(server: Server) -> None:
    room = _room(server)
    with server.client() as c:
        missing = c.get("/w/no-such-room-here", headers=HTML)
        assert missing.status_code == 404
        assert "no waiting room" in missing.text.lower()
        thai = c.get("/w/no-such-room-here", headers={**HTML, "accept-language": "th"})
        assert thai.status_code == 404 and "ไม่มีห้องรอคิวชื่อ" in thai.text
        bad = c.get("/w/%3Cscript%3E", headers=HTML)
        assert bad.status_code == 404 and "<script>" not in bad.text
        get = c.get(f"/w/{room}", headers=IDENTITY)
        head = c.head(f"/w/{room}", headers=IDENTITY)
        assert head.status_code == 200 and head.content == b""
        assert head.headers["content-length"] == str(len(get.content))
        assert head.headers["etag"] == get.headers["etag"]


def test_the_guard_refuses_a_navigation_with_a_small_page(make_server: Any) -> None:
    srv = make_server({"WAITING_LIMIT_PER_MIN": "2"})
    room = _room(srv)
    with srv.client() as c:
        assert c.get(f"/w/{room}", headers=HTML).status_code == 200
        assert c.get(f"/w/{room}", headers=HTML).status_code == 200
        refused = c.get(f"/w/{room}", headers={**HTML, **IDENTITY})
        assert refused.status_code == 429
        assert refused.headers["content-type"].startswith("text/html")
        assert int(refused.headers["retry-after"]) > 0
        assert len(refused.content) < 2000
        assert "place in line is kept" in refused.text
        xhr = c.get(f"/w/{room}", headers={"accept": "application/json"})
        assert xhr.status_code == 429 and xhr.headers["content-type"].startswith("text/plain")
        # the queue itself is untouched
        assert join(c, room).status_code == 200
        # the assets and fonts are not charged to the page budget
        assert c.get(f"/fonts/{FONT_FILES[0]}").status_code == 200


REFUSED_IN = {
    "en": "One moment, please",
    "th": "กรุณารอสักครู่",
    "es": "Un momento, por favor",
    "ja": "しばらくお待ちください",
    "de": "Einen Moment, bitte",
}


def test_the_refusal_page_speaks_the_visitors_language(make_server: Any) -> None:
    srv = make_server({"WAITING_LIMIT_PER_MIN": "1"})
    room = _room(srv)
    with srv.client() as c:
        assert c.get(f"/w/{room}", headers=HTML).status_code == 200
        for lang, heading in REFUSED_IN.items():
            # the qm_lang cookie wins over Accept-Language; without it, Accept-Language decides
            c.cookies.set("qm_lang", lang)
            refused = c.get(f"/w/{room}", headers={**HTML, **IDENTITY, "accept-language": "de;q=0.1, es;q=0.2"})
            assert refused.status_code == 429
            assert f"<html lang={lang} dir=ltr>" in refused.text and heading in refused.text, refused.text
            assert f"{refused.headers['retry-after']} " in refused.text.split("<p>")[1]
            assert len(refused.content) < 1500, (lang, len(refused.content))
            # it reloads itself after Retry-After: by script, and by a meta refresh only for a browser without one
            retry = int(refused.headers["retry-after"])
            assert f"location.reload()}},{retry * 1000})" in refused.text
            assert f'<noscript><meta http-equiv=refresh content="{retry}"></noscript>' in refused.text
        c.cookies.delete("qm_lang")
        refused = c.get(f"/w/{room}", headers={**HTML, **IDENTITY, "accept-language": "xx, ja-JP;q=0.9, en;q=0.5"})
        assert "<html lang=ja dir=ltr>" in refused.text and REFUSED_IN["ja"] in refused.text
        refused = c.get(f"/w/{room}", headers={**HTML, **IDENTITY, "accept-language": "xx"})
        assert "<html lang=en dir=ltr>" in refused.text
        refused = c.get(f"/w/{room}", headers={**HTML, **IDENTITY, "accept-language": "he"})
        assert "<html lang=he dir=rtl>" in refused.text and "רק רגע" in refused.text
        # the console and the docs take the same refusal, in the same language
        c.cookies.set("qm_lang", "th")
        assert c.get("/docs", headers=HTML).status_code == 200
        docs = c.get("/docs", headers={**HTML, **IDENTITY})
        assert docs.status_code == 429 and REFUSED_IN["th"] in docs.text


@pytest.mark.parametrize("name", FONT_FILES)
def test_fonts_are_whole_woff2_files_cached_a_week_and_never_compressed(server: Server, name: str) -> None:
    with server.client() as c:
        r = c.get(f"/fonts/{name}", headers={"accept-encoding": "gzip, br"})
        head = c.head(f"/fonts/{name}")
    assert r.status_code == 200
    assert r.content[:4] == b"wOF2"
    assert "content-encoding" not in r.headers
    assert r.headers["content-type"] == "font/woff2"
    assert r.headers["cache-control"] == "public, max-age=604800"
    assert int(r.headers["content-length"]) == len(r.content) == (FONTS_DIR / name).stat().st_size
    assert head.status_code == 200 and head.headers["content-length"] == r.headers["content-length"]


def test_font_licence_is_served_and_unknown_fonts_are_404(server: Server) -> None:
    with server.client() as c:
        licence = c.get("/fonts/LICENSE.txt")
        assert licence.status_code == 200 and "SIL Open Font License" in licence.text
        assert c.get("/fonts/Arial.woff2").status_code == 404
        assert c.get("/fonts/../asset.py").status_code == 404
        assert c.get("/fonts/%2e%2e/asset.py").status_code == 404


def test_waiting_page_css_names_only_fonts_this_server_serves(server: Server) -> None:
    room = _room(server)
    with server.client() as c:
        css_hash = _asset_names(c.get(f"/w/{room}").text)["css"]
        css = c.get(f"/assets/waiting-{css_hash}.css").text
        urls = re.findall(r'url\("?([^")]+)"?\)', css)
        assert urls
        for url in urls:
            assert url.startswith("../fonts/"), url
            assert c.get("/fonts/" + url.removeprefix("../fonts/")).status_code == 200


@pytest.mark.parametrize(
    ("path", "attempts_key"),
    [("/offline.html", "qm_offline_attempts"), ("/origin-down.html", "qm_origin_down_attempts")],
)
def test_outage_pages_are_self_contained_noindex_and_in_five_languages(
    server: Server, path: str, attempts_key: str
) -> None:
    with server.client() as c:
        r = c.get(path)
        head = c.head(path)
    assert r.status_code == 200
    assert r.headers["x-robots-tag"] == "noindex"
    assert r.headers["cache-control"] == "no-store"
    assert head.headers["content-length"] == str(len(r.content)) and head.content == b""
    body = r.text
    lowered = body.lower()
    assert '<meta name="robots" content="noindex' in lowered
    for banned in ("<link", "<script src", "<img", "@font-face", "@import", "url(", "http://", "https://"):
        assert banned not in lowered, f"{path} carries {banned!r}"
    for name in LANG_NAMES:
        assert name in body
    assert "qm_lang" in body and attempts_key in body
    assert "position" not in lowered and "eta" not in re.findall(r"\b\w+\b", lowered)
    csp = r.headers["content-security-policy"]
    assert "unsafe-inline" not in csp
    for kind in ("script", "style"):
        (inline,) = re.findall(rf"<{kind}>(.*?)</{kind}>", body, re.S)
        digest = base64.b64encode(hashlib.sha256(inline.encode()).digest()).decode()
        assert f"'sha256-{digest}'" in csp, f"the CSP does not allow the page's own {kind}"


def test_origin_down_never_says_paused_or_that_the_place_was_lost(server: Server) -> None:
    with server.client() as c:
        body = c.get("/origin-down.html").text.lower()
    for word in ("paused", "pausiert", "pausado", "一時停止", "หยุดชั่วคราว", "lost your place", "join again"):
        assert word not in body, word
    assert "your pass is still valid" in body
    assert "var first = 15, last = 60" in body


def test_offline_retries_from_20_to_60_seconds_with_jitter(server: Server) -> None:
    with server.client() as c:
        body = c.get("/offline.html").text
    assert "var FIRST = 20, LAST = 60, JITTER = 0.8;" in body


def test_a_visitor_put_back_is_told_why(server: Server) -> None:
    room = _room(server, ratePerMinute=0)
    with server.client() as first, server.client() as second, server.admin() as admin:
        join(first, room).raise_for_status()
        mine = join(second, room).json()
        assert mine["reason"] is None
        r = admin.post(f"/api/admin/rooms/{room}/eject", json={"ticket": 1})
        assert r.status_code == 200, r.text
        put_back = status(first, room)
        assert put_back["state"] == "waiting" and put_back["reason"] == "ejected"
        assert put_back["position"] == 2
        assert admin.post(f"/api/admin/rooms/{room}/pause").status_code == 200
        paused = status(second, room)
        assert paused["roomState"] == "paused" and paused["etaSec"] is None


def test_unknown_encoding_preferences_fall_back_to_identity(server: Server) -> None:
    room = _room(server)
    with server.client() as c:
        refused = c.get(f"/w/{room}", headers={"accept-encoding": "br;q=0, gzip;q=0"})
        star = c.get(f"/w/{room}", headers={"accept-encoding": "*"})
    assert "content-encoding" not in refused.headers
    assert star.headers.get("content-encoding") == "br"
