"""Content negotiation: the weighted lists of Accept-Encoding and Accept-Language, and If-None-Match, read one way."""

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


def etag_matches(if_none_match: bytes | None, *etags: bytes) -> bool:
    """Does an If-None-Match header name one of ``etags`` (weak or strong) or ``*``?"""
    if not if_none_match:
        return False
    for candidate in if_none_match.split(b","):
        tag = candidate.strip()
        if tag == b"*" or tag.removeprefix(b"W/") in etags:
            return True
    return False
