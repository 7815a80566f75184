"""Flush in the console: the card's button, its confirm, and the mark it leaves on the room's chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from axe import describe, violations
from harness import Server, start_server, wait_until
from passkit import PUBLIC_KEY, Visitor, admitted


@pytest.fixture(scope="module")
def qm() -> Any:
    srv = start_server({"PUBLIC_API_KEY": PUBLIC_KEY})
    try:
        yield srv
    finally:
        srv.stop()


def _room(qm: Server, room_id: str) -> dict[str, Any]:
    with qm.admin() as admin:
        room: dict[str, Any] = admin.get(f"/api/admin/rooms/{room_id}").json()["room"]
    return room


def test_flush_from_the_card_after_a_confirm_and_its_chart_mark(browser: Any, qm: Server, artifacts: Path) -> None:
    inside = admitted(qm, name="Flash sale", sessionTtlSec=600, presenceSec=None, maxConcurrent=10)
    room = inside.room_id
    Visitor(qm, room)  # a second one holding a pass
    ctx = browser.new_context(bypass_csp=True, viewport={"width": 1360, "height": 900})
    page = ctx.new_page()
    page.goto(f"{qm.base_url}/")
    page.locator("#signin-key").fill(qm.admin_key)
    page.get_by_role("button", name="Sign in").click()
    page.locator("#live.on").wait_for(timeout=10_000)
    card = page.locator(f'article.card[data-room="{room}"]')
    card.wait_for(timeout=10_000)
    card.get_by_role("button", name="Chart").click()
    page.locator("#chart-box canvas").first.wait_for(timeout=40_000)
    # the legend's events entry names what its marks are, flushes among them (as the guide lists them)
    events = page.locator("#legend").get_by_role("button", name="events")
    title = events.get_attribute("title") or ""
    for kind in ("rate moves", "state flips", "threshold activation", "autotune", "flushes", "purges", "ejects"):
        assert kind in title, (kind, title)

    # the confirm says who is sent back; cancelling it changes nothing
    # the destructive group wraps as one: Purge, Flush and Delete on one row, never a lone Delete
    boxes = [card.get_by_role("button", name=n, exact=True).bounding_box() for n in ("Purge", "Flush", "Delete")]
    assert all(box is not None for box in boxes) and max(b["y"] for b in boxes) - min(b["y"] for b in boxes) < 2, boxes
    flush = card.get_by_role("button", name="Flush", exact=True)
    flush.click()
    dialog = page.locator("#dlg-confirm[open]")
    dialog.wait_for(timeout=5_000)
    text = dialog.inner_text()
    assert f"Flush {room}?" in text and "1 on the site, 1 holding a pass" in text, text
    page.screenshot(path=str(artifacts / "console-flush-confirm.png"))
    found = violations(page)
    assert not found, describe(found)
    page.keyboard.press("Escape")
    page.wait_for_function("() => !document.querySelector('#dlg-confirm[open]')", timeout=5_000)
    assert _room(qm, room)["activeSessions"] == 1

    flush.click()
    page.locator("#dlg-confirm[open]").get_by_role("button", name="Flush the site").click()
    page.get_by_text(f"Flushed 2 from {room}.").wait_for(timeout=10_000)
    summary = _room(qm, room)
    assert (summary["activeSessions"], summary["passesOutstanding"]) == (0, 0)
    assert inside.check().json()["reason"] == "flushed"

    with qm.admin() as admin:
        wait_until(
            lambda: any(m["kind"] == "flush" for m in admin.get(f"/api/admin/series/{room}").json()["marks"]),
            timeout=15,
            what="the flush mark",
        )
    with page.expect_response(lambda r: f"/api/admin/series/{room}" in r.url):
        page.locator("#chart-range").dispatch_event("change")
    over = page.locator("#chart-box .u-over")
    tip = page.locator("#mark-tip")

    def hovered() -> str | None:
        """Hover from the right edge leftwards (the mark is at "now") until the tip names the flush."""
        over.scroll_into_view_if_needed()
        box = over.bounding_box()
        assert box is not None
        for dx in range(0, 200, 2):
            page.mouse.move(box["x"] + box["width"] - 1 - dx, box["y"] + box["height"] / 2)
            if tip.is_visible() and "site flushed" in tip.inner_text():
                return str(tip.inner_text())
        return None

    # the card's next live frame shows the site empty: nobody in session, no pass held
    page.wait_for_function(
        '(id) => document.querySelector(`article.card[data-room="${id}"] [data-k="capacity"]`)'
        ".textContent.startsWith('0/10')",
        arg=room,
        timeout=10_000,
    )
    note = wait_until(hovered, timeout=15, what="the flush mark's tip")
    assert "site flushed: 2 passes and sessions released" in note, note
    page.screenshot(path=str(artifacts / "console-flush-mark.png"))
    ctx.close()
