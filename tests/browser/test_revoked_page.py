"""A visitor whose session the site ended comes back to the waiting page: it says why they are in line again
("The site ended your visit"), in their language, and it is axe-clean (WCAG 2.1 AA)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from axe import describe, violations
from harness import create_room, start_server, unique_id, wait_until

KEY = "pk-" + secrets.token_urlsafe(18)
UA = "Mozilla/5.0 (revoked-page-test)"


@pytest.fixture(scope="module")
def qm() -> Iterator[Any]:
    srv = start_server({"PUBLIC_API_KEY": KEY})
    try:
        yield srv
    finally:
        srv.stop()


def test_a_revoked_visitor_back_on_the_waiting_page_is_told_why(browser: Any, qm: Any, artifacts: Path) -> None:
    room = unique_id("revoked")
    with qm.admin() as admin:
        create_room(admin, room, ratePerMinute=600, queueMaxPerIp=None, presenceSec=None)
    with httpx.Client(base_url=qm.base_url, headers={"User-Agent": UA}, timeout=10) as visitor:
        token = visitor.post("/api/join", json={"roomId": room}).json()["token"]
        wait_until(
            lambda: (
                visitor.get("/api/status", params={"roomId": room, "token": token}).json()["state"] == "passed" or None
            ),
            15,
            0.1,
            "the visitor's turn",
        )
        door = visitor.get("/api/check", params={"roomId": room, "token": token}).json()["doorKey"]
    with qm.admin() as admin:  # no outflow from here: back in line, the visitor stays there
        assert admin.post(f"/api/admin/rooms/{room}/rate", json={"ratePerMinute": 0}).status_code == 200
    with httpx.Client(base_url=qm.base_url, headers={"Authorization": f"Bearer {KEY}"}, timeout=10) as site:
        r = site.post("/api/sessions/revoke", json={"roomId": room, "doorKey": door, "token": token})
        assert r.status_code == 200 and r.json()["revoked"] is True, r.text

    context = browser.new_context(viewport={"width": 1100, "height": 820}, user_agent=UA, bypass_csp=True)
    try:
        context.add_cookies([{"name": f"qm_{room}", "value": token, "url": qm.base_url}])
        page = context.new_page()
        page.goto(f"{qm.base_url}/w/{room}?lang=en")
        page.get_by_text("The site ended your visit; you have a new place in line.").wait_for(timeout=10_000)
        assert " ".join(page.locator("#headline").inner_text().split()) == "You are number 1 in line"
        page.screenshot(path=str(artifacts / "waiting-revoked-en.png"), full_page=True)
        found = violations(page)
        assert not found, describe(found)
        page.select_option("#lang", "th")
        page.get_by_text("เว็บไซต์ได้ปิดการเข้าชมของคุณแล้ว คุณได้คิวใหม่แล้ว").wait_for(timeout=10_000)
        page.screenshot(path=str(artifacts / "waiting-revoked-th.png"), full_page=True)
    finally:
        context.close()
