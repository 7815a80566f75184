"""The install verifier in a real browser: the operator pastes a page of the customer's site (a real site on
127.0.0.1, so the queue runs with PROXY_ALLOW_PRIVATE=1), sees whether the tag is on it and whether its origin
is answered, watches the refusals the live tag causes, allows the origin in one click (tagOrigins only), and
the card then says where visitors admitted from that origin land.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from axe import describe, violations
from browsing import sign_in
from demo_site import serve_site
from harness import Server, create_room, start_server, unique_id, wait_until
from page_site import PageSite, html


@pytest.fixture(scope="module")
def qm() -> Iterator[Server]:
    srv = start_server({"PROXY_ALLOW_PRIVATE": "1"})
    try:
        yield srv
    finally:
        srv.stop()


def _check(page: Any, url: str) -> Any:
    """Run the verifier on ``url`` from the open dialog; the answer's table once it is there."""
    dlg = page.locator("#dlg-verify")
    dlg.locator("#verify-url").fill(url)
    dlg.get_by_role("button", name="Check page").click()
    answer = dlg.locator("#verify-out dl.verify-kv")
    answer.wait_for(timeout=15_000)
    return dlg


def _refused(qm: Server, room: str, url: str) -> int:
    with qm.admin() as admin:
        r = admin.post(f"/api/admin/rooms/{room}/install-check", json={"url": url})
    count: int = r.json()["refusedChecks"]
    return count


def test_the_operator_verifies_a_page_and_unblocks_its_tag(browser: Any, qm: Server, artifacts: Path) -> None:
    room = unique_id("shop")
    with serve_site(qm.base_url, room) as site, qm.admin() as admin:
        create_room(admin, room, name="Landing drop", targetUrl="https://www.shop.example/")
        ctx = browser.new_context(bypass_csp=True, viewport={"width": 1360, "height": 1000})
        page = ctx.new_page()
        sign_in(page, qm)
        card = page.locator(f'article.card[data-room="{room}"]')
        card.wait_for(timeout=10_000)
        assert card.locator('[data-k="return-line"]').is_hidden()  # nothing to say yet
        card.get_by_role("button", name="Verify install").click()
        dlg = page.locator("#dlg-verify")
        assert dlg.locator("#verify-url").input_value() == "https://www.shop.example/"  # the targetUrl to start from

        # the tag is there and names the room, but its origin is not allowed: refused, with the fix offered
        dlg = _check(page, f"{site}/checkout")
        dlg.get_by_text(f'✓ present, data-room="{room}"').wait_for()
        dlg.get_by_text(f"✗ refused — {site} is not in tagOrigins: the tag fails open there").wait_for()
        dlg.get_by_text("– none counted yet; every check from this origin would be refused and counted").wait_for()
        fix = dlg.get_by_role("button", name=f"Allow {site} in tagOrigins")
        fix.wait_for()
        page.screenshot(path=str(artifacts / "verifier-refused.png"))
        found = violations(page, "#dlg-verify")
        assert not found, describe(found)

        # a visitor opens the live page: its tag's check is refused and counted
        shopper = browser.new_page()
        shopper.goto(f"{site}/checkout")
        shopper.get_by_text("admit=null").wait_for(timeout=10_000)  # failed open
        wait_until(lambda: _refused(qm, room, f"{site}/checkout") >= 1, what="the refusal counted")
        dlg = _check(page, f"{site}/checkout")
        dlg.get_by_text(
            "refused checks counted for this origin: a page with the tag is live and unprotected"
        ).wait_for()

        # one click: the origin goes into tagOrigins and nowhere else
        dlg.get_by_role("button", name=f"Allow {site} in tagOrigins").click()
        dlg.get_by_text(f"✓ answered — {site} is allowed by tagOrigins").wait_for(timeout=15_000)
        saved = admin.get(f"/api/admin/rooms/{room}").json()["room"]
        assert saved["tagOrigins"] == [site] and saved["returnOrigins"] == []
        dlg.get_by_text("✗ admitted visitors are sent to https://www.shop.example/, not back here").wait_for()
        dlg.get_by_text("That is also where a connector (Node, Worker, WordPress)").wait_for()
        assert dlg.get_by_role("button", name=f"Allow {site} in tagOrigins").count() == 0
        page.screenshot(path=str(artifacts / "verifier-fixed.png"))
        found = violations(page, "#dlg-verify")
        assert not found, describe(found)

        # the same visitor's tag is answered now: the queue takes them to the waiting page instead of failing open
        shopper.reload()
        shopper.wait_for_url(f"{qm.base_url}/w/{room}*", timeout=10_000)
        shopper.close()

        # the card says plainly where visitors admitted from that origin land
        dlg.get_by_role("button", name="Close").click()
        line = card.locator('[data-k="return-line"]')
        line.get_by_text("1 return URL was refused").wait_for(timeout=10_000)  # the next live frame has the count
        # the shopper who joined from that page asked to come back to it: refused, and counted on the card too
        assert line.inner_text() == (
            f"Tags on {site} are answered, but visitors admitted there are sent to https://www.shop.example/: "
            "it is not in returnOrigins. 1 return URL was refused: those visitors landed on "
            "https://www.shop.example/ instead of the page they came from. A room used through a connector (Node, "
            "Worker, WordPress) or a tag on another origin needs that origin in returnOrigins."
        )
        card.screenshot(path=str(artifacts / "verifier-card-note.png"))
        ctx.close()


def test_a_page_without_the_tag_says_what_to_add(browser: Any, qm: Server, artifacts: Path) -> None:
    site = PageSite()
    try:
        site.pages["/"] = html(body="<h1>A shop with no tag yet</h1>")
        with qm.admin() as admin:
            room = create_room(admin, unique_id("bare"), targetUrl=site.origin + "/")["id"]
        ctx = browser.new_context(bypass_csp=True, viewport={"width": 1360, "height": 1000})
        page = ctx.new_page()
        sign_in(page, qm)
        page.locator(f'article.card[data-room="{room}"]').get_by_role("button", name="Verify install").click()
        dlg = _check(page, site.origin + "/")
        dlg.get_by_text("✗ not on the page").wait_for()
        dlg.get_by_text(f"✓ answered — {site.origin} is allowed by the room's targetUrl").wait_for()
        dlg.get_by_text(f'⚠ No qm.js script tag. Add <script src="…/qm.js" data-room="{room}" async>').wait_for()
        assert dlg.get_by_role("button", name="Allow", exact=False).count() == 0  # the origin needs no fix
        page.screenshot(path=str(artifacts / "verifier-no-tag.png"))
        found = violations(page, "#dlg-verify")
        assert not found, describe(found)
        ctx.close()
    finally:
        site.close()
