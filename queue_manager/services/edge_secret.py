"""EDGE_SECRET: every request and upgrade must carry X-QM-Edge equal to a listed value.

Compared in constant time against every listed value (comma-separated, for rotation). The refusal
names no header. ``/healthz`` (GET/HEAD of exactly that path, any query) is the one exemption, for
a platform health check that reaches the container directly. The header is never logged, audited
or forwarded.
"""

from __future__ import annotations

import hmac

from queue_manager.http.wire import Scope

EDGE_EXEMPT = frozenset({b"/healthz"})
EDGE_HEADER = b"x-qm-edge"

REFUSAL_PAGE = (
    b"<!doctype html><html lang=en><meta charset=utf-8><meta name=robots content=noindex>"
    b'<title>Forbidden</title><body style="font:16px system-ui,sans-serif;margin:3rem auto;max-width:30rem">'
    b"<h1 style=font-size:1.3rem>This address is not served directly</h1>"
    b"<p>Please use the site's public address.</p></body></html>"
)


class EdgeGate:
    def __init__(self, secrets: tuple[str, ...]) -> None:
        self._secrets = tuple(s.encode() for s in secrets)

    @property
    def enabled(self) -> bool:
        return bool(self._secrets)

    def exempt(self, scope: Scope) -> bool:
        raw = scope.get("raw_path") or scope.get("path", "").encode()
        return scope.get("method") in ("GET", "HEAD") and raw.split(b"?", 1)[0] in EDGE_EXEMPT

    def passes(self, scope: Scope) -> bool:
        value = b""
        for k, v in scope.get("headers", ()):
            if k == EDGE_HEADER:
                value = v
                break
        ok = False
        for secret in self._secrets:  # every value compared, so timing says nothing about which matched
            ok |= hmac.compare_digest(value, secret)
        return ok


def wants_page(scope: Scope) -> bool:
    """Would a browser show this answer to a person (a navigation)?"""
    mode = dest = accept = b""
    for k, v in scope.get("headers", ()):
        if k == b"sec-fetch-mode":
            mode = v
        elif k == b"sec-fetch-dest":
            dest = v
        elif k == b"accept":
            accept = v
    if mode:
        return mode == b"navigate" or dest in (b"document", b"iframe", b"frame", b"object", b"embed")
    return b"text/html" in accept
