"""Files under queue_manager/web, read once per process."""

from __future__ import annotations

import html
from functools import cache
from importlib import resources


@cache
def _text(name: str) -> str:
    return resources.files("queue_manager.web").joinpath(name).read_text(encoding="utf-8")


def waiting_template() -> str:
    return _text("waiting.html")


@cache
def qm_js() -> bytes:
    return _text("qm.js").encode()


def refusal_page(headers: list[tuple[bytes, bytes]]) -> bytes:
    """The small self-reloading page a throttled navigation gets."""
    retry = next((v.decode() for k, v in headers if k == b"retry-after"), "30")
    return (
        "<!doctype html><html lang=en><meta charset=utf-8><meta name=robots content=noindex>"
        f'<meta http-equiv=refresh content="{html.escape(retry)}"><title>One moment</title>'
        '<body style="font:16px system-ui,sans-serif;margin:3rem auto;max-width:30rem;padding:0 1rem">'
        "<h1 style=font-size:1.3rem>One moment, please</h1><p>This page was reloaded very often from your "
        f"network. It will reload by itself in {html.escape(retry)} seconds. Your place in line is kept."
        "</p></body></html>"
    ).encode()


def not_found_page(room_id: str) -> bytes:
    return (
        "<!doctype html><html lang=en><meta charset=utf-8><meta name=robots content=noindex>"
        "<title>No such waiting room</title>"
        '<body style="font:16px system-ui,sans-serif;margin:3rem auto;max-width:30rem;padding:0 1rem">'
        f"<h1 style=font-size:1.3rem>There is no waiting room called “{html.escape(room_id[:80])}”</h1>"
        "<p>Check the link you followed.</p></body></html>"
    ).encode()
