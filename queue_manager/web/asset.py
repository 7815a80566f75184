"""Files under queue_manager/web, read once per process."""

from __future__ import annotations

import base64
import hashlib
import html
import re
from functools import cache
from importlib import resources


@cache
def _text(name: str) -> str:
    return resources.files("queue_manager.web").joinpath(name).read_text(encoding="utf-8")


def waiting_template() -> str:
    return _text("waiting.html")


@cache
def offline_page() -> bytes:
    """offline.html: the self-contained page an operator hosts on the CDN for when the queue is down."""
    return _text("offline.html").encode()


@cache
def origin_down_page() -> bytes:
    """origin_down.html: what a navigation gets when the site behind an inline room answers 502/504 or not at all."""
    return _text("origin_down.html").encode()


_INLINE = re.compile(rb"<(script|style)>(.*?)</\1>", re.S)


@cache
def inline_csp(page: bytes) -> bytes:
    """A strict Content-Security-Policy for a self-contained page: its inline script and style allowed by hash."""
    hashes: dict[bytes, list[str]] = {b"script": [], b"style": []}
    for kind, body in _INLINE.findall(page):
        hashes[kind].append("'sha256-" + base64.b64encode(hashlib.sha256(body).digest()).decode() + "'")
    script = " ".join(hashes[b"script"]) or "'none'"
    style = " ".join(hashes[b"style"]) or "'none'"
    return (
        f"default-src 'none'; script-src {script}; style-src {style}; img-src data:; base-uri 'none'; "
        "form-action 'none'; frame-ancestors 'none'"
    ).encode()


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
