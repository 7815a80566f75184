"""Preview links in a real browser: every state of a room's page, in the room's brand, in English and Thai (and
one state in all five languages), each marked Preview, axe-clean, with a screenshot; the page asks the server
for nothing (no join, no stream, no status), and the room's numbers are the same after all of it. Then the
console's Preview dialog makes one and opens it in a new tab."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from axe import describe, violations
from harness import create_room, unique_id

DESKTOP = {"width": 1100, "height": 820}
LOGO = (
    b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 120 40">'
    b'<rect x="0" y="4" width="32" height="32" rx="8" fill="#ffd166"/>'
    b'<text x="40" y="28" font-family="sans-serif" font-size="20" font-weight="700" fill="#ffd166">ACME</text></svg>'
)
BRAND = {
    "displayName": "Acme Outlet",
    "background": "#0b1f3a",
    "accent": "#ffd166",
    "message": {"en": "Doors open at 9:00.", "th": "ร้านเปิด 9 โมงตรง"},
}
MARK = {"en": "Preview", "th": "ตัวอย่าง", "es": "Vista previa", "ja": "プレビュー", "de": "Vorschau"}
#: state -> language -> (the element to read, the text it shows)
SHOWS: dict[str, dict[str, tuple[str, str]]] = {
    "waiting": {"en": ("#headline", "You are number 7 in line"), "th": ("#headline", "คุณอยู่ลำดับที่ 7 ในคิว")},
    "prequeue": {"en": ("#headline", "You are in the pre-queue."), "th": ("#headline", "คุณอยู่ในคิวล่วงหน้า")},
    "turn": {"en": ("#headline", "It’s your turn"), "th": ("#headline", "ถึงคิวของคุณแล้ว")},
    "paused": {"en": ("#notice", "The line is paused by the organiser."), "th": ("#notice", "ผู้จัดหยุดคิวไว้ชั่วคราว")},
    "full": {"en": ("#headline", "The line is full"), "th": ("#headline", "คิวเต็มแล้ว")},
    "random": {"en": ("#headline", "You are in the draw."), "th": ("#headline", "คุณอยู่ในการสุ่มแล้ว")},
    "closed": {"en": ("#headline", "This waiting room is closed"), "th": ("#headline", "ห้องรอคิวนี้ปิดอยู่")},
    "origin_down": {
        "en": ("#t-head", "The site is not answering right now"),
        "th": ("#t-head", "เว็บไซต์ยังไม่ตอบสนองในขณะนี้"),
    },
    "offline": {"en": ("#t-head", "We’ll be right back"), "th": ("#t-head", "อีกสักครู่จะกลับมา")},
}
ASKS = ("/api/join", "/api/status", "/events", "/api/notify", "/api/check")


@pytest.fixture(scope="module")
def room(qm: Any) -> str:
    room = unique_id("pv")
    with qm.admin() as admin:
        create_room(admin, room, name="Spring drop", ratePerMinute=0, brand=BRAND)
        r = admin.post(f"/api/admin/rooms/{room}/logo", content=LOGO, headers={"content-type": "image/svg+xml"})
        assert r.status_code == 200, r.text
    return room


def _link(qm: Any, room: str, state: str, lang: str) -> str:
    with qm.admin() as admin:
        r = admin.post(f"/api/admin/rooms/{room}/preview", json={"state": state, "lang": lang, "position": 7})
    assert r.status_code == 200, r.text
    url: str = r.json()["url"]
    return url


def _numbers(qm: Any, room: str) -> dict[str, Any]:
    with qm.admin() as admin:
        data = admin.get(f"/api/admin/rooms/{room}").json()["room"]
    return {k: v for k, v in data.items() if isinstance(v, int) and not isinstance(v, bool) and "At" not in k}


def _text(page: Any, selector: str) -> str:
    return " ".join(page.locator(selector).inner_text().split())


@pytest.mark.parametrize("state", list(SHOWS))
def test_each_state_in_english_and_thai(browser: Any, qm: Any, room: str, artifacts: Path, state: str) -> None:
    before = _numbers(qm, room)
    for lang in ("en", "th"):
        context = browser.new_context(viewport=DESKTOP, bypass_csp=True, locale="en-US")
        page = context.new_page()
        asked: list[str] = []
        page.on("request", lambda r, into=asked: into.append(urlsplit(r.url).path))
        page.goto(_link(qm, room, state, lang))
        selector, text = SHOWS[state][lang]
        page.locator(selector).filter(has_text=text).wait_for(timeout=10_000)
        assert text in _text(page, selector)
        assert page.locator("html").get_attribute("lang") == lang
        mark = page.locator("#preview-mark, #t-preview")
        assert mark.is_visible() and mark.inner_text() == MARK[lang]
        if state in ("origin_down", "offline"):
            assert page.locator(".brand-name").inner_text().strip() == "Acme Outlet"  # the room's brand
        else:
            assert page.locator("h1").inner_text() == "Acme Outlet"
            assert page.locator("img.brand-logo").is_visible()
        if state == "closed":  # as the real closed page: no live updates are claimed
            assert "Live updates on" not in page.locator("body").inner_text()
        page.screenshot(path=str(artifacts / f"preview-{state}-{lang}.png"), full_page=True)
        found = violations(page)
        assert not found, f"axe on the {state} preview ({lang}):\n{describe(found)}"
        asked_server = [p for p in asked if p.startswith(ASKS)]
        assert not asked_server, f"the {state} preview asked the server: {asked_server}"
        context.close()
    assert _numbers(qm, room) == before


def test_one_state_in_every_language_under_its_own_policy(browser: Any, qm: Any, room: str, artifacts: Path) -> None:
    for lang, mark in MARK.items():
        context = browser.new_context(viewport=DESKTOP, locale="en-US")  # the page's CSP enforced
        page = context.new_page()
        blocked: list[str] = []
        page.on(
            "console",
            lambda m, into=blocked: into.append(m.text) if "Content Security Policy" in m.text else None,
        )
        page.goto(_link(qm, room, "waiting", lang))
        page.locator("#headline .num").filter(has_text="7").wait_for(timeout=10_000)
        assert page.locator("#preview-mark").inner_text() == mark
        assert page.locator("#lang").input_value() == lang
        assert not blocked, blocked
        page.screenshot(path=str(artifacts / f"preview-waiting-{lang}-csp.png"), full_page=True)
        context.close()


def test_the_console_opens_a_preview_in_a_new_tab(browser: Any, qm: Any, room: str, artifacts: Path) -> None:
    before = _numbers(qm, room)
    context = browser.new_context(viewport={"width": 1360, "height": 1000}, bypass_csp=True)
    page = context.new_page()
    page.goto(f"{qm.base_url}/")
    page.locator("#signin-key").fill(qm.admin_key)
    page.get_by_role("button", name="Sign in").click()
    page.locator("#live.on").wait_for(timeout=10_000)
    card = page.locator(f'article.card[data-room="{room}"]')
    card.wait_for(timeout=10_000)
    card.get_by_role("button", name="Preview").click()
    dlg = page.locator("#dlg-preview")
    dlg.get_by_label("State").select_option("paused")
    dlg.get_by_label("Language").select_option("th")
    dlg.get_by_label("Position").fill("12")
    dlg.get_by_label("Wait (minutes)").fill("25")
    found = violations(page, "#dlg-preview")
    assert not found, describe(found)
    page.screenshot(path=str(artifacts / "preview-console-dialog.png"))
    with context.expect_page() as opened:
        dlg.get_by_role("button", name="Open preview").click()
    tab = opened.value
    tab.wait_for_url(f"{qm.base_url}/preview/*", timeout=10_000)
    tab.locator("#headline .num").filter(has_text="12").wait_for(timeout=10_000)
    assert "ประมาณ 25 นาที" in _text(tab, "#eta")
    assert "ผู้จัดหยุดคิวไว้ชั่วคราว" in _text(tab, "#notice")
    assert tab.locator("#preview-mark").inner_text() == "ตัวอย่าง"
    tab.screenshot(path=str(artifacts / "preview-console-opened.png"), full_page=True)
    dlg.locator("#preview-link").wait_for()
    assert "works until" in _text(page, "#preview-out")
    # the figures are hidden for a state that shows none
    dlg.get_by_label("State").select_option("offline")
    assert dlg.locator("#preview-figures").is_hidden()
    context.close()
    assert _numbers(qm, room) == before
