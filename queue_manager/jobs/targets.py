"""Target health for snippet rooms: is each room's ``targetUrl`` answering?

A snippet room (a ``targetUrl`` and no ``proxyOrigin``) sends the people it lets through to a site this
server never sees; an inline room's origin has a probe of its own (``inline/origin_health.py``). On every
alert frame the leader (``alert_frame.py``) calls :meth:`TargetProbe.round`, which starts a probe of each
snippet room last probed ``TARGET_PROBE_EVERY_MS`` ago or more (at once when its ``targetUrl`` changed):

* a ``HEAD`` of the ``targetUrl`` (a site that answers 405 or 501 to ``HEAD`` gets a ``GET`` whose body is
  never read), 5 s for the whole exchange, DNS included, redirects not followed (a 3xx is an answer),
  ``user-agent: queue-manager-probe/<version>``, a fresh connection each time. ok = an answer below
  500 in time;
* held to the private-address rule (``outbound.pin``): a name with any private or internal address is
  refused unless ``PROXY_ALLOW_PRIVATE=1``, and the probe connects to the address it checked. A refused
  probe is a configuration matter shown in the panel (its summary says which setting allows it, and how
  to stop probing), not a failing site;
* a ``targetUrl`` under a name reserved never to resolve (``.example``, ``.invalid``, ``.test`` and the
  ``example.com/.net/.org`` documentation domains: RFC 2606, RFC 6761) is not probed at all: its result
  says ``notProbed`` with the reason, ``ok`` is null, and it is neither failing nor degrading health;
* at most 8 at once, beside the frames: a frame never waits for a site, and a room whose probe is still
  running is not probed again.

Each result goes to the ``targets`` report the fleet shares (one field per room), so one instance probes
and every instance reads the same; a room that is gone, or became inline, is taken out of it. ``seen`` is
what this instance last read of that report: the alert frame sets it on every instance.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from queue_manager import __version__
from queue_manager.clock import Clock
from queue_manager.config import Settings
from queue_manager.jobs.shared_state import Shared
from queue_manager.outbound import Pinned, Refused, pin

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("queue_manager.targets")

TIMEOUT_SEC = 5.0
CONCURRENCY = 8
USER_AGENT = f"queue-manager-probe/{__version__}"
REPORT = "targets"
#: Top-level names reserved never to be delegated (RFC 2606 section 2; RFC 6761 sections 6.2, 6.4, 6.5).
#: ``localhost`` is not among them: it resolves, to loopback, and is judged by the private-address rule.
RESERVED_TLDS = frozenset({"example", "invalid", "test"})
#: Second-level names reserved for documentation (RFC 2606 section 3), and every name under them.
RESERVED_DOMAINS = ("example.com", "example.net", "example.org")
#: What a probe refused by the private-address rule reads: the setting that allows it, and the way out.
REFUSED_PRIVATE = (
    "refused: a private or internal address (set PROXY_ALLOW_PRIVATE=1 to probe a site on this network, "
    "or TARGET_PROBE=0 to stop probing)"
)


def reserved_name(host: str) -> bool:
    """Whether ``host`` is a name reserved for examples and tests, which never resolves on the Internet."""
    name = host.lower().rstrip(".")
    if name.rpartition(".")[2] in RESERVED_TLDS:
        return True
    return any(name == domain or name.endswith("." + domain) for domain in RESERVED_DOMAINS)


def snippet_targets(rooms: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """room id -> targetUrl, for every room that is not inline."""
    return {str(r["id"]): str(r["targetUrl"]) for r in rooms if r.get("targetUrl") and not r.get("proxyOrigin")}


def failing(result: Mapping[str, Any]) -> bool:
    """A probe that got no answer below 500; a refused probe is not one, nor a target that is not probed."""
    return result.get("ok") is False and not result.get("refused")


def outcome(result: Mapping[str, Any]) -> str:
    """What the site did, without the method and the URL: ``503``, ``timed out after 5 s``…"""
    return str(result.get("summary") or "").rpartition(" → ")[2] or "no answer"


class TargetProbe:
    def __init__(self, settings: Settings, shared: Shared, clock: Clock, *, timeout: float = TIMEOUT_SEC) -> None:
        self.shared = shared
        self.clock = clock
        self.every_ms = settings.target_probe_every_ms
        self.enabled = settings.target_probe
        self.allow_private = settings.proxy_allow_private
        self.timeout = timeout
        self.seen: dict[str, dict[str, Any]] = {}  # the fleet's report as this instance last read it
        self._started: dict[str, tuple[str, int]] = {}  # room -> (url, wall ms) of its last probe
        self._written: dict[str, dict[str, Any]] = {}  # room -> the last result this instance wrote
        self._running: dict[str, asyncio.Task[None]] = {}
        self._slots: asyncio.Semaphore | None = None
        self._client: httpx.AsyncClient | None = None

    # ------------------------------------------------------------------ the leader's round

    async def round(self, rooms: Sequence[Mapping[str, Any]], now: int) -> None:
        """Start the probes that are due and take rooms that are no longer snippet rooms out of the report."""
        targets = snippet_targets(rooms) if self.enabled else {}  # TARGET_PROBE=0: none, and none reported
        for room_id in sorted((set(self.seen) | set(self._written)) - set(targets)):
            self._written.pop(room_id, None)
            self._started.pop(room_id, None)
            await self.shared.report(REPORT, room_id, None)
        for room_id, url in targets.items():
            running = self._running.get(room_id)
            if running is not None and not running.done():
                continue
            last = self._started.get(room_id)
            if last is not None and last[0] == url and now - last[1] < self.every_ms:
                continue
            self._started[room_id] = (url, now)
            task = asyncio.create_task(self._probe_room(room_id, url), name=f"qm-target-probe-{room_id}")
            self._running[room_id] = task
            task.add_done_callback(functools.partial(self._finished, room_id))

    def _finished(self, room_id: str, task: asyncio.Task[None]) -> None:
        if self._running.get(room_id) is task:
            del self._running[room_id]

    async def _probe_room(self, room_id: str, url: str) -> None:
        if self._slots is None:
            self._slots = asyncio.Semaphore(CONCURRENCY)
        try:
            async with self._slots:
                result = await self.probe(url)
            previous = self._written.get(room_id) or self.seen.get(room_id) or {}
            since = None
            if failing(result):
                if previous.get("url") == url and failing(previous):
                    since = previous.get("failingSince")
                since = since or result["checkedAt"]
            result["failingSince"] = since
            self._written[room_id] = result
            await self.shared.report(REPORT, room_id, result)
        except Exception:  # pragma: no cover - logged, the next round probes again
            log.exception("target probe of %s failed", room_id)

    # ------------------------------------------------------------------ one probe

    async def probe(self, url: str) -> dict[str, Any]:
        """Probe one URL now: the result as the report stores it (``failingSince`` is the caller's)."""
        checked_at = self.clock.wall_ms()
        host = urlsplit(url).hostname or ""
        if reserved_name(host):
            return {
                "url": url,
                "method": None,
                "ok": None,
                "status": None,
                "latencyMs": None,
                "summary": f"{url} → not probed: {host} is a name reserved for examples, which never resolves",
                "error": None,
                "refused": None,
                "notProbed": "reserved name",
                "checkedAt": checked_at,
                "failingSince": None,
            }
        import httpx  # loaded by the first probe, not by every server start

        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=self.timeout,
                follow_redirects=False,
                trust_env=False,  # never through a proxy: the request goes to the address that was checked
                limits=httpx.Limits(max_keepalive_connections=0),  # a fresh connection: no other site's TLS
            )
        client = self._client
        started = time.monotonic()
        method = "HEAD"
        status: int | None = None
        error: str | None = None
        refused: str | None = None
        try:
            async with asyncio.timeout(self.timeout):
                target = await pin(url, allow_private=self.allow_private)
                status = await self._ask(client, "HEAD", target)
                if status in (405, 501):
                    method = "GET"
                    status = await self._ask(client, "GET", target)
            answer = str(status)
            if status >= 500:
                error = f"HTTP {status}"
        except Refused as exc:
            if exc.private:
                refused, answer = str(exc), REFUSED_PRIVATE
            else:
                error, answer = str(exc), "does not resolve"
        except (TimeoutError, httpx.TimeoutException):
            error = answer = f"timed out after {self.timeout:g} s"
        except httpx.HTTPError as exc:
            name = type(exc).__name__
            error = f"{name}: {exc}" if str(exc) else name
            answer = "connection failed" if isinstance(exc, httpx.ConnectError) else f"failed ({name})"
        return {
            "url": url,
            "method": method,
            "ok": status is not None and status < 500,
            "status": status,
            "latencyMs": None if status is None else int((time.monotonic() - started) * 1000),
            "summary": f"{method} {url} → {answer}",
            "error": error,
            "refused": refused,
            "notProbed": None,
            "checkedAt": checked_at,
            "failingSince": None,
        }

    async def _ask(self, client: httpx.AsyncClient, method: str, target: Pinned) -> int:
        """The status of one request; the body, if any, is never read."""
        request = client.build_request(
            method, target.url, headers={**target.headers, "user-agent": USER_AGENT}, extensions=target.extensions
        )
        response = await client.send(request, stream=True)
        await response.aclose()
        return response.status_code

    # ------------------------------------------------------------------ what the routes read

    def view(self, *, full: bool) -> dict[str, dict[str, Any]]:
        """room -> its last result; without ``full`` no error text and ``refused: true`` for the refusal's
        text (either can name an internal address)."""
        out: dict[str, dict[str, Any]] = {}
        for room_id, result in sorted(self.seen.items()):
            row = dict(result)
            if not full:
                row["error"] = None
                row["refused"] = True if result.get("refused") else None
            out[room_id] = row
        return out

    async def close(self) -> None:
        running = list(self._running.values())
        for task in running:
            task.cancel()
        for task in running:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._client is not None:
            await self._client.aclose()
            self._client = None
