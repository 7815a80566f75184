"""Fetch one page of a customer's site for the console's install verifier, held to the private-address rule.

Every hop is resolved and checked before it is connected to (``outbound.pin``: the rule a proxy origin and the
target probe are held to; ``PROXY_ALLOW_PRIVATE=1`` lifts it), and the request goes to the address that was
checked, with the URL's ``Host`` and TLS server name. Redirects are followed by hand, at most
``MAX_REDIRECTS``, each new location checked again as a new hop; a redirect to anything but an absolute
http(s) URL without credentials ends the fetch. The whole exchange (DNS, every hop and the body) has
``TIMEOUT_SEC``, the body is read to ``MAX_BYTES`` (after decompression) and never further, and nothing is
kept but what the verifier reads out of it.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit, urlunsplit

from queue_manager import __version__, outbound
from queue_manager.engine.origins import origin_of

if TYPE_CHECKING:
    import httpx

TIMEOUT_SEC = 8.0
MAX_BYTES = 1024 * 1024  # the tag belongs in <head>: a megabyte of page is far past it
MAX_REDIRECTS = 5
USER_AGENT = f"queue-manager-verifier/{__version__}"
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


@dataclass(slots=True)
class Fetched:
    """What one fetch came to. ``status`` is the last hop's; ``body`` is empty unless that was a 2xx."""

    url: str
    final_url: str
    status: int | None = None
    content_type: str = ""
    body: bytes = b""
    truncated: bool = False
    redirects: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None  # the site could not be fetched (no answer, a bad redirect, too many…)
    refused: str | None = None  # a hop named a private or internal address and the rule refused it
    latency_ms: int | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "ok": self.error is None and self.refused is None and self.status is not None and self.status < 300,
            "status": self.status,
            "finalUrl": self.final_url,
            "redirects": self.redirects,
            "contentType": self.content_type or None,
            "bytes": len(self.body),
            "truncated": self.truncated,
            "error": self.error,
            "refused": self.refused,
            "latencyMs": self.latency_ms,
        }


class _Refused(Exception):
    pass


class _Failed(Exception):
    pass


async def _pin(url: str, allow_private: bool) -> tuple[str, dict[str, str], dict[str, Any]]:
    """``url`` with the checked address in place of its host, the Host header and the TLS server name."""
    try:
        pinned = await outbound.pin(url, allow_private=allow_private, what="the site")
    except outbound.Refused as exc:
        raise (_Refused if exc.private else _Failed)(str(exc)) from None
    return pinned.url, pinned.headers, pinned.extensions


def _next_hop(current: str, location: str | None) -> str:
    if not location:
        raise _Failed("a redirect without a Location")
    target = urljoin(current, location.strip())
    if origin_of(target) is None:
        raise _Failed(f"a redirect to {target[:200]!r}, which is not an http(s) URL this verifier follows")
    return urlunsplit(urlsplit(target)._replace(fragment=""))


async def _read(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    """The body, decoded, to ``limit`` bytes: (body, whether there was more)."""
    encoding = (response.headers.get("content-encoding") or "identity").strip().lower()
    if encoding not in ("identity", "gzip", "x-gzip", "deflate"):
        raise _Failed(f"the page came with Content-Encoding {encoding[:40]}, which this verifier does not read")
    inflate = None
    if encoding in ("gzip", "x-gzip"):
        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    elif encoding == "deflate":
        inflate = zlib.decompressobj()
    out = bytearray()
    raw_limit = limit * 4  # a compressed page whose first megabyte is not in this much is no page
    raw = 0
    async for chunk in response.aiter_raw():
        raw += len(chunk)
        if inflate is not None:
            try:
                chunk = inflate.decompress(chunk, limit + 1 - len(out))
            except zlib.error:
                raise _Failed("the page's compressed body is corrupt") from None
        out += chunk
        if len(out) > limit or raw > raw_limit:
            return bytes(out[:limit]), True
    return bytes(out), False


async def fetch(url: str, *, allow_private: bool, seconds: float = TIMEOUT_SEC, limit: int = MAX_BYTES) -> Fetched:
    """GET ``url`` (an absolute http(s) URL the caller has checked) the way a browser would reach it."""
    import httpx  # loaded by the first verification, not by every server start

    result = Fetched(url=url, final_url=url)
    started = time.monotonic()
    current = url
    try:
        async with (
            asyncio.timeout(seconds),
            httpx.AsyncClient(
                timeout=seconds,
                follow_redirects=False,
                trust_env=False,  # never through a proxy: the request goes to the address that was checked
                limits=httpx.Limits(max_keepalive_connections=0),
            ) as client,
        ):
            for hop in range(MAX_REDIRECTS + 1):
                pinned, host, extensions = await _pin(current, allow_private)
                request = client.build_request(
                    "GET",
                    pinned,
                    headers={
                        **host,
                        "user-agent": USER_AGENT,
                        "accept": "text/html,application/xhtml+xml;q=0.9,*/*;q=0.1",
                        "accept-encoding": "gzip, deflate",
                    },
                    extensions=extensions,
                )
                response = await client.send(request, stream=True)
                try:
                    result.status = response.status_code
                    result.final_url = current
                    if response.status_code in _REDIRECTS:
                        location = response.headers.get("location")
                        result.redirects.append({"status": response.status_code, "location": (location or "")[:2048]})
                        if hop == MAX_REDIRECTS:
                            raise _Failed(f"more than {MAX_REDIRECTS} redirects")
                        current = _next_hop(current, location)
                        continue
                    result.content_type = (response.headers.get("content-type") or "")[:200]
                    if 200 <= response.status_code < 300:
                        result.body, result.truncated = await _read(response, limit)
                    break
                finally:
                    await response.aclose()
    except _Refused as exc:
        result.refused = str(exc)
        result.final_url = current
    except _Failed as exc:
        result.error = str(exc)
    except TimeoutError:
        result.error = f"no answer within {seconds:g} s"
    except httpx.HTTPError as exc:
        name = type(exc).__name__
        result.error = f"{name}: {exc}" if str(exc) else name
    result.latency_ms = int((time.monotonic() - started) * 1000)
    return result
