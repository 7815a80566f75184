"""Diagnostics → Alerting in a real browser, against a real server paging a real webhook receiver, and the room
card's AUTO · SELF once threshold activation has put a queue up by itself."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from axe import describe, violations
from browsing import sign_in
from customer_site import Site
from harness import Server, create_room, free_port, join, start_server, unique_id, wait_until
from receiver import Receiver

# the alert frames quickly, a condition fires after 1 s, and nothing re-pages during a test
FAST = {"ALERT_EVERY_MS": "200", "ALERT_HOLD_SEC": "1", "ALERT_REPEAT_SEC": "3600"}


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    """A real webhook receiver process that keeps every body POSTed to it."""
    r = Receiver(free_port())
    r.start()
    try:
        yield r
    finally:
        r.close()


@pytest.fixture(scope="module")
def paging(receiver: Receiver) -> Iterator[Server]:
    """A server whose alert frames page the receiver."""
    srv = start_server({"ALERT_WEBHOOK_URL": receiver.url, "ALERT_ALLOW_PRIVATE": "1", **FAST})
    try:
        yield srv
    finally:
        srv.stop()


def _context(browser: Any, **kwargs: Any) -> Any:
    # axe is injected as a script tag, which the console's CSP (script-src 'self') would refuse
    return browser.new_context(bypass_csp=True, viewport={"width": 1360, "height": 1000}, **kwargs)


def _frozen_room(srv: Server, name: str) -> str:
    """A paused room with somebody waiting: queue_frozen (its targetUrl is a reserved example name, which is
    not probed; rows are picked by room and event all the same)."""
    room = unique_id("frozen")
    with srv.admin() as admin, srv.client() as visitor:
        create_room(admin, room, name=name, state="paused")
        join(visitor, room).raise_for_status()
    return room


def _alerting(page: Any, dialog: str) -> Any:
    """The Alerting section of an open dialog, once its first read has landed."""
    section = page.locator(f"#{dialog}[open] section.alerting")
    section.wait_for(timeout=10_000)
    section.locator("h4", has_text="Firing now").wait_for(timeout=10_000)
    return section


def _both_themes(page: Any, artifacts: Path, name: str) -> None:
    """A screenshot in light and in dark, each checked by axe."""
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        page.screenshot(path=str(artifacts / f"{name}-{scheme}.png"))
        found = violations(page)
        assert not found, describe(found)
    page.emulate_media(color_scheme="light")


def test_firing_now_lists_the_condition_and_a_test_alert_is_delivered(
    browser: Any, paging: Server, receiver: Receiver, artifacts: Path
) -> None:
    room = _frozen_room(paging, "Spring drop")
    # the server pages it on its own clock, with nobody looking
    wait_until(lambda: receiver.got(event="queue_frozen", roomId=room, status="firing"), timeout=15, what="the page")

    ctx = _context(browser)
    page = ctx.new_page()
    sign_in(page, paging)
    page.get_by_role("button", name="Diagnostics", exact=True).click()
    section = _alerting(page, "dlg-diagnostics")
    firing = section.locator("ul[aria-labelledby='alerting-firing-h'] li", has_text=room).filter(
        has_text="queue_frozen"
    )
    firing.wait_for(timeout=10_000)
    text = firing.inner_text()
    assert "queue_frozen" in text and "Spring drop" in text and "warning" in text.lower(), text
    assert "1 waiting and the room is paused" in text and "since" in text and "paged" in text, text
    config = section.locator("dl.kv").inner_text()
    assert "http://127.0.0.1:" in config and "the leader" in config and "every 200 ms" in config, config
    assert "nobody is being paged" not in section.inner_text()
    # the page the receiver got is in the delivery log, with its HTTP result
    deliveries = section.locator("table[aria-labelledby='alerting-deliveries-h'] tbody tr")
    row = deliveries.filter(has_text=room).filter(has_text="queue_frozen").first
    row.wait_for(timeout=10_000)
    assert "firing" in row.inner_text() and "HTTP 200" in row.inner_text()

    # Send test alert: the receiver gets the test event, the panel says it was delivered and lists it
    button = section.get_by_role("button", name="Send test alert")
    assert button.is_enabled()
    before = len(receiver.got(event="test"))
    button.click()
    result = section.locator("#alert-test-result")
    page.wait_for_function("() => /delivered|not sent/.test(document.querySelector('#alert-test-result').textContent)")
    assert result.inner_text().startswith("Test alert delivered at") and "HTTP 200" in result.inner_text()
    assert result.get_attribute("role") == "status"
    wait_until(lambda: len(receiver.got(event="test")) > before, what="the test body at the receiver")
    body = receiver.got(event="test")[-1]
    assert body["source"] == "queue-manager" and body["status"] == "firing", body
    assert body["text"].startswith("[queue-manager] INFO: Test alert from "), body
    deliveries.filter(has=page.locator(".badge", has_text="test")).first.wait_for(timeout=10_000)
    page.locator("#dlg-diagnostics .dlg-body").evaluate("(n) => n.scrollTo(0, 0)")
    _both_themes(page, artifacts, "alerting-firing")

    # resumed, the condition clears: the receiver gets its resolved, and Firing now no longer lists it
    with paging.admin() as admin:
        admin.post(f"/api/admin/rooms/{room}/resume").raise_for_status()
    wait_until(lambda: receiver.got(event="queue_frozen", roomId=room, status="resolved"), timeout=15, what="resolved")
    firing.wait_for(state="detached", timeout=15_000)
    deliveries.filter(has_text=room).filter(has_text="queue_frozen").filter(has_text="resolved").first.wait_for(
        timeout=15_000
    )
    ctx.close()


def test_a_viewer_key_and_a_monitor_link_see_the_button_disabled_with_the_reason(
    browser: Any, paging: Server, receiver: Receiver, artifacts: Path
) -> None:
    room = _frozen_room(paging, "Watched drop")
    with paging.admin() as admin:
        key = admin.post("/api/admin/operators", json={"name": "v", "role": "viewer"}).json()["key"]
        link = admin.post("/api/admin/monitor-links").json()["url"]
    wait_until(lambda: receiver.got(event="queue_frozen", roomId=room), timeout=15, what="the page")

    ctx = _context(browser)
    page = ctx.new_page()
    sign_in(page, paging, key)
    assert "viewer" in page.locator("#who").inner_text()
    page.get_by_role("button", name="Diagnostics", exact=True).click()
    section = _alerting(page, "dlg-diagnostics")
    section.locator("li", has_text=room).filter(has_text="queue_frozen").wait_for(timeout=10_000)
    button = section.get_by_role("button", name="Send test alert")
    assert button.is_disabled()
    why = section.locator("#alert-test-why").inner_text()
    assert "read-only" in why and "operator or owner" in why, why
    assert button.get_attribute("aria-describedby") == "alert-test-why"
    assert "http://127.0.0.1:" in section.locator("dl.kv").inner_text()  # a viewer is on the team
    page.screenshot(path=str(artifacts / "alerting-viewer.png"))
    ctx.close()

    # a monitor link has Security and Reports in its bar: the panel is at the top of Security
    monitor = _context(browser)
    mpage = monitor.new_page()
    mpage.goto(link if link.startswith("http") else f"{paging.base_url}/{link.lstrip('/')}")
    mpage.locator("#live.on").wait_for(timeout=10_000)
    assert mpage.get_by_role("button", name="Diagnostics", exact=True).count() == 0
    mpage.get_by_role("button", name="Security", exact=True).click()
    section = _alerting(mpage, "dlg-security")
    section.locator("li", has_text=room).filter(has_text="queue_frozen").wait_for(timeout=10_000)
    button = section.get_by_role("button", name="Send test alert")
    assert button.is_disabled()
    assert "monitor link is read-only" in section.locator("#alert-test-why").inner_text()
    config = section.locator("dl.kv").inner_text()
    assert "not shown to this credential" in config and receiver.url not in section.inner_text(), config
    _both_themes(mpage, artifacts, "alerting-monitor")
    monitor.close()


def test_without_a_webhook_the_panel_says_nobody_is_paged_and_the_button_is_inert(
    browser: Any, artifacts: Path
) -> None:
    # a long hold: the condition is listed under Holding, true now and not yet fired
    srv = start_server({"ALERT_WEBHOOK_URL": None, "ALERT_EVERY_MS": "200", "ALERT_HOLD_SEC": "3600"})
    try:
        room = _frozen_room(srv, "Quiet drop")
        with srv.admin() as admin:
            refused = admin.post("/api/admin/alerts")
            assert refused.status_code == 409 and refused.json()["code"] == "webhook_not_configured"
        ctx = _context(browser)
        page = ctx.new_page()
        sign_in(page, srv)
        page.get_by_role("button", name="Diagnostics", exact=True).click()
        section = _alerting(page, "dlg-diagnostics")
        holding = section.locator("ul[aria-labelledby='alerting-holding-h'] li", has_text=room).filter(
            has_text="queue_frozen"
        )
        holding.wait_for(timeout=15_000)
        assert "queue_frozen" in holding.inner_text() and "fires at" in holding.inner_text()
        text = section.inner_text()
        assert "nobody is being paged" in text, text
        assert "Nothing is firing." in text and "None: no webhook is set." in text, text
        assert "no webhook set" in section.locator("dl.kv").inner_text()
        button = section.get_by_role("button", name="Send test alert")
        assert button.is_visible() and button.is_disabled()
        why = section.locator("#alert-test-why").inner_text()
        assert "ALERT_WEBHOOK_URL" in why and "nobody is paged" in why, why
        _both_themes(page, artifacts, "alerting-no-webhook")
        ctx.close()
    finally:
        srv.stop()


def test_a_queue_threshold_activation_put_up_reads_auto_self(browser: Any, paging: Server, artifacts: Path) -> None:
    room = unique_id("spike")
    with paging.admin() as admin:
        armed = {"enabled": True, "joinsPerMin": 5, "sustainSec": 1, "releaseAfterSec": 300}
        create_room(admin, room, name="Night drop", state="bypass", autoActivate=armed, queueMaxPerIp=None)
    ctx = _context(browser)
    page = ctx.new_page()
    sign_in(page, paging)
    card = page.locator(f'article.card[data-room="{room}"]')
    auto = card.locator('[data-k="auto"]')
    auto.get_by_text("AUTO ≥5/MIN").wait_for(timeout=10_000)
    assert "armed" in (auto.get_attribute("title") or "")
    # a spike of arrivals while the room is in bypass: the machine puts the queue up by itself
    for _ in range(20):
        with paging.client() as visitor:
            join(visitor, room).raise_for_status()
    with paging.admin() as admin:
        wait_until(
            lambda: admin.get(f"/api/admin/rooms/{room}").json()["room"]["state"] == "active",
            timeout=20,
            what="threshold activation to put the queue up (arrivals counted while in bypass)",
        )
    auto.get_by_text("AUTO · SELF").wait_for(timeout=10_000)
    assert "badge-warn" in (auto.get_attribute("class") or "")
    title = auto.get_attribute("title") or ""
    assert title.startswith("Threshold activation put this queue up by itself at ") and "joins/min" in title, title
    card.locator('[data-k="state"]', has_text="active").wait_for(timeout=10_000)
    card.scroll_into_view_if_needed()
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        card.screenshot(path=str(artifacts / f"card-auto-self-{scheme}.png"))
        found = violations(page)
        assert not found, describe(found)
    page.emulate_media(color_scheme="light")
    # the flip is a mark of its own on the room's chart, its note on hover
    with paging.admin() as admin:

        def threshold_mark() -> list[dict[str, Any]]:
            marks: list[dict[str, Any]] = admin.get(f"/api/admin/series/{room}").json()["marks"]
            return [m for m in marks if m["kind"] == "threshold"]

        note = wait_until(threshold_mark, timeout=15, what="the threshold mark")[0]["note"]
    assert note.startswith("threshold activation: bypass → active at "), note
    card.get_by_role("button", name="Chart").click()
    page.locator("#chart-box canvas").first.wait_for(timeout=40_000)
    over = page.locator("#chart-box .u-over")
    tip = page.locator("#mark-tip")

    def hover_tip() -> str | None:
        with page.expect_response(lambda r: f"/api/admin/series/{room}" in r.url):
            page.locator("#chart-range").dispatch_event("change")
        page.wait_for_function("() => !!document.querySelector('#chart-box canvas')")
        box = over.bounding_box()
        assert box is not None
        for dx in range(0, 400, 2):
            page.mouse.move(box["x"] + box["width"] - 1 - dx, box["y"] + box["height"] / 2)
            if tip.is_visible() and "threshold activation" in tip.inner_text():
                return str(tip.inner_text())
        return None

    assert "bypass → active" in wait_until(hover_tip, timeout=20, what="the threshold mark's tooltip")
    page.screenshot(path=str(artifacts / "chart-threshold-mark.png"))
    ctx.close()


def test_a_snippet_rooms_site_chip_follows_its_target_probe(browser: Any, artifacts: Path) -> None:
    site = Site()
    env = {**FAST, "PROXY_ALLOW_PRIVATE": "1", "TARGET_PROBE_EVERY_MS": "1000"}
    srv = start_server(env)
    try:
        room = unique_id("shop")
        with srv.admin() as admin:
            create_room(admin, room, name="Shop", targetUrl=site.url)
        ctx = _context(browser)
        page = ctx.new_page()
        sign_in(page, srv)
        card = page.locator(f'article.card[data-room="{room}"]')
        chip = card.locator('[data-k="site"]')
        chip.get_by_text("site · ok").wait_for(timeout=30_000)
        site.status = 503
        chip.get_by_text("site · failing").wait_for(timeout=30_000)
        line = card.locator('[data-k="site-line"]').inner_text()
        assert "Site not answering" in line and "503" in line, line
        card.screenshot(path=str(artifacts / "card-site-failing.png"))
        site.status = 200
        chip.get_by_text("site · ok").wait_for(timeout=30_000)
        ctx.close()
    finally:
        srv.stop()
        site.close()


def test_an_example_target_reads_not_probed_and_a_private_one_refused_with_the_way_out(
    browser: Any, artifacts: Path
) -> None:
    """The README's first room (https://shop.example, a name reserved never to resolve) is not probed: no red
    chip, no "origin down", Diagnostics says "not probed". A site on this machine without PROXY_ALLOW_PRIVATE
    reads "refused" with the setting that allows it, never "failing"."""
    site = Site()
    srv = start_server({**FAST, "PROXY_ALLOW_PRIVATE": "0", "TARGET_PROBE_EVERY_MS": "1000"})
    try:
        example, private = unique_id("readme"), unique_id("local")
        with srv.admin() as admin:
            create_room(admin, example, name="Readme shop", targetUrl="https://shop.example")
            create_room(admin, private, name="Local shop", targetUrl=site.url)

        def both_reported() -> bool:
            with srv.admin() as admin:
                targets = admin.get("/api/admin/health").json()["targets"]
            return example in targets and private in targets

        wait_until(both_reported, timeout=30, what="both targets in the report")
        ctx = _context(browser)
        page = ctx.new_page()
        sign_in(page, srv)
        card = page.locator(f'article.card[data-room="{example}"]')
        card.wait_for(timeout=10_000)
        assert card.locator('[data-k="site"]').is_hidden()  # no verdict on a site that was not probed
        assert page.locator("#incident").is_hidden()
        page.get_by_role("button", name="Diagnostics", exact=True).click()
        section = _alerting(page, "dlg-diagnostics")
        rows = section.locator("ul[aria-labelledby='alerting-targets-h'] li")
        readme = rows.filter(has_text="Readme shop")
        readme.wait_for(timeout=10_000)
        assert readme.locator(".badge").text_content() == "not probed"
        assert "shop.example is a name reserved for examples" in readme.inner_text()
        local = rows.filter(has_text="Local shop")
        assert local.locator(".badge").text_content() == "refused"
        text = local.inner_text()
        assert "set PROXY_ALLOW_PRIVATE=1" in text and "TARGET_PROBE=0" in text, text
        assert site.requests == []  # never contacted
        section.locator("h4", has_text="Target probes").scroll_into_view_if_needed()
        page.screenshot(path=str(artifacts / "alerting-targets-not-probed.png"))
        found = violations(page)
        assert not found, describe(found)
        ctx.close()
    finally:
        srv.stop()
        site.close()
