"""Inline in a real browser: a visitor waits at the app's own URL and lands on the app when admitted."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from harness import start_server, unique_id

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: tests.inline.peer
from tests.inline.peer import Peer


def test_visitor_waits_at_the_apps_url_and_lands_on_the_app(browser: Any, peer: Peer, artifacts: Path) -> None:
    srv = start_server({"PROXY_ALLOW_PRIVATE": "1"})
    try:
        room = unique_id("inline")
        public = f"http://localhost:{srv.port}"
        with srv.admin() as admin:
            body = {
                "id": room,
                "name": "Inline drop",
                "targetUrl": public,
                "proxyOrigin": peer.url,
                "ratePerMinute": 0,
            }
            admin.post("/api/admin/rooms", json=body).raise_for_status()
            page = browser.new_page(viewport={"width": 1000, "height": 760})
            requests: list[str] = []
            page.on("request", lambda r: requests.append(r.url))
            response = page.goto(f"{public}/page/shoes?size=9")
            assert response is not None and response.status == 503
            assert response.headers.get("x-qm-queued")
            page.get_by_text("You are number").wait_for(timeout=10_000)
            assert page.url == f"{public}/page/shoes?size=9"  # the waiting page is at the visitor's own URL
            assert "Inline drop" in page.title()
            page.screenshot(path=str(artifacts / "inline-waiting.png"), full_page=True)
            # the operator opens the doors: the page reloads into the app, at the same URL
            admin.post(f"/api/admin/rooms/{room}/rate", json={"ratePerMinute": 600}).raise_for_status()
            page.get_by_text("Peer app page /page/shoes").wait_for(timeout=20_000)
            assert page.url == f"{public}/page/shoes?size=9"
            page.screenshot(path=str(artifacts / "inline-admitted.png"), full_page=True)
            # the queue's own calls went under /__qm on the app's host; nothing went to another origin
            queue_calls = [u for u in requests if "/api/join" in u or "/api/status" in u or "/events" in u]
            assert queue_calls and all(urlsplit(u).path.startswith("/__qm/") for u in queue_calls)
            assert {f"{urlsplit(u).scheme}://{urlsplit(u).netloc}" for u in requests} == {public}
            # the admitted visitor's next navigation goes straight to the app
            page.goto(f"{public}/page/next")
            page.get_by_text("Peer app page /page/next").wait_for(timeout=10_000)
            page.close()
    finally:
        srv.stop()
