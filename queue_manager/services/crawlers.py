"""Verified crawlers: is the address that sends a crawler's User-Agent really that crawler's?

The check every vendor in ``engine.access_rules.CRAWLERS`` documents: the reverse look-up (PTR) of the
address names a host in one of the vendor's domains, and the forward look-up (A or AAAA) of that host
gives the address back. A User-Agent alone is a claim anyone can send.

Look-ups are asynchronous (dnspython's resolver, ``DNS_RESOLVER`` or the system's), bounded together by
``CRAWLER_DNS_TIMEOUT_MS``, and never block the event loop. Each (address, crawler) verdict is kept:
a verified one for ``CRAWLER_CACHE_SEC``, a refused one for the same time (the answer will not change
soon), a look-up that failed or timed out for a minute. Requests for an address being looked up share
the one look-up. At most ``CACHE_MAX`` verdicts are kept, the oldest dropped first. dnspython is imported
on the first look-up: a server whose rooms name no crawler never loads it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Callable
from typing import Any

from queue_manager.engine.access_rules import Crawler, in_domains

log = logging.getLogger("queue_manager.crawlers")

CACHE_MAX = 10_000
FAILED_TTL_SEC = 60.0


class CrawlerCheck:
    """The verdicts of one process, and its look-ups in flight."""

    def __init__(
        self,
        now: Callable[[], float],
        *,
        resolver_address: str | None = None,
        timeout_ms: int = 1000,
        cache_sec: int = 3600,
    ) -> None:
        self._now = now
        self._address = resolver_address
        self._timeout = timeout_ms / 1000.0
        self._ttl = float(cache_sec)
        self._verdicts: dict[tuple[str, str], tuple[bool, float]] = {}
        self._pending: dict[tuple[str, str], asyncio.Task[bool]] = {}
        self._resolver: Any = None
        self.lookups = 0  # look-ups started (what a cache hit never adds to)

    def cached(self, ip: str, crawler: Crawler) -> bool | None:
        """The kept verdict, or None when there is none (or it ran out)."""
        hit = self._verdicts.get((ip, crawler.name))
        if hit is None:
            return None
        verdict, until = hit
        if self._now() >= until:
            del self._verdicts[(ip, crawler.name)]
            return None
        return verdict

    async def verified(self, ip: str, crawler: Crawler) -> bool:
        """Whether ``ip`` is ``crawler``'s: the kept verdict, or a look-up awaited up to the timeout."""
        hit = self.cached(ip, crawler)
        if hit is not None:
            return hit
        key = (ip, crawler.name)
        task = self._pending.get(key)
        if task is None:
            self.lookups += 1
            task = asyncio.get_running_loop().create_task(self._lookup(ip, crawler))
            self._pending[key] = task
            task.add_done_callback(lambda _t: self._pending.pop(key, None))
        return await asyncio.shield(task)

    async def _lookup(self, ip: str, crawler: Crawler) -> bool:
        try:
            verdict = await asyncio.wait_for(self._confirm(ip, crawler), self._timeout)
            ttl = self._ttl
        except Exception as exc:
            log.info("crawler check of %s as %s failed: %s", ip, crawler.name, type(exc).__name__)
            verdict, ttl = False, min(self._ttl, FAILED_TTL_SEC)
        if len(self._verdicts) >= CACHE_MAX:
            del self._verdicts[next(iter(self._verdicts))]
        self._verdicts[(ip, crawler.name)] = (verdict, self._now() + ttl)
        return verdict

    async def _confirm(self, ip: str, crawler: Crawler) -> bool:
        import dns.asyncresolver
        import dns.exception
        import dns.resolver
        import dns.reversename

        resolver = self._resolver_of(dns.asyncresolver)
        addr = ipaddress.ip_address(ip)
        try:
            ptr = await resolver.resolve(dns.reversename.from_address(ip), "PTR")
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
            return False
        names = [r.target.to_text() for r in ptr]
        for name in names:
            if not in_domains(name, crawler.domains):
                continue
            kind = "A" if addr.version == 4 else "AAAA"
            try:
                answer = await resolver.resolve(name, kind)
            except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
                continue
            if any(ipaddress.ip_address(r.address) == addr for r in answer):
                return True
        return False

    def _resolver_of(self, module: Any) -> Any:
        if self._resolver is None:
            if self._address:
                resolver = module.Resolver(configure=False)
                host, port = split_address(self._address)
                resolver.nameservers = [host]
                resolver.port = port
            else:
                resolver = module.Resolver()
            resolver.lifetime = self._timeout
            self._resolver = resolver
        return self._resolver


def split_address(text: str) -> tuple[str, int]:
    """``host``, ``host:port``, ``[v6]:port`` or a bare IPv6 address; the port 53 unless given."""
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else 53
    if text.count(":") == 1:
        host, port = text.split(":")
        return host, int(port)
    return text, 53
