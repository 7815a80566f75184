"""The guides in a real browser: /docs and /docs/th render, links between and within guides work, nothing is
fetched from another origin, the keyboard reaches the content, and axe finds no WCAG 2.1 AA violation."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from axe import describe, violations
from harness import Server


def _page(browser: Any, scheme: str = "light", width: int = 1280, height: int = 900) -> tuple[Any, Any, list[str]]:
    # bypass_csp: the pages allow no script at all, and axe is injected as one
    ctx = browser.new_context(viewport={"width": width, "height": height}, color_scheme=scheme, bypass_csp=True)
    page = ctx.new_page()
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    return ctx, page, requests


def _assert_clean(page: Any, what: str) -> None:
    found = violations(page)
    assert not found, f"{what}: axe found WCAG 2.1 AA violations:\n{describe(found)}"


def _assert_same_origin(requests: list[str], base: str) -> None:
    origins = {f"{urlsplit(u).scheme}://{urlsplit(u).netloc}" for u in requests if urlsplit(u).scheme != "data"}
    assert origins <= {base}, f"a docs page asked another origin: {sorted(origins)}"


def _in_view(page: Any, selector: str) -> bool:
    return bool(
        page.eval_on_selector(
            selector, "el => { const r = el.getBoundingClientRect(); return r.top >= -1 && r.top < innerHeight; }"
        )
    )


def _id_in_view(page: Any, element_id: str) -> bool:
    return bool(
        page.evaluate(
            "id => { const r = document.getElementById(id).getBoundingClientRect(); "
            "return r.top >= -1 && r.top < innerHeight; }",
            element_id,
        )
    )


def test_english_guides_links_and_anchors(browser: Any, qm: Server, artifacts: Path) -> None:
    ctx, page, requests = _page(browser)
    try:
        page.goto(f"{qm.base_url}/docs")
        assert page.title() == "Guides · Queue Manager"
        _assert_clean(page, "/docs")
        page.screenshot(path=str(artifacts / "docs-index.png"), full_page=True)

        page.get_by_role("link", name="Operating Queue Manager").click()
        page.wait_for_url(f"{qm.base_url}/docs/operations")
        assert page.locator("h1").inner_text() == "Operating Queue Manager"
        _assert_clean(page, "/docs/operations")
        page.screenshot(path=str(artifacts / "docs-operations.png"))

        # an intra-doc link (INTEGRATION.md in the markdown) lands on the rendered guide
        page.locator("main").get_by_role("link", name="INTEGRATION.md", exact=True).first.click()
        page.wait_for_url(f"{qm.base_url}/docs/integration")
        # the guide's own contents list jumps to a heading on the page
        page.locator("main").get_by_role("link", name="Binding: why a copied pass is worthless").click()
        page.wait_for_url("**#5-binding-why-a-copied-pass-is-worthless")
        assert _id_in_view(page, "5-binding-why-a-copied-pass-is-worthless")
        _assert_clean(page, "/docs/integration")
        page.screenshot(path=str(artifacts / "docs-integration-anchor.png"))
        _assert_same_origin(requests, qm.base_url)
    finally:
        ctx.close()


def test_keyboard_skip_link_reaches_the_content(browser: Any, qm: Server) -> None:
    ctx, page, _ = _page(browser)
    try:
        page.goto(f"{qm.base_url}/docs/operations")
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.textContent") == "Skip to content"
        assert _in_view(page, ".skip"), "the skip link shows when focused"
        page.keyboard.press("Enter")
        assert page.evaluate("document.activeElement.id") == "content"
    finally:
        ctx.close()


def test_thai_guides_in_dark_mode(browser: Any, qm: Server, artifacts: Path) -> None:
    ctx, page, requests = _page(browser, scheme="dark")
    try:
        page.goto(f"{qm.base_url}/docs/th")
        assert page.evaluate("document.documentElement.lang") == "th"
        _assert_clean(page, "/docs/th")
        page.screenshot(path=str(artifacts / "docs-th-index-dark.png"), full_page=True)

        page.get_by_role("link", name="Queue Manager: คู่มือการเชื่อมต่อ").click()
        page.wait_for_url(f"{qm.base_url}/docs/th/integration")
        heading = "5-การผูกสิทธิ์-ทำไมบัตรผ่านที่ถูกคัดลอกจึงไร้ค่า"
        page.locator("main").get_by_role("link", name="การผูกสิทธิ์: ทำไมบัตรผ่านที่ถูกคัดลอกจึงไร้ค่า").click()
        page.wait_for_function("id => location.hash && decodeURIComponent(location.hash.slice(1)) === id", arg=heading)
        assert _id_in_view(page, heading)
        _assert_clean(page, "/docs/th/integration")
        page.screenshot(path=str(artifacts / "docs-th-integration-dark.png"))

        # the language switch keeps the guide
        page.get_by_role("link", name="English").click()
        page.wait_for_url(f"{qm.base_url}/docs/integration")
        _assert_same_origin(requests, qm.base_url)
    finally:
        ctx.close()


def test_thai_fallback_on_a_phone(browser: Any, qm: Server, artifacts: Path) -> None:
    ctx, page, requests = _page(browser, width=390, height=844)
    try:
        page.goto(f"{qm.base_url}/docs/th/configuration")
        notice = page.get_by_role("note")
        assert "ยังไม่มีฉบับแปลภาษาไทย" in notice.inner_text()
        assert _in_view(page, ".notice"), "the notice is the first thing on the page"
        _assert_clean(page, "/docs/th/configuration")
        page.screenshot(path=str(artifacts / "docs-th-fallback-phone.png"))
        page.goto(f"{qm.base_url}/docs/nope")
        _assert_clean(page, "404")
        page.screenshot(path=str(artifacts / "docs-404-phone.png"))
        _assert_same_origin(requests, qm.base_url)
    finally:
        ctx.close()
