"""The Python connector's request rules (connectors/python/qm_gate/_rules.py) are the queue's own inline gate's.

In-process: the static rule, the navigation test and the hand-off's token removal, case by case, against
queue_manager/inline/gate.py. The connector's behaviour in front of real apps is tests/connectors/
test_python_connector.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "connectors" / "python"))

from qm_gate import _rules

from queue_manager.inline import gate

STATIC_CASES = [
    ("GET", "/assets/app.js", None),
    ("HEAD", "/img/logo.PNG", "image"),
    ("GET", "/fonts/a.woff2", "font"),
    ("POST", "/assets/app.js", None),
    ("GET", "/api/stock.json", None),
    ("GET", "/robots.txt", None),
    ("GET", "/api/stock;.js", None),
    ("GET", "/a%2fb.css", None),
    ("GET", "/a\\b.css", None),
    ("GET", "/x/../admin.css", None),
    ("GET", "/x/./a.css", None),
    ("GET", "/.css", None),
    ("GET", "/app.css", "document"),
    ("GET", "/app.css", "IFRAME"),
    ("GET", "/app.css", "style"),
    ("GET", "/page", None),
    ("GET", "/v/clip.webm", "video"),
]

HEADER_CASES: list[dict[str, str]] = [
    {},
    {"accept": "text/html,application/xhtml+xml"},
    {"accept": "*/*"},
    {"accept": "application/json"},
    {"accept": "application/json;q=0.5, text/html"},
    {"accept": "text/html;q=0.4, application/json"},
    {"sec-fetch-mode": "navigate", "accept": "text/html"},
    {"sec-fetch-mode": "cors", "sec-fetch-dest": "empty", "accept": "text/html"},
    {"sec-fetch-dest": "iframe"},
    {"sec-fetch-mode": "navigate", "x-requested-with": "XMLHttpRequest"},
    {"sec-fetch-mode": "navigate", "x-qm-accept": "json"},
]


def test_the_static_extensions_are_the_inline_gates() -> None:
    assert _rules.STATIC_EXTENSIONS == gate.STATIC_EXTENSIONS


@pytest.mark.parametrize(("method", "path", "dest"), STATIC_CASES)
def test_what_skips_the_gate_is_the_inline_rule(method: str, path: str, dest: str | None) -> None:
    inline = gate.skips_gate(method, path.encode(), dest.encode() if dest is not None else None)
    assert _rules.skips_gate(method, path, dest) is inline


@pytest.mark.parametrize("headers", HEADER_CASES)
def test_a_navigation_is_what_the_inline_gate_calls_one(headers: dict[str, str]) -> None:
    visit = _rules.Visit("GET", "/", "", "https", headers, "203.0.113.9")
    assert _rules.is_navigation(visit) is gate.is_navigation({k.encode(): v.encode() for k, v in headers.items()})


def test_the_hand_off_token_is_taken_out_of_the_url() -> None:
    assert _rules.hand_off("https://s.example/p?a=1&qm_token=ab.cd&b=2") == ("ab.cd", "https://s.example/p?a=1&b=2")
    assert _rules.hand_off("https://s.example/p?qm_token=ab.cd") == ("ab.cd", "https://s.example/p")
    assert _rules.hand_off("https://s.example/p?a=1") == (None, "https://s.example/p?a=1")
    assert _rules.strip_token("b=2&qm_token=eyJh.eyJi.c2ln") == "b=2"
    assert _rules.is_invitation("eyJhbGciOiJIUzI1NiJ9.eyJyb29tIjoicyJ9.c2ln")
    assert not _rules.is_invitation("ab.cd")


def test_the_visitor_address_and_url_behind_trusted_proxies() -> None:
    headers = {"host": "app.internal:8000", "x-forwarded-for": "198.51.100.7, 10.0.0.2",
               "x-forwarded-proto": "https", "x-forwarded-host": "shop.example"}  # fmt: skip
    visit = _rules.Visit("GET", "/cart", "x=1", "http", headers, "10.0.0.3")
    assert _rules.client_ip(visit, 0) == "10.0.0.3"
    assert _rules.client_ip(visit, 1) == "10.0.0.2"
    assert _rules.client_ip(visit, 2) == "198.51.100.7"
    assert _rules.visitor_url(visit, 0) == "http://app.internal:8000/cart?x=1"
    assert _rules.visitor_url(visit, 1) == "https://shop.example/cart?x=1"
