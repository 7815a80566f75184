"""The visitor pages in every language, in a real browser at phone size: each state of the page (by preview links)
shows its own text, sets lang and dir, and nothing overflows the screen; Arabic and Hebrew mirror (the picker at
the start of the line, the progress bar filling from the right); axe is clean in an LTR and an RTL language; no
request leaves the server. Screenshots of the scripts with their own glyphs (Arabic, Hebrew, Chinese, Japanese,
Hindi, Korean) under test-artifacts/browser/lang-*.png."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from axe import describe, violations
from browsing import sign_in
from harness import create_room, unique_id, wait_until

from queue_manager.web import translations

PHONE = {"width": 360, "height": 740}
#: state -> (the element to read, the section and key of the text it shows)
SHOWS: dict[str, tuple[str, str, str]] = {
    "waiting": ("#headline", "waiting", "posBefore"),
    "prequeue": ("#headline", "waiting", "preHead"),
    "turn": ("#headline", "waiting", "turn"),
    "paused": ("#notice", "waiting", "paused"),
    "full": ("#headline", "waiting", "fullHead"),
    "random": ("#headline", "waiting", "randomHead"),
    "closed": ("#headline", "waiting", "closedHead"),
    "origin_down": ("#t-head", "originDown", "head"),
    "offline": ("#t-head", "offline", "head"),
}
SCREENSHOTS = {"ar", "he", "zh-Hans", "zh-Hant", "ja", "hi", "ko"}


@pytest.fixture(scope="module")
def room(qm: Any) -> str:
    room = unique_id("lang")
    with qm.admin() as admin:
        create_room(admin, room, name="Spring drop", ratePerMinute=0, brand={"displayName": "Acme Outlet"})
    return room


def _link(qm: Any, room: str, state: str, lang: str) -> str:
    with qm.admin() as admin:
        r = admin.post(f"/api/admin/rooms/{room}/preview", json={"state": state, "lang": lang, "position": 1234})
    assert r.status_code == 200, r.text
    url: str = r.json()["url"]
    return url


def _overflow(page: Any) -> list[str]:
    """What sticks out past the screen's width: the page's own scroll width, and any visible element's box."""
    found: list[str] = page.evaluate(
        """() => {
          const out = [];
          const width = document.documentElement.clientWidth;
          const page = document.documentElement.scrollWidth;
          if (page > width + 1) out.push('page ' + page);
          for (const el of document.body.querySelectorAll('*')) {
            const box = el.getBoundingClientRect();
            if (!box.width || getComputedStyle(el).visibility === 'hidden') continue;
            const name = el.id || el.className || el.tagName;
            if (box.left < -1 || box.right > width + 1) out.push(name + ' ' + box.left + '..' + box.right);
            const hidden = getComputedStyle(el).overflowX === 'hidden' && !el.classList.contains('sr-only');
            if (hidden && el.scrollWidth > el.clientWidth + 1 && el.id !== 'bar')
              out.push('clipped ' + (el.id || el.className || el.tagName));
          }
          return out;
        }"""
    )
    return found


@pytest.mark.parametrize("lang", translations.LANGUAGES)
def test_every_state_in_every_language_fits_a_phone(
    browser: Any, qm: Any, room: str, artifacts: Path, lang: str
) -> None:
    table = translations.language_file(lang)
    direction = translations.direction(lang)
    context = browser.new_context(viewport=PHONE, locale="en-US")  # the page's own CSP enforced
    page = context.new_page()
    urls: list[str] = []
    page.on("request", lambda r: urls.append(r.url))
    for state, (selector, section, key) in SHOWS.items():
        page.goto(_link(qm, room, state, lang))
        text = table[section][key]
        page.locator(selector).filter(has_text=text).wait_for(timeout=10_000)
        assert page.locator("html").get_attribute("lang") == lang, state
        assert page.locator("html").get_attribute("dir") == direction, state
        assert page.locator("#lang").input_value() == lang, state
        over = _overflow(page)
        assert not over, f"{lang} {state} overflows a {PHONE['width']} px screen: {over}"
        if lang in SCREENSHOTS or state == "waiting":
            page.screenshot(path=str(artifacts / f"lang-{state}-{lang}.png"), full_page=True)
    own = urlsplit(qm.base_url).netloc
    assert [u for u in urls if urlsplit(u).scheme in ("http", "https") and urlsplit(u).netloc != own] == []
    context.close()


@pytest.mark.parametrize("lang", ["ar", "he"])
def test_right_to_left_pages_mirror(browser: Any, qm: Any, artifacts: Path, lang: str) -> None:
    room = unique_id("rtl")
    with qm.admin() as admin:
        create_room(admin, room, ratePerMinute=0)
    context = browser.new_context(viewport=PHONE, locale=lang)
    page = context.new_page()
    page.goto(f"{qm.base_url}/w/{room}")
    page.locator("#ref-line").wait_for(state="visible")
    assert page.locator("html").get_attribute("dir") == "rtl"
    picker, brand = page.locator(".lang").bounding_box(), page.locator(".brand").bounding_box()
    assert picker["x"] < brand["x"], "the picker sits at the end of the line: the left in a right-to-left page"
    bar, fill = page.locator("#bar").bounding_box(), page.locator("#bar-fill").bounding_box()
    assert abs((bar["x"] + bar["width"]) - (fill["x"] + fill["width"])) < 1.5, "the bar fills from the right"
    lead = page.locator("#lead")
    assert lead.evaluate("e => getComputedStyle(e).direction") == "rtl"
    assert page.locator("#lead").inner_text() == translations.language_file(lang)["waiting"]["lead"]
    page.screenshot(path=str(artifacts / f"lang-live-{lang}.png"), full_page=True)
    # the picker switches to a left-to-right language in place, and back
    page.locator("#lang").select_option("en")
    page.locator("html[dir=ltr][lang=en]").wait_for(state="attached")
    page.locator("#lang").select_option(lang)
    page.locator(f"html[dir=rtl][lang={lang}]").wait_for(state="attached")
    context.close()


@pytest.mark.parametrize(("lang", "path"), [("ar", "/offline.html"), ("he", "/origin-down.html")])
def test_the_outage_pages_turn_right_to_left(browser: Any, qm: Any, artifacts: Path, lang: str, path: str) -> None:
    context = browser.new_context(viewport=PHONE, locale=lang)
    page = context.new_page()
    page.goto(f"{qm.base_url}{path}")
    section = "offline" if path == "/offline.html" else "originDown"
    page.locator("#t-head").filter(has_text=translations.language_file(lang)[section]["head"]).wait_for()
    assert page.locator("html").get_attribute("dir") == "rtl"
    assert not _overflow(page)
    page.screenshot(path=str(artifacts / f"lang-outage-{section}-{lang}.png"), full_page=True)
    context.close()


@pytest.mark.parametrize("lang", ["fr", "ar"])
def test_axe_is_clean_in_a_left_to_right_and_a_right_to_left_language(
    browser: Any, qm: Any, room: str, lang: str
) -> None:
    context = browser.new_context(viewport=PHONE, bypass_csp=True)  # axe is injected
    page = context.new_page()
    for state in ("waiting", "closed", "offline"):
        selector, section, key = SHOWS[state]
        page.goto(_link(qm, room, state, lang))
        page.locator(selector).filter(has_text=translations.language_file(lang)[section][key]).wait_for()
        found = violations(page)
        assert not found, f"axe on the {state} page ({lang}):\n{describe(found)}"
    context.close()


def test_an_operator_sets_a_rooms_languages_in_the_console(browser: Any, qm: Any, artifacts: Path) -> None:
    room = unique_id("langs")
    with qm.admin() as admin:
        create_room(admin, room, name="Berlin drop", ratePerMinute=0)
    context = browser.new_context(bypass_csp=True, viewport={"width": 1360, "height": 1000})  # axe is injected
    page = context.new_page()
    sign_in(page, qm)
    card = page.locator(f'article.card[data-room="{room}"]')
    card.wait_for(timeout=10_000)
    card.get_by_role("button", name="Edit").click()
    page.locator("#dlg-editor[open]").wait_for(timeout=5_000)
    field = page.get_by_label("Visitor page languages")
    assert field.input_value() == ""
    field.fill("de, xx")
    page.get_by_role("button", name="Save changes").click()
    page.locator("#dlg-editor .error").get_by_text("invalid_languages", exact=False).wait_for(timeout=5_000)
    field.fill("de, fr en")
    field.scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / "console-editor-languages.png"))
    found = violations(page)
    assert not found, describe(found)
    page.get_by_role("button", name="Save changes").click()
    page.locator("#dlg-editor[open]").wait_for(state="detached", timeout=5_000)
    with qm.admin() as admin:
        wait_until(
            lambda: admin.get(f"/api/admin/rooms/{room}").json()["room"]["languages"] == ["de", "fr", "en"],
            what="the languages saved from the editor",
        )
    card.get_by_role("button", name="Edit").click()
    page.locator("#dlg-editor[open]").wait_for(timeout=5_000)
    assert page.get_by_label("Visitor page languages").input_value() == "de, fr, en"
    context.close()
