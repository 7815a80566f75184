"""A room's entry keys and codes on both kinds (this process's and PostgreSQL's): a rotation keeps the
replaced key for the overlap, keys past it are gone; codes stored once, a use spent atomically (one of many
racing redemptions wins the last use), given back, counted per lane, removed."""

from __future__ import annotations

import asyncio
import time

from queue_manager.clock import FakeClock
from queue_manager.journal.database import Database
from queue_manager.sidestores.entrycodes.base import EntryCodes, StoredCode
from queue_manager.sidestores.entrycodes.memory import MemoryEntryCodes
from queue_manager.sidestores.entrycodes.pg import PgEntryCodes
from queue_manager.sidestores.entrykeys.base import EntryKeys, SealedKey
from queue_manager.sidestores.entrykeys.memory import MemoryEntryKeys
from queue_manager.sidestores.entrykeys.pg import PgEntryKeys


def near_now() -> FakeClock:
    return FakeClock(wall_ms=int(time.time() * 1000))


async def test_keys_in_this_process() -> None:
    clock = near_now()
    await rotation_keeps_the_old_key_for_the_overlap(clock, MemoryEntryKeys(clock))


async def test_keys_in_postgresql(db: Database) -> None:
    clock = near_now()
    await rotation_keeps_the_old_key_for_the_overlap(clock, PgEntryKeys(db, clock))


async def test_codes_in_this_process() -> None:
    await codes_are_spent_once_per_use(MemoryEntryCodes())


async def test_codes_in_postgresql(db: Database) -> None:
    await codes_are_spent_once_per_use(PgEntryCodes(db))


def key(clock: FakeClock, kid: str) -> SealedKey:
    return SealedKey(kid, kid.encode() * 4, clock.wall_ms(), None)


async def rotation_keeps_the_old_key_for_the_overlap(clock: FakeClock, keys: EntryKeys) -> None:
    assert await keys.rotate("shop", key(clock, "k1"), 60_000) is None  # the room's first key
    assert [k.kid for k in await keys.keys("shop")] == ["k1"]
    clock.advance(10)
    previous = await keys.rotate("shop", key(clock, "k2"), 60_000)
    assert previous is not None and previous.kid == "k1"
    assert previous.valid_until_ms == clock.wall_ms() + 60_000
    listed = await keys.keys("shop")
    assert [k.kid for k in listed] == ["k2", "k1"] and listed[0].valid_until_ms is None  # current first
    assert listed[1].sealed == b"k1" * 4
    clock.advance(30)
    await keys.rotate("shop", key(clock, "k3"), 60_000)  # k1 keeps its own (earlier) end
    assert [k.kid for k in await keys.keys("shop")] == ["k3", "k2", "k1"]
    clock.advance(31)
    assert [k.kid for k in await keys.keys("shop")] == ["k3", "k2"]  # k1 past its end
    await keys.rotate("shop", key(clock, "k4"), 0)  # no overlap (a leaked key): every older key stops at once
    assert [k.kid for k in await keys.keys("shop")] == ["k4"]
    assert await keys.keys("other") == []
    await keys.drop("shop")
    assert await keys.keys("shop") == []


async def codes_are_spent_once_per_use(codes: EntryCodes) -> None:
    salt = await codes.salt("shop")
    assert len(salt) == 16 and await codes.salt("shop") == salt  # made once
    assert await codes.salt("other") != salt
    rows = [StoredCode(b"a" * 32, "press", 1), StoredCode(b"b" * 32, None, 2), StoredCode(b"a" * 32, None, 9)]
    assert await codes.add("shop", rows) == 2  # the repeat of a is not stored again
    assert (await codes.redeem("shop", b"a" * 32)).lane == "press"
    assert (await codes.redeem("shop", b"a" * 32)).outcome == "used_up"
    assert (await codes.redeem("shop", b"z" * 32)).outcome == "invalid"
    assert (await codes.redeem("other", b"b" * 32)).outcome == "invalid"  # rooms apart
    # two uses of b, six redemptions racing: two win
    raced = await asyncio.gather(*(codes.redeem("shop", b"b" * 32) for _ in range(6)))
    assert sorted(r.outcome for r in raced) == ["ok", "ok", "used_up", "used_up", "used_up", "used_up"]
    await codes.give_back("shop", b"b" * 32)
    assert (await codes.redeem("shop", b"b" * 32)).outcome == "ok"
    assert await codes.counts("shop") == {
        "press": {"codes": 1, "uses": 1, "redeemed": 1},
        "": {"codes": 1, "uses": 2, "redeemed": 2},
    }
    assert await codes.drop("shop") == 2
    assert await codes.counts("shop") == {}
    assert (await codes.redeem("shop", b"b" * 32)).outcome == "invalid"
