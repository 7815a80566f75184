"""What a keep-alive connection repeats from one request to the next, worked out once per connection.

A browser sends the same header lines, in the same order, on every request of a keep-alive connection
for the pages of one site (the same ``User-Agent``, ``Accept``, ``Cookie`` …), and an app answers a page
with the same header lines within a second (its ``Date`` moves once a second). The fast path
(``inline/fastpath.py``) keeps, on each visitor connection, the last thing it built from such inputs
together with the inputs themselves, and uses it again only when every input is equal, compared whole:

* :class:`UpstreamHead` — the request head the app receives (``proxy.upstream_request``);
* :class:`CookieJar` — the visitor's parsed ``Cookie`` header (``Request.cookies``);
* :class:`ResponseHead` — the answer's head the visitor receives (``forward.downstream_headers`` and
  the framing, ``Relay.upstream_head``).

Nothing here decides anything: each memo returns exactly what the function it stands in front of
returns for the same inputs, and every rule that depends on the request (the door check, the skip
rules, the app's ``X-QM-Command``) still runs on every request. One entry per connection, replaced by
the next different one: the memory is the connection's, and goes with it.
"""

from __future__ import annotations

from typing import Any

from queue_manager.context import Context
from queue_manager.http.wire import Request
from queue_manager.inline import proxy
from queue_manager.services.identity import Identity


class UpstreamHead:
    """The last request head sent to the app on this connection, and what it was made from."""

    __slots__ = ("key", "value")

    def __init__(self) -> None:
        self.key: tuple[Any, ...] | None = None
        self.value: tuple[bytes, str] = (b"", "none")

    def get(self, ctx: Context, req: Request, ident: Identity) -> tuple[bytes, str]:
        """``proxy.upstream_request(ctx, req, ident)``: the head the app receives, and the body's framing."""
        scope = req.scope
        # everything upstream_request reads: the header lines as sent, the method and target, and the
        # identity's address, scheme and trust (with the edge secret's, which makes forwarders trusted)
        key = (
            scope["headers"],
            req.method,
            scope.get("raw_path"),
            scope["path"],
            scope.get("query_string"),
            ident.ip,
            ident.scheme,
            ident.trusted_peer,
            ctx.edge.enabled,
        )
        if key == self.key:
            return self.value
        value = proxy.upstream_request(ctx, req, ident)
        self.key = key
        self.value = value
        return value


class CookieJar:
    """The last ``Cookie`` header parsed on this connection, and its cookies."""

    __slots__ = ("jar", "raw")

    def __init__(self) -> None:
        self.raw: bytes | None = None
        self.jar: dict[str, str] | None = None

    def lend(self, req: Request) -> None:
        """Give ``req`` the cookies already parsed from the same ``Cookie`` header, if the last one was."""
        raw = self.raw
        if raw is not None and self.jar is not None and req.headers.get(b"cookie") == raw:
            req.reuse_cookies(self.jar)

    def keep(self, req: Request) -> None:
        """Remember ``req``'s cookies if they were parsed (a request that never read them is left alone)."""
        jar = req.parsed_cookies
        if jar is not None and jar is not self.jar:
            raw = req.headers.get(b"cookie")
            if raw is not None:
                self.raw = raw
                self.jar = jar


class ResponseHead:
    """The last answer's head written to the visitor on this connection, and what it was made from."""

    __slots__ = ("key", "value")

    def __init__(self) -> None:
        self.key: tuple[Any, ...] | None = None
        # the head, whether the body goes out chunked, whether the connection is kept, whether the app
        # asked the queue to revoke the visitor's session
        self.value: tuple[bytes, bool, bool, bool] = (b"", False, True, False)

    def get(self, key: tuple[Any, ...]) -> tuple[bytes, bool, bool, bool] | None:
        return self.value if key == self.key else None

    def put(self, key: tuple[Any, ...], value: tuple[bytes, bool, bool, bool]) -> None:
        self.key = key
        self.value = value
