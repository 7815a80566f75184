"""The waiting page per queueing method: a closed room (reject) is the room's closed page in its brand,
message and the visitor's language, answered with the operator's status, and a page left open when the
room closes turns into it and back; a random room shows how many wait, a wait range and the odds in
words instead of a place."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx
from axe import describe, violations
from browsing import headline
from harness import create_room, join, start_server, unique_id

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: tests.inline.peer
from tests.inline.peer import Peer

BRAND = {
    "displayName": "Acme Outlet",
    "background": "#f4efe6",
    "accent": "#8a1c1c",
    "message": {"en": "The sale reopens on Monday at 9:00.", "th": "การขายเปิดอีกครั้งวันจันทร์ เวลา 9:00 น."},
}


def test_a_closed_room_shows_its_closed_page(browser: Any, qm: Any, artifacts: Path) -> None:
    room = unique_id("closed")
    with qm.admin() as admin:
        create_room(admin, room, name="Winter release", queueing="reject", brand=BRAND)
        context = browser.new_context(viewport={"width": 1100, "height": 820}, bypass_csp=True, locale="en-US")
        page = context.new_page()
        response = page.goto(f"{qm.base_url}/w/{room}")
        assert response is not None and response.status == 503
        assert response.headers["retry-after"] == "300" and response.headers["x-qm-closed"] == "1"
        assert headline(page) == "This waiting room is closed"
        assert page.locator("p.lead").inner_text() == "Nobody can join the line right now. Please come back later."
        assert page.locator("#brand-message").inner_text() == "The sale reopens on Monday at 9:00."
        page.wait_for_function("document.title.startsWith('Closed')")
        assert page.locator("#conn-text").inner_text() == "Closed"
        assert not page.locator("#v-wait").is_visible() and not page.locator("#ref-line").is_visible()
        page.screenshot(path=str(artifacts / "waiting-closed-en.png"), full_page=True)
        found = violations(page)
        assert not found, f"axe (WCAG 2.1 AA) on the closed page:\n{describe(found)}"
        page.select_option("#lang", "th")
        page.wait_for_function("document.documentElement.lang === 'th'")
        assert headline(page) == "ห้องรอคิวนี้ปิดอยู่"
        assert "โปรดกลับมาใหม่ภายหลัง" in page.locator("p.lead").inner_text()
        assert page.locator("#brand-message").inner_text() == "การขายเปิดอีกครั้งวันจันทร์ เวลา 9:00 น."
        page.screenshot(path=str(artifacts / "waiting-closed-th.png"), full_page=True)
        for lang, head in (
            ("es", "Esta sala de espera está cerrada"),
            ("ja", "この待合室は閉じています"),
            ("de", "Dieser Warteraum ist geschlossen"),
        ):
            page.select_option("#lang", lang)
            page.wait_for_function(f"document.documentElement.lang === '{lang}'")
            assert headline(page) == head
        context.close()
        r = admin.get(f"/api/admin/rooms/{room}").json()["room"]
        assert r["joinsTotal"] == 0  # the closed page joins nothing
        admin.post("/api/admin/rooms", json={"id": room, "rejectStatus": 200}).raise_for_status()
        plain = browser.new_page()
        response = plain.goto(f"{qm.base_url}/w/{room}")
        assert response is not None and response.status == 200
        assert headline(plain) == "This waiting room is closed"
        plain.close()


def test_an_open_page_turns_into_the_closed_page_and_back(browser: Any, qm: Any, artifacts: Path) -> None:
    room = unique_id("switch")
    with qm.admin() as admin, qm.client() as first:
        create_room(admin, room, name="Winter release", ratePerMinute=0, queueMaxPerIp=None)
        join(first, room).raise_for_status()
        page = browser.new_page(viewport={"width": 1000, "height": 760})  # the page's own CSP: no eval here
        page.goto(f"{qm.base_url}/w/{room}")
        page.locator("#headline").filter(has_text="2").wait_for(timeout=10_000)
        admin.post("/api/admin/rooms", json={"id": room, "queueing": "reject"}).raise_for_status()
        page.get_by_text("This waiting room is closed", exact=True).wait_for(timeout=10_000)
        assert not page.locator("#v-wait").is_visible()
        page.screenshot(path=str(artifacts / "waiting-closed-live.png"), full_page=True)
        admin.post("/api/admin/rooms", json={"id": room, "queueing": "fifo"}).raise_for_status()
        page.locator("#headline").filter(has_text="2").wait_for(timeout=10_000)
        assert page.locator("#v-wait").is_visible()  # the place was kept: still number 2
        page.close()


def test_a_random_room_shows_a_range_and_the_odds(browser: Any, qm: Any, artifacts: Path) -> None:
    room = unique_id("random")
    with qm.admin() as admin:
        create_room(admin, room, name="Winter release", ratePerMinute=0, queueing="random", queueMaxPerIp=None)
        others = [qm.client() for _ in range(7)]
        try:
            for c in others:
                join(c, room).raise_for_status()
            context = browser.new_context(viewport={"width": 1100, "height": 900}, bypass_csp=True, locale="en-US")
            page = context.new_page()
            page.goto(f"{qm.base_url}/w/{room}")
            page.get_by_text("You are in the draw.", exact=True).wait_for()
            assert page.locator("#ahead-label").inner_text() == "People waiting"
            assert page.locator("#ahead").inner_text() == "8"
            assert page.locator("#eta").inner_text() == "No estimate right now"  # rate 0: the line does not move
            # 8 waiting at 4 a minute: between turn 2 (30 s) and turn 6 (90 s); 4 of 8 within a minute
            admin.post("/api/admin/rooms", json={"id": room, "ratePerMinute": 4}).raise_for_status()
            page.wait_for_function("document.getElementById('eta').innerText.startsWith('between')", timeout=10_000)
            assert page.locator("#eta").inner_text() == "between about 30 s and about 2 min"
            assert page.locator("#odds").inner_text() == "About 50 in 100 chance of your turn within the next minute."
            assert page.locator("#random-explain").is_visible() and not page.locator("#bar").is_visible()
            page.screenshot(path=str(artifacts / "waiting-random-en.png"), full_page=True)
            found = violations(page)
            assert not found, f"axe (WCAG 2.1 AA) on the random line:\n{describe(found)}"
            page.select_option("#lang", "th")
            page.wait_for_function("document.documentElement.lang === 'th'")
            assert headline(page) == "คุณอยู่ในการสุ่มแล้ว"
            assert page.locator("#ahead-label").inner_text() == "จำนวนผู้รอ"
            assert "ใน 100" in page.locator("#odds").inner_text()
            page.screenshot(path=str(artifacts / "waiting-random-th.png"), full_page=True)
            for lang, head in (
                ("es", "Está participando en el sorteo."),
                ("ja", "抽選に参加しています。"),
                ("de", "Sie nehmen an der Auslosung teil."),
            ):
                page.select_option("#lang", lang)
                page.wait_for_function(f"document.documentElement.lang === '{lang}'")
                assert headline(page) == head
            context.close()
        finally:
            for c in others:
                c.close()


def test_inline_a_closed_room_answers_its_closed_page(browser: Any, peer: Peer, artifacts: Path) -> None:
    srv = start_server({"PROXY_ALLOW_PRIVATE": "1"})
    try:
        room = unique_id("inlineclosed")
        public = f"http://localhost:{srv.port}"
        with srv.admin() as admin:
            body = {
                "id": room,
                "name": "Inline drop",
                "targetUrl": public,
                "proxyOrigin": peer.url,
                "queueing": "reject",
                "rejectStatus": 200,
            }
            admin.post("/api/admin/rooms", json=body).raise_for_status()
            page = browser.new_page(viewport={"width": 1000, "height": 760})
            response = page.goto(f"{public}/page/shoes?size=9")
            assert response is not None and response.status == 200  # the operator's status, not 503 queued
            assert headline(page) == "This waiting room is closed"
            assert page.url == f"{public}/page/shoes?size=9"
            page.screenshot(path=str(artifacts / "inline-closed.png"), full_page=True)
            page.close()
            api = httpx.get(f"{public}/api/cart", headers={"Accept": "application/json", "Sec-Fetch-Mode": "cors"})
            assert api.status_code == 503 and api.json()["code"] == "room_closed"
            assert api.headers["x-qm-closed"] == "1" and "x-qm-queued" not in api.headers
    finally:
        srv.stop()
