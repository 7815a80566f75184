"""The waiting page when the line is full: a visitor refused a place (503 queue_full) sees the "line is
full" state in the room's brand and in the language they pick, and nobody in line is touched."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from axe import describe, violations
from browsing import headline
from harness import create_room, join, start_server, unique_id

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: tests.inline.peer
from tests.inline.peer import Peer


def test_a_refused_visitor_sees_the_line_is_full(browser: Any, qm: Any, artifacts: Path) -> None:
    room = unique_id("full")
    with qm.admin() as admin, qm.client() as other:
        create_room(
            admin,
            room,
            ratePerMinute=0,
            maxWaiting=1,
            queueMaxPerIp=None,
            name="Winter release",
            brand={"displayName": "Acme Outlet", "background": "#f4efe6", "accent": "#8a1c1c"},
        )
        join(other, room).raise_for_status()  # the one place the line holds
        context = browser.new_context(viewport={"width": 1100, "height": 820}, bypass_csp=True, locale="en-US")
        page = context.new_page()
        page.goto(f"{qm.base_url}/w/{room}")
        page.get_by_text("The line is full", exact=True).wait_for()
        assert headline(page) == "The line is full"
        assert not page.locator("p.lead").is_visible()  # "you keep your place": not said to someone without one
        problem = page.locator("#problem")
        assert problem.is_visible()
        assert "Try again later" in problem.inner_text()
        assert page.title().startswith("Line full")
        assert page.locator("#conn-text").inner_text() == "Trying again automatically"  # no place is claimed
        page.screenshot(path=str(artifacts / "waiting-full-en.png"), full_page=True)
        found = violations(page)
        assert not found, f"axe (WCAG 2.1 AA) on the full line:\n{describe(found)}"

        page.select_option("#lang", "th")
        page.wait_for_function("document.documentElement.lang === 'th'")
        assert headline(page) == "คิวเต็มแล้ว"
        assert "โปรดลองใหม่ภายหลัง" in problem.inner_text()
        page.screenshot(path=str(artifacts / "waiting-full-th.png"), full_page=True)
        for lang, head in (("es", "La fila está llena"), ("ja", "列が満員です"), ("de", "Die Warteschlange ist voll")):
            page.select_option("#lang", lang)
            page.wait_for_function(f"document.documentElement.lang === '{lang}'")
            assert headline(page) == head
        context.close()
        r = admin.get(f"/api/admin/rooms/{room}").json()["room"]
        assert (r["waiting"], r["refusedFull"]) == (1, 1)


def test_inline_a_gated_page_whose_join_is_refused_shows_the_full_line(
    browser: Any, peer: Peer, artifacts: Path
) -> None:
    srv = start_server({"PROXY_ALLOW_PRIVATE": "1"})
    try:
        room = unique_id("inlinefull")
        public = f"http://localhost:{srv.port}"
        with srv.admin() as admin, srv.client() as other:
            body = {
                "id": room,
                "name": "Inline drop",
                "targetUrl": public,
                "proxyOrigin": peer.url,
                "ratePerMinute": 0,
                "maxWaiting": 1,
                "queueMaxPerIp": None,
            }
            admin.post("/api/admin/rooms", json=body).raise_for_status()
            join(other, room).raise_for_status()
            page = browser.new_page(viewport={"width": 1000, "height": 760})
            response = page.goto(f"{public}/page/shoes?size=9")
            assert response is not None and response.status == 503
            page.get_by_text("The line is full", exact=True).wait_for(timeout=10_000)
            assert page.url == f"{public}/page/shoes?size=9"
            assert "Try again later" in page.locator("#problem").inner_text()
            page.screenshot(path=str(artifacts / "inline-full.png"), full_page=True)
            page.close()
            assert admin.get(f"/api/admin/rooms/{room}").json()["room"]["refusedFull"] == 1
    finally:
        srv.stop()
