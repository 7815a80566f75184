"""The console shows what the server says: the settings in effect and the configuration warnings in Diagnostics,
a room save's warnings in the editor, and the inline switch (the tick, its confirmation, the move to PUBLIC_URL)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from axe import describe, violations
from harness import free_port, start_server, unique_id, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: tests.inline.peer
from tests.inline.peer import Peer

#: Names under qm.test reach this machine (the console on a hostname, an inline room's public host).
HOSTS = "MAP *.qm.test 127.0.0.1"
CHROMIUM = os.environ.get("QM_CHROMIUM", "/usr/bin/chromium")
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Chromium with every *.qm.test name resolved to this machine (the conftest's browser, plus that rule)."""
    if not (os.path.exists(CHROMIUM) or shutil.which("chromium")):
        if os.environ.get("CI"):
            pytest.fail(f"Chromium is required in CI and is not at {CHROMIUM} (apt-get install chromium)")
        pytest.skip(f"no Chromium at {CHROMIUM}: apt-get install chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=[*LAUNCH_ARGS, f"--host-resolver-rules={HOSTS}"])
        try:
            yield b
        finally:
            b.close()


def _sign_in(page: Any, url: str, key: str) -> None:
    page.goto(url)
    page.locator("#signin-key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    page.locator("#live.on").wait_for(timeout=10_000)


def _panel(page: Any, dialog: str) -> Any:
    dlg = page.locator(f"#{dialog}[open]")
    dlg.wait_for(timeout=10_000)
    page.wait_for_function(
        "(sel) => { const d = document.querySelector(sel); return d && !d.textContent.includes('Loading…'); }",
        arg=f"#{dialog}",
        timeout=10_000,
    )
    return dlg


def test_an_inline_save_warns_in_the_editor_and_diagnostics_lists_it_with_the_settings(
    browser: Any, peer: Peer, artifacts: Path
) -> None:
    srv = start_server({"PROXY_ALLOW_PRIVATE": "1", "PROTECTION_MODE": "block"})  # a value that warns, not used
    try:
        ops = f"http://ops.qm.test:{srv.port}"  # a hostname: the console there is withheld once a room is inline
        shop = f"http://shop.qm.test:{srv.port}"
        room = unique_id("shop")
        ctx = browser.new_context(bypass_csp=True, viewport={"width": 1360, "height": 1000})
        page = ctx.new_page()
        _sign_in(page, f"{ops}/", srv.admin_key)
        # a new room, made inline with the tick and the internal address beside it
        page.get_by_role("button", name="+ New room").click()
        page.locator("#dlg-editor[open]").wait_for(timeout=5_000)
        address = page.locator("#ed-proxyOrigin")
        assert address.is_disabled()  # a snippet room until the tick is set
        page.locator("#ed-id").fill(room)
        page.locator("#ed-targetUrl").fill(shop)
        page.get_by_label("Serve this room inline").check()
        assert address.is_enabled()
        assert page.get_by_label("Internal address of the site behind the queue").count() == 1
        address.fill(peer.url)
        page.get_by_role("button", name="Create room").click()
        # the save succeeded and said why this console is about to go: the editor stays open on it, no toast
        saved = page.locator("#dlg-editor[open] .saved-view")
        saved.wait_for(timeout=10_000)
        warning = saved.locator('li[data-code="console_host_withheld"]')
        text = warning.inner_text()
        assert "ops.qm.test" in text and "ADMIN_HOST" in text, text
        assert "makes that console, and every monitor link on that host, answer 404" in text, text
        assert page.locator("#toasts .toast").count() == 0
        assert page.locator("#dlg-editor").get_attribute("open") is not None
        page.screenshot(path=str(artifacts / "console-save-warning.png"))
        found = violations(page)
        assert not found, describe(found)
        with srv.admin() as admin:
            saved_room = admin.get(f"/api/admin/rooms/{room}").json()["room"]
        assert saved_room["proxyOrigin"] == peer.url
        # it stays until the operator closes it (the next health read, 10 s on, has come and gone meanwhile)
        with page.expect_request(lambda r: r.url.endswith("/api/admin/health"), timeout=30_000):
            pass
        assert saved.is_visible()
        page.get_by_role("button", name="Close", exact=True).last.click()
        page.locator("#dlg-editor[open]").wait_for(state="detached", timeout=5_000)
        ctx.close()

        # the console on the server's own address: Diagnostics lists the same reason, in the guide's words
        ctx = browser.new_context(bypass_csp=True, viewport={"width": 1360, "height": 1000})
        page = ctx.new_page()
        _sign_in(page, f"{srv.base_url}/", srv.admin_key)
        page.locator("#insecure").wait_for(timeout=10_000)
        assert "neither ADMIN_HOST nor PUBLIC_URL" in (page.locator("#insecure").get_attribute("title") or "")
        page.get_by_role("button", name="Diagnostics", exact=True).click()
        dlg = _panel(page, "dlg-diagnostics")
        config = dlg.locator(".config-warnings")
        item = config.locator('li[data-code="console_host_withheld"]')
        assert "The fix is to set ADMIN_HOST (or PUBLIC_URL) to that hostname and restart." in item.inner_text()
        item.scroll_into_view_if_needed()
        page.screenshot(path=str(artifacts / "console-diagnostics-config-warnings.png"))
        assert dlg.locator("li.note.warn", has_text="PROTECTION_MODE").count() == 1  # the settings warning, as before
        # the settings in effect: folded away until asked for, by group, each with its source; secrets never
        block = dlg.locator("details#diag-settings")
        assert block.get_attribute("open") is None
        assert not block.locator("table").first.is_visible()
        with srv.admin() as admin:
            listing = admin.get("/api/admin/health").json()["settings"]
        block.locator("summary").click()
        rows = block.locator("tr[data-setting]")
        assert rows.count() == len(listing)
        groups = block.locator(".settings-group h4").all_inner_texts()
        assert [g.lower() for g in groups] == [g.lower() for g in dict.fromkeys(s["group"] for s in listing)]
        assert groups[0].lower() == "core and storage"

        def row(name: str) -> list[str]:
            cells: list[str] = block.locator(f'tr[data-setting="{name}"] > *').all_inner_texts()
            return cells

        assert row("PORT") == ["PORT", str(srv.port), "environment"]
        assert row("ADMIN_KEY") == ["ADMIN_KEY", "set (hidden)", "environment"]
        assert row("EDGE_SECRET") == ["EDGE_SECRET", "unset", "default"]
        assert row("PROXY_ALLOW_PRIVATE") == ["PROXY_ALLOW_PRIVATE", "on", "environment"]
        assert row("PROTECTION_MODE") == ["PROTECTION_MODE", "monitor", "default · the value set is not used"]
        assert row("SIDESTORE")[2] == "derived"
        assert srv.admin_key not in dlg.inner_text() and srv.secret not in dlg.inner_text()
        block.locator('tr[data-setting="PORT"]').scroll_into_view_if_needed()
        page.screenshot(path=str(artifacts / "console-diagnostics-settings.png"))
        found = violations(page)
        assert not found, describe(found)
        page.emulate_media(color_scheme="dark")
        page.screenshot(path=str(artifacts / "console-diagnostics-settings-dark.png"))
        found = violations(page)
        assert not found, describe(found)
        ctx.close()
    finally:
        srv.stop()


def test_the_inline_tick_confirms_and_the_last_inline_room_moves_the_console_to_public_url(
    browser: Any, peer: Peer, artifacts: Path
) -> None:
    port = free_port()
    public = f"http://127.0.0.1:{port}"
    srv = start_server({"PORT": str(port), "PUBLIC_URL": public, "PROXY_ALLOW_PRIVATE": "1"})
    try:
        shop = f"http://shop.qm.test:{port}"
        room, other = unique_id("shop"), unique_id("plain")
        with srv.admin() as admin:
            body = {"id": room, "name": "Shop", "targetUrl": shop, "proxyOrigin": peer.url, "ratePerMinute": 600}
            admin.post("/api/admin/rooms", json=body).raise_for_status()
            admin.post("/api/admin/rooms", json={"id": other, "targetUrl": "https://plain.example"}).raise_for_status()
        ctx = browser.new_context(bypass_csp=True, viewport={"width": 1360, "height": 1000})
        page = ctx.new_page()
        # the console through the inline host itself, under /__qm/ on the customer's domain
        _sign_in(page, f"{shop}/__qm/", srv.admin_key)
        card = page.locator(f'article.card[data-room="{room}"]')
        card.get_by_role("button", name="Edit").click()
        page.locator("#dlg-editor[open]").wait_for(timeout=5_000)
        tick = page.get_by_label("Serve this room inline")
        address = page.get_by_label("Internal address of the site behind the queue")
        assert tick.is_checked() and address.input_value() == peer.url and address.is_enabled()
        page.locator("#ed-inline").scroll_into_view_if_needed()
        page.screenshot(path=str(artifacts / "console-inline-switch.png"))
        # clearing the tick asks first, saying it returns the room to snippet mode and that this console moves
        tick.click()
        confirm = page.locator("#dlg-confirm[open]")
        confirm.wait_for(timeout=5_000)
        text = confirm.inner_text()
        assert f"returns {room} to snippet mode" in text, text
        assert "takes the queue's own /__qm/* surface off that host with it — including this console" in text, text
        assert f"moves you to PUBLIC_URL, {public}/" in text, text
        page.screenshot(path=str(artifacts / "console-inline-confirm.png"))
        found = violations(page)
        assert not found, describe(found)
        confirm.get_by_role("button", name="Cancel").click()
        confirm.wait_for(state="hidden", timeout=5_000)
        # cancelled: still inline (the console puts the tick back once the dialog has answered)
        page.wait_for_function("() => document.querySelector('#ed-inline-on').checked", timeout=5_000)
        assert tick.is_checked() and address.is_enabled()
        tick.click()
        confirm.wait_for(timeout=5_000)
        confirm.get_by_role("button", name="Return to snippet mode").click()
        confirm.wait_for(state="hidden", timeout=5_000)
        page.wait_for_function("() => document.querySelector('#ed-proxyOrigin').disabled", timeout=5_000)
        assert not tick.is_checked() and address.is_disabled()
        note = page.locator("#ed-inline-warn li")  # the warning stays in the form until the save
        assert f"{room} is the last inline room on shop.qm.test:{port}" in note.inner_text()
        page.screenshot(path=str(artifacts / "console-inline-cleared.png"))
        # the save: the room is a snippet room, and the console moves to PUBLIC_URL
        page.get_by_role("button", name="Save changes").click()
        page.wait_for_url(f"{public}/", timeout=15_000)
        page.locator("#signin-key").wait_for(timeout=10_000)  # the session cookie was the old host's
        with srv.admin() as admin:
            assert admin.get(f"/api/admin/rooms/{room}").json()["room"].get("proxyOrigin") is None
        stale = httpx.get(f"http://127.0.0.1:{port}/__qm/api/admin/rooms", headers={"Host": f"shop.qm.test:{port}"})
        assert stale.status_code == 404 and stale.json()["consoleUrl"] == f"{public}/"
        ctx.close()
    finally:
        srv.stop()


def test_an_operator_key_sees_the_inline_switch_disabled_and_why(browser: Any, peer: Peer) -> None:
    srv = start_server({"PROXY_ALLOW_PRIVATE": "1"})
    try:
        room = unique_id("shop")
        with srv.admin() as admin:
            body = {"id": room, "targetUrl": f"http://localhost:{srv.port}", "proxyOrigin": peer.url}
            admin.post("/api/admin/rooms", json=body).raise_for_status()
            made = admin.post("/api/admin/operators", json={"name": "Night ops", "role": "operator"})
            made.raise_for_status()
            key = made.json()["key"]
        ctx = browser.new_context(bypass_csp=True)
        page = ctx.new_page()
        _sign_in(page, f"{srv.base_url}/", key)
        page.locator(f'article.card[data-room="{room}"]').get_by_role("button", name="Edit").click()
        page.locator("#dlg-editor[open]").wait_for(timeout=5_000)
        tick = page.get_by_label("Serve this room inline")
        assert tick.is_checked() and tick.is_disabled()
        assert page.locator("#ed-proxyOrigin").is_disabled() and page.locator("#ed-targetUrl").is_disabled()
        assert "needs the owner role" in page.locator("#ed-inline-why").inner_text()
        # every other setting is still the operator's: a save that leaves inline alone goes through
        page.locator("#ed-name").fill("Renamed by ops")
        page.get_by_role("button", name="Save changes").click()
        page.locator("#dlg-editor[open]").wait_for(state="detached", timeout=10_000)
        with srv.admin() as admin:
            wait_until(lambda: admin.get(f"/api/admin/rooms/{room}").json()["room"]["name"] == "Renamed by ops")
            assert admin.get(f"/api/admin/rooms/{room}").json()["room"]["proxyOrigin"] == peer.url
        ctx.close()
    finally:
        srv.stop()


def test_deleting_the_last_inline_room_of_the_console_host_warns_and_moves_the_console(
    browser: Any, peer: Peer, artifacts: Path
) -> None:
    port = free_port()
    public = f"http://127.0.0.1:{port}"
    srv = start_server({"PORT": str(port), "PUBLIC_URL": public, "PROXY_ALLOW_PRIVATE": "1"})
    try:
        shop = f"http://shop.qm.test:{port}"
        room, other = unique_id("shop"), unique_id("plain")
        with srv.admin() as admin:
            body = {"id": room, "name": "Shop", "targetUrl": shop, "proxyOrigin": peer.url}
            admin.post("/api/admin/rooms", json=body).raise_for_status()
            admin.post("/api/admin/rooms", json={"id": other, "targetUrl": "https://plain.example"}).raise_for_status()
        ctx = browser.new_context(bypass_csp=True, viewport={"width": 1360, "height": 1000})
        page = ctx.new_page()
        _sign_in(page, f"{shop}/__qm/", srv.admin_key)
        # another room's delete says nothing of the console
        page.locator(f'article.card[data-room="{other}"]').get_by_role("button", name="Delete").click()
        confirm = page.locator("#dlg-confirm[open]")
        confirm.wait_for(timeout=5_000)
        assert "/__qm/*" not in confirm.inner_text()
        confirm.get_by_role("button", name="Cancel").click()
        confirm.wait_for(state="hidden", timeout=5_000)
        # the last inline room on this host: the confirmation says the console goes with it, and where to
        page.locator(f'article.card[data-room="{room}"]').get_by_role("button", name="Delete").click()
        confirm.wait_for(timeout=5_000)
        text = confirm.inner_text()
        assert f"{room} is the last inline room on shop.qm.test:{port}" in text, text
        assert (
            "Deleting it takes the queue's own /__qm/* surface off that host with it — including this console" in text
        )
        assert f"After the delete the console moves you to PUBLIC_URL, {public}/" in text, text
        page.screenshot(path=str(artifacts / "console-inline-delete-confirm.png"))
        confirm.get_by_role("button", name="Delete and move").click()
        page.wait_for_url(f"{public}/", timeout=15_000)
        page.locator("#signin-key").wait_for(timeout=10_000)
        with srv.admin() as admin:
            assert admin.get(f"/api/admin/rooms/{room}").status_code == 404
        ctx.close()
    finally:
        srv.stop()
