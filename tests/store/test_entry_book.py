"""The entry book on both kinds: a token id spent once until its exp, given back; a user key's place claimed
by the first join only; the counts per room."""

from __future__ import annotations

import time

from redis.asyncio import Redis

from queue_manager.clock import FakeClock
from queue_manager.sidestores.entrybook.base import EntryBook, entry_counts, report_tallies
from queue_manager.sidestores.entrybook.memory import MemoryEntryBook
from queue_manager.sidestores.entrybook.valkey import ValkeyEntryBook


def near_now() -> FakeClock:
    return FakeClock(wall_ms=int(time.time() * 1000))  # near the real clock: Valkey expires keys by it


async def test_in_this_process() -> None:
    clock = near_now()
    await the_book_keeps_what_the_join_needs(clock, MemoryEntryBook(clock), fake_time=True)


async def test_in_valkey(valkey: tuple[Redis, str]) -> None:
    client, prefix = valkey
    clock = near_now()
    await the_book_keeps_what_the_join_needs(clock, ValkeyEntryBook(client, prefix, clock), fake_time=False)


async def the_book_keeps_what_the_join_needs(clock: FakeClock, book: EntryBook, *, fake_time: bool) -> None:
    now = clock.wall_ms()
    assert await book.spend("shop", "jti-1", now + 60_000) is True
    assert await book.spend("shop", "jti-1", now + 60_000) is False  # once
    assert await book.spend("other", "jti-1", now + 60_000) is True  # rooms apart
    await book.forget("shop", "jti-1")
    assert await book.spend("shop", "jti-1", now + 60_000) is True  # given back: usable again
    if fake_time:  # past the token's exp the id is forgotten (Valkey: the key's own expiry)
        clock.advance(61)
        assert await book.spend("shop", "jti-1", clock.wall_ms() + 60_000) is True

    assert await book.claim_place("shop", "alice", "pending", 10_000) is None  # the first join claims
    assert await book.claim_place("shop", "alice", "3:7", 10_000) == "pending"  # the second is told
    await book.set_place("shop", "alice", "3:7", 60_000)
    assert await book.place("shop", "alice") == "3:7"
    assert await book.claim_place("shop", "alice", "pending", 10_000) == "3:7"
    assert await book.place("shop", "bob") is None
    await book.drop_place("shop", "alice")
    assert await book.place("shop", "alice") is None

    await book.tally("shop", "accepted")
    await book.tally("shop", "accepted")
    await book.tally("shop", "token_used")
    await book.tally("shop", "codeIssued", 5)
    await book.tally("shop", "codeRedeemed")
    await book.tally("shop", "code_invalid", 2)
    counts = entry_counts(await book.tallies("shop"))
    assert counts == {
        "tokensAccepted": 2,
        "tokensRefused": {"token_used": 1},
        "codesIssued": 5,
        "codesRedeemed": 1,
        "codesRefused": {"code_invalid": 2},
    }
    assert report_tallies(counts) == {
        "tokensAccepted": 2,
        "tokensRefused": 1,
        "codesIssued": 5,
        "codesRedeemed": 1,
        "codesRefused": 2,
    }
    assert await book.tallies("empty") == {}
