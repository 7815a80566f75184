"""Room changes as an event: a save awaits every subscriber, one failing subscriber spoils nothing, another
instance's change is announced without waiting, and the inline proxy's host index is a subscriber."""

from __future__ import annotations

import asyncio
import logging

import pytest

from queue_manager.config import load_settings
from queue_manager.server import Server
from queue_manager.services.room_changes import RoomChanges

GOOD = {"ADMIN_KEY": "k" * 40, "SECRET": "s" * 48, "PUBLIC_API_KEY": "p" * 40}


async def test_announce_returns_once_every_subscriber_has_taken_the_change(caplog: pytest.LogCaptureFixture) -> None:
    changes = RoomChanges()
    seen: list[tuple[str, frozenset[str]]] = []

    async def slow(rooms: frozenset[str]) -> None:
        await asyncio.sleep(0.01)
        seen.append(("slow", rooms))

    async def broken(rooms: frozenset[str]) -> None:
        raise RuntimeError("index unreadable")

    async def fast(rooms: frozenset[str]) -> None:
        seen.append(("fast", rooms))

    for subscriber in (slow, broken, fast):
        changes.subscribe(subscriber)
    caplog.set_level(logging.ERROR, logger="queue_manager.services")
    await changes.announce(frozenset({"shop"}))
    assert seen == [("slow", frozenset({"shop"})), ("fast", frozenset({"shop"}))]
    assert any("room change was not taken in: shop" in r.getMessage() for r in caplog.records)


async def test_announce_soon_runs_in_a_task_of_its_own() -> None:
    changes = RoomChanges()
    seen: list[frozenset[str]] = []
    done = asyncio.Event()

    async def subscriber(rooms: frozenset[str]) -> None:
        seen.append(rooms)
        done.set()

    changes.announce_soon(frozenset({"a"}))  # nobody listens yet: nothing scheduled
    changes.subscribe(subscriber)
    changes.announce_soon(frozenset())  # nothing named: nothing scheduled
    changes.announce_soon(frozenset({"a", "b"}))
    assert seen == []  # not in the caller's turn
    await asyncio.wait_for(done.wait(), 1)
    assert seen == [frozenset({"a", "b"})]


async def test_the_inline_host_index_takes_a_room_change_at_once() -> None:
    server = Server(load_settings(GOOD))
    ctx = server.ctx
    await ctx.store.start()
    await server.inline.refresh()
    assert not server.inline.index  # no inline room yet
    # the room is written without a route (as another instance's save would be): the index has not read it
    await ctx.store.upsert_room(
        {"id": "shop", "targetUrl": "https://shop.example/", "proxyOrigin": "http://10.0.0.5:3000"}
    )
    assert not server.inline.index
    await ctx.room_changes.announce(frozenset({"shop"}))
    assert server.inline.index.lookup(b"shop.example") is not None
