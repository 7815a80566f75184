"""The fleet view of the counters (fleet/counters.py, metrics.to_wire/from_wire/total): each instance's
counters survive the trip through Valkey, the sum adds every field per key, a key that expired drops
out, and a failed read answers partial with what was last read within the expiry — without Valkey."""

from __future__ import annotations

from typing import cast

from redis.asyncio import Redis

from queue_manager.clock import FakeClock
from queue_manager.fleet.counters import FleetCounters
from queue_manager.metrics import Counters, from_wire, to_wire, total


def _counters(unknown: int, errors: int, room: str = "shop") -> Counters:
    c = Counters(unknown_room_checks=unknown, refused_key_checks=1)
    c.origin_errors[(room, "connect")] = errors
    c.visitor_disconnects[room] = 1
    c.refused_origin_checks[(room, "https://evil.example")] = 2
    c.reject_token("expired")
    c.protection = {"blocked": 3, "assessed": 10}
    return c


def test_counters_survive_the_wire_and_add_up_per_key() -> None:
    a, b = _counters(2, 4), _counters(3, 1)
    b.origin_errors[("blog", "response")] = 7
    b.backend_down["open"] = 5
    s = total([from_wire(to_wire(a)), from_wire(to_wire(b))])
    assert s.unknown_room_checks == 5
    assert s.refused_key_checks == 2
    assert s.origin_errors == {("shop", "connect"): 5, ("blog", "response"): 7}
    assert s.visitor_disconnects == {"shop": 2}
    assert s.refused_origin_checks == {("shop", "https://evil.example"): 4}
    assert s.rejected_tokens == 2 and s.rejected_tokens_by_reason == {"expired": 2}
    assert s.protection == {"blocked": 6, "assessed": 20}
    assert s.backend_down == {"open": 5}
    assert a.unknown_room_checks == 2 and a.origin_errors == {("shop", "connect"): 4}  # the parts are untouched


def test_a_malformed_or_unknown_field_counts_as_zero() -> None:
    c = from_wire({"unknown_room_checks": "7", "blocked_return_urls": -1, "origin_errors": [["a"], 3], "new": 9})
    assert c == Counters()
    assert from_wire(None) == Counters()
    assert from_wire({"rate_limited_checks": 4, "visitor_disconnects": {"x": 2, "y": "z"}}).visitor_disconnects == {
        "x": 2,
        "y": 0,
    }


class _FakeValkey:
    """SET PX, MGET, DEL and the index's sorted-set commands over dicts whose entries expire on the FakeClock."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.data: dict[bytes, tuple[bytes, int]] = {}
        self.zsets: dict[str, dict[str, int]] = {}
        self.failing = False

    def _live(self) -> dict[bytes, bytes]:
        if self.failing:
            raise ConnectionError("valkey unreachable")
        now = self.clock.wall_ms()
        return {k: v for k, (v, until) in self.data.items() if until > now}

    async def set(self, key: str, value: str, px: int) -> None:
        self._live()
        self.data[key.encode()] = (value.encode(), self.clock.wall_ms() + px)

    async def zadd(self, key: str, mapping: dict[str, int]) -> None:
        self._live()
        self.zsets.setdefault(key, {}).update(mapping)

    async def zremrangebyscore(self, key: str, low: str, high: int) -> None:
        zset = self.zsets.get(key, {})
        for member in [m for m, score in zset.items() if score <= high]:
            del zset[member]

    async def zrangebyscore(self, key: str, low: int, high: str) -> list[bytes]:
        self._live()
        return [m.encode() for m, score in sorted(self.zsets.get(key, {}).items()) if score >= low]

    async def zrem(self, key: str, member: str) -> None:
        self.zsets.get(key, {}).pop(member, None)

    async def mget(self, keys: list[str]) -> list[bytes | None]:
        live = self._live()
        return [live.get(k.encode()) for k in keys]

    async def delete(self, key: str) -> None:
        self.data.pop(key.encode(), None)


def _instance(valkey: _FakeValkey, clock: FakeClock, name: str, counters: Counters) -> FleetCounters:
    fleet = FleetCounters(cast(Redis, valkey), "qm:", name, clock)
    fleet.source = lambda: counters
    return fleet


async def test_the_view_sums_the_live_instances_and_an_expired_key_drops_out() -> None:
    clock = FakeClock()
    valkey = _FakeValkey(clock)
    a = _instance(valkey, clock, "i:a", _counters(2, 1))
    b = _instance(valkey, clock, "i:b", _counters(3, 1))
    await a.publish()
    await b.publish()
    summed, fleet = await a.view()
    assert (summed.unknown_room_checks, fleet) == (5, {"instances": 2, "partial": False})
    assert summed.origin_errors == {("shop", "connect"): 2}
    a_counters = _counters(4, 1)  # A's own numbers are read live, not from its key
    a.source = lambda: a_counters
    assert (await b.view())[0].unknown_room_checks == 5  # B reads A's key: written before the change
    assert (await a.view())[0].unknown_room_checks == 7
    clock.advance(14)
    await a.publish()
    clock.advance(1)  # B's key is 15 s old: expired
    summed, fleet = await a.view()
    assert (summed.unknown_room_checks, fleet) == (4, {"instances": 1, "partial": False})


async def test_a_clean_stop_deletes_the_key_at_once() -> None:
    clock = FakeClock()
    valkey = _FakeValkey(clock)
    a = _instance(valkey, clock, "i:a", _counters(2, 0))
    b = _instance(valkey, clock, "i:b", _counters(3, 0))
    await b.publish()
    assert (await a.view())[1]["instances"] == 2
    await b.stop()
    summed, fleet = await a.view()
    assert (summed.unknown_room_checks, fleet["instances"]) == (2, 1)


async def test_valkey_unreachable_is_partial_with_what_was_last_read_within_the_expiry() -> None:
    clock = FakeClock()
    valkey = _FakeValkey(clock)
    a = _instance(valkey, clock, "i:a", _counters(2, 0))
    b = _instance(valkey, clock, "i:b", _counters(3, 0))
    await b.publish()
    await a.view()
    valkey.failing = True
    clock.advance(10)
    summed, fleet = await a.view()
    assert (summed.unknown_room_checks, fleet) == (5, {"instances": 2, "partial": True})
    clock.advance(5)  # what was read 15 s ago no longer counts
    summed, fleet = await a.view()
    assert (summed.unknown_room_checks, fleet) == (2, {"instances": 1, "partial": True})


async def test_a_breaker_that_is_down_reads_nothing() -> None:
    clock = FakeClock()
    valkey = _FakeValkey(clock)
    a = FleetCounters(cast(Redis, valkey), "qm:", "i:a", clock, down=lambda: True)
    b = _instance(valkey, clock, "i:b", _counters(3, 0))
    await b.publish()
    summed, fleet = await a.view()
    assert (summed.unknown_room_checks, fleet) == (0, {"instances": 1, "partial": True})
