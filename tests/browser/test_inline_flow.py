"""Inline in a real browser: a visitor waits at the app's own URL and lands on the app when admitted."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

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


def _guide_fetch_example() -> str:
    """The single-page app's `fetch` from the Integration Guide's "JSON for apps", as printed there."""
    guide = (Path(__file__).resolve().parents[2] / "docs" / "INTEGRATION.md").read_text(encoding="utf-8")
    section = guide.split("### JSON for apps: the gated wait", 1)[1]
    return section.split("```js\n", 1)[1].split("```", 1)[0]


def test_a_single_page_apps_fetch_meets_the_gate_as_json(browser: Any, peer: Peer, artifacts: Path) -> None:
    """Only /api/ is queued: the app's page loads, and the guide's `fetch` meets the gate as JSON. Without a
    place it sends the visitor to the waiting room (coming back to the page); with one it shows the place
    and, once the doors open, gets the app's answer."""
    srv = start_server({"PROXY_ALLOW_PRIVATE": "1"})
    try:
        room = unique_id("spa")
        public = f"http://localhost:{srv.port}"
        with srv.admin() as admin:
            body = {
                "id": room,
                "name": "Inline app",
                "targetUrl": public,
                "proxyOrigin": peer.url,
                "ratePerMinute": 0,
                "rules": [{"pattern": "/api/*", "action": "queue"}],
            }
            admin.post("/api/admin/rooms", json=body).raise_for_status()
            page = browser.new_page(viewport={"width": 1000, "height": 760})
            example = _guide_fetch_example()
            spa = f"{public}/page/spa"
            assert page.goto(spa).status == 200  # the page itself is not queued
            # a plain fetch (no header of ours) is no navigation: JSON, not the page
            plain = page.evaluate(
                "fetch('/api/echo').then(async (r) => [r.status, r.headers.get('content-type'), await r.json()])"
            )
            assert plain[0] == 503 and plain[1].startswith("application/json")
            assert plain[2]["state"] == "not_in_line" and plain[2]["roomId"] == room
            # no place: the guide's fetch takes the visitor to the waiting room, which comes back to this page
            page.evaluate(f"(() => {{ {example}\nwindow.showWait = () => {{}}; api('/api/echo'); }})()")
            page.get_by_text("You are number").wait_for(timeout=10_000)
            assert page.url.startswith(f"{public}/__qm/w/{room}?qm_return=")
            assert parse_qs(urlsplit(page.url).query)["qm_return"] == [spa]
            page.screenshot(path=str(artifacts / "inline-spa-sent-to-wait.png"), full_page=True)
            # a place in line: the guide's fetch shows it, and gets the app's answer once the doors open
            assert page.goto(spa).status == 200
            page.evaluate(
                f"(() => {{ {example}\nwindow.seen = []; window.showWait = (...a) => window.seen.push(a);"
                "\nwindow.done = api('/api/echo').then(async (r) => [r.status, await r.text()]); })()"
            )
            page.wait_for_function("window.seen.length > 0", timeout=10_000)
            assert page.evaluate("window.seen[0]") == [1, None, "waiting"]  # a rate of 0: no estimate
            admin.post(f"/api/admin/rooms/{room}/rate", json={"ratePerMinute": 600}).raise_for_status()
            status, text = page.evaluate("window.done")
            assert status == 200 and "/api/echo" in text, text
            page.close()
    finally:
        srv.stop()
