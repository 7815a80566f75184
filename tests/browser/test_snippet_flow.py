"""A visitor meets the queue in a real browser: tag → waiting page → their turn → back on the site."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from demo_site import serve_site
from harness import create_room, join, unique_id


def _origins(urls: list[str]) -> set[str]:
    return {f"{urlsplit(u).scheme}://{urlsplit(u).netloc}" for u in urls if urlsplit(u).scheme in ("http", "https")}


def test_visitor_waits_then_lands_on_the_site(browser: Any, qm: Any, artifacts: Path) -> None:
    room = unique_id("shop")
    with serve_site(qm.base_url, room) as site, qm.admin() as admin:
        create_room(admin, room, targetUrl=site, ratePerMinute=0, name="Spring drop")
        page = browser.new_page(viewport={"width": 1000, "height": 760})
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        page.goto(f"{site}/checkout")
        page.wait_for_url(f"{qm.base_url}/w/{room}*", timeout=10_000)
        page.get_by_text("You are number").wait_for(timeout=10_000)
        page.screenshot(path=str(artifacts / "waiting-page.png"), full_page=True)
        assert "Spring drop" in page.title()
        # the operator opens the doors: the page moves on by itself, through the permitted return URL
        admin.post(f"/api/admin/rooms/{room}/rate", json={"ratePerMinute": 600}).raise_for_status()
        page.wait_for_url(f"{site}/checkout*", timeout=15_000)
        page.get_by_text("admit=true").wait_for(timeout=10_000)
        assert "qm_token" not in page.url  # the tag takes the pass out of the address bar
        page.screenshot(path=str(artifacts / "admitted-site.png"), full_page=True)
        assert _origins(requests) <= {qm.base_url, site}, "a page asked another origin"
        page.close()


def test_paused_room_says_so_and_keeps_the_place(browser: Any, qm: Any, artifacts: Path) -> None:
    room = unique_id("paused")
    with qm.admin() as admin, qm.client() as other:
        create_room(admin, room, targetUrl="https://shop.example", state="paused", name="Paused sale")
        join(other, room).raise_for_status()  # somebody is already ahead
        page = browser.new_page(viewport={"width": 1000, "height": 760})
        page.goto(f"{qm.base_url}/w/{room}")
        page.get_by_text("paused").first.wait_for(timeout=10_000)
        page.get_by_text("No estimate").first.wait_for(timeout=10_000)
        page.screenshot(path=str(artifacts / "waiting-paused.png"), full_page=True)
        page.close()


def test_unknown_room_page(browser: Any, qm: Any, artifacts: Path) -> None:
    page = browser.new_page()
    response = page.goto(f"{qm.base_url}/w/no-such-room")
    assert response is not None and response.status == 404
    page.get_by_text("no waiting room").wait_for(timeout=5_000)
    page.close()
