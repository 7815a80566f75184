"""The gate's pure decisions: does a request skip the queue check (:mod:`queue_manager.http.static_paths`),
and does a person see the answer?
"""

from __future__ import annotations

from queue_manager.http.negotiate import wants_json
from queue_manager.http.static_paths import BROWSING_DESTS, STATIC_EXTENSIONS, plain_path, skips_gate, static_extension

__all__ = ["BROWSING_DESTS", "STATIC_EXTENSIONS", "is_navigation", "plain_path", "skips_gate", "static_extension"]


def is_navigation(headers: dict[bytes, bytes]) -> bool:
    """Will a browser show the answer to a person? Not when the request asks for JSON (``X-QM-Accept: json``,
    ``X-Requested-With: XMLHttpRequest``, an Accept preferring JSON); else Fetch Metadata first, ``Accept:
    text/html`` without it."""
    if wants_json(headers):
        return False
    mode = headers.get(b"sec-fetch-mode")
    dest = headers.get(b"sec-fetch-dest")
    if mode is not None or dest is not None:
        return mode == b"navigate" or (dest is not None and dest.lower() in BROWSING_DESTS)
    return b"text/html" in headers.get(b"accept", b"")
