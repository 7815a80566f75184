"""The console's room editor sets a room's queueing method (and a closed room's page status) from a select,
and the change lands in the room."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from axe import describe, violations
from harness import create_room, start_server, unique_id, wait_until


@pytest.fixture(scope="module")
def qm() -> Iterator[Any]:
    srv = start_server()
    try:
        yield srv
    finally:
        srv.stop()


def _room(admin: Any, room_id: str) -> dict[str, Any]:
    room: dict[str, Any] = admin.get(f"/api/admin/rooms/{room_id}").json()["room"]
    return room


def test_the_editor_switches_the_queueing_method(browser: Any, qm: Any, artifacts: Path) -> None:
    room = unique_id("method")
    with qm.admin() as admin:
        create_room(admin, room, name="Spring sale")
        ctx = browser.new_context(bypass_csp=True, viewport={"width": 1360, "height": 1000})
        page = ctx.new_page()
        page.goto(f"{qm.base_url}/")
        page.locator("#signin-key").fill(qm.admin_key)
        page.get_by_role("button", name="Sign in").click()
        page.locator("#live.on").wait_for(timeout=10_000)
        card = page.locator(f'article.card[data-room="{room}"]')
        card.wait_for(timeout=10_000)
        card.get_by_role("button", name="Edit").click()
        page.locator("#dlg-editor[open]").wait_for(timeout=5_000)
        method = page.get_by_label("Queueing method")
        status = page.get_by_label("Closed page status")
        assert method.input_value() == "fifo" and status.input_value() == "503"
        assert [o.get_attribute("value") for o in method.locator("option").all()] == [
            "fifo",
            "random",
            "passthrough",
            "reject",
        ]
        method.select_option("reject")
        status.select_option("200")
        page.locator('[data-field="queueing"]').scroll_into_view_if_needed()
        page.screenshot(path=str(artifacts / "console-editor-queueing.png"))
        found = violations(page)
        assert not found, describe(found)
        page.get_by_role("button", name="Save changes").click()
        wait_until(lambda: _room(admin, room)["queueing"] == "reject", what="the room closed from the editor")
        assert _room(admin, room)["rejectStatus"] == 200
        badge = card.locator('[data-k="method"]')
        badge.get_by_text("closed", exact=True).wait_for(timeout=10_000)
        card.screenshot(path=str(artifacts / "console-card-closed.png"))
        # and back: the editor shows what the room has
        page.locator("#dlg-editor[open]").wait_for(state="detached", timeout=5_000)
        card.get_by_role("button", name="Edit").click()
        page.locator("#dlg-editor[open]").wait_for(timeout=5_000)
        assert method.input_value() == "reject" and status.input_value() == "200"
        method.select_option("random")
        page.get_by_role("button", name="Save changes").click()
        wait_until(lambda: _room(admin, room)["queueing"] == "random", what="the room made random from the editor")
        assert _room(admin, room)["rejectStatus"] == 200  # not sent again: unchanged
        badge.get_by_text("random draw", exact=True).wait_for(timeout=10_000)
        found = violations(page)
        assert not found, describe(found)
        admin.post("/api/admin/rooms", json={"id": room, "queueing": "fifo"}).raise_for_status()
        badge.wait_for(state="hidden", timeout=10_000)  # the usual line carries no badge
        ctx.close()
