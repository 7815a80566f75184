"""What the browser tests do the same way on every page: read the waiting page's headline, sign in to the console."""

from __future__ import annotations

from typing import Any

from harness import Server


def headline(page: Any) -> str:
    """The waiting page's headline as one line of text."""
    return " ".join(page.locator("#headline").inner_text().split())


def sign_in(page: Any, srv: Server, key: str | None = None) -> None:
    """Open the console of ``srv`` and sign in with ``key`` (the admin key by default) until it is live."""
    page.goto(f"{srv.base_url}/")
    page.locator("#signin-key").fill(key or srv.admin_key)
    page.get_by_role("button", name="Sign in").click()
    page.locator("#live.on").wait_for(timeout=10_000)
