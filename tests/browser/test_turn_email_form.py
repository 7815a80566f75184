"""The waiting page's "E-mail me when it is my turn" form in a real browser: labelled, keyboard-usable,
announced through its live status line, in the page's language, and axe-clean (WCAG 2.1 AA); the
address it sends arrives at a real SMTP server (aiosmtpd) when the turn comes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from axe import describe, violations
from harness import Server, create_room, join, start_server, unique_id
from mailsink import MailSink

DESKTOP = {"width": 1100, "height": 900}
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def sink() -> Iterator[MailSink]:
    with MailSink() as s:
        yield s


@pytest.fixture(scope="module")
def qm(sink: MailSink) -> Iterator[Server]:
    srv = start_server({"EMAIL_NOTIFY": "1", "SMTP_URL": sink.url, "SMTP_FROM": "queue@shop.example"})
    try:
        yield srv
    finally:
        srv.stop()


def _assert_axe_clean(page: Any, what: str) -> None:
    found = violations(page)
    assert not found, f"axe (WCAG 2.1 AA) on {what}:\n{describe(found)}"


def test_a_visitor_leaves_an_address_and_gets_the_email_in_their_language(
    browser: Any, qm: Server, sink: MailSink, artifacts: Path
) -> None:
    room = unique_id("mail")
    address = f"visitor-{room}@example.com"
    with qm.admin() as admin, qm.client() as other:
        create_room(admin, room, ratePerMinute=0, name="Winter release")
        join(other, room).raise_for_status()  # somebody is ahead
        context = browser.new_context(viewport=DESKTOP, bypass_csp=True, locale="en-US")
        page = context.new_page()
        page.goto(f"{qm.base_url}/w/{room}")
        page.wait_for_function("document.querySelector('#headline .num')?.textContent === '2'")

        form = page.locator("#mail")
        form.wait_for(state="visible")
        assert page.get_by_role("heading", name="E-mail me when it is my turn").is_visible()
        field = page.get_by_label("E-mail address")
        assert field.get_attribute("type") == "email" and field.get_attribute("autocomplete") == "email"
        status = page.locator("#mail-status")
        assert status.get_attribute("aria-live") == "polite" and status.get_attribute("role") == "status"
        _assert_axe_clean(page, "the waiting page with the e-mail form (English)")

        # a wrong address is said in the status line and marks the field
        field.fill("not-an-address")
        page.get_by_role("button", name="E-mail me").click()
        page.get_by_text("Enter an e-mail address like name@example.com.").wait_for()
        assert field.get_attribute("aria-invalid") == "true"
        assert page.evaluate("document.activeElement.id") == "mail-address"
        _assert_axe_clean(page, "the e-mail form with an error")

        # the keyboard way: type, Enter, and the confirmation is announced
        field.fill(address)
        field.press("Enter")
        page.get_by_text("We will e-mail v•••@example.com when it is your turn.").wait_for()
        assert field.get_attribute("aria-invalid") is None
        assert page.get_by_role("button", name="Do not e-mail me").is_visible()
        page.screenshot(path=str(artifacts / "waiting-email-en.png"), full_page=True)
        _assert_axe_clean(page, "the e-mail form, signed up")

        # a reload shows what is kept; cancelling forgets it
        page.reload()
        page.get_by_text("We will e-mail v•••@example.com when it is your turn.").wait_for()
        page.get_by_role("button", name="Do not e-mail me").click()
        page.get_by_text("You will not get an e-mail. The address is deleted.").wait_for()
        assert admin.get("/api/admin/health").json()["turnEmails"]["addresses"] == 0

        # in Thai this time: the page's language goes with the address
        page.select_option("#lang", "th")
        page.wait_for_function("document.documentElement.lang === 'th'")
        page.get_by_label("ที่อยู่อีเมล").fill(address)
        page.get_by_role("button", name="ส่งอีเมลถึงฉัน", exact=True).click()
        page.get_by_text("เราจะส่งอีเมลถึง v•••@example.com เมื่อถึงคิวของคุณ").wait_for()
        page.screenshot(path=str(artifacts / "waiting-email-th.png"), full_page=True)
        _assert_axe_clean(page, "the e-mail form, signed up (Thai)")

        assert admin.post(f"/api/admin/rooms/{room}/rate", json={"ratePerMinute": 600}).status_code == 200
        [mail] = sink.wait_for(address)
        assert mail.message["Content-Language"] == "th"
        assert f"{qm.base_url}/w/{room}" in mail.text
        context.close()


def test_the_form_on_a_phone_in_dark_mode(browser: Any, qm: Server, artifacts: Path) -> None:
    room = unique_id("mailphone")
    with qm.admin() as admin, qm.client() as other:
        create_room(admin, room, ratePerMinute=0, name="Limited sneakers · size run")
        join(other, room).raise_for_status()
        context = browser.new_context(
            viewport=PHONE,
            device_scale_factor=2,
            is_mobile=True,
            color_scheme="dark",
            bypass_csp=True,
            extra_http_headers={"Accept-Language": "de-DE,de;q=0.9"},
        )
        page = context.new_page()
        page.goto(f"{qm.base_url}/w/{room}")
        page.locator("#mail").wait_for(state="visible")
        assert page.get_by_role("heading", name="Per E-Mail benachrichtigen, wenn ich an der Reihe bin").is_visible()
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"], "the form makes the page scroll sideways on a phone"
        page.screenshot(path=str(artifacts / "waiting-email-de-phone-dark.png"), full_page=True)
        _assert_axe_clean(page, "the e-mail form on a phone in dark mode (German)")
        context.close()
