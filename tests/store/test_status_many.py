"""``status_many``: a room's live streams read in one call, exactly as a ``status`` call per stream would.

Every test runs on memory, valkey and (with a cluster URL) cluster. The batch is compared with ``status``
calls made at the same instant afterwards (``status`` at one instant is idempotent), and its marks (seen,
told) are read back the way an operator reads them or through what they change later.
"""

from __future__ import annotations

import pytest

from queue_manager.engine.errors import EngineError
from queue_manager.engine.view import VisitorView
from queue_manager.engine.visitor import Presented
from queue_manager.store.base import STATUS_BATCH

from .conftest import Env, Visitor

QUIET = {"presenceSec": None, "queueMaxPerIp": None}


async def batch(env: Env, people: list[Visitor], room_id: str = "r") -> list[VisitorView]:
    views: list[VisitorView] = await env.store.status_many(room_id, [(p.client, p.token) for p in people])
    return views


async def one_by_one(people: list[Visitor]) -> list[VisitorView]:
    return [await p.status() for p in people]


async def test_waiting_tickets_in_order_with_their_positions(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=0, **QUIET)
    people = [env.visitor() for _ in range(5)]
    for p in people:
        await p.join()
    asked = [people[3], people[0], people[4], people[1], people[2]]
    views = await batch(env, asked)
    assert [v.position for v in views] == [4, 1, 5, 2, 3]
    assert [v.ticket for v in views] == [p.n for p in asked]
    assert views == await one_by_one(asked)
    assert await env.store.status_many("r", []) == []


async def test_in_a_room_with_lanes_each_view_names_its_lane(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=0, lanes=[{"id": "main", "share": 50}, {"id": "vip", "share": 50}], **QUIET)
    people = [env.visitor() for _ in range(4)]
    for i, p in enumerate(people):
        view = await env.store.join("r", p.client, None, None, lane="vip" if i % 2 else None)
        p.token = Presented(gen=view.gen, n=view.ticket)
    views = await batch(env, people)
    assert [v.lane for v in views] == ["main", "vip", "main", "vip"]
    assert [v.position for v in views] == [1, 1, 2, 2]  # each within its lane
    assert views == await one_by_one(people)


async def test_the_batch_marks_each_holder_seen(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=0, **QUIET)
    seen, unseen = env.visitor(), env.visitor()
    await seen.join()
    await unseen.join()
    env.clock.advance(10)
    await batch(env, [seen])
    assert (await env.describe(seen))["lastSeenSecAgo"] == 0.0
    assert (await env.describe(unseen))["lastSeenSecAgo"] == 10.0


async def test_a_pass_shown_in_a_batch_is_told(stores: Env) -> None:
    """A told holder keeps its slot for the claim window; an untold one unseen for presenceSec gives it back."""
    env = stores
    await env.room(ratePerMinute=60, maxConcurrent=1, presenceSec=30, passedTtlSec=600, queueMaxPerIp=None)
    a, b = env.visitor(), env.visitor()
    await a.join()
    await b.join()
    await env.run(1)
    views = await batch(env, [b, a])
    assert [v.state for v in views] == ["waiting", "passed"]  # no status call here: it would tell a too
    for _ in range(40):
        env.clock.advance(1)
        await batch(env, [b])
        await env.store.tick()
    assert (await env.describe(a))["holdsSlot"]
    assert await env.state(b) == "waiting"


async def test_pre_queue_handles_are_seen_and_drawn_in_a_batch(stores: Env) -> None:
    env = stores
    opens = env.clock.wall_ms() + 60_000
    await env.room(opensAt=opens, presenceSec=None, ratePerMinute=0)
    people = [env.visitor() for _ in range(4)]
    for p in people:
        await p.join()
    env.clock.advance(20)
    views = await batch(env, people[:3])
    assert [v.state for v in views] == ["scheduled"] * 3
    assert [v.handle for v in views] == [p.token.handle for p in people[:3]]  # type: ignore[union-attr]
    assert [v.pre_count for v in views] == [4, 4, 4]
    assert views == await one_by_one(people[:3])
    env.clock.advance(40)
    drawn = await batch(env, people)  # the draw falls due on this very call
    assert sorted(v.position for v in drawn) == [1, 2, 3, 4]  # type: ignore[type-var]
    assert drawn == await one_by_one(people)
    ages = [(await env.describe(v.ticket))["lastSeenSecAgo"] for v in drawn]  # type: ignore[arg-type]
    assert ages == [0.0, 0.0, 0.0, 0.0]
    assert "prequeue.draw" in env.types()


async def test_pre_queue_seen_mark_carries_into_the_draw(stores: Env) -> None:
    env = stores
    opens = env.clock.wall_ms() + 60_000
    await env.room(opensAt=opens, presenceSec=None, ratePerMinute=0)
    polled, quiet = env.visitor(), env.visitor()
    await polled.join()
    await quiet.join()
    env.clock.advance(20)
    await batch(env, [polled])
    env.clock.advance(40)
    await env.store.tick()
    assert [e.data for e in env.events() if e.type == "prequeue.draw"] == [{"count": 2, "first": 1}]
    record = (await env.store.draw_state("r")).record
    assert record is not None and record.drawn is not None
    ticket_of = {h: record.drawn.first_ticket + i for i, h in enumerate(record.drawn.order)}
    ages = [(await env.describe(ticket_of[p.token.handle]))["lastSeenSecAgo"] for p in (polled, quiet)]  # type: ignore[union-attr]
    assert ages == [40.0, 60.0]


async def test_expired_unknown_and_other_generation_tokens(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=60, passedTtlSec=200, **QUIET)
    gone, waiting = env.visitor(), env.visitor()
    await gone.join()
    await env.run(1)
    await env.run(200)
    await waiting.join()
    env.types()
    unknown = env.visitor()
    unknown.token = Presented(gen=1, n=999)
    stranger = env.visitor()
    stranger.token = None
    views = await batch(env, [gone, unknown, waiting, stranger])
    assert [v.reason for v in views] == ["expired", "expired", None, None]
    assert views[2].ticket == waiting.n and views[3].ticket is None
    assert views == await one_by_one([gone, unknown, waiting, stranger])

    await env.store.delete_room("r")
    await env.room(ratePerMinute=0, **QUIET)
    fresh = env.visitor()
    await fresh.join()
    views = await batch(env, [waiting, fresh])
    assert views[0].reason == "previous_generation" and views[0].gen == 2
    assert views[1].position == 1 and views[1].ticket == fresh.n
    assert views == await one_by_one([waiting, fresh])


async def test_a_batch_commits_the_events_it_causes(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=60, passedTtlSec=30, **QUIET)
    a = env.visitor()
    await a.join()
    await env.run(1)
    env.types()
    env.clock.advance(31)  # the pass expires: the batch's sweep notices
    views = await batch(env, [a])
    assert views[0].reason == "expired"
    assert env.types() == ["expire"]


async def test_a_list_longer_than_one_batch(stores: Env) -> None:
    env = stores
    await env.room(ratePerMinute=0, **QUIET)
    count = 2 * STATUS_BATCH + 7
    people = [env.visitor() for _ in range(count)]
    for p in people:
        await p.join()
    asked = people[::-1]
    views = await batch(env, asked)
    assert [v.position for v in views] == list(range(count, 0, -1))
    assert [v.ticket for v in views] == [p.n for p in asked]
    assert views == await one_by_one(asked)
    env.clock.advance(5)
    await batch(env, people)
    ages = {(await env.describe(p))["lastSeenSecAgo"] for p in people}
    assert ages == {0.0}  # every part of the split list marked its holders


async def test_a_deleted_room_fails_the_whole_batch(stores: Env) -> None:
    env = stores
    await env.room(**QUIET)
    people = [env.visitor() for _ in range(3)]
    for p in people:
        await p.join()
    await env.store.delete_room("r")
    with pytest.raises(EngineError) as info:
        await batch(env, people)
    assert (info.value.status, info.value.code, info.value.extra) == (404, "no_room", {"roomId": "r"})
    with pytest.raises(EngineError) as info:
        await batch(env, people, "nope")
    assert (info.value.code, info.value.extra) == ("no_room", {"roomId": "nope"})
