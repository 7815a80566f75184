"""The console's Reports panel in a real browser: a partial row is marked ⚠, its counters read "n+" and its
net unserved "—"; a full day's rows can be picked with the bucket and from controls."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from axe import describe, violations
from harness import Server, create_room, join, start_server, unique_id, wait_until


def _hour_started_long_enough_ago(need_sec: int = 20) -> None:
    """A server started in an hour's first seconds covers almost all of it: start later, so its open hour has
    a hole (the time before it started) whatever the wall clock says."""
    into = int(time.time()) % 3600
    if into < need_sec:
        time.sleep(need_sec - into)


def test_a_partial_row_is_marked_and_its_counters_are_lower_bounds(browser: Any, artifacts: Path) -> None:
    _hour_started_long_enough_ago()
    srv: Server = start_server()
    try:
        room = unique_id("rep")
        with srv.admin() as admin:
            create_room(admin, room, ratePerMinute=0, queueMaxPerIp=None)
            wait_until(lambda: admin.get(f"/api/admin/reports?roomId={room}").json()["rows"], timeout=15)
            for _ in range(2):
                with srv.client() as c:
                    join(c, room).raise_for_status()

            def joined() -> dict[str, Any] | None:
                rows = admin.get(f"/api/admin/reports?roomId={room}").json()["rows"]
                return rows[-1] if rows and rows[-1]["joins"] >= 2 else None

            row = wait_until(joined, timeout=15, what="the joins in the open hour")
            assert row["partial"] is True and row["netUnserved"] is None  # the hour began before the server
        ctx = browser.new_context(bypass_csp=True, viewport={"width": 1360, "height": 900})
        page = ctx.new_page()
        page.goto(f"{srv.base_url}/")
        page.locator("#signin-key").fill(srv.admin_key)
        page.get_by_role("button", name="Sign in").click()
        page.locator("#live.on").wait_for(timeout=10_000)
        page.locator("#menu-btn").click()
        page.get_by_role("menuitem", name="Reports").click()
        dlg = page.locator("#dlg-reports[open] table")
        dlg.wait_for(timeout=10_000)
        line = page.locator("#dlg-reports tr.partial", has_text=room)
        line.wait_for(timeout=10_000)
        cells = line.locator("td").all_inner_texts()
        assert cells[0] == room and cells[1].startswith("⚠ ")
        assert cells[2] == "2+" and cells[3] == "0+"  # joins, passes: lower bounds
        assert cells[4] == "—"  # net unserved is not known for a partial row
        assert cells[10].endswith("+") and cells[11] == "0+" and cells[12].endswith("+")
        heads = page.locator("#dlg-reports th").all_inner_texts()
        assert heads[13].lower() == "line full" and cells[13] == "0+"  # joins refused: the line was full
        assert heads[14].lower() == "sessions ended" and cells[14] == "0+"  # sessions the site ended: none
        assert "lower bounds" in page.locator("#dlg-reports").inner_text()
        page.locator("#dlg-reports").screenshot(path=str(artifacts / "console-reports-partial.png"))
        found = violations(page)
        assert not found, describe(found)
        # by day, from today: the same room's day, partial too
        page.locator("#rep-bucket").select_option("day")
        page.locator("#dlg-reports th", has_text="Day (UTC)").wait_for(timeout=10_000)
        day = page.locator("#dlg-reports tr.partial", has_text=room)
        day.wait_for(timeout=10_000)
        assert day.locator("td").nth(2).inner_text() == "2+"
        ctx.close()
    finally:
        srv.stop()
