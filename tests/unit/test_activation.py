"""Threshold activation's rules, one frame at a time, on the memory store (the numbers a frame reads are
given; the flips are the store's real compare-and-set)."""

from __future__ import annotations

from typing import Any

from queue_manager.clock import FakeClock
from queue_manager.jobs import activation
from queue_manager.store.memory import MemoryStore

ARMED = {"enabled": True, "joinsPerMin": 120, "sustainSec": 10, "releaseAfterSec": 30}


class Trail:
    def __init__(self) -> None:
        self.rows: list[tuple[Any, str, dict[str, Any]]] = []

    async def __call__(self, actor: Any, action: str, **detail: Any) -> None:
        self.rows.append((actor, action, detail))


async def make(state: str = "bypass", **armed: Any) -> MemoryStore:
    store = MemoryStore(FakeClock())
    await store.upsert_room(
        {"id": "shop", "targetUrl": "https://shop.example/", "state": state, "autoActivate": {**ARMED, **armed}}
    )
    return store


async def frame(store: MemoryStore, trail: Trail, doc: dict[str, Any], now: int, joins: int, **kw: Any) -> str:
    room = {**(await store.get_room("shop")), "joinsLastMinute": joins, **kw}
    await activation.run(store, trail, doc, [room], now)
    state: str = (await store.get_room("shop"))["state"]
    return state


async def test_activates_once_arrivals_hold_for_sustain_and_names_the_number() -> None:
    store, trail, doc = await make(), Trail(), {}
    assert await frame(store, trail, doc, 0, 150) == "bypass"
    assert await frame(store, trail, doc, 9_999, 150) == "bypass"
    assert await frame(store, trail, doc, 10_000, 290) == "active"
    (actor, action, detail) = trail.rows[0]
    assert actor is None and action == "room.threshold"  # the system actor
    assert detail["change"] == "bypass → active" and detail["joinsPerMin"] == 290 and detail["threshold"] == 120
    assert activation.badges(doc, 10_000)["shop"] == {"at": 10_000, "action": "activate", "joinsPerMin": 290}
    assert activation.badges(doc, 10_000 + activation.SELF_BADGE_MS) == {}


async def test_a_dip_below_the_threshold_restarts_the_sustain() -> None:
    store, trail, doc = await make(), Trail(), {}
    await frame(store, trail, doc, 0, 150)
    await frame(store, trail, doc, 5_000, 100)
    assert await frame(store, trail, doc, 12_000, 150) == "bypass"
    assert await frame(store, trail, doc, 22_000, 150) == "active"


async def test_stands_down_after_quiet_only_with_an_empty_line() -> None:
    store, trail, doc = await make(), Trail(), {}
    await frame(store, trail, doc, 0, 200)
    assert await frame(store, trail, doc, 10_000, 200) == "active"
    assert await frame(store, trail, doc, 20_000, 50, waiting=3) == "active"
    assert await frame(store, trail, doc, 60_000, 50, waiting=3) == "active"  # quiet, but people are in line
    assert await frame(store, trail, doc, 61_000, 50, waiting=0) == "bypass"
    detail = trail.rows[-1][2]
    assert detail["change"] == "active → bypass" and detail["joinsPerMin"] == 50


async def test_release_after_zero_never_stands_down() -> None:
    store, trail, doc = await make(releaseAfterSec=0), Trail(), {}
    await frame(store, trail, doc, 0, 200)
    await frame(store, trail, doc, 10_000, 200)
    assert await frame(store, trail, doc, 10_000_000, 0) == "active"


async def test_a_paused_room_is_never_overridden_and_pausing_hands_it_to_the_operator() -> None:
    store, trail, doc = await make(state="paused"), Trail(), {}
    await frame(store, trail, doc, 0, 500)
    assert await frame(store, trail, doc, 100_000, 500) == "paused" and trail.rows == []
    store, trail, doc = await make(), Trail(), {}
    await frame(store, trail, doc, 0, 200)
    await frame(store, trail, doc, 10_000, 200)
    await store.upsert_room({"id": "shop", "state": "paused"})
    await frame(store, trail, doc, 11_000, 0)
    await store.upsert_room({"id": "shop", "state": "active"})  # the operator resumes: the operator's queue now
    assert await frame(store, trail, doc, 500_000, 0) == "active"


async def test_an_operators_queue_is_not_taken_down() -> None:
    store, trail, doc = await make(state="active"), Trail(), {}
    assert await frame(store, trail, doc, 0, 0) == "active"
    assert await frame(store, trail, doc, 1_000_000, 0) == "active" and trail.rows == []


async def test_a_change_made_between_the_read_and_the_flip_wins() -> None:
    store, trail, doc = await make(), Trail(), {}
    stale = {**(await store.get_room("shop")), "joinsLastMinute": 500}
    await activation.run(store, trail, doc, [stale], 0)
    await store.upsert_room({"id": "shop", "state": "paused"})  # the operator pauses; the frame read bypass
    await activation.run(store, trail, doc, [stale], 20_000)
    assert (await store.get_room("shop"))["state"] == "paused" and trail.rows == []
    assert activation.badges(doc, 20_000) == {}  # a flip that did not happen leaves no AUTO · SELF


async def test_the_badge_is_there_the_moment_the_flip_lands() -> None:
    """A room read while the flip is being written (before the audit row, before the frame ends) already
    carries AUTO · SELF: the card never shows a queue the machine put up without saying so."""
    trail, doc = Trail(), {}
    seen: list[dict[str, Any]] = []

    class Watching(MemoryStore):
        async def upsert_room(self, body: dict[str, Any], **kw: Any) -> Any:
            done = await super().upsert_room(body, **kw)
            if kw.get("expect_state") is not None:  # the job's flip, landed
                seen.append(activation.badges(doc, 10_000))  # what GET /api/admin/rooms would add right now
            return done

    store = Watching(FakeClock())
    await store.upsert_room(
        {"id": "shop", "targetUrl": "https://shop.example/", "state": "bypass", "autoActivate": ARMED}
    )
    room = {**(await store.get_room("shop")), "joinsLastMinute": 200}
    await activation.run(store, trail, doc, [room], 0)
    await activation.run(store, trail, doc, [room], 10_000)
    assert seen == [{"shop": {"at": 10_000, "action": "activate", "joinsPerMin": 200}}]
