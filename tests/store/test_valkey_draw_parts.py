"""A large drop's draw (and a long line's purge) on the Valkey store goes in over several calls
(``draw_chunk`` entries each), so Valkey serves everyone else between them; nobody sees a half-drawn or
half-purged line and nobody is minted between two parts. The answers and the journal are those of the
same change applied at once. Before a draw is applied, its order, Refs and record are put in place in
parts (``DRAW_STAGE`` entries each, lua/draw_stage.lua) by the caller that claimed it, so no call carries
the whole draw."""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio import Redis

from queue_manager.clock import FakeClock
from queue_manager.engine import draw as draw_rules
from queue_manager.engine.model import ClientId
from queue_manager.engine.randomness import SeededRandom
from queue_manager.engine.visitor import Presented
from queue_manager.store.base import StoreUnavailable
from queue_manager.store.valkey import ValkeyStore
from queue_manager.store.valkey import runner as runner_module
from queue_manager.store.valkey.draws import draw_plan
from queue_manager.store.valkey.keys import room_key

from .conftest import TARGET, RecordingJournal, make_valkey

PEOPLE = 25


def person(i: int) -> ClientId:
    return ClientId(ident=f"198.51.100.{i % 7}", fp=f"fp{i}".encode(), cookie=f"ck{i}".encode())


async def _filled(
    redis: Redis, prefix: str, chunk: int
) -> tuple[ValkeyStore, FakeClock, RecordingJournal, list[Presented]]:
    clock, journal = FakeClock(), RecordingJournal()
    store = await make_valkey(redis, prefix, clock, journal, draw_chunk=chunk, rng=SeededRandom(7))
    opens = clock.wall_ms() + 60_000
    await store.upsert_room(
        {
            "id": "r",
            "targetUrl": TARGET,
            "opensAt": opens,
            "ratePerMinute": 0,
            "presenceSec": None,
            "queueMaxPerIp": None,
        }
    )
    held = []
    for i in range(PEOPLE):
        view = await store.join("r", person(i), None, None)
        assert view.handle is not None and view.ticket is None
        held.append(Presented(gen=view.gen, handle=view.handle))
    clock.advance(60)
    return store, clock, journal, held


async def _begin_in_parts(store: ValkeyStore) -> dict[str, Any]:
    """The draw asked for and its first part applied, by hand: the call a visitor's request would make."""
    runner = store._runner
    now = await runner.now()
    asked = await store._calls.eval("stats", "r", [*runner.header(now, "*"), "draw"])
    assert asked["k"] == "draw" and asked["paged"] and asked["count"] == PEOPLE and len(asked["entries"]) == 4
    asked["entries"] = await runner._draw_pages("r", now, asked)
    assert asked["entries"] is not None and len(asked["entries"]) == PEOPLE
    plan = draw_plan(store.rng, "r", asked)
    assert await runner._draw_stage("r", now, str(asked["claim"]), plan)
    reply: dict[str, Any] = await store._calls.eval(
        "stats", "r", [*runner.header(now, "*", plan.staged_args()), "draw"]
    )
    return reply


async def test_a_draw_in_parts_answers_as_the_draw_at_once(
    valkey: tuple[Redis, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    redis, prefix = valkey
    monkeypatch.setattr(runner_module, "DRAW_STAGE", 6)  # put in place in five parts, then applied
    seen: dict[int, Any] = {}
    for chunk in (2000, 4):  # at once, then in parts of four
        part_prefix = f"{prefix}{chunk}:"
        store, _clock, journal, held = await _filled(redis, part_prefix, chunk)
        try:
            views = [await store.status("r", person(i), held[i]) for i in range(PEOPLE)]
            record = (await store.draw_state("r")).record
            assert record is not None and record.drawn is not None
            drawn = record.drawn
            assert drawn.order == draw_rules.draw_order(record.seed, drawn.handles, drawn.groups)
            assert sorted(v.ticket for v in views if v.ticket is not None) == list(range(1, PEOPLE + 1))
            for i, view in enumerate(views):  # ticket n is the n-th of the order
                assert drawn.order[view.ticket - 1] == held[i].handle  # type: ignore[operator]
            draws = [e.data for e in journal.events if e.type == "prequeue.draw"]
            assert draws == [{"count": PEOPLE, "first": 1}]
            keys = [room_key(part_prefix, "r", k) for k in ("dq", "dr", "drs")]
            assert await redis.exists(*keys) == 0
            for field in ("dro", "drn", "dcl"):  # nothing of the parts or of the claim is left
                assert await redis.hget(room_key(part_prefix, "r", "st"), field) in (None, b"")
            seen[chunk] = ([(v.ticket, v.position, v.state) for v in views], [e.type for e in journal.events])
        finally:
            await store.close()
    assert seen[4] == seen[2000]


async def test_between_two_parts_nobody_is_minted_and_the_room_is_not_exported(valkey: tuple[Redis, str]) -> None:
    redis, prefix = valkey
    store, _clock, _journal, held = await _filled(redis, prefix, 4)
    try:
        reply = await _begin_in_parts(store)
        assert reply["k"] == "again"  # the first part went in; the call did none of its own work
        st = await redis.hgetall(room_key(prefix, "r", "st"))
        assert (int(st[b"dro"]), int(st[b"drn"])) == (4, PEOPLE)
        assert await redis.llen(room_key(prefix, "r", "dq")) == PEOPLE
        assert await redis.zcard(room_key(prefix, "r", "line")) == 4
        draws = [data for typ, _seq, _ts, data in reply["ev"] if typ == "prequeue.draw"]
        assert draws == [{"count": PEOPLE, "first": 1}]  # the whole draw, with its first part
        with pytest.raises(StoreUnavailable):
            await store.export_room("r")
        late = await store.join("r", ClientId(ident="203.0.113.9", fp=b"late", cookie=b"late"), None, None)
        assert late.ticket == PEOPLE + 1 and late.position == PEOPLE + 1  # behind everyone drawn
        assert await redis.exists(room_key(prefix, "r", "dq"), room_key(prefix, "r", "dr")) == 0
        tickets = [(await store.status("r", person(i), held[i])).ticket for i in range(PEOPLE)]
        assert sorted(t for t in tickets if t is not None) == list(range(1, PEOPLE + 1))
        snapshot = await store.export_room("r")
        assert (snapshot["room"], len(snapshot["line"]), snapshot["prequeue"]) == ("r", PEOPLE + 1, [])
    finally:
        await store.close()


async def test_an_entry_taken_back_during_the_draw_leaves_its_number_unused(valkey: tuple[Redis, str]) -> None:
    redis, prefix = valkey
    store, _clock, _journal, held = await _filled(redis, prefix, 4)
    try:
        await _begin_in_parts(store)
        order = [h.decode() for h in await redis.lrange(room_key(prefix, "r", "dq"), 0, -1)]
        victim = order[10]  # not yet in line
        runner = store._runner
        gone = await store._calls.eval(
            "revoke", "r", [*runner.header(await runner.now(), "*"), "prequeue", "1", "0", victim, "", ""]
        )
        assert [e[0] for e in gone["ev"]] == ["prequeue.revoke"]
        kept = [i for i in range(PEOPLE) if held[i].handle != victim]
        tickets = {held[i].handle: (await store.status("r", person(i), held[i])).ticket for i in kept}
        assert {tickets[h] for h in order if h != victim} == set(range(1, PEOPLE + 1)) - {11}
        assert all(tickets[h] == order.index(h) + 1 for h in tickets)  # the others keep their numbers
        assert int(await redis.hget(room_key(prefix, "r", "st"), "next")) == PEOPLE + 1
    finally:
        await store.close()


async def test_one_caller_reads_a_large_pre_queue_the_others_wait_for_it(valkey: tuple[Redis, str]) -> None:
    redis, prefix = valkey
    store, clock, _journal, held = await _filled(redis, prefix, 4)
    try:
        runner = store._runner

        async def ask(draw_ver: str = "") -> dict[str, Any]:
            header = runner.header(await runner.now(), "*", (draw_ver, "", ""))
            reply: dict[str, Any] = await store._calls.eval("stats", "r", [*header, "draw"])
            return reply

        claimed = await ask()
        assert claimed["k"] == "draw" and claimed["claim"].startswith("c")
        assert (await ask())["k"] == "drawwait"  # anyone else waits while the claim holds
        clock.advance(0.001)
        again = await ask(claimed["claim"])  # the claimer may ask again (its pages changed under it)
        assert again["k"] == "draw" and again["claim"] != claimed["claim"]
        assert (await ask(claimed["claim"]))["k"] == "drawwait"  # an older claim is nobody's
        clock.advance(10 + PEOPLE / 20_000 + 0.001)  # the claim ran out: its claimer is gone
        taken = await ask()
        assert taken["k"] == "draw" and taken["claim"] != again["claim"]
        clock.advance(11)  # that claimer never came back either: a store call claims, reads and draws
        view = await store.status("r", person(0), held[0])
        assert view.ticket is not None
    finally:
        await store.close()


async def test_a_draw_is_put_in_place_only_by_its_claimer_and_only_for_the_pre_queue_it_read(
    valkey: tuple[Redis, str],
) -> None:
    redis, prefix = valkey
    store, clock, _journal, held = await _filled(redis, prefix, 4)
    try:
        runner = store._runner
        now = await runner.now()
        asked = await store._calls.eval("stats", "r", [*runner.header(now, "*"), "draw"])
        asked["entries"] = await runner._draw_pages("r", now, asked)
        plan = draw_plan(store.rng, "r", asked)
        dq, dr, drs = (room_key(prefix, "r", k) for k in ("dq", "dr", "drs"))

        async def stage(offset: int, claim: str = str(asked["claim"]), ver: str = plan.ver) -> str:
            handles, refs = plan.order[offset : offset + 5], plan.refs[offset : offset + 5]
            args = [*runner.header(now, "*"), ver, claim, str(offset), "piece", str(len(handles)), *handles, *refs]
            reply = await store._calls.eval("draw_stage", "r", args)
            return str(reply["k"])

        assert await stage(0, claim="c1") == "restage"  # not the claim
        assert await stage(0, ver="0:0:1:") == "restage"  # not the pre-queue it read
        assert await redis.exists(dq, dr, drs) == 0
        assert await stage(0) == "staged" and await stage(5) == "staged"
        assert await stage(15) == "restage"  # a part must follow the last one put
        assert await redis.llen(dq) == 10 and await redis.get(drs) == b"piecepiece"
        assert [h.decode() for h in await redis.lrange(dr, 0, -1)] == plan.refs[:10]
        # an apply naming a count that is not the pre-queue's (not every part in) applies nothing
        header = runner.header(now, "*", (plan.ver, "", '{"n": 10}'))
        assert (await store._calls.eval("stats", "r", [*header, "draw"]))["k"] == "drawwait"
        assert (
            await redis.zcard(room_key(prefix, "r", "line")) == 0
            and await redis.hlen(room_key(prefix, "r", "pq")) == PEOPLE
        )
        # the claimer went away; the next one starts over: its first part clears what was left
        clock.advance(11)
        later = await runner.now()
        taken = await store._calls.eval("stats", "r", [*runner.header(later, "*"), "draw"])
        assert taken["k"] == "draw" and taken["claim"] != asked["claim"]
        now = later
        assert await stage(0, claim=str(taken["claim"])) == "staged"
        assert await redis.llen(dq) == 5 and await redis.get(drs) == b"piece"
        # that claimer went away too; a store call claims, reads, puts in place and applies: everyone drawn,
        # nothing left of the parts
        clock.advance(11)
        view = await store.status("r", person(0), held[0])
        assert view.ticket is not None
        tickets = [(await store.status("r", person(i), held[i])).ticket for i in range(PEOPLE)]
        assert sorted(t for t in tickets if t is not None) == list(range(1, PEOPLE + 1))
        assert await redis.exists(dq, dr, drs) == 0
        record = (await store.draw_state("r")).record
        assert record is not None and record.drawn is not None and len(record.drawn.order) == PEOPLE
    finally:
        await store.close()


async def _at_once_and_in_parts(redis: Redis, prefix: str, run: Any) -> None:
    """``run(chunk, store, clock, journal, prefix)`` on a store applying at most ``chunk`` entries a call, with
    parts of 2,000 (everything at once here) and of four: both answer alike."""
    seen: dict[int, Any] = {}
    for chunk in (2000, 4):
        part_prefix = f"{prefix}{chunk}:"
        clock, journal = FakeClock(), RecordingJournal()
        store = await make_valkey(redis, part_prefix, clock, journal, draw_chunk=chunk, rng=SeededRandom(7))
        try:
            seen[chunk] = await run(chunk, store, clock, journal, part_prefix)
        finally:
            await store.close()
    assert seen[4] == seen[2000]


async def test_a_long_line_is_purged_in_parts_and_answers_as_purged_at_once(valkey: tuple[Redis, str]) -> None:
    """A purge moves the line aside at once and finishes its tickets ``draw_chunk`` at a time; the next call
    of the room (any visitor's) applies the parts left before its own work, so nobody sees a half-purged
    line, and the answers are those of a purge at once (finished records, lookups, the journal)."""
    redis, prefix = valkey

    async def run(chunk: int, store: ValkeyStore, clock: FakeClock, journal: RecordingJournal, part_prefix: str) -> Any:
        await store.upsert_room(
            {"id": "r", "targetUrl": TARGET, "ratePerMinute": 60, "presenceSec": None, "queueMaxPerIp": None}
        )
        held = []
        for i in range(PEOPLE):
            view = await store.join("r", person(i), None, None)
            held.append(Presented(gen=view.gen, n=view.ticket))
        clock.advance(3)
        await store.tick()  # a few promoted: their passes survive the purge
        assert await store.purge("r") == PEOPLE - 3
        st = await redis.hgetall(room_key(part_prefix, "r", "st"))
        fq = room_key(part_prefix, "r", "fq")
        if chunk == 4:  # the first part went in with the purge; the rest waits aside
            assert st.get(b"fqr") == b"purged" and await redis.zcard(fq) == PEOPLE - 3 - 4
        assert await redis.zcard(room_key(part_prefix, "r", "line")) == 0
        views = [await store.status("r", person(i), held[i]) for i in range(PEOPLE)]  # the first drives the rest
        assert await redis.exists(fq) == 0
        assert await redis.hget(room_key(part_prefix, "r", "st"), "fqr") in (None, b"")
        lookups = [await store.lookup("r", str(n)) for n in range(1, PEOPLE + 1)]
        result = (
            [(v.ticket, v.state, v.position) for v in views],
            [(d["state"], d["reason"]) for d in lookups],
            [(e.type, e.data) for e in journal.events],
        )
        assert [state for _, state, _ in result[0]].count("passed") == 3
        assert [d["reason"] for d in lookups].count("purged") == PEOPLE - 3
        return result

    await _at_once_and_in_parts(redis, f"{prefix}p", run)


async def test_a_flush_of_many_passes_finishes_them_in_parts_and_answers_as_at_once(valkey: tuple[Redis, str]) -> None:
    """A flush empties the pass and session sets at once and finishes their tickets ``draw_chunk`` at a time,
    in number order; the room's next call applies what is left first. The answers are a flush at once's."""
    redis, prefix = valkey

    async def run(chunk: int, store: ValkeyStore, clock: FakeClock, journal: RecordingJournal, part_prefix: str) -> Any:
        await store.upsert_room(
            {"id": "r", "targetUrl": TARGET, "ratePerMinute": 600, "presenceSec": None, "queueMaxPerIp": None}
        )
        held = []
        for i in range(PEOPLE):
            view = await store.join("r", person(i), None, None)
            held.append(Presented(gen=view.gen, n=view.ticket))
        clock.advance(2)
        await store.tick()  # 20 promoted, 5 still waiting
        assert await store.flush("r") == 20
        fq = room_key(part_prefix, "r", "fq")
        if chunk == 4:
            st = await redis.hgetall(room_key(part_prefix, "r", "st"))
            assert st.get(b"fqr") == b"flushed" and await redis.zcard(fq) == 20 - 4
        assert await redis.scard(room_key(part_prefix, "r", "ps")) == 0  # every pass ended at once
        views = [await store.status("r", person(i), held[i]) for i in range(PEOPLE)]
        assert await redis.exists(fq) == 0
        lookups = [await store.lookup("r", str(n)) for n in range(1, PEOPLE + 1)]
        assert [d["reason"] for d in lookups].count("flushed") == 20
        result = (
            [(v.ticket, v.state, v.position) for v in views],
            [(d["state"], d["reason"]) for d in lookups],
            [(e.type, e.data) for e in journal.events],
        )
        return result

    await _at_once_and_in_parts(redis, f"{prefix}f", run)


def _count_parts(store: ValkeyStore) -> list[str]:
    """The script calls of ``store`` answered 'parts' (a part of a change in parts went in) from now on."""
    parts: list[str] = []
    calls = store._calls
    evaluate = calls.eval

    async def counted(name: str, room_id: str, args: Any) -> Any:
        reply = await evaluate(name, room_id, args)
        if reply.get("k") == "parts":
            parts.append(name)
        return reply

    calls.eval = counted  # type: ignore[method-assign]
    return parts


async def test_lanes_changed_under_a_long_line_are_regrouped_in_parts_as_at_once(valkey: tuple[Redis, str]) -> None:
    """A change of a room's lanes regroups its waiting line and its pre-queue ``draw_chunk`` at a time (a
    ticket of a lane that is gone into the first lane); the next call of the room applies what is left
    first, so positions are never read from a half-regrouped line. The answers are a regroup at once's."""
    redis, prefix = valkey
    lanes = [{"id": "members", "share": 70}, {"id": "public", "share": 30}]

    async def run(chunk: int, store: ValkeyStore, clock: FakeClock, journal: RecordingJournal, part_prefix: str) -> Any:
        room = {"id": "r", "targetUrl": TARGET, "ratePerMinute": 0, "presenceSec": None, "queueMaxPerIp": None}
        await store.upsert_room({**room, "lanes": lanes})
        held = []
        for i in range(PEOPLE):
            view = await store.join("r", person(i), None, None, lane=lanes[i % 2]["id"])
            held.append(Presented(gen=view.gen, n=view.ticket))
        parts = _count_parts(store)
        # the members lane goes: its tickets join the public lane, in line order
        await store.upsert_room({**room, "lanes": [{"id": "public", "share": 100}]})
        assert (len(parts) > 0) == (chunk == 4)  # with parts of four, calls answered 'parts' until done
        views = [await store.status("r", person(i), held[i]) for i in range(PEOPLE)]
        st = await redis.hgetall(room_key(part_prefix, "r", "st"))
        assert st.get(b"rgo", b"") == b"" and st.get(b"rgq", b"") == b""  # nothing left of the parts
        assert {v.lane for v in views} == {"public"}
        assert sorted(v.position for v in views if v.position is not None) == list(range(1, PEOPLE + 1))
        result = ([(v.ticket, v.lane, v.position) for v in views], [e.type for e in journal.events])
        return result

    await _at_once_and_in_parts(redis, f"{prefix}l", run)
