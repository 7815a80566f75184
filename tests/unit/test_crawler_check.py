"""Verified crawlers (services/crawlers.py) against a local DNS server: PTR in the vendor's domain and the
forward look-up giving the address back verifies; a wrong PTR or a forward mismatch does not; a verdict is
kept (no second question), a silent server is a failure kept briefly."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from queue_manager.engine.access_rules import CRAWLERS
from queue_manager.services.crawlers import CrawlerCheck, split_address
from tests.conformance.dnsserver import DnsServer

GOOGLE = CRAWLERS["googlebot"]


@pytest.fixture
def dns_server() -> Iterator[DnsServer]:
    server = DnsServer().start()
    yield server
    server.stop()


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def check(server: DnsServer, clock: Clock, timeout_ms: int = 2000) -> CrawlerCheck:
    return CrawlerCheck(clock, resolver_address=server.address, timeout_ms=timeout_ms, cache_sec=600)


def test_a_genuine_crawler_is_verified_once_and_kept(dns_server: DnsServer) -> None:
    dns_server.crawler("192.0.2.10", "crawl-192-0-2-10.googlebot.com")
    clock = Clock()
    crawlers = check(dns_server, clock)

    async def run() -> list[bool]:
        return [await crawlers.verified("192.0.2.10", GOOGLE), await crawlers.verified("192.0.2.10", GOOGLE)]

    assert asyncio.run(run()) == [True, True]
    assert dns_server.asked[("10.2.0.192.in-addr.arpa", "PTR")] == 1  # the second answer came from the cache
    assert dns_server.asked[("crawl-192-0-2-10.googlebot.com", "A")] == 1
    assert crawlers.lookups == 1
    clock.t += 601  # the verdict ran out: asked again
    assert asyncio.run(crawlers.verified("192.0.2.10", GOOGLE)) is True
    assert dns_server.asked[("10.2.0.192.in-addr.arpa", "PTR")] == 2


def test_an_ipv6_crawler(dns_server: DnsServer) -> None:
    dns_server.crawler("2001:db8::10", "crawl.googlebot.com")
    assert asyncio.run(check(dns_server, Clock()).verified("2001:db8::10", GOOGLE)) is True


def test_a_ptr_outside_the_vendors_domains_is_not_verified(dns_server: DnsServer) -> None:
    dns_server.crawler("192.0.2.20", "googlebot.com.impostor.example")
    assert asyncio.run(check(dns_server, Clock()).verified("192.0.2.20", GOOGLE)) is False
    assert dns_server.asked[("googlebot.com.impostor.example", "A")] == 0  # never asked forward


def test_a_forward_lookup_that_does_not_give_the_address_back_is_not_verified(dns_server: DnsServer) -> None:
    dns_server.crawler("192.0.2.30", "crawl-x.googlebot.com", forward=["192.0.2.99"])
    assert asyncio.run(check(dns_server, Clock()).verified("192.0.2.30", GOOGLE)) is False


def test_no_ptr_at_all_is_not_verified(dns_server: DnsServer) -> None:
    assert asyncio.run(check(dns_server, Clock()).verified("192.0.2.40", GOOGLE)) is False


def test_a_silent_server_is_not_verified_and_kept_briefly(dns_server: DnsServer) -> None:
    dns_server.silent.add("50.2.0.192.in-addr.arpa")
    clock = Clock()
    crawlers = check(dns_server, clock, timeout_ms=200)
    assert asyncio.run(crawlers.verified("192.0.2.50", GOOGLE)) is False
    assert crawlers.cached("192.0.2.50", GOOGLE) is False
    clock.t += 61
    assert crawlers.cached("192.0.2.50", GOOGLE) is None


def test_requests_for_one_address_share_one_lookup(dns_server: DnsServer) -> None:
    dns_server.crawler("192.0.2.60", "crawl.googlebot.com")
    crawlers = check(dns_server, Clock())

    async def run() -> list[bool]:
        return list(await asyncio.gather(*(crawlers.verified("192.0.2.60", GOOGLE) for _ in range(5))))

    assert asyncio.run(run()) == [True] * 5
    assert crawlers.lookups == 1


def test_resolver_addresses() -> None:
    assert split_address("127.0.0.1:5353") == ("127.0.0.1", 5353)
    assert split_address("10.0.0.2") == ("10.0.0.2", 53)
    assert split_address("[::1]:5353") == ("::1", 5353)
    assert split_address("::1") == ("::1", 53)
