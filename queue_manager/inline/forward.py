"""Headers across the proxy: what the app receives and what the visitor gets back.

* Hop-by-hop headers (and every header the ``Connection`` header names) never cross.
* ``X-QM-Edge`` (the edge secret) and the ``qm_console`` cookie never reach the app; a ``Set-Cookie``
  from the app naming ``qm_console`` never reaches the visitor.
* The visitor's ``Host`` is kept. ``X-Forwarded-Host/-Proto/-Port/-For`` describe the visitor's hop.
  The rightmost ``X-Forwarded-For`` entry is always the client address this server resolved; from a
  proxy listed in TRUST_PROXY_IPS the chain it sent is kept to the left of it and its Forwarded,
  X-Real-IP, CF-Connecting-IP and True-Client-IP pass through; from any other peer they are dropped.
"""

from __future__ import annotations

from queue_manager.http import cookies
from queue_manager.http.hostname import split_host
from queue_manager.services.identity import Identity

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
# the caller's own words unless it is a listed proxy
FORWARDED_IN = frozenset({b"forwarded", b"x-real-ip", b"cf-connecting-ip", b"true-client-ip"})
# rebuilt by this server, never passed through as sent
REBUILT = frozenset({b"x-forwarded-for", b"x-forwarded-host", b"x-forwarded-proto", b"x-forwarded-port"})
NEVER_UP = frozenset({b"x-qm-edge", b"expect", b"content-length", b"host"})
CONSOLE_COOKIE = cookies.CONSOLE


def _named_in_connection(headers: list[tuple[bytes, bytes]]) -> frozenset[bytes]:
    """The header names ``Connection`` lists, less the hop-by-hop ones (dropped anyway)."""
    named: frozenset[bytes] = NONE_NAMED
    for k, v in headers:
        if k == b"connection":
            named = named | _connection_names(v) if named else _connection_names(v)
    return named


def _connection_names(value: bytes) -> frozenset[bytes]:
    """One Connection header's names beyond the hop-by-hop ones; the few short values browsers and
    apps send (``keep-alive``, ``close``, ``Upgrade``) are remembered, at most 256 of 64 bytes or less."""
    named = _NAMED.get(value)
    if named is None:
        named = frozenset(t.strip().lower() for t in value.split(b",") if t.strip()) - HOP_BY_HOP
        if len(value) <= 64:  # a client's long or endless variety costs it the split, never our memory
            if len(_NAMED) >= 256:
                _NAMED.clear()
            _NAMED[value] = named
    return named


NONE_NAMED: frozenset[bytes] = frozenset()
_NAMED: dict[bytes, frozenset[bytes]] = {}


def strip_console_cookie(value: bytes) -> bytes:
    """The Cookie header without ``qm_console`` (every other cookie untouched, in order)."""
    if CONSOLE_COOKIE.encode() not in value:
        return value
    kept = [p for p in value.split(b";") if p.strip().partition(b"=")[0].strip() != CONSOLE_COOKIE.encode()]
    return b";".join(kept).strip()


# every request header name the app never receives as sent (Host and X-Forwarded-* are rebuilt)
DROP_UP = HOP_BY_HOP | REBUILT | NEVER_UP
#: the app's command to the queue (``X-QM-Command: revoke``): acted on by the proxy, never shown to the visitor
COMMAND = b"x-qm-command"
DROP_DOWN = HOP_BY_HOP | {b"date", COMMAND}


def commands(headers: list[tuple[bytes, bytes]]) -> frozenset[bytes]:
    """What the app's response asks of the queue: each ``X-QM-Command`` value, lower case (``revoke``)."""
    return frozenset(part.strip().lower() for k, v in headers if k == COMMAND for part in v.split(b",") if part.strip())


CONSOLE_SET_COOKIE = CONSOLE_COOKIE.encode()


def upstream_headers(
    headers: list[tuple[bytes, bytes]], ident: Identity, trusted: bool, *, upgrade: bool = False
) -> list[tuple[bytes, bytes]]:
    """The request headers the app receives (Host first; body framing is added by the caller)."""
    out: list[tuple[bytes, bytes]] = []
    host = b""
    chain = b""
    fwd_host = b""
    connection = False
    for k, v in headers:
        if k in DROP_UP:
            if k == b"host":
                if not host:
                    host = v
            elif k == b"x-forwarded-for":
                chain = chain + b", " + v if chain else v
            elif k == b"x-forwarded-host":
                if ident.trusted_peer and not fwd_host:  # never believed via the edge
                    fwd_host = v
            elif k == b"connection":
                connection = True
            continue
        if k in FORWARDED_IN and not trusted:
            continue
        if k == b"cookie":
            v = strip_console_cookie(v)
            if not v:
                continue
        out.append((k, v))
    if connection:  # and what the Connection header names
        named = _named_in_connection(headers)
        if named:
            out = [(k, v) for k, v in out if k not in named]
    scheme = ident.scheme
    if fwd_host or b":" in host or b"," in host:
        shown_host = (fwd_host or host).decode("latin-1").split(",")[0].strip()
        port = split_host(shown_host, scheme)[1] if shown_host else (443 if scheme == "https" else 80)
        shown = shown_host.encode("latin-1")
    else:
        shown = host.strip()
        port = 443 if scheme == "https" else 80
    client = ident.ip.encode()
    xff = chain.strip() + b", " + client if trusted and chain.strip() else client
    head = [(b"host", host)] if host else []
    head += [
        (b"x-forwarded-for", xff),
        (b"x-forwarded-host", shown),
        (b"x-forwarded-proto", scheme.encode()),
        (b"x-forwarded-port", b"443" if port == 443 else b"80" if port == 80 else str(port).encode()),
    ]
    if upgrade:
        head += [(b"connection", b"upgrade"), (b"upgrade", b"websocket")]
    return head + out


def downstream_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The response headers the visitor receives (the server adds its own framing and Date)."""
    out: list[tuple[bytes, bytes]] = []
    connection = False
    for k, v in headers:
        if k in DROP_DOWN:
            connection = connection or k == b"connection"
            continue
        if k == b"set-cookie" and v.split(b"=", 1)[0].strip() == CONSOLE_SET_COOKIE:
            continue
        out.append((k, v))
    if connection:  # and what the Connection header names
        named = _named_in_connection(headers)
        if named:
            out = [(k, v) for k, v in out if k not in named]
    return out


def request_head(method: str, target: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
    lines = [b"%s %s HTTP/1.1" % (method.encode("latin-1"), target)]
    lines += [k + b": " + v for k, v in headers]
    lines.append(b"\r\n")
    return b"\r\n".join(lines)
