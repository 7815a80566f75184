"""The console's priority lanes: the room editor's Lanes table sets a room's lanes (a share split that does
not add up is refused and said), and the room card shows each lane's line, share and estimate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from axe import describe, violations
from browsing import sign_in
from harness import Server, create_room, join, unique_id, wait_until


def _room(admin: Any, room_id: str) -> dict[str, Any]:
    room: dict[str, Any] = admin.get(f"/api/admin/rooms/{room_id}").json()["room"]
    return room


def test_the_editor_sets_lanes_and_the_card_shows_each_lane(browser: Any, qm: Server, artifacts: Path) -> None:
    room = unique_id("lanes")
    with qm.admin() as admin, qm.client() as visitor:
        create_room(admin, room, name="Members sale", ratePerMinute=0)
        assert join(visitor, room).status_code == 200
        ctx = browser.new_context(bypass_csp=True, viewport={"width": 1360, "height": 1000})  # axe is injected
        page = ctx.new_page()
        sign_in(page, qm)
        card = page.locator(f'article.card[data-room="{room}"]')
        card.wait_for(timeout=10_000)
        lanes = card.locator('[data-k="lanes"]')
        assert lanes.is_hidden()  # no lanes: one line, nothing more on the card
        card.get_by_role("button", name="Edit").click()
        page.locator("#dlg-editor[open]").wait_for(timeout=5_000)
        kind = page.get_by_label("Lanes are set by")
        assert kind.input_value() == "share"
        fieldset = page.locator("#ed-lanes-set")
        for lane_id, share in (("public", "40"), ("members", "70")):
            fieldset.get_by_role("button", name="+ Add lane").click()
            row = fieldset.locator(".lane-row").last
            row.get_by_label("Lane id").fill(lane_id)
            row.get_by_label("Share or priority").fill(share)
        page.locator("#ed-ln-total").get_by_text("Shares add up to 110 %", exact=False).wait_for(timeout=5_000)
        page.get_by_role("button", name="Save changes").click()
        error = page.locator("#dlg-editor .error")
        error.get_by_text("invalid_lanes", exact=False).wait_for(timeout=5_000)
        assert "add up to 100" in error.inner_text()
        assert _room(admin, room)["lanes"] == []  # refused: nothing changed
        fieldset.locator(".lane-row").first.get_by_label("Share or priority").fill("30")
        page.locator("#ed-ln-total").get_by_text("Shares add up to 100 %", exact=False).wait_for(timeout=5_000)
        fieldset.scroll_into_view_if_needed()
        page.screenshot(path=str(artifacts / "console-editor-lanes.png"))
        found = violations(page)
        assert not found, describe(found)
        page.get_by_role("button", name="Save changes").click()
        want = [{"id": "public", "share": 30}, {"id": "members", "share": 70}]
        wait_until(lambda: _room(admin, room)["lanes"] == want, what="the lanes saved from the editor")
        page.locator("#dlg-editor[open]").wait_for(state="detached", timeout=5_000)
        # the card: the one waiting is in the default lane (public), members has nobody
        lanes.wait_for(timeout=10_000)
        public = lanes.locator("li").filter(has_text="public")
        public.get_by_text("1 waiting").wait_for(timeout=10_000)
        assert "30 %" in public.inner_text() and "not moving" in public.inner_text()
        members = lanes.locator("li").filter(has_text="members")
        assert "0 waiting" in members.inner_text() and "70 %" in members.inner_text()
        admin.post("/api/admin/rooms", json={"id": room, "ratePerMinute": 6}).raise_for_status()
        public.get_by_text("~34s").wait_for(timeout=30_000)  # 1 place at 30 % of 6 a minute: ⌈60 / 1.8⌉
        card.screenshot(path=str(artifacts / "console-card-lanes.png"))
        found = violations(page)
        assert not found, describe(found)
        # the editor shows what the room has, and priorities replace shares
        card.get_by_role("button", name="Edit").click()
        page.locator("#dlg-editor[open]").wait_for(timeout=5_000)
        assert [r.get_by_label("Lane id").input_value() for r in fieldset.locator(".lane-row").all()] == [
            "public",
            "members",
        ]
        kind.select_option("priority")
        fieldset.locator(".lane-row").first.get_by_label("Share or priority").fill("10")
        fieldset.locator(".lane-row").last.get_by_label("Share or priority").fill("90")
        page.get_by_role("button", name="Save changes").click()
        want = [{"id": "public", "priority": 10}, {"id": "members", "priority": 90}]
        wait_until(lambda: _room(admin, room)["lanes"] == want, what="the lanes made priorities")
        public.get_by_text("priority 10").wait_for(timeout=10_000)
        ctx.close()
