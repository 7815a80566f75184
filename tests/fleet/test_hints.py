"""Change hints over <prefix>ctl against a real Valkey (Redis 7): delivery, own hints skipped, a
(re)subscription counts as "re-read everything", and the switch that turns them off."""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio import Redis

from queue_manager.fleet.hints import Hints
from queue_manager.services.room_changes import RoomChanges


async def _until(check: Any, what: str) -> None:
    for _ in range(200):  # a generous bound: delivery is normally a few ms
        if check():
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"never: {what}")


async def test_a_hint_reaches_the_other_instance_not_its_sender(client: Redis, prefix: str) -> None:
    a, b = Hints(client, prefix, "a"), Hints(client, prefix, "b")
    got_a: list[dict[str, Any]] = []
    got_b: list[dict[str, Any]] = []
    resyncs: list[str] = []
    a.on("access", got_a.append)
    b.on("access", got_b.append)
    b.on("resync", lambda _: resyncs.append("b"))
    a.start()
    b.start()
    try:
        await _until(lambda: a.subscribed and b.subscribed, "both subscribed")
        assert resyncs == ["b"]  # subscribing counts as a resync: what was sent before is lost
        await a.publish("access", who="op-1")
        await _until(lambda: got_b, "B got A's hint")
        assert got_b[0]["k"] == "access" and got_b[0]["from"] == "a" and got_b[0]["who"] == "op-1"
        await b.publish("access")
        await _until(lambda: a.received == 1, "A got B's hint")
        assert got_a and b.received == 1  # neither handles its own
        assert a.health() == {"enabled": True, "subscribed": True, "published": 1, "received": 1, "dropped": 0}
    finally:
        await a.stop()
        await b.stop()


async def test_switched_off_hints_neither_publish_nor_subscribe(client: Redis, prefix: str) -> None:
    off, on = Hints(client, prefix, "off", enabled=False), Hints(client, prefix, "on")
    seen: list[dict[str, Any]] = []
    off.on("access", seen.append)
    on.start()
    off.start()
    try:
        await _until(lambda: on.subscribed, "subscribed")
        await off.publish("access")
        await on.publish("access")
        await asyncio.sleep(0.2)
        assert on.received == 0 and not seen and not off.subscribed and off.published == 0
    finally:
        await on.stop()
        await off.stop()


async def test_a_subscription_valkey_answers_tells_the_store_it_is_reachable(client: Redis, prefix: str) -> None:
    heard: list[str] = []
    hints = Hints(client, prefix, "a", reached=lambda: heard.append("a"))
    hints.start()
    try:
        await _until(lambda: hints.subscribed, "subscribed")
        assert heard == ["a"]
    finally:
        await hints.stop()


async def test_another_instances_room_change_is_announced_here(client: Redis, prefix: str) -> None:
    a, b = Hints(client, prefix, "a"), Hints(client, prefix, "b")
    changes = RoomChanges()
    heard: list[frozenset[str]] = []

    async def subscriber(rooms: frozenset[str]) -> None:
        heard.append(rooms)

    changes.subscribe(subscriber)
    changes.follow(b)
    a.start()
    b.start()
    try:
        await _until(lambda: a.subscribed and b.subscribed, "both subscribed")
        # the hint a save's commit sends (fleet/room_watch.py)
        await a.publish("rooms", created=["new"], deleted=["gone"], changed=["shop"])
        await _until(lambda: heard, "B announced A's room change")
        assert heard == [frozenset({"new", "gone", "shop"})]
    finally:
        await a.stop()
        await b.stop()
