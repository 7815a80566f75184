"""A room's brand in a real browser: the waiting page in each of its five languages and the outage pages,
with the page's own CSP enforced (the logo and colours load, nothing is blocked, nothing leaves the origin),
axe (WCAG 2.1 AA) clean on the brand's colours, and a screenshot of each."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from axe import describe, violations
from harness import create_room, unique_id
from playwright.sync_api import TimeoutError as PlaywrightTimeout

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1100, "height": 820}
LOGO = (
    b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 120 40">'
    b'<rect x="0" y="4" width="32" height="32" rx="8" fill="#ffd166"/>'
    b'<path d="M8 28 L16 10 L24 28 Z" fill="#0b1f3a"/>'
    b'<text x="40" y="28" font-family="sans-serif" font-size="20" font-weight="700" fill="#ffd166">ACME</text></svg>'
)
MESSAGES = {
    "en": "Doors open at 9:00. Thank you for waiting!",
    "th": "ร้านเปิด 9 โมงตรง ขอบคุณที่รอ",
    "es": "Abrimos a las 9:00. ¡Gracias por esperar!",
    "ja": "9時に開店します。お待ちいただきありがとうございます。",
    "de": "Wir öffnen um 9 Uhr. Danke fürs Warten!",
}
LOCALES = {"en": "en-US", "th": "th-TH", "es": "es-ES", "ja": "ja-JP", "de": "de-DE"}
DARK = {"background": "#0b1f3a", "accent": "#ffd166"}
LIGHT = {"background": "#f4efe6", "accent": "#8a1c1c"}


def _branded_room(qm: Any, colours: dict[str, str]) -> str:
    room = unique_id("brand")
    brand = {
        "displayName": "Acme Outlet",
        "message": MESSAGES,
        "helpUrl": "https://help.acme.example/queue",
        **colours,
    }
    with qm.admin() as admin:
        create_room(admin, room, ratePerMinute=0, brand=brand)
        r = admin.post(f"/api/admin/rooms/{room}/logo", content=LOGO, headers={"content-type": "image/svg+xml"})
        assert r.status_code == 200, r.text
    return room


@pytest.fixture(scope="module")
def dark_room(qm: Any) -> str:
    return _branded_room(qm, DARK)


def _rgb(hex_colour: str) -> str:
    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgb({r}, {g}, {b})"


def _watch(page: Any) -> tuple[list[str], list[str]]:
    """(every request's URL, every console message about a blocked resource or CSP)."""
    urls: list[str] = []
    blocked: list[str] = []
    page.on("request", lambda r: urls.append(r.url))
    page.on(
        "console",
        lambda m: blocked.append(m.text) if "Content Security Policy" in m.text or "Refused" in m.text else None,
    )
    return urls, blocked


def _logo_loaded(page: Any, selector: str) -> bool:
    """The image is in the page and decoded, within 10 s (a dialog just opened may still be fetching it)."""
    try:
        page.wait_for_function(
            "sel => { const img = document.querySelector(sel); return !!img && img.complete && img.naturalWidth > 0 }",
            arg=selector,
            timeout=10_000,
        )
    except PlaywrightTimeout:
        return False
    return True


@pytest.mark.parametrize("lang", list(LOCALES))
def test_the_branded_waiting_page_in_each_language(
    browser: Any, qm: Any, dark_room: str, artifacts: Path, lang: str
) -> None:
    # first with the page's own CSP: the brand's stylesheet and logo load and nothing is refused
    context = browser.new_context(viewport=PHONE, locale=LOCALES[lang])
    page = context.new_page()
    urls, blocked = _watch(page)
    page.goto(f"{qm.base_url}/w/{dark_room}")
    page.locator("#ref-line").wait_for(state="visible")
    assert page.locator("html").get_attribute("lang") == lang
    assert page.locator("h1").inner_text() == "Acme Outlet"
    assert page.locator("#brand-message").inner_text() == MESSAGES[lang]
    assert page.locator("#brand-help").get_attribute("href") == "https://help.acme.example/queue"
    assert _logo_loaded(page, "img.brand-logo")
    assert page.eval_on_selector("body", "b => getComputedStyle(b).backgroundColor") == _rgb(DARK["background"])
    assert page.eval_on_selector("#brand-help", "a => getComputedStyle(a).color") == _rgb(DARK["accent"])
    assert not blocked, blocked
    own = urlsplit(qm.base_url).netloc
    assert [u for u in urls if urlsplit(u).scheme in ("http", "https") and urlsplit(u).netloc != own] == []
    page.screenshot(path=str(artifacts / f"brand-waiting-{lang}.png"), full_page=True)
    context.close()
    # then axe, which has to be injected (so this context lets scripts in)
    context = browser.new_context(viewport=DESKTOP, locale=LOCALES[lang], bypass_csp=True)
    page = context.new_page()
    page.goto(f"{qm.base_url}/w/{dark_room}")
    page.locator("#ref-line").wait_for(state="visible")
    found = violations(page)
    assert not found, f"axe on the branded waiting page ({lang}):\n{describe(found)}"
    context.close()


def test_switching_language_on_the_page_switches_the_brand_message(browser: Any, qm: Any, dark_room: str) -> None:
    context = browser.new_context(viewport=DESKTOP, locale="en-US")
    page = context.new_page()
    page.goto(f"{qm.base_url}/w/{dark_room}")
    assert page.locator("#brand-message").inner_text() == MESSAGES["en"]
    page.select_option("#lang", "ja")
    assert page.locator("#brand-message").inner_text() == MESSAGES["ja"]
    assert page.locator("#brand-help").inner_text() == "ヘルプとお問い合わせ"
    context.close()


def test_a_light_brand_keeps_dark_text_and_is_axe_clean(browser: Any, qm: Any, artifacts: Path) -> None:
    room = _branded_room(qm, LIGHT)
    context = browser.new_context(viewport=DESKTOP, locale="de-DE", bypass_csp=True, color_scheme="dark")
    page = context.new_page()
    page.goto(f"{qm.base_url}/w/{room}")
    page.locator("#ref-line").wait_for(state="visible")
    # the visitor's dark preference does not put light text on the brand's light background
    assert page.eval_on_selector("body", "b => getComputedStyle(b).backgroundColor") == _rgb(LIGHT["background"])
    assert page.eval_on_selector("h1", "h => getComputedStyle(h).color") == "rgb(0, 0, 0)"
    page.screenshot(path=str(artifacts / "brand-waiting-light-de.png"), full_page=True)
    found = violations(page)
    assert not found, f"axe on the light-branded waiting page:\n{describe(found)}"
    context.close()


@pytest.mark.parametrize(("path", "lang"), [("/offline.html", "th"), ("/origin-down.html", "en")])
def test_the_branded_outage_pages_are_self_contained_and_axe_clean(
    browser: Any, qm: Any, dark_room: str, artifacts: Path, path: str, lang: str
) -> None:
    context = browser.new_context(viewport=PHONE, locale=LOCALES[lang])
    page = context.new_page()
    urls, blocked = _watch(page)
    page.goto(f"{qm.base_url}{path}?room={dark_room}")
    assert page.locator("#t-brand").inner_text() == MESSAGES[lang]
    assert _logo_loaded(page, ".brand-name img")
    assert page.eval_on_selector("body", "b => getComputedStyle(b).backgroundColor") == _rgb(DARK["background"])
    assert not blocked, blocked
    assert len([u for u in urls if urlsplit(u).scheme in ("http", "https")]) == 1  # the page itself, nothing else
    name = path.strip("/").replace(".html", "")
    page.screenshot(path=str(artifacts / f"brand-{name}-{lang}.png"), full_page=True)
    context.close()
    context = browser.new_context(viewport=PHONE, locale=LOCALES[lang], bypass_csp=True)
    page = context.new_page()
    page.goto(f"{qm.base_url}{path}?room={dark_room}")
    found = violations(page)
    assert not found, f"axe on the branded {path} ({lang}):\n{describe(found)}"
    context.close()


def test_an_operator_brands_a_room_in_the_console_editor(
    browser: Any, qm: Any, artifacts: Path, tmp_path: Path
) -> None:
    logo = tmp_path / "acme.svg"
    logo.write_bytes(LOGO)
    context = browser.new_context(viewport={"width": 1360, "height": 1000}, bypass_csp=True)  # for axe
    page = context.new_page()
    page.goto(f"{qm.base_url}/")
    page.locator("#signin-key").fill(qm.admin_key)
    page.get_by_role("button", name="Sign in").click()
    page.locator("#live.on").wait_for(timeout=10_000)
    room = unique_id("brand")
    page.get_by_role("button", name="+ New room").click()
    page.locator("#ed-id").fill(room)
    page.locator("#ed-targetUrl").fill("https://shop.example/")
    page.locator("#ed-br-name").fill("Acme Outlet")
    page.locator("#ed-br-colours").check()
    page.locator("#ed-br-bg").fill("#0b1f3a")
    page.locator("#ed-br-accent").fill("#52607a")  # too little contrast: the form says so, the server refuses
    assert "below 4.5:1" in page.locator("#ed-br-ratio").inner_text()
    page.locator("#ed-br-msg-th").fill(MESSAGES["th"])
    page.locator("#ed-br-logo").set_input_files(str(logo))
    page.get_by_role("button", name="Create room").click()
    page.locator("#dlg-editor .error", has_text="low_contrast").wait_for(timeout=5_000)
    assert page.locator('[data-field="brand.accent"]').get_attribute("class") == "field bad"
    page.locator("#ed-br-accent").fill("#ffd166")
    assert "meets WCAG AA" in page.locator("#ed-br-ratio").inner_text()
    page.screenshot(path=str(artifacts / "brand-console-editor.png"))
    found = violations(page, "#dlg-editor")
    assert not found, describe(found)
    page.get_by_role("button", name="Create room").click()
    page.locator(f'article.card[data-room="{room}"]').wait_for(timeout=10_000)
    with qm.admin() as admin:
        brand = admin.get(f"/api/admin/rooms/{room}").json()["room"]["brand"]
    assert brand["displayName"] == "Acme Outlet" and brand["accent"] == "#ffd166"
    assert brand["message"] == {"th": MESSAGES["th"]} and brand["logo"]["type"] == "image/svg+xml"
    # reopened, the editor shows the stored logo
    page.locator(f'article.card[data-room="{room}"]').get_by_role("button", name="Edit").click()
    page.locator("#dlg-editor[open]").wait_for(timeout=5_000)
    assert _logo_loaded(page, "#dlg-editor img.brand-preview")
    context.close()
