"""Delivering a page: a JSON POST to ``ALERT_WEBHOOK_URL``, 5 s for the whole exchange.

The receiver's address is held to the rule a proxy origin is held to (``ssrf.py``): a private or
internal address is refused at start-up (``refusal``) and again at every delivery, on the addresses
the name resolves to then, unless ``ALERT_ALLOW_PRIVATE=1`` or ``PROXY_ALLOW_PRIVATE=1``. The request
goes to the address that was checked (``outbound.pin``: ``Host`` and TLS server name stay the URL's).

Every attempt is one ``Delivery``; the last 20 are kept in this process for ``GET /api/admin/alerts``.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections import deque
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import orjson

from queue_manager import __version__, ssrf
from queue_manager.config import ConfigRefusal, Settings
from queue_manager.outbound import Refused, pin

if TYPE_CHECKING:
    import httpx

TIMEOUT_SEC = 5.0
ALLOW_SETTING = "ALERT_ALLOW_PRIVATE"  # what a refusal of a private receiver tells the operator to set
RECEIVER = "the receiver"
LOG_KEEP = 20


@dataclass(slots=True)
class Delivery:
    at: int  # wall ms the attempt started
    event: str
    status: str  # firing | resolved
    severity: str
    roomId: str | None
    ts: int
    ok: bool
    httpStatus: int | None
    error: str | None
    durationMs: int
    attempt: int
    test: bool

    def public(self, *, full: bool) -> dict[str, Any]:
        out = asdict(self)
        if not full:
            out["error"] = None if self.ok else "failed"  # a refusal or a connect error can name an address
        return out


def allow_private(settings: Settings) -> bool:
    return settings.alert_allow_private or settings.proxy_allow_private


def refusal(settings: Settings) -> ConfigRefusal | None:
    """Start-up: a webhook on a private or internal address, not explicitly allowed."""
    url = settings.alert_webhook_url
    if not url or allow_private(settings):
        return None
    host = urlsplit(url).hostname or ""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return None  # does not resolve now: every delivery checks again, and fails until it does
    for info in infos:
        address = str(info[4][0])
        if ssrf.is_private(address):
            refused = ssrf.OriginRefused(host, address, setting=ALLOW_SETTING, what=RECEIVER)
            return ConfigRefusal("ALERT_WEBHOOK_URL", f"ALERT_WEBHOOK_URL: {refused}")
    return None


class Webhook:
    def __init__(self, settings: Settings, wall_ms: Any) -> None:
        self.url = settings.alert_webhook_url
        self.allow_private = allow_private(settings)
        self.wall_ms = wall_ms
        self.log: deque[Delivery] = deque(maxlen=LOG_KEEP)
        self.sent = 0
        self.failed = 0
        self._client: httpx.AsyncClient | None = None

    @property
    def configured(self) -> bool:
        return bool(self.url)

    def where(self) -> str | None:
        """The receiver without its path and query (which often carry the receiver's secret)."""
        if not self.url:
            return None
        parts = urlsplit(self.url)
        origin = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"  # never the userinfo either
        return f"{origin}/…" if parts.path not in ("", "/") or parts.query else f"{origin}/"

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def send(self, body: dict[str, Any], *, attempt: int = 1, test: bool = False) -> Delivery:
        import httpx  # loaded by the first delivery, not by every server start

        started = time.monotonic()
        at = int(self.wall_ms())
        status: int | None = None
        error: str | None = None
        if not self.url:
            error = "no ALERT_WEBHOOK_URL is set"
        else:
            try:
                async with asyncio.timeout(TIMEOUT_SEC):
                    target = await pin(self.url, allow_private=self.allow_private, setting=ALLOW_SETTING, what=RECEIVER)
                    if self._client is None:
                        self._client = httpx.AsyncClient(timeout=TIMEOUT_SEC, follow_redirects=False)
                    reply = await self._client.post(
                        target.url,
                        content=orjson.dumps(body),
                        headers={
                            **target.headers,
                            "content-type": "application/json",
                            "user-agent": f"queue-manager/{__version__}",
                        },
                        extensions=target.extensions,
                    )
                    status = reply.status_code
                    if not 200 <= status < 300:
                        error = f"HTTP {status}"
            except Refused as exc:
                error = f"refused: {exc}"
            except TimeoutError:
                error = f"timed out after {TIMEOUT_SEC:g} s"
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        ok = error is None
        delivery = Delivery(
            at=at,
            event=str(body.get("event")),
            status=str(body.get("status")),
            severity=str(body.get("severity")),
            roomId=body.get("roomId"),
            ts=int(body.get("ts") or at),
            ok=ok,
            httpStatus=status,
            error=error,
            durationMs=int((time.monotonic() - started) * 1000),
            attempt=attempt,
            test=test,
        )
        self.log.appendleft(delivery)
        if ok:
            self.sent += 1
        else:
            self.failed += 1
        return delivery

    @staticmethod
    def final(delivery: Delivery) -> bool:
        """Whether the page is done with: delivered, or refused by the receiver for a reason a retry keeps."""
        status = delivery.httpStatus
        return delivery.ok or (status is not None and 400 <= status < 500 and status not in (408, 429))
