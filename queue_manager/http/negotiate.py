"""Content negotiation: the weighted lists of Accept, Accept-Encoding and Accept-Language, and If-None-Match."""

from __future__ import annotations

MAX_ITEMS = 20  # a header longer than this is somebody's fuzzer, not a browser


def weighted(header: str | None) -> list[tuple[str, float]]:
    """``"br;q=1, gzip;q=0.5, *;q=0"`` → ``[("br", 1.0), ("gzip", 0.5), ("*", 0.0)]`` in the order given.

    Tokens are lower-cased; a missing q is 1, an unreadable one 0 (refused); at most MAX_ITEMS are read."""
    items: list[tuple[str, float]] = []
    if not header:
        return items
    for part in header.split(",")[:MAX_ITEMS]:
        token, _, params = part.strip().partition(";")
        q = 1.0
        params = params.strip().lower()
        if params.startswith("q="):
            try:
                q = float(params[2:])
            except ValueError:
                q = 0.0
        items.append((token.strip().lower(), q))
    return items


def accepts(header: str | None, coding: str) -> bool:
    """Does this Accept-Encoding take ``coding`` (named, or by ``*``) with a q above 0?"""
    offered = dict(weighted(header))
    return offered.get(coding, offered.get("*", 0.0)) > 0


#: the headers an app sends to ask a gated address for JSON instead of the waiting page (besides Accept)
JSON_HEADER = b"x-qm-accept"
XHR_HEADER = b"x-requested-with"
#: what a response that answers the same address as a page or as JSON varies by
VARY_JSON = (b"vary", b"Accept, X-Requested-With, X-QM-Accept")


def prefers_json(accept: str | None) -> bool:
    """Does this Accept name ``application/json`` with a q above 0 and above ``text/html``'s?

    Only the types named count: a browser's ``*/*`` is not a request for JSON, and a tie goes to the page."""
    json_q = html_q = 0.0
    for token, q in weighted(accept):
        if token == "application/json":
            json_q = q
        elif token == "text/html":
            html_q = q
    return json_q > 0 and json_q > html_q


def wants_json(headers: dict[bytes, bytes]) -> bool:
    """Does this request ask for JSON rather than a page? ``X-QM-Accept: json``, ``X-Requested-With:
    XMLHttpRequest`` or an Accept that prefers ``application/json`` to ``text/html``."""
    asked = headers.get(JSON_HEADER)
    if asked is not None and asked.strip().lower() == b"json":
        return True
    xhr = headers.get(XHR_HEADER)
    if xhr is not None and xhr.strip().lower() == b"xmlhttprequest":
        return True
    accept = headers.get(b"accept")
    return accept is not None and b"json" in accept and prefers_json(accept.decode("latin-1"))


def etag_matches(if_none_match: bytes | None, *etags: bytes) -> bool:
    """Does an If-None-Match header name one of ``etags`` (weak or strong) or ``*``?"""
    if not if_none_match:
        return False
    for candidate in if_none_match.split(b","):
        tag = candidate.strip()
        if tag == b"*" or tag.removeprefix(b"W/") in etags:
            return True
    return False
