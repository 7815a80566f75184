"""A room's entry on the waiting page in a real browser: an invitation link joins and leaves the address bar
clean, a refused invitation says what to do in the visitor's language, and a code room asks for a code."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from axe import describe, violations
from browsing import headline
from demo_site import serve_site
from harness import Server, create_room, unique_id
from invites import claims, entry_key, sign
from playwright.sync_api import expect

DESKTOP = {"width": 1100, "height": 820}
PHONE = {"width": 390, "height": 844}


def test_an_invitation_link_joins_and_leaves_the_address_bar(browser: Any, qm: Server, artifacts: Path) -> None:
    room = unique_id("invite")
    with qm.admin() as admin:
        create_room(admin, room, ratePerMinute=0, entry="token", name="Members' preview")
        key = entry_key(admin, room)
    token = sign(key["key"], key["kid"], claims(room, "member-1"))
    back = "https://shop.example/members"
    context = browser.new_context(viewport=DESKTOP, locale="en-US")
    page = context.new_page()
    page.goto(f"{qm.base_url}/w/{room}?qm_return={quote(back, safe='')}&qm_token={token}")
    expect(page.locator("#headline .num")).to_have_text("1", timeout=10_000)
    assert headline(page) == "You are number 1 in line"
    query = parse_qs(urlsplit(page.url).query)
    assert "qm_token" not in query and query["qm_return"] == [back]  # the token is gone, the rest kept
    page.screenshot(path=str(artifacts / "entry-invited-desktop.png"), full_page=True)
    # a reload keeps the place without the token
    page.reload()
    expect(page.locator("#headline .num")).to_have_text("1", timeout=10_000)
    context.close()


def test_a_used_invitation_says_what_to_do_in_the_visitors_language(browser: Any, qm: Server, artifacts: Path) -> None:
    room = unique_id("invite")
    with qm.admin() as admin, qm.client() as first:
        create_room(admin, room, ratePerMinute=0, entry="token")
        key = entry_key(admin, room)
        token = sign(key["key"], key["kid"], claims(room))
        assert first.post("/api/join", json={"roomId": room, "token": token}).status_code == 200
    context = browser.new_context(viewport=PHONE, locale="th-TH", bypass_csp=True)  # axe runs a script
    page = context.new_page()
    page.goto(f"{qm.base_url}/w/{room}?qm_token={token}")
    expect(page.locator("#problem")).to_contain_text("ลิงก์คำเชิญนี้ถูกใช้ไปแล้ว", timeout=10_000)
    page.screenshot(path=str(artifacts / "entry-used-th-phone.png"), full_page=True)
    page.locator("#lang").select_option("en")
    expect(page.locator("#problem")).to_have_text(
        "This invitation link has been used already. Go back to the site that invited you and ask for a fresh link."
    )
    found = violations(page)
    assert not found, describe(found)
    context.close()
    # no token at all: the page says the room is by invitation only
    context = browser.new_context(viewport=DESKTOP, locale="de-DE")
    page = context.new_page()
    page.goto(f"{qm.base_url}/w/{room}")
    expect(page.locator("#problem")).to_contain_text("nur mit Einladung", timeout=10_000)
    context.close()


def test_a_code_room_asks_for_a_code(browser: Any, qm: Server, artifacts: Path) -> None:
    room = unique_id("codes")
    with qm.admin() as admin:
        create_room(admin, room, ratePerMinute=0, entry="code", name="Box office")
        (code,) = admin.post(f"/api/admin/rooms/{room}/codes", json={"count": 1}).json()["codes"]
    context = browser.new_context(viewport=DESKTOP, locale="en-US", bypass_csp=True)  # axe runs a script
    page = context.new_page()
    page.goto(f"{qm.base_url}/w/{room}")
    form = page.locator("#code")
    expect(form).to_be_visible(timeout=10_000)
    expect(page.locator("#status-card")).to_be_hidden()
    page.screenshot(path=str(artifacts / "entry-code-form-desktop.png"), full_page=True)
    found = violations(page)
    assert not found, describe(found)
    page.locator("#code-input").fill("AAAAA-AAAAA")
    page.get_by_role("button", name="Join the line").click()
    expect(page.locator("#code-status")).to_have_text(
        "That code is not valid for this waiting room. Check it and try again."
    )
    page.screenshot(path=str(artifacts / "entry-code-wrong-desktop.png"), full_page=True)
    page.locator("#code-input").fill(code.lower())
    page.get_by_role("button", name="Join the line").click()
    expect(page.locator("#headline .num")).to_have_text("1", timeout=10_000)
    expect(form).to_be_hidden()
    page.reload()  # the place is kept: no code asked again
    expect(page.locator("#headline .num")).to_have_text("1", timeout=10_000)
    expect(form).to_be_hidden()
    context.close()


def test_the_tag_carries_an_invitation_to_the_waiting_page(browser: Any, qm: Server, artifacts: Path) -> None:
    room = unique_id("tag-invite")
    with serve_site(qm.base_url, room) as site, qm.admin() as admin:
        create_room(admin, room, targetUrl=site, ratePerMinute=0, entry="token", name="Members' drop")
        key = entry_key(admin, room)
        token = sign(key["key"], key["kid"], claims(room, "member-7"))
        page = browser.new_page(viewport=DESKTOP)
        page.goto(f"{site}/checkout?item=42&qm_token={token}")
        page.wait_for_url(f"{qm.base_url}/w/{room}*", timeout=10_000)
        expect(page.locator("#headline .num")).to_have_text("1", timeout=10_000)
        assert "qm_token" not in page.url  # the waiting page took it out in turn
        back = parse_qs(urlsplit(page.url).query)["qm_return"][0]
        assert back == f"{site}/checkout?item=42"  # the site's own address, without the invitation
        counts = admin.get(f"/api/admin/rooms/{room}").json()["room"]["entryCounts"]
        assert counts["tokensAccepted"] == 1
        page.screenshot(path=str(artifacts / "entry-tag-invited.png"), full_page=True)
        page.close()
