"""Where the server's own requests may go: alert deliveries, target probes and the install verifier's page
fetch, held to the private-address rule.

:func:`pin` resolves a URL's host and refuses it when any address the name resolves to is private or
internal (``ssrf.py``: the rule a proxy origin is held to), unless the operator allowed it. It returns
the URL rewritten to the first address it checked, with the ``Host`` header and the TLS server name of
the original URL, so the request goes to the address that was checked: a name that starts resolving to
an internal address between the check and the connect cannot be used to reach it.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from queue_manager import ssrf


class Refused(Exception):
    """The request is not made: the host does not resolve (``private`` False), or it resolves to a
    private or internal address the rule refuses (``private`` True)."""

    def __init__(self, message: str, *, private: bool) -> None:
        super().__init__(message)
        self.private = private


@dataclass(frozen=True, slots=True)
class Pinned:
    """A URL with the checked address in place of its host, and what keeps the request the URL's."""

    url: str
    headers: dict[str, str] = field(default_factory=dict)  # Host
    extensions: dict[str, Any] = field(default_factory=dict)  # the TLS server name (httpx)


async def pin(url: str, *, allow_private: bool, setting: str = "PROXY_ALLOW_PRIVATE", what: str = "the app") -> Pinned:
    """Resolve and check ``url``'s host; a refusal names ``setting`` (the variable that allows it) and
    ``what`` is on the private network (see ``ssrf.OriginRefused``)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise Refused(f"{host} does not resolve ({exc.strerror or exc})", private=False) from None
    addresses = [str(info[4][0]) for info in infos]
    if not addresses:
        raise Refused(f"{host} does not resolve", private=False)
    if not allow_private:
        for address in addresses:
            if ssrf.is_private(address):
                raise Refused(str(ssrf.OriginRefused(host, address, setting=setting, what=what)), private=True)
    address = addresses[0]
    literal = f"[{address}]" if ":" in address else address
    netloc = literal if parts.port is None else f"{literal}:{parts.port}"
    headers = {"host": parts.netloc.rpartition("@")[2]}
    extensions: dict[str, Any] = {"sni_hostname": host} if parts.scheme == "https" else {}
    return Pinned(urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, "")), headers, extensions)
