"""The operator console in a real browser: sign in, run a room, look a visitor up, share a read-only view."""

from __future__ import annotations

import re
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from axe import describe, violations
from browsing import sign_in
from harness import Server, create_room, free_port, join, start_server, unique_id, wait_until


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _room(admin: Any, room_id: str) -> dict[str, Any]:
    room: dict[str, Any] = admin.get(f"/api/admin/rooms/{room_id}").json()["room"]
    return room


def _context(browser: Any, **kwargs: Any) -> Any:
    # axe is injected as a script tag, which the console's CSP (script-src 'self') would refuse
    return browser.new_context(bypass_csp=True, **kwargs)


def _focus_is(page: Any, script: str, expected: str) -> None:
    """Wait until ``script`` (about document.activeElement) reads ``expected``: a dialog's close event is async."""
    page.wait_for_function(f"(want) => ({script}) === want", arg=expected, timeout=5_000)


def _card(page: Any, room_id: str) -> Any:
    return page.locator(f'article.card[data-room="{room_id}"]')


def test_operator_runs_a_room_from_the_console(browser: Any, qm: Any, artifacts: Path) -> None:
    ctx = _context(browser, viewport={"width": 1360, "height": 900})
    page = ctx.new_page()
    requests: list[str] = []
    failed: list[tuple[int, str]] = []
    page.on("request", lambda r: requests.append(r.url))
    page.on("response", lambda r: failed.append((r.status, r.url)) if r.status >= 400 else None)
    page.goto(f"{qm.base_url}/")
    page.locator("#signin-key").wait_for(timeout=10_000)
    page.screenshot(path=str(artifacts / "console-signin.png"))
    found = violations(page)
    assert not found, describe(found)

    sign_in(page, qm)
    # the key is not kept anywhere the page's scripts can read
    assert page.evaluate("() => JSON.stringify(localStorage) + JSON.stringify(sessionStorage)").find(qm.admin_key) < 0
    assert page.locator("#signin-key").input_value() == ""
    assert "qm_console" not in page.evaluate("() => document.cookie")

    with qm.admin() as admin, qm.client() as visitor:
        # a few rooms with people in them, for the dashboard and its chart
        busy = unique_id("busy")
        create_room(admin, busy, name="Spring sale", ratePerMinute=30, maxConcurrent=40)
        for _ in range(6):
            with qm.client() as other:
                join(other, busy).raise_for_status()

        # create a room from the editor
        room = unique_id("shop")
        page.get_by_role("button", name="+ New room").click()
        page.locator("#ed-id").fill(room)
        page.locator("#ed-name").fill("Checkout")
        page.locator("#ed-targetUrl").fill("https://shop.example/")
        page.locator("#ed-ratePerMinute").fill("0")
        page.locator("#ed-maxConcurrent").fill("25")
        page.locator("#ed-maxWaiting").fill("5000")
        page.locator("#ed-maxWaitSec").fill("3600")
        assert page.locator("#ed-preQueueShards").input_value() == "1"  # a new room: its own slot
        page.locator("#ed-preQueueShards").fill("3")
        page.locator("#ed-preQueueShards").scroll_into_view_if_needed()
        page.screenshot(path=str(artifacts / "console-editor-shards.png"))
        page.locator("#ed-aa-enabled").check()
        page.locator("#ed-aa-joins").fill("500")
        page.screenshot(path=str(artifacts / "console-editor.png"))
        found = violations(page)
        assert not found, describe(found)
        page.get_by_role("button", name="Create room").click()
        card = _card(page, room)
        card.wait_for(timeout=10_000)
        assert _room(admin, room)["maxConcurrent"] == 25
        assert (_room(admin, room)["maxWaiting"], _room(admin, room)["maxWaitSec"]) == (5000, 3600)
        assert _room(admin, room)["preQueueShards"] == 3
        assert _room(admin, room)["autoActivate"]["enabled"] is True
        card.get_by_text("AUTO ≥500/MIN").wait_for(timeout=10_000)
        assert card.locator('[data-k="capacity"]').inner_text() == "0/25"

        # pause and resume
        card.get_by_role("button", name="Pause").click()
        wait_until(lambda: _room(admin, room)["state"] == "paused", what="paused")
        card.locator(".badge", has_text="paused").wait_for(timeout=10_000)
        card.get_by_role("button", name="Resume").click()
        wait_until(lambda: _room(admin, room)["state"] == "active", what="resumed")

        # the rate dial from the keyboard: → +10, Shift+→ +1, PageUp +50, ← -10
        dial = card.get_by_role("slider")
        dial.focus()
        dial.press("ArrowRight")
        dial.press("Shift+ArrowRight")
        dial.press("PageUp")
        dial.press("ArrowLeft")
        wait_until(lambda: _room(admin, room)["ratePerMinute"] == 51, what="rate 51 from the keyboard")
        assert dial.input_value() == "51"
        # back to 0 so the visitor below stays in the line
        card.locator('input[type="number"]').fill("0")
        card.locator('input[type="number"]').press("Enter")
        wait_until(lambda: _room(admin, room)["ratePerMinute"] == 0, what="rate typed back to 0")

        # a visitor joins over HTTP; the operator looks them up and ejects them in two steps
        join(visitor, room).raise_for_status()
        join(qm.client(), room).raise_for_status()
        card.locator('[data-k="waiting"]', has_text="2").wait_for(timeout=10_000)
        card.get_by_role("button", name="Visitors").click()
        page.locator("#vis-q").fill("1")
        page.locator("#vis-q").press("Enter")
        dlg = page.locator("#dlg-visitor")
        dlg.get_by_text("Position").wait_for(timeout=10_000)
        eject = page.locator("#vis-eject")
        eject.click()
        assert "Confirm" in eject.inner_text()
        before = dlg.locator(".kv").inner_text()
        # the drill-down refreshes with the live frames (every 2 s); the arming survives it
        wait_until(lambda: dlg.locator(".kv").inner_text() != before, timeout=15, what="a drill-down refresh")
        assert "Confirm" in page.locator("#vis-eject").inner_text()
        page.screenshot(path=str(artifacts / "console-drilldown.png"))
        found = violations(page)
        assert not found, describe(found)
        page.locator("#vis-eject").click()

        def ejected() -> bool:
            rows = admin.get(f"/api/admin/audit?roomId={room}").json()["audit"]
            return any(a["action"] == "visitor.eject" for a in rows)

        wait_until(ejected, what="the eject in the audit trail")
        assert admin.get(f"/api/admin/rooms/{room}/visitors/1").json()["visitor"]["position"] == 2
        page.keyboard.press("Escape")
        # focus goes back to the button that opened the dialog
        _focus_is(page, "document.activeElement.textContent", "Visitors")

        # the dashboard with its chart, once a few samples are in
        page.locator("#chart-room").select_option(busy)
        page.locator("#chart-box canvas").first.wait_for(timeout=20_000)
        page.screenshot(path=str(artifacts / "console-dashboard.png"), full_page=True)
        found = violations(page)
        assert not found, describe(found)

        # no card line is cut short by an ellipsis ("+6 holding passes" is the guide's wording);
        # after the screenshot, since the next frame puts the real text back
        page.evaluate("""() => { for (const dd of document.querySelectorAll('[data-h="capacity"]'))
            dd.textContent = '+1,234 holding passes'; }""")
        cut = page.evaluate("""() => [...document.querySelectorAll('.stats dd')]
            .filter((dd) => dd.scrollWidth > dd.clientWidth + 1).map((dd) => dd.textContent)""")
        assert not cut, cut
        # share a monitor link: opening the dialog mints nothing
        links_before = len(admin.get("/api/admin/monitor-links").json()["links"])
        page.get_by_role("button", name="Share monitor").click()
        page.get_by_role("button", name="Mint a new link").wait_for(timeout=10_000)
        assert len(admin.get("/api/admin/monitor-links").json()["links"]) == links_before
        page.get_by_role("button", name="Mint a new link").click()
        page.locator("#share-url").wait_for(timeout=10_000)
        url = page.locator("#share-url").input_value()
        assert "#monitor=" in url
        page.keyboard.press("Escape")

        def reveals(link_id: str) -> int:
            rows = admin.get("/api/admin/audit", params={"limit": 200}).json()["audit"]
            return sum(1 for r in rows if r["action"] == "monitor_token.reveal" and r["target"] == link_id)

        def share_field() -> str:
            page.get_by_role("button", name="Share monitor").click()
            page.locator("#share-url").wait_for(timeout=10_000)
            value: str = page.locator("#share-url").input_value()
            return value

        # reopening shows the live link in the field: nothing minted, and the page's own link needs no reveal
        count = len(admin.get("/api/admin/monitor-links").json()["links"])
        assert share_field() == url
        page.keyboard.press("Escape")
        # a newer live link made elsewhere is the one the field shows, revealed (audited) once, never minted
        newer = admin.post("/api/admin/monitor-links").json()
        count += 1
        assert share_field() == newer["url"] and newer["url"] != url
        assert newer["link"]["id"] in page.locator("#share-which").inner_text()
        found = violations(page)
        assert not found, describe(found)
        page.screenshot(path=str(artifacts / "console-share.png"))
        page.keyboard.press("Escape")
        assert share_field() == newer["url"]
        page.keyboard.press("Escape")
        assert len(admin.get("/api/admin/monitor-links").json()["links"]) == count
        assert reveals(newer["link"]["id"]) == 1
        # once it is revoked, the field falls back to the link still live
        admin.delete(f"/api/admin/monitor-links/{newer['link']['id']}").raise_for_status()
        assert share_field() == url
        page.keyboard.press("Escape")

    monitor = _context(browser, viewport={"width": 1200, "height": 800}, color_scheme="dark")
    mpage = monitor.new_page()
    mrequests: list[str] = []
    mpage.on("request", lambda r: mrequests.append(r.url))
    mpage.goto(url)
    _card(mpage, room).wait_for(timeout=10_000)
    mpage.locator("#live.on").wait_for(timeout=10_000)
    assert "read-only" in mpage.locator("#who").inner_text()
    hidden = (
        "Pause",
        "Resume",
        "Purge",
        "Flush",
        "Delete",
        "Edit",
        "Visitors",
        "+ New room",
        "Share monitor",
        "Diagnostics",
    )
    for name in hidden:
        assert mpage.get_by_role("button", name=name, exact=True).count() == 0, name
    assert mpage.get_by_role("slider").count() == 0
    mpage.screenshot(path=str(artifacts / "console-monitor.png"), full_page=True)
    found = violations(mpage)
    assert not found, describe(found)

    # revoking the link ends the open view: the stream says revoked and the dead-link screen replaces it
    with qm.admin() as admin:
        admin.post("/api/admin/monitor-links/revoke-all").raise_for_status()
    mpage.locator("#dead-title").wait_for(timeout=10_000)
    assert mpage.locator("#app").is_hidden()

    # a narrow viewport
    page.set_viewport_size({"width": 390, "height": 844})
    wait_until(lambda: page.evaluate("() => document.documentElement.scrollWidth") <= 390, what="no sideways scroll")
    page.screenshot(path=str(artifacts / "console-narrow.png"), full_page=True)
    # on a phone the destructive group shares a row of its own: no lone Delete wrapped under Purge and Flush
    buttons = ("Pause", "Purge", "Flush", "Delete")
    boxes = {n: _card(page, room).get_by_role("button", name=n, exact=True).bounding_box() for n in buttons}
    assert abs(boxes["Purge"]["y"] - boxes["Delete"]["y"]) < 2 and boxes["Purge"]["y"] > boxes["Pause"]["y"], boxes
    assert abs(boxes["Flush"]["y"] - boxes["Delete"]["y"]) < 2, boxes

    # the only refusal is the "am I signed in?" probe on each load before signing in
    assert {(status, urlsplit(u).path) for status, u in failed} == {(401, "/api/admin/whoami")}, failed
    assert any(urlsplit(u).path.startswith("/fonts/Geist") for u in requests), "the console's own fonts"
    origins = {_origin(u) for u in requests + mrequests if u.startswith("http")}
    assert origins == {qm.base_url}, f"the console asked another origin: {origins}"
    ctx.close()
    monitor.close()


def test_keyboard_skip_links_and_console_menu(browser: Any, qm: Any) -> None:
    with qm.admin() as admin:
        first, second = unique_id("kb-a"), unique_id("kb-b")
        create_room(admin, first, name="First")
        create_room(admin, second, name="Second")
    ctx = _context(browser, viewport={"width": 1300, "height": 900})
    page = ctx.new_page()
    sign_in(page, qm)
    _card(page, second).wait_for(timeout=10_000)
    # the first Tab offers Skip to rooms
    page.locator("body").focus()
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.textContent") == "Skip to rooms"
    # skip past a room: its first stop, Enter moves to the next card
    skip = _card(page, first).locator(".skip-room")
    skip.focus()
    assert skip.inner_text() == "Skip past First to the next room"
    page.keyboard.press("Enter")
    order = page.evaluate("() => [...document.querySelectorAll('article.card')].map(n => n.dataset.room)")
    nxt = order[order.index(first) + 1] if order.index(first) + 1 < len(order) else None
    active = page.evaluate("() => document.activeElement.closest('article')?.dataset.room || document.activeElement.id")
    assert active == (nxt or "chart-h")
    # the Console menu: Enter opens, arrows wrap, Escape returns to the button
    page.locator("#menu-btn").focus()
    page.keyboard.press("Enter")
    assert page.evaluate("() => document.activeElement.textContent") == "Reports"
    page.keyboard.press("ArrowUp")
    assert page.evaluate("() => document.activeElement.textContent") == "Sign out"
    page.keyboard.press("Home")
    assert page.evaluate("() => document.activeElement.textContent") == "Reports"
    page.keyboard.press("Escape")
    assert page.evaluate("() => document.activeElement.id") == "menu-btn"
    assert page.locator("#menu").is_hidden()
    # Tab leaves the menu and closes it rather than cycling inside
    page.keyboard.press("Enter")
    assert page.locator("#menu").is_visible()
    page.keyboard.press("Tab")
    page.locator("#menu").wait_for(state="hidden", timeout=5_000)
    assert page.evaluate("() => !document.activeElement.closest('#menu')")
    page.locator("#menu-btn").focus()
    # a confirm opened inside a panel: the first Escape returns to the panel, the second to the menu button
    with qm.admin() as admin:
        admin.post("/api/admin/operators", json={"name": "Day ops", "role": "operator"}).raise_for_status()
    page.locator("#menu-btn").click()
    page.get_by_role("menuitem", name="Access").click()
    revoke = page.locator("#dlg-access").get_by_role("button", name="Revoke", exact=True).first
    revoke.click()
    page.locator("#dlg-confirm[open]").wait_for(timeout=5_000)
    page.keyboard.press("Escape")
    _focus_is(page, "document.activeElement.textContent", "Revoke")
    assert page.evaluate("() => !!document.activeElement.closest('#dlg-access')")
    page.keyboard.press("Escape")
    _focus_is(page, "document.activeElement.id", "menu-btn")
    # a dialog whose room was deleted meanwhile hands focus to the room list, never to nothing
    _card(page, second).get_by_role("button", name="Edit").click()
    page.locator("#dlg-editor[open]").wait_for(timeout=5_000)
    with qm.admin() as admin:
        admin.delete(f"/api/admin/rooms/{second}").raise_for_status()
    _card(page, second).wait_for(state="detached", timeout=10_000)
    page.keyboard.press("Escape")
    _focus_is(page, "document.activeElement.id", "rooms-h")
    # sign out from the menu: the session is revoked and the sign-in screen is back
    page.locator("#menu-btn").focus()
    page.keyboard.press("ArrowDown")
    page.keyboard.press("End")
    page.keyboard.press("Enter")
    page.locator("#signin-key").wait_for(timeout=10_000)
    page.reload()
    page.locator("#signin-key").wait_for(timeout=10_000)  # the cookie is gone: still signed out
    ctx.close()


def test_viewer_key_sees_no_controls(browser: Any, qm: Any) -> None:
    with qm.admin() as admin:
        room = unique_id("vw")
        create_room(admin, room)
        key = admin.post("/api/admin/operators", json={"name": "Watcher", "role": "viewer"}).json()["key"]
    ctx = _context(browser)
    page = ctx.new_page()
    page.goto(f"{qm.base_url}/")
    page.locator("#signin-key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    _card(page, room).wait_for(timeout=10_000)
    assert "viewer" in page.locator("#who").inner_text()
    assert page.get_by_role("slider").count() == 0
    for name in ("Pause", "Purge", "Flush", "Delete", "+ New room", "Share monitor"):
        assert page.get_by_role("button", name=name, exact=True).count() == 0, name
    # a viewer is on the team: the drill-down is there, read-only (no Eject)
    with qm.client() as c:
        ref = join(c, room).json()["ref"]
    _card(page, room).get_by_role("button", name="Visitors").click()
    page.locator("#vis-q").fill(ref)
    page.locator("#vis-q").press("Enter")
    page.locator("#dlg-visitor").get_by_text("Position").wait_for(timeout=10_000)
    assert page.locator("#vis-eject").count() == 0
    # the room is deleted and created again: the caller's Ref names the earlier generation
    with qm.admin() as admin:
        admin.delete(f"/api/admin/rooms/{room}").raise_for_status()
        create_room(admin, room)
    page.locator("#vis-q").press("Enter")
    page.locator("#dlg-visitor").get_by_text("earlier generation").wait_for(timeout=10_000)
    ctx.close()


# The browser's own Notification, with every title it is asked to show kept in window.__qmNotes for the test to read.
NOTIFICATIONS_SEEN = """(() => {
  const Real = window.Notification, seen = [];
  window.__qmNotes = seen;
  class Recorded extends Real { constructor(title, options) { seen.push(title); super(title, options); } }
  Object.defineProperty(Recorded, "permission", { get: () => Real.permission });
  Recorded.requestPermission = (...args) => Real.requestPermission(...args);
  window.Notification = Recorded;
})()"""


def _panel(page: Any, dialog: str) -> Any:
    """An opened panel once its content has loaded (it opens on a "Loading…" line)."""
    dlg = page.locator(f"#{dialog}[open]")
    dlg.wait_for(timeout=10_000)
    page.wait_for_function(
        "(sel) => { const d = document.querySelector(sel); return d && !d.textContent.includes('Loading…'); }",
        arg=f"#{dialog}",
        timeout=10_000,
    )
    return dlg


def test_room_states_site_down_panels_dry_run_and_a_restart(browser: Any, artifacts: Path) -> None:
    srv = start_server({"PROXY_ALLOW_PRIVATE": "1"})
    again: Any = None
    try:
        public = f"http://localhost:{srv.port}"
        launch, held, moving, site = unique_id("launch"), unique_id("held"), unique_id("moving"), unique_id("site")
        with srv.admin() as admin:
            create_room(admin, launch, name="Launch")
            opens = time.time() + 4 * 60 + 30
            when = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(opens))
            admin.post(f"/api/admin/rooms/{launch}/schedule", json={"opensAt": when}).raise_for_status()
            create_room(admin, held, name="Held line", ratePerMinute=30)
            # one a minute: its line is still moving (not empty) however long the console takes to come up
            create_room(admin, moving, name="Moving line", ratePerMinute=1, maxConcurrent=50)
            for room in (held, held, moving, moving, moving):
                with srv.client() as c:
                    join(c, room).raise_for_status()
            admin.post(f"/api/admin/rooms/{held}/pause").raise_for_status()
            # an inline room whose site is not answering: nothing listens on its proxyOrigin
            dead = f"http://127.0.0.1:{free_port()}"
            body = {"id": site, "name": "Site", "targetUrl": public, "proxyOrigin": dead, "ratePerMinute": 600}
            admin.post("/api/admin/rooms", json=body).raise_for_status()
        visitor = browser.new_page()
        visitor.goto(f"{public}/shop")
        visitor.get_by_text("The site is not answering right now").wait_for(timeout=20_000)
        visitor.close()

        ctx = _context(browser, viewport={"width": 1360, "height": 1000})
        page = ctx.new_page()
        sign_in(page, srv)
        for room in (launch, held, moving, site):
            _card(page, room).wait_for(timeout=10_000)
        # one room is letting nobody through: the header leaves it out of the worst wait, and says so
        page.locator("#t-worst-note", has_text="excludes 1 at ∞").wait_for(timeout=30_000)
        held_est = _card(page, held).locator('[data-k="est"]')
        assert held_est.inner_text() == "∞" and "resume" in (held_est.get_attribute("title") or "")
        countdown = _card(page, launch).locator('[data-k="countdown"]')
        assert countdown.inner_text().startswith("Doors open in 4m")
        assert "soon" in (countdown.get_attribute("class") or "")  # amber inside the last five minutes
        # the site behind the inline room is down: the card, its chip and the header all say so
        card = _card(page, site)
        card.locator('[data-k="site"]', has_text="site · failing").wait_for(timeout=15_000)
        line = card.locator('[data-k="site-line"]').inner_text()
        assert re.fullmatch(r"Site not answering — \d+ visitors? got an error page", line), line
        assert page.locator("#incident").inner_text().startswith("⚠ origin down — Site")
        page.wait_for_function("() => document.querySelector('[data-k=countdown]:not([hidden])')")
        page.screenshot(path=str(artifacts / "console-states.png"), full_page=True)
        found = violations(page)
        assert not found, describe(found)
        page.emulate_media(color_scheme="dark")
        page.screenshot(path=str(artifacts / "console-states-dark.png"), full_page=True)
        found = violations(page)
        assert not found, describe(found)
        page.emulate_media(color_scheme="light")

        # Diagnostics: the inline rows, origin errors per room and failure, disconnects apart
        page.get_by_role("button", name="Diagnostics", exact=True).click()
        dlg = _panel(page, "dlg-diagnostics")
        text = dlg.inner_text()
        assert "Inline rooms" in text and "gated" in text and f"{site}:" in text and "Visitor disconnects" in text, text
        assert "join off · check off · waiting page off" in text, text  # 0 is "no limit", not "0/min"
        page.screenshot(path=str(artifacts / "console-diagnostics.png"))
        found = violations(page)
        assert not found, describe(found)
        page.keyboard.press("Escape")

        # the URL-targeting dry run warns about an origin the room will not return visitors to, before saving
        _card(page, moving).get_by_role("button", name="Edit").click()
        page.locator("#dlg-editor[open]").wait_for(timeout=5_000)
        warnings = page.locator("#dlg-editor .warn-list li")
        assert warnings.count() == 0
        page.get_by_role("button", name="+ Add rule").click()
        rule = page.locator("#dlg-editor .rule-row input").last
        rule.fill("https://other.example/checkout*")
        rule.press("Tab")
        warnings.first.wait_for(timeout=5_000)
        assert "https://other.example" in warnings.first.inner_text()
        page.locator("#ed-dry").fill("https://shop.example/checkout/1")
        page.get_by_role("button", name="Test", exact=True).click()
        page.locator("#dlg-editor .result:not([hidden])").wait_for(timeout=5_000)
        assert warnings.count() == 1  # shop.example is the target's own origin
        page.locator("#ed-returnOrigins").fill("https://other.example")
        page.locator("#ed-returnOrigins").press("Tab")
        page.wait_for_function("() => document.querySelectorAll('#dlg-editor .warn-list li').length === 0")
        page.locator("#ed-returnOrigins").fill("")
        page.locator("#ed-returnOrigins").press("Tab")
        warnings.first.wait_for(timeout=5_000)
        page.locator("#dlg-editor .warn-list").scroll_into_view_if_needed()
        page.screenshot(path=str(artifacts / "console-dry-run.png"))
        found = violations(page)
        assert not found, describe(found)
        page.keyboard.press("Escape")

        # Reports says plainly that STORE=memory keeps no history; Access lists who can sign in
        page.locator("#menu-btn").click()
        page.get_by_role("menuitem", name="Reports").click()
        dlg = _panel(page, "dlg-reports")
        assert "STORE=memory keeps no history past a restart" in dlg.inner_text()
        page.screenshot(path=str(artifacts / "console-reports.png"))
        found = violations(page)
        assert not found, describe(found)
        page.keyboard.press("Escape")
        page.locator("#menu-btn").click()
        page.get_by_role("menuitem", name="Access").click()
        _panel(page, "dlg-access")
        page.screenshot(path=str(artifacts / "console-access.png"))
        found = violations(page)
        assert not found, describe(found)
        page.keyboard.press("Escape")

        # the server restarts: the console shows it is reconnecting, comes back by itself and says so
        srv.stop()
        page.locator("#live.off").wait_for(timeout=15_000)
        assert page.locator("#live-text").inner_text() == "Reconnecting…"
        again = Server(srv.argv, srv.env, srv.port, tempfile.mkdtemp(prefix="qm-browser-"))
        again.wait_listening()
        page.locator("#live.on").wait_for(timeout=30_000)
        page.locator(".toast", has_text="The server restarted.").wait_for(timeout=10_000)
        # STORE=memory: the rooms are gone, and the chart says so rather than keep the old room's lines
        page.locator("#chart-empty", has_text="No rooms to chart yet.").wait_for(timeout=10_000)
        assert page.locator("#chart-box canvas").count() == 0
        assert page.locator("#chart-csv").is_hidden() and page.locator("#chart-room").is_hidden()
        page.screenshot(path=str(artifacts / "console-restarted.png"))
        # and the same on a first load of a server with no room at all
        page.reload()
        page.locator("#live.on").wait_for(timeout=10_000)
        page.locator("#chart-empty", has_text="No rooms to chart yet.").wait_for(timeout=10_000)
        assert page.locator("#chart-csv").is_hidden() and page.locator("#legend").is_hidden()
        # a new room has at most one sample: no lone dot, a line saying what is coming
        with again.admin() as admin:
            create_room(admin, unique_id("fresh"), name="Fresh")
        page.locator("#chart-room option").first.wait_for(state="attached", timeout=10_000)
        page.wait_for_function("() => !document.querySelector('#chart-empty').hidden")
        if page.locator("#chart-box canvas").count() == 0:
            assert page.locator("#chart-empty").is_visible()
        page.locator("#chart-box canvas").first.wait_for(timeout=40_000)  # two samples: the lines are drawn
        assert page.locator("#chart-empty").is_hidden()
        page.screenshot(path=str(artifacts / "console-fresh-room.png"))
        ctx.close()
    finally:
        srv.stop()
        if again is not None:
            again.stop()


def test_insecure_config_badge_opens_diagnostics_and_is_kept_from_a_monitor_link(browser: Any, artifacts: Path) -> None:
    srv = start_server({"ADMIN_KEY": "qm-dev-admin-key"})  # the documented default: the badge must say so
    try:
        room = unique_id("dial")
        with srv.admin() as admin:
            create_room(admin, room, name="Dial", ratePerMinute=30)
            stuck = unique_id("stuck")
            create_room(admin, stuck, name="Stuck", ratePerMinute=0)
            with srv.client() as c:
                join(c, stuck).raise_for_status()
            link = admin.post("/api/admin/monitor-links").json()["url"]
        ctx = _context(browser, viewport={"width": 1360, "height": 900})
        page = ctx.new_page()
        sign_in(page, srv)
        badge = page.locator("#insecure")
        badge.wait_for(timeout=10_000)
        assert "ADMIN_KEY is the default" in (badge.get_attribute("title") or "")
        # the only room with a line lets nobody through: the header's number is ∞ itself, and says why
        page.locator("#t-worst-note", has_text="1 not admitting").wait_for(timeout=10_000)
        assert page.locator("#t-worst").inner_text() == "∞"
        est = _card(page, stuck).locator('[data-k="est"]')
        assert est.inner_text() == "∞" and "raise the rate" in (est.get_attribute("title") or "")
        # the rest of the dial's keys: PageUp/PageDown by 50, Shift+← by 1
        dial = _card(page, room).get_by_role("slider")
        dial.focus()
        for key in ("PageUp", "PageUp", "PageDown", "Shift+ArrowLeft"):
            dial.press(key)
        with srv.admin() as admin:
            wait_until(lambda: _room(admin, room)["ratePerMinute"] == 79, what="rate 30 + 50 + 50 - 50 - 1")
        badge.click()
        _panel(page, "dlg-diagnostics")
        page.screenshot(path=str(artifacts / "console-insecure.png"))
        found = violations(page)
        assert not found, describe(found)
        page.keyboard.press("Escape")
        _focus_is(page, "document.activeElement.id", "insecure")
        ctx.close()
        # whoever a monitor link was forwarded to is not told the key is the default
        monitor = _context(browser)
        mpage = monitor.new_page()
        mpage.goto(link if link.startswith("http") else f"{srv.base_url}/{link.lstrip('/')}")
        _card(mpage, room).wait_for(timeout=10_000)
        # the badge is labelled once the health read has landed: it must still be hidden then
        mpage.wait_for_function("() => document.querySelector('#insecure').hasAttribute('aria-label')")
        assert mpage.locator("#insecure").is_hidden()
        monitor.close()
    finally:
        srv.stop()


def test_chart_splits_the_rate_scale_toggles_series_and_lists_collapsed_marks(
    browser: Any, qm: Any, artifacts: Path
) -> None:
    room = unique_id("surge")
    with qm.admin() as admin:
        create_room(admin, room, name="Surge", ratePerMinute=1, queueMaxPerIp=None)
        tickets = []
        for _ in range(30):  # thirty visitors, each with a client (cookies) of their own
            with qm.client() as c:
                tickets.append(join(c, room).json()["ticket"])
    ctx = _context(browser, viewport={"width": 1360, "height": 900}, permissions=["notifications"])
    ctx.add_init_script(NOTIFICATIONS_SEEN)
    page = ctx.new_page()
    sign_in(page, qm)
    # Alerts: the surge raises a desktop notification in this tab once armed
    alerts = page.get_by_role("button", name="Alerts")
    alerts.click()
    page.wait_for_function("() => document.querySelector('#alerts-btn').getAttribute('aria-pressed') === 'true'")
    page.wait_for_function("() => window.__qmNotes.some((t) => t === 'Surge: Surge')", timeout=10_000)
    _card(page, room).get_by_role("button", name="Chart").click()
    # a surge of joins against a trickle of passes: each rate line gets its own scale, and the legend says so
    page.locator("#chart-box canvas").first.wait_for(timeout=40_000)
    legend = page.locator("#legend")
    legend.get_by_text("(own scale)").first.wait_for(timeout=20_000)
    assert legend.get_by_text("(own scale)").count() == 2
    # an eject and a pause in the same moment: one mark on the timeline, both listed on hover
    with qm.admin() as admin:
        admin.post(f"/api/admin/rooms/{room}/eject", json={"ticket": tickets[-1]}).raise_for_status()
        admin.post(f"/api/admin/rooms/{room}/pause").raise_for_status()

        def both() -> bool:
            kinds = {m["kind"] for m in admin.get(f"/api/admin/series/{room}").json()["marks"]}
            return {"eject", "pause"} <= kinds

        wait_until(both, timeout=15, what="the eject and pause marks")
    # redraw now rather than at the next 10 s refresh
    with page.expect_response(lambda r: f"/api/admin/series/{room}" in r.url):
        page.locator("#chart-range").dispatch_event("change")
    page.wait_for_function("() => !!document.querySelector('#chart-box canvas')")
    over = page.locator("#chart-box .u-over")
    tip = page.locator("#mark-tip")

    def sweep() -> list[str]:
        """Hover from the right edge leftwards (the marks are at "now") and collect the tips shown. The chart's
        place is read each time: a card above it can grow meanwhile (a health read adding a site line)."""
        tips: list[str] = []
        over.scroll_into_view_if_needed()
        box = over.bounding_box()
        assert box is not None
        for dx in range(0, 200, 2):
            page.mouse.move(box["x"] + box["width"] - 1 - dx, box["y"] + box["height"] / 2)
            if tip.is_visible():
                tips.append(tip.inner_text())
                if "ejected" in tips[-1] and "paused" in tips[-1]:
                    break
        return tips

    # the response is in before the page has parsed it and redrawn: sweep again until the redraw is in
    tips = wait_until(lambda: (t := sweep()) and "ejected" in t[-1] and "paused" in t[-1] and t, timeout=15)
    # two seconds apart at most (the pause is seen at the next sample): one group, both listed
    assert "visitor #" in tips[-1] and "ejected" in tips[-1] and "paused" in tips[-1], tips
    page.screenshot(path=str(artifacts / "console-chart-marks.png"))
    # Export CSV downloads the retained series of the room on the chart, percentiles included
    with page.expect_download() as download:
        page.locator("#chart-csv").click()
    assert download.value.suggested_filename == f"{room}-10s.csv"
    head = Path(download.value.path()).read_text(encoding="utf-8").splitlines()[0].split(",")
    assert {"time", "depth", "joinsPerMin", "passesPerMin", "waitP50Sec", "waitP90Sec"} <= set(head), head
    # the legend toggles a series off and on
    depth = legend.get_by_role("button", name="queue depth")
    assert depth.get_attribute("aria-pressed") == "true"
    depth.click()
    assert legend.get_by_role("button", name="queue depth").get_attribute("aria-pressed") == "false"
    found = violations(page)
    assert not found, describe(found)
    ctx.close()
