"""The console under /__qm/ on an inline host, and the API reference's document, in a real browser.

On an inline host the console is served at /__qm/ and calls /__qm/api/admin/*: its session cookie must be
scoped there, or signing in leads nowhere. /docs/api links to the OpenAPI document where that cookie
reaches, so an operator signed in to the console opens it with one click.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import Server, create_room, start_server, unique_id, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: tests.inline.peer
from tests.inline.peer import Peer


@pytest.fixture(scope="module")
def qm() -> Iterator[Server]:
    srv = start_server({"PROXY_ALLOW_PRIVATE": "1"})
    try:
        yield srv
    finally:
        srv.stop()


def _room(admin: Any, room_id: str) -> dict[str, Any]:
    room: dict[str, Any] = admin.get(f"/api/admin/rooms/{room_id}").json()["room"]
    return room


def test_operator_signs_in_under_the_prefix_on_an_inline_host_and_pauses_a_room(
    browser: Any, qm: Server, peer: Peer, artifacts: Path
) -> None:
    public = f"http://localhost:{qm.port}"  # the inline room's public host: everything but /__qm/ is the app's
    inline = unique_id("inl")
    with qm.admin() as admin:
        body = {"id": inline, "name": "Inline shop", "targetUrl": public, "proxyOrigin": peer.url, "ratePerMinute": 60}
        admin.post("/api/admin/rooms", json=body).raise_for_status()
        room = unique_id("drop")
        create_room(admin, room, name="Sneaker drop", ratePerMinute=30)
        ctx = browser.new_context(viewport={"width": 1360, "height": 900})
        page = ctx.new_page()
        answers: list[tuple[int, str]] = []
        page.on("response", lambda r: answers.append((r.status, r.url)))
        # the console's former address on this host lands on the console under the prefix
        page.goto(f"{public}/__qm/progress")
        assert page.url == f"{public}/__qm/"
        page.locator("#signin-key").fill(qm.admin_key)
        answers.clear()  # before signing in, the console's who-am-I is refused: that is how it knows
        page.get_by_role("button", name="Sign in").click()
        page.locator("#live.on").wait_for(timeout=10_000)
        cookies = {c["name"]: c for c in ctx.cookies()}
        assert cookies["qm_console"]["path"] == "/__qm/api/admin"
        assert cookies["qm_console"]["httpOnly"] and cookies["qm_console"]["sameSite"] == "Strict"
        card = page.locator(f'article.card[data-room="{room}"]')
        card.wait_for(timeout=10_000)
        page.screenshot(path=str(artifacts / "console-inline-signed-in.png"))
        card.get_by_role("button", name="Pause").click()
        wait_until(lambda: _room(admin, room)["state"] == "paused", what="paused from the console under /__qm/")
        card.locator(".badge", has_text="paused").wait_for(timeout=10_000)
        page.screenshot(path=str(artifacts / "console-inline-paused.png"))
        # every admin call went under the prefix, and none was refused
        admin_calls = [(s, u) for s, u in answers if "/api/admin/" in u]
        assert admin_calls and all(u.startswith(f"{public}/__qm/api/admin/") for _, u in admin_calls), admin_calls
        assert not [(s, u) for s, u in admin_calls if s >= 400], admin_calls
        # the app's own pages on this host never see the operator's session (the proxy strips it)
        page.goto(f"{public}/page/home")
        assert "qm_console" not in (page.content() or "")
        ctx.close()


def test_the_api_reference_links_to_a_document_a_signed_in_console_can_open(
    browser: Any, qm: Server, artifacts: Path
) -> None:
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    page.goto(f"{qm.base_url}/")
    page.locator("#signin-key").fill(qm.admin_key)
    page.get_by_role("button", name="Sign in").click()
    page.locator("#live.on").wait_for(timeout=10_000)
    page.goto(f"{qm.base_url}/docs/api")
    link = page.locator(".lede a").first
    assert link.get_attribute("href") == "/api/admin/openapi.json"
    page.screenshot(path=str(artifacts / "docs-api-reference.png"))
    with page.expect_navigation():
        link.click()
    assert page.url == f"{qm.base_url}/api/admin/openapi.json"
    document = json.loads(page.locator("body").inner_text())
    assert document["openapi"].startswith("3.1") and "/api/join" in document["paths"]
    # the Bearer-only address is still there for scripts; the browser's session does not reach it
    response = page.goto(f"{qm.base_url}/api/openapi.json")
    assert response is not None and response.status == 401
    ctx.close()
    # signed out, the link answers 401: the document is not public
    fresh = browser.new_context()
    response = fresh.new_page().goto(f"{qm.base_url}/api/admin/openapi.json")
    assert response is not None and response.status == 401
    fresh.close()
