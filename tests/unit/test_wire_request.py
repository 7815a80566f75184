"""http/wire.Request: headers as one dict per request; a repeated name is joined as HTTP says."""

from __future__ import annotations

from typing import Any

from queue_manager.http.wire import Request


async def _receive() -> dict[str, Any]:
    return {"type": "http.request", "body": b"", "more_body": False}


def scope(headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {"type": "http", "method": "GET", "path": "/", "query_string": b"", "headers": headers}


def test_distinct_headers_are_kept_as_sent() -> None:
    req = Request(
        scope([(b"host", b"q.example"), (b"user-agent", b"UA/1"), (b"origin", b"https://a.example")]), _receive, "/"
    )
    assert req.headers == {b"host": b"q.example", b"user-agent": b"UA/1", b"origin": b"https://a.example"}
    assert req.header(b"origin") == "https://a.example" and req.header(b"accept") is None


def test_a_repeated_header_is_joined_with_commas_and_cookies_with_semicolons() -> None:
    req = Request(
        scope(
            [
                (b"x-forwarded-for", b"203.0.113.1"),
                (b"cookie", b"a=1"),
                (b"x-forwarded-for", b"198.51.100.2"),
                (b"cookie", b"b=2"),
            ]
        ),
        _receive,
        "/",
    )
    assert req.headers[b"x-forwarded-for"] == b"203.0.113.1,198.51.100.2"
    assert req.headers[b"cookie"] == b"a=1; b=2"
    assert req.cookies == {"a": "1", "b": "2"}
