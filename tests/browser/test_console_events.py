"""The console's scheduled events in a real browser: the card says which event comes next and which is in force,
the Events dialog shows them on a timeline and in a table, adds one from its form (the server keeps what was
typed) and deletes one; axe-clean, with screenshots."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from axe import describe, violations
from browsing import sign_in
from harness import create_room, unique_id, wait_until


def _iso(seconds_from_now: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + seconds_from_now))


def test_the_events_dialog_shows_adds_and_deletes(browser: Any, qm: Any, artifacts: Path) -> None:
    room = unique_id("evc")
    with qm.admin() as admin:
        create_room(admin, room, name="Winter shop", ratePerMinute=60)
        r = admin.post(  # begun a minute ago and not over: in force at once
            f"/api/admin/rooms/{room}/events",
            json={"id": "now", "name": "Flash sale", "startsAt": _iso(-60), "endsAt": _iso(3600), "ratePerMinute": 500},
        )
        assert r.status_code == 201, r.text
        r = admin.post(
            f"/api/admin/rooms/{room}/events",
            json={
                "id": "later",
                "name": "Members' hour",
                "preQueueAt": _iso(4 * 3600),
                "startsAt": _iso(5 * 3600),
                "endsAt": _iso(6 * 3600),
                "shuffle": True,
                "maxConcurrent": 300,
            },
        )
        assert r.status_code == 201, r.text
        wait_until(lambda: admin.get(f"/api/admin/rooms/{room}").json()["room"]["eventInForce"], timeout=15)
    context = browser.new_context(viewport={"width": 1360, "height": 1000}, bypass_csp=True)
    page = context.new_page()
    sign_in(page, qm)
    card = page.locator(f'article.card[data-room="{room}"]')
    card.wait_for(timeout=10_000)
    line = card.locator('[data-k="event-line"]')
    line.filter(has_text="Event “Flash sale” in force until").wait_for(timeout=10_000)
    card.screenshot(path=str(artifacts / "console-events-card.png"))
    card.get_by_role("button", name="Events").click()
    dlg = page.locator("#dlg-events")
    dlg.locator("table").wait_for(timeout=10_000)
    rows = dlg.locator("tbody tr")
    assert rows.count() == 2
    first = rows.nth(0).locator("td").all_inner_texts()
    assert first[0] == "Flash sale" and first[4] == "Rate/min 500" and first[5] == "in force"
    second = rows.nth(1).locator("td").all_inner_texts()
    assert second[1].endswith("· shuffled") and second[4] == "Max concurrent 300" and second[5] == "upcoming"
    assert dlg.locator(".ev-timeline .ev-row").count() == 2
    assert dlg.locator(".ev-timeline .ev-pre").count() == 1  # the members' pre-queue
    found = violations(page, "#dlg-events")
    assert not found, describe(found)
    dlg.screenshot(path=str(artifacts / "console-events-dialog.png"))
    # add one from the form: tomorrow, with a rate and a message
    dlg.get_by_label("Name").fill("Restock")
    start = page.evaluate("() => { const d = new Date(Date.now() + 86400e3); d.setSeconds(0, 0); return d.getTime(); }")
    local = page.evaluate(
        "(ms) => new Date(ms - new Date(ms).getTimezoneOffset() * 60000).toISOString().slice(0, 16)", start
    )
    local_end = page.evaluate(
        "(ms) => new Date(ms - new Date(ms).getTimezoneOffset() * 60000).toISOString().slice(0, 16)",
        start + 3600_000,
    )
    dlg.get_by_label("Starts").fill(local)
    dlg.get_by_label("Ends").fill(local_end)
    dlg.get_by_label("Rate/min").fill("240")
    dlg.get_by_label("Page message").fill("Restocked: 500 pairs")
    dlg.get_by_role("button", name="Add event").click()
    dlg.locator("#ev-out").filter(has_text="Event added.").wait_for(timeout=10_000)
    with qm.admin() as admin:
        events = admin.get(f"/api/admin/rooms/{room}/events").json()["events"]
    made = [e for e in events if e["name"] == "Restock"]
    assert len(made) == 1
    assert made[0]["ratePerMinute"] == 240 and made[0]["message"] == {"en": "Restocked: 500 pairs"}
    assert made[0]["startsAt"].startswith(time.strftime("%Y-%m-%dT%H:%M", time.gmtime(start / 1000)))
    assert dlg.locator("tbody tr").count() == 3
    # delete the one in force: the room's own rate is back within a second or two
    dlg.get_by_role("button", name="Delete event Flash sale").click()
    dlg.locator("#ev-out").filter(has_text="Event deleted").wait_for(timeout=10_000)
    assert dlg.locator("tbody tr").count() == 2
    with qm.admin() as admin:
        wait_until(lambda: admin.get(f"/api/admin/rooms/{room}").json()["room"]["ratePerMinute"] == 60, timeout=15)
    dlg.screenshot(path=str(artifacts / "console-events-after.png"))
    context.close()
