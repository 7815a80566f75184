"""The engine's injected random source: a seeded source replays a drop exactly (its handles and its seed,
and so its draw)."""

from __future__ import annotations

import asyncio

from queue_manager.clock import FakeClock
from queue_manager.engine.drop import draw_order
from queue_manager.engine.model import ClientId
from queue_manager.engine.randomness import SYSTEM_RANDOM, SeededRandom, SystemRandomSource
from queue_manager.engine.ticket import PreEntry
from queue_manager.store.memory import MemoryStore

TARGET = "https://shop.example"


def _entries() -> list[PreEntry]:
    # 40 entries from 8 addresses, up to 9 each: plenty of permutations to tell seeds apart
    return [PreEntry(f"h{i:02d}", f"10.0.0.{i % 8}", b"f", None, None, i, 0) for i in range(40)]


def test_the_same_seed_replays_the_same_draw_and_another_seed_does_not():
    first = draw_order(_entries(), SeededRandom(7).draw_seed())
    again = draw_order(_entries(), SeededRandom(7).draw_seed())
    other = draw_order(_entries(), SeededRandom(8).draw_seed())
    assert first == again
    assert other != first
    assert sorted(first) == sorted(other) == sorted(e.handle for e in _entries())


def test_a_draw_stays_round_robin_by_address():
    order = draw_order(_entries(), SeededRandom(3).draw_seed())
    idents = {e.handle: e.ident for e in _entries()}
    # every address's k-th place comes before any address's (k+1)-th: 8 addresses, 5 places each
    rounds = [order[i : i + 8] for i in range(0, 40, 8)]
    assert all(len({idents[h] for h in round_}) == 8 for round_ in rounds)


def _drop(seed: int) -> tuple[list[str], list[int]]:
    """A drop opening through the memory store on a seeded source: (handles in join order, the
    ticket number each was drawn as)."""
    clock = FakeClock()
    store = MemoryStore(clock, rng=SeededRandom(seed))

    async def run() -> tuple[list[str], list[int]]:
        await store.upsert_room({"id": "r", "targetUrl": TARGET, "opensAt": clock.wall_ms() + 10_000})
        handles = []
        for i in range(12):
            client = ClientId(f"10.0.{i}.1", bytes([i]) * 16)
            view = await store.join("r", client, None, None)
            assert view.state == "scheduled" and view.handle is not None
            handles.append(view.handle)
        clock.advance(11)
        await store.tick()
        room = store.engine.room("r")
        return handles, [room.drawn[h] for h in handles]

    return asyncio.run(run())


def test_a_seeded_store_replays_a_whole_drop():
    handles, numbers = _drop(11)
    assert _drop(11) == (handles, numbers)  # the same handles and the same draw
    assert sorted(numbers) == list(range(1, 13))
    assert _drop(12)[1] != numbers


def test_rooms_use_the_system_source_unless_given_one():
    store = MemoryStore(FakeClock())
    assert store.engine.rng is SYSTEM_RANDOM and isinstance(SYSTEM_RANDOM, SystemRandomSource)
    handle = SYSTEM_RANDOM.token_hex(8)
    assert len(handle) == 16 and int(handle, 16) >= 0
    seeds = {SYSTEM_RANDOM.draw_seed() for _ in range(3)}
    assert len(seeds) == 3 and all(len(seed) == 32 for seed in seeds)
