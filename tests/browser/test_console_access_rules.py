"""The console's Access rules in a real browser: the editor shows the room's list with the header's secret
withheld and each rule's matches, the dry run names the rule a described request meets, a bad list is refused
in the form, and a save keeps the secret the form never showed; axe-clean, with screenshots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from axe import describe, violations
from browsing import sign_in
from harness import create_room, start_server, unique_id

SECRET = "console-probe-" + "3" * 12
RULES = [
    {"id": "probe", "action": "bypass", "match": {"header": {"name": "X-Probe", "value": SECRET}}},
    {"id": "geo", "action": "block", "match": {"countries": ["DE"]}, "note": "not sold there"},
    {"id": "local", "action": "bypass", "match": {"cidrs": ["127.0.0.0/8"]}},
]


def _check(qm: Any, room: str, **headers: str) -> dict[str, Any]:
    r = httpx.get(f"{qm.base_url}/api/check", params={"roomId": room, "url": "https://shop.example/"}, headers=headers)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def test_the_editor_shows_tests_and_saves_access_rules(browser: Any, qm: Any, artifacts: Path) -> None:
    room = unique_id("acc")
    with qm.admin() as admin:
        create_room(admin, room, name="Guarded shop", ratePerMinute=0, accessRules=RULES)
    assert _check(qm, room)["accessRule"] == "local"  # one match to show
    context = browser.new_context(viewport={"width": 1360, "height": 1000}, bypass_csp=True)
    page = context.new_page()
    try:
        sign_in(page, qm)
        page.locator(f'article.card[data-room="{room}"]').get_by_role("button", name="Edit").click()
        page.locator("#dlg-editor[open]").wait_for(timeout=5_000)
        listed = page.locator("#ed-accessRules")
        text = listed.input_value()
        assert '"set": true' in text and SECRET not in text and "matchCount" not in text
        stats = page.locator("#ed-access .access-stats li")
        assert stats.count() == 3
        assert "1 matched" in stats.nth(2).inner_text() and "never matched" in stats.nth(0).inner_text()

        page.locator("#ed-access-address").fill("203.0.113.7")
        page.locator("#ed-access-country").fill("DE")
        page.get_by_role("button", name="Test request").click()
        result = page.locator("#ed-access-result:not([hidden])")
        result.wait_for(timeout=5_000)
        assert "Access rule 2 (geo) matches first: refused" in result.inner_text()
        page.locator("#ed-access-headers").fill(f"X-Probe: {SECRET}")
        page.get_by_role("button", name="Test request").click()
        page.locator("#ed-access-result", has_text="Access rule 1 (probe)").wait_for(timeout=5_000)
        page.locator("#ed-access-result").evaluate("e => e.scrollIntoView({block: 'center'})")
        page.screenshot(path=str(artifacts / "console-access-rules.png"))
        found = violations(page)
        assert not found, describe(found)

        listed.fill("[{not json")
        page.get_by_role("button", name="Save changes").click()
        page.locator("#dlg-editor .error", has_text="Access rules: not a JSON list").wait_for(timeout=5_000)

        # drop the local bypass: the probe (secret kept from before) and the geo block stay
        kept = text[: text.rindex("},") + 1] + "\n]"
        listed.fill(kept)
        page.get_by_role("button", name="Save changes").click()
        page.locator("#dlg-editor").wait_for(state="hidden", timeout=5_000)
    finally:
        context.close()
    with qm.admin() as admin:
        saved = admin.get(f"/api/admin/rooms/{room}").json()["room"]["accessRules"]
    assert [r["id"] for r in saved] == ["probe", "geo"]
    assert saved[0]["matchCount"] == 0 and saved[1]["note"] == "not sold there"
    assert _check(qm, room, **{"X-Probe": SECRET})["accessRule"] == "probe"  # the secret the form never saw
    assert _check(qm, room)["admit"] is False  # the local bypass is gone


def test_the_waiting_page_says_a_blocked_visitor_is_not_allowed(browser: Any, qm: Any, artifacts: Path) -> None:
    """A visitor a block rule refuses who reaches the waiting page: the join answers 403 access_blocked and the
    page says so in the visitor's language, once, and stops asking (waiting would not change the answer)."""
    room = unique_id("blk")
    with qm.admin() as admin:
        rules = [{"id": "here", "action": "block", "match": {"cidrs": ["127.0.0.0/8", "::1/128"]}}]
        create_room(admin, room, name="Guarded shop", accessRules=rules)
    context = browser.new_context(viewport={"width": 900, "height": 700}, locale="de-DE")
    page = context.new_page()
    try:
        page.goto(f"{qm.base_url}/w/{room}")
        problem = page.locator("#problem:not([hidden])")
        problem.wait_for(timeout=10_000)
        assert "Diese Website nimmt Anfragen wie Ihre hier nicht an" in problem.inner_text()
        page.screenshot(path=str(artifacts / "waiting-access-blocked.png"))
    finally:
        context.close()
    with qm.admin() as admin:
        matched = admin.get(f"/api/admin/rooms/{room}").json()["room"]["accessRules"][0]["matchCount"]
    assert matched == 1  # one join, no retries


def test_an_inline_hosts_not_allowed_page(browser: Any, peer: Any, artifacts: Path) -> None:
    """A block rule on an inline host: the browser gets the room's short page (403) in its brand and language."""
    srv = start_server({"PROXY_ALLOW_PRIVATE": "1"})
    try:
        public = f"http://localhost:{srv.port}"
        body = {
            "id": unique_id("inb"),
            "name": "Inline shop",
            "targetUrl": public,
            "proxyOrigin": peer.url,
            "brand": {"displayName": "Harbour Books", "accent": "#0f766e", "background": "#f0fdfa"},
            "accessRules": [{"id": "private", "action": "block", "match": {"pathPrefix": "/page/private"}}],
        }
        with srv.admin() as admin:
            admin.post("/api/admin/rooms", json=body).raise_for_status()
        context = browser.new_context(viewport={"width": 900, "height": 600}, locale="th-TH")
        page = context.new_page()
        try:
            response = page.goto(f"{public}/page/private/1")
            assert response is not None and response.status == 403
            page.locator("h1", has_text="ไม่อนุญาตให้เข้าถึง").wait_for(timeout=5_000)
            assert "Harbour Books" in page.locator(".brand").inner_text()
            page.screenshot(path=str(artifacts / "inline-access-blocked.png"))
            found = violations(page)
            assert not found, describe(found)
        finally:
            context.close()
    finally:
        srv.stop()
