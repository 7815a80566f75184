"""The waiting page and the outage pages in a real browser: languages, live updates, causes, the countdown,
the hand-off through the permitted return URL, no request to any other origin, and axe (WCAG 2.1 AA)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest
from axe import describe, violations
from browsing import headline
from demo_site import serve_site
from harness import create_room, join, start_server, unique_id

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1100, "height": 820}


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _recorded(page: Any) -> list[str]:
    seen: list[str] = []
    page.on("request", lambda r: seen.append(r.url))
    return seen


def _web_requests(urls: list[str]) -> list[str]:
    return [u for u in urls if urlsplit(u).scheme in ("http", "https", "ws", "wss")]


def _assert_axe_clean(page: Any, what: str) -> None:
    found = violations(page)
    assert not found, f"axe (WCAG 2.1 AA) on {what}:\n{describe(found)}"


def test_a_visitor_waits_switches_language_sees_the_causes_and_is_let_through(
    browser: Any, qm: Any, artifacts: Path
) -> None:
    room = unique_id("journey")
    with serve_site(qm.base_url, room) as site, qm.admin() as admin, qm.client() as other:
        create_room(admin, room, targetUrl=site, ratePerMinute=0, maxConcurrent=1, name="Winter release")
        join(other, room).raise_for_status()  # ticket 1: somebody is already ahead
        context = browser.new_context(viewport=DESKTOP, bypass_csp=True, locale="en-US")
        page = context.new_page()
        requests = _recorded(page)
        page.goto(f"{qm.base_url}/w/{room}?qm_return={quote(site + '/checkout', safe='')}")

        # waiting: position, people ahead, an honest estimate, the Ref and the ticket number
        page.wait_for_function("document.querySelector('#headline .num')?.textContent === '2'")
        assert headline(page) == "You are number 2 in line"
        assert page.locator("#ahead").inner_text() == "1 person"
        assert page.locator("#eta").inner_text() == "No estimate right now"  # rate 0: the arithmetic says ∞
        ref = page.locator("#ref").inner_text()
        assert re.fullmatch(r"[A-Z0-9]{4,12}", ref)
        assert page.locator("#ticket").inner_text() == "2"
        page.get_by_text("Live updates on").wait_for()
        assert page.locator("#live").get_attribute("aria-live") == "polite"
        page.screenshot(path=str(artifacts / "waiting-en-desktop.png"), full_page=True)
        _assert_axe_clean(page, "the waiting page (waiting, English)")

        # the picker: Thai at once, persisted in qm_lang, and still Thai (server-rendered) after a reload
        page.select_option("#lang", "th")
        page.wait_for_function("document.documentElement.lang === 'th'")
        assert headline(page) == "คุณอยู่ลำดับที่ 2 ในคิว"
        assert page.locator("#eta").inner_text() == "ยังประมาณเวลาไม่ได้"
        cookies = {c["name"]: c["value"] for c in context.cookies(qm.base_url)}
        assert cookies.get("qm_lang") == "th"
        page.reload()
        assert page.locator("html").get_attribute("lang") == "th"
        assert page.locator("#lang").input_value() == "th"
        page.wait_for_function("document.querySelector('#headline .num')?.textContent === '2'")
        assert page.locator("#ref").inner_text() == ref, "the reload lost the place"
        assert "ห้องรอคิว" in page.title()
        page.screenshot(path=str(artifacts / "waiting-th-desktop.png"), full_page=True)
        _assert_axe_clean(page, "the waiting page (waiting, Thai)")
        page.select_option("#lang", "ja")
        page.wait_for_function("document.documentElement.lang === 'ja'")
        assert headline(page) == "あなたの順番は 2 番目です"
        page.screenshot(path=str(artifacts / "waiting-ja-desktop.png"), full_page=True)
        page.select_option("#lang", "en")
        page.wait_for_function("document.documentElement.lang === 'en'")

        # paused is named, and the place is kept
        assert admin.post(f"/api/admin/rooms/{room}/pause").status_code == 200
        page.get_by_text("The line is paused by the organiser. You keep your place.").wait_for()
        assert headline(page) == "You are number 2 in line"
        page.screenshot(path=str(artifacts / "waiting-paused-en.png"), full_page=True)
        _assert_axe_clean(page, "the waiting page (paused)")
        assert admin.post(f"/api/admin/rooms/{room}/resume").status_code == 200
        page.wait_for_function("document.querySelector('#notice').hidden")

        # put back by an operator: the cause is named, not a fresh arrival
        r = admin.post(f"/api/admin/rooms/{room}/eject", json={"ref": ref})
        assert r.status_code == 200, r.text
        page.get_by_text("An operator moved you to the back of the line.").wait_for()
        assert page.locator("#ticket").inner_text() == "2"
        page.screenshot(path=str(artifacts / "waiting-ejected-en.png"), full_page=True)
        _assert_axe_clean(page, "the waiting page (ejected)")

        # the operator opens the rate: ticket 1 goes through and takes the one slot; the live stream says so
        other.get("/api/status", params={"roomId": room}).raise_for_status()  # ticket 1's holder is present
        arrived = len(requests)
        r = admin.post(f"/api/admin/rooms/{room}/rate", json={"ratePerMinute": 600})
        assert r.status_code == 200, r.text
        page.wait_for_function("document.querySelector('#headline .num')?.textContent === '1'")
        assert page.locator("#ahead").inner_text() == "Nobody: you are next"
        assert page.locator("#eta").inner_text() == "about 5 s"
        assert not [u for u in requests[arrived:] if "/api/status" in u], "the update came from polling, not live"

        # everything so far came from the queue's own origin
        before_handoff = _web_requests(requests)
        foreign = [u for u in before_handoff if _origin(u) != qm.base_url]
        assert not foreign, f"the waiting page asked another origin: {foreign}"
        assert any(u.endswith(".woff2") for u in before_handoff), "the page did not load its own fonts"

        # a slot frees up (the ceiling is lifted): the visitor is let through to the permitted return URL
        r = admin.post("/api/admin/rooms", json={"id": room, "maxConcurrent": None})
        assert r.status_code == 200, r.text
        page.wait_for_url(f"{site}/checkout*", timeout=15_000)
        page.get_by_text("admit=true").wait_for(timeout=10_000)
        assert {_origin(u) for u in _web_requests(requests)} <= {qm.base_url, site}
        context.close()


def test_the_turn_is_announced_before_the_hand_off(browser: Any, qm: Any, artifacts: Path) -> None:
    room = unique_id("turn")
    with serve_site(qm.base_url, room) as site, qm.admin() as admin:
        create_room(admin, room, targetUrl=site, ratePerMinute=600, name="Open doors")
        context = browser.new_context(viewport=DESKTOP, bypass_csp=True)
        held: list[str] = []

        def hold(route: Any) -> None:  # a 204 keeps the browser on the waiting page, to look at it
            held.append(route.request.url)
            route.fulfill(status=204)

        context.route(f"{site}/**", hold)
        page = context.new_page()
        with page.expect_request(lambda r: r.url.startswith(site), timeout=15_000):
            page.goto(f"{qm.base_url}/w/{room}?qm_return={quote(site + '/checkout', safe='')}")
        page.get_by_text("It’s your turn").wait_for()
        assert held and held[0].startswith(f"{site}/checkout?") and "qm_token=" in held[0]  # the permitted URL
        assert page.locator("#turn-link").get_attribute("href") == held[0]
        assert "Your pass is valid until" in page.locator("#pass-until").inner_text()
        page.screenshot(path=str(artifacts / "waiting-turn-en.png"), full_page=True)
        _assert_axe_clean(page, "the waiting page (your turn)")
        context.unroute(f"{site}/**")
        page.locator("#turn-link").click()  # the visitor whose browser stayed can follow the link
        page.wait_for_url(f"{site}/checkout*", timeout=15_000)
        context.close()


def test_phone_viewport_dark_mode_and_keyboard(browser: Any, qm: Any, artifacts: Path) -> None:
    room = unique_id("phone")
    with qm.admin() as admin:
        create_room(admin, room, ratePerMinute=30, state="paused", name="Limited sneakers · size run")
        for _ in range(3):
            with qm.client() as someone:
                join(someone, room).raise_for_status()
        context = browser.new_context(
            viewport=PHONE,
            device_scale_factor=2,
            is_mobile=True,
            has_touch=True,
            bypass_csp=True,
            locale="de-DE",
            extra_http_headers={"Accept-Language": "de-DE,de;q=0.9,en;q=0.5"},
        )
        page = context.new_page()
        requests = _recorded(page)
        page.goto(f"{qm.base_url}/w/{room}")
        assert page.locator("html").get_attribute("lang") == "de"  # Accept-Language on a first visit
        page.wait_for_function("document.querySelector('#headline .num')?.textContent === '4'")
        assert headline(page) == "Sie sind Nummer 4 in der Warteschlange"
        page.get_by_text("angehalten").wait_for()
        page.screenshot(path=str(artifacts / "waiting-de-phone.png"), full_page=True)
        _assert_axe_clean(page, "the waiting page on a phone (German)")
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"], "the page scrolls sideways on a phone"

        # keyboard: the picker is the first stop and its focus is visible
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.id") == "lang"
        outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
        assert outline not in ("none", ""), "no visible focus on the language picker"
        assert {_origin(u) for u in _web_requests(requests)} == {qm.base_url}
        context.close()

        dark = browser.new_context(viewport=PHONE, color_scheme="dark", bypass_csp=True)
        page = dark.new_page()
        page.goto(f"{qm.base_url}/w/{room}")
        page.wait_for_function("document.querySelector('#headline .num')?.textContent === '5'")
        page.screenshot(path=str(artifacts / "waiting-en-phone-dark.png"), full_page=True)
        _assert_axe_clean(page, "the waiting page in dark mode")
        dark.close()


def test_scheduled_countdown_runs_on_the_servers_clock(browser: Any, qm: Any, artifacts: Path) -> None:
    room = unique_id("drop")
    opens = datetime.now(UTC) + timedelta(hours=2)
    with qm.admin() as admin:
        create_room(admin, room, name="Midnight drop")
        r = admin.post(f"/api/admin/rooms/{room}/schedule", json={"opensAt": opens.strftime("%Y-%m-%dT%H:%M:%S.000Z")})
        assert r.status_code == 200, r.text
    context = browser.new_context(viewport=DESKTOP, bypass_csp=True)
    page = context.new_page()
    # the device's clock is three days fast: a countdown against it would read zero
    page.clock.install(time=datetime.now(UTC) + timedelta(days=3))
    requests = _recorded(page)
    page.goto(f"{qm.base_url}/w/{room}")
    page.get_by_text("You are in the pre-queue.").wait_for()
    page.wait_for_function("/^\\d\\d:\\d\\d:\\d\\d$/.test(document.querySelector('#countdown').textContent)")
    shown = page.locator("#countdown").inner_text()
    hours, minutes, _ = (int(x) for x in shown.split(":"))
    assert (hours, minutes) in ((1, 59), (1, 58), (2, 0)), f"countdown {shown} is not two hours"
    assert page.get_by_text("1 person is in the pre-queue (that is you).").is_visible()
    assert page.locator("#v-wait").is_hidden()
    # the drop's published commitment, and this visitor's handle to find in the draw afterwards
    with qm.client() as c:
        committed = c.get(f"/api/rooms/{room}/draw").json()
    assert page.locator("#draw-commitment").inner_text() == committed["commitment"]
    assert page.get_by_text("Draw commitment:").is_visible()
    handle = page.locator("#draw-handle").inner_text()
    assert len(handle) == 16 and page.locator("#draw-handle").is_visible()
    page.screenshot(path=str(artifacts / "waiting-scheduled.png"), full_page=True)
    _assert_axe_clean(page, "the waiting page (scheduled)")
    page.select_option("#lang", "es")
    page.get_by_text("Está en la precola.").wait_for()
    assert page.locator("#countdown-label").inner_text() == "Las puertas abren en"
    assert page.get_by_text("Compromiso del sorteo:").is_visible()
    assert page.locator("#draw-commitment").inner_text() == committed["commitment"]
    assert {_origin(u) for u in _web_requests(requests)} == {qm.base_url}
    context.close()


@pytest.mark.parametrize(
    ("path", "key", "first", "heading_th"),
    [
        ("/offline.html", "qm_offline_attempts", 20, "อีกสักครู่จะกลับมา"),
        ("/origin-down.html", "qm_origin_down_attempts", 15, "เว็บไซต์ยังไม่ตอบสนองในขณะนี้"),
    ],
)
def test_outage_pages_stand_alone_speak_the_chosen_language_and_retry_with_jitter(
    browser: Any, qm: Any, artifacts: Path, path: str, key: str, first: int, heading_th: str
) -> None:
    name = path.strip("/").removesuffix(".html")
    context = browser.new_context(viewport=DESKTOP, bypass_csp=True)
    page = context.new_page()
    requests = _recorded(page)
    page.clock.install()
    page.goto(f"{qm.base_url}{path}")
    assert _web_requests(requests) == [f"{qm.base_url}{path}"], "an outage page must load nothing else"
    page.screenshot(path=str(artifacts / f"{name}-en.png"), full_page=True)
    _assert_axe_clean(page, f"{path} (English)")

    # retry: nothing before the first step, a reload by first * 1.8 s; the attempt count survives the reload
    page.clock.run_for(int(first * 1000) - 1000)
    assert page.evaluate(f"localStorage.getItem('{key}')") is None
    with page.expect_navigation():
        page.clock.run_for(int(first * 0.8 * 1000) + 2000)
    record = json.loads(page.evaluate(f"localStorage.getItem('{key}')"))
    assert record["n"] == 1
    context.close()

    # a visitor who picked Thai on the way in gets Thai; a phone gets a layout that fits
    thai = browser.new_context(viewport=PHONE, bypass_csp=True)
    thai.add_cookies([{"name": "qm_lang", "value": "th", "url": qm.base_url}])
    page = thai.new_page()
    page.goto(f"{qm.base_url}{path}")
    page.wait_for_function("document.documentElement.lang === 'th'")
    assert page.locator("h1").inner_text() == heading_th
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    page.screenshot(path=str(artifacts / f"{name}-th-phone.png"), full_page=True)
    _assert_axe_clean(page, f"{path} (Thai)")
    thai.close()


def test_the_page_keeps_working_when_the_stream_is_refused(browser: Any, qm: Any) -> None:
    """No EventSource (or a proxy that eats it): the page polls /api/status every 5 s instead."""
    room = unique_id("poll")
    with qm.admin() as admin, qm.client() as other:
        create_room(admin, room, ratePerMinute=0)
        join(other, room).raise_for_status()
        context = browser.new_context(viewport=DESKTOP, bypass_csp=True)
        context.route("**/events?*", lambda route: route.abort())
        page = context.new_page()
        requests = _recorded(page)
        page.goto(f"{qm.base_url}/w/{room}")
        page.wait_for_function("document.querySelector('#headline .num')?.textContent === '2'")
        page.get_by_text("Reconnecting… your place is kept").or_(
            page.get_by_text("Updating every few seconds")
        ).wait_for()
        r = admin.post(f"/api/admin/rooms/{room}/eject", json={"ticket": 1})
        assert r.status_code == 200, r.text
        page.wait_for_function("document.querySelector('#headline .num')?.textContent === '1'", timeout=15_000)
        assert any("/api/status?" in u for u in requests), "the update did not come from polling"
        context.close()


def test_a_throttled_navigation_gets_a_small_page_in_the_visitors_language(browser: Any, artifacts: Path) -> None:
    srv = start_server({"WAITING_LIMIT_PER_MIN": "1"})
    try:
        room = unique_id("throttled")
        with srv.admin() as admin:
            create_room(admin, room, name="Drop")
        # Accept-Language decides when there is no qm_lang cookie
        ctx = browser.new_context(viewport=PHONE, locale="ja-JP")
        page = ctx.new_page()
        seen = _recorded(page)
        assert page.goto(f"{srv.base_url}/w/{room}").status == 200
        refused = page.goto(f"{srv.base_url}/w/{room}")
        assert refused is not None and refused.status == 429
        assert page.locator("html").get_attribute("lang") == "ja"
        page.get_by_role("heading", name="しばらくお待ちください").wait_for(timeout=5_000)
        assert len(refused.body()) < 1500
        page.screenshot(path=str(artifacts / "refused-ja-phone.png"), full_page=True)
        _assert_axe_clean(page, "the refusal page (ja)")
        assert {_origin(u) for u in _web_requests(seen)} == {srv.base_url}
        # the qm_lang cookie wins over Accept-Language
        ctx.add_cookies([{"name": "qm_lang", "value": "th", "url": srv.base_url}])
        refused = page.goto(f"{srv.base_url}/w/{room}")
        assert refused is not None and refused.status == 429
        page.get_by_role("heading", name="กรุณารอสักครู่").wait_for(timeout=5_000)
        assert refused.headers["retry-after"] in page.locator("p").inner_text()
        page.screenshot(path=str(artifacts / "refused-th-phone.png"), full_page=True)
        _assert_axe_clean(page, "the refusal page (th)")
        ctx.close()
    finally:
        srv.stop()
