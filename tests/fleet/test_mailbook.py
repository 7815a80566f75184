"""The turn-e-mail address book against a real Valkey: one claim for the whole fleet, TTLs, the index."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from queue_manager.clock import FakeClock
from queue_manager.sidestores.mailbook.base import Entry, Place
from queue_manager.sidestores.mailbook.valkey import ValkeyAddressBook
from queue_manager.store.valkey import keys
from tests.fleet.test_leader import _cleanup


@pytest.fixture(autouse=True)
async def _clean(client: Redis, prefix: str) -> AsyncIterator[None]:
    yield
    await _cleanup(client, prefix)


def entry(n: int, address: str = "v@example.com") -> Entry:
    return Entry(Place("shop", 3, n), address, "th", "https://q.example/w/shop", 1_767_225_600_000)


async def test_two_instances_claim_one_entry_once(client: Redis, prefix: str) -> None:
    clock = FakeClock()
    a, b = ValkeyAddressBook(client, prefix, clock), ValkeyAddressBook(client, prefix, clock)
    await a.put(entry(1), 60_000)
    assert await a.counts() == (1, 1)
    assert await b.claim(Place("shop", 3, 1)) is True
    assert await a.claim(Place("shop", 3, 1)) is False  # the old leader, late: refused
    assert await b.claim(Place("shop", 3, 2)) is False  # nothing there: nothing created either
    assert not await client.exists(keys.mail_key(prefix, "shop", 3, 2))
    got = await a.get(Place("shop", 3, 1))
    assert (
        got is not None
        and got.sent
        and (got.address, got.lang, got.link)
        == (
            "v@example.com",
            "th",
            "https://q.example/w/shop",
        )
    )
    assert await a.counts() == (1, 0)


async def test_a_new_address_replaces_the_old_and_unclaims(client: Redis, prefix: str) -> None:
    book = ValkeyAddressBook(client, prefix, FakeClock())
    await book.put(entry(1, "old@example.com"), 60_000)
    assert await book.claim(Place("shop", 3, 1))
    await book.put(entry(1, "new@example.com"), 60_000)
    got = await book.get(Place("shop", 3, 1))
    assert got is not None and got.address == "new@example.com" and not got.sent
    assert [e.address for e in await book.entries()] == ["new@example.com"]


async def test_lapse_sets_the_ttl_once_and_the_index_forgets_expired_keys(client: Redis, prefix: str) -> None:
    book = ValkeyAddressBook(client, prefix, FakeClock())
    place = Place("shop", 3, 7)
    await book.put(entry(7), 3_600_000)
    key = keys.mail_key(prefix, "shop", 3, 7)
    assert 3_500_000 < await client.pttl(key) <= 3_600_000  # the backstop
    await book.lapse(place, 5_000)
    assert 0 < await client.pttl(key) <= 5_000
    await book.lapse(place, 60_000)  # a later scan does not extend it
    assert await client.pttl(key) <= 5_000
    assert await book.counts() == (1, 0)
    await client.delete(key)  # what the TTL does
    assert await book.entries() == []
    assert await book.counts() == (0, 0)


async def test_remove_says_whether_there_was_one(client: Redis, prefix: str) -> None:
    book = ValkeyAddressBook(client, prefix, FakeClock())
    await book.put(entry(1), 60_000)
    assert await book.remove(Place("shop", 3, 1)) is True
    assert await book.remove(Place("shop", 3, 1)) is False
    assert await book.get(Place("shop", 3, 1)) is None and await book.counts() == (0, 0)
