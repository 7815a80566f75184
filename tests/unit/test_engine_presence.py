"""presenceSec: absent holders do not hold slots.

"Seen" = joined, polled status (or holds the stream). At their turn an absent ticket is promoted in
order without a slot and without spending rate credit; after promotion a never-told holder gives the
slot back once unseen for presenceSec; a told holder keeps it for the whole claim window."""

from __future__ import annotations

from queue_manager.engine import operator, report
from queue_manager.engine.outflow import SLOT


def _resume_with(engine, run, *keep):
    """Resume a paused room and tick once, the ``keep`` visitors polling."""
    engine.upsert({"id": "r", "state": "active"})
    return run(1, each=lambda: [v.status() for v in keep])


def test_absent_head_is_promoted_in_order_without_slot_or_credit(make_room, visitor, run, engine):
    room = make_room(ratePerMinute=60, state="paused", presenceSec=30, queueMaxPerIp=None)
    ghost, p1, p2 = visitor(room), visitor(room), visitor(room)
    for v in (ghost, p1, p2):
        v.join()
    run(31, each=lambda: (p1.status(), p2.status()))  # the ghost never polls
    assert _resume_with(engine, run, p1, p2) == 2
    assert ghost.state == "passed" and not ghost.ticket.slot
    assert p1.state == "passed" and p1.ticket.slot  # the one credit of that second went to p1
    assert p2.state == "waiting" and p2.position == 1
    assert room.occupancy() == 1
    promotes = [e.data for e in engine.drain_events() if e.type == "promote"]
    assert [(p["n"], p["slot"]) for p in promotes] == [(ghost.n, False), (p1.n, True)]
    assert promotes[0]["credit"] - promotes[1]["credit"] == SLOT  # only p1's promotion spent credit


def test_absent_ticket_behind_a_blocked_present_head_waits_its_turn(make_room, visitor, run, engine):
    room = make_room(ratePerMinute=60, maxConcurrent=1, presenceSec=30, queueMaxPerIp=None)
    d = visitor(room)
    d.join()
    run(1)
    assert d.check().admit  # the only slot is taken
    p1, ghost = visitor(room), visitor(room)
    p1.join()
    ghost.join()
    run(60, each=p1.status)  # p1 is present but blocked by capacity; the ghost is absent behind it
    assert p1.state == "waiting" and p1.position == 1
    assert ghost.state == "waiting" and ghost.position == 2
    operator.eject(room, d.n)
    d.status()
    run(1, each=p1.status)
    assert p1.state == "passed" and p1.ticket.slot
    assert ghost.state == "passed" and not ghost.ticket.slot  # now at the head: promoted in order


def test_without_presence_an_unseen_head_costs_credit_and_takes_a_slot(make_room, visitor, run, engine):
    room = make_room(ratePerMinute=60, state="paused", presenceSec=None, queueMaxPerIp=None)
    ghost, p1 = visitor(room), visitor(room)
    ghost.join()
    p1.join()
    run(31, each=p1.status)
    assert _resume_with(engine, run, p1) == 1
    assert ghost.state == "passed" and ghost.ticket.slot
    assert p1.state == "waiting"


def test_ghost_flood_lets_the_real_visitor_through_about_presence_sec_later(make_room, visitor, run, fill):
    """The guide's measurement: 200 never-polling joins, maxConcurrent 5, 600/min."""
    room = make_room(ratePerMinute=600, maxConcurrent=5, presenceSec=30, queueMaxPerIp=None)
    fill(room, 200)
    real = visitor(room)
    real.join()
    seconds = 0
    while real.state == "waiting":
        run(1, each=real.status)
        seconds += 1
        assert room.occupancy() <= 5
        assert seconds <= 35, "the real visitor is still stuck behind ghosts"
    assert seconds <= 32
    assert real.ticket.slot
    stats = report.stats(room)
    assert stats["passesOutstanding"] >= 200  # the ghosts are in passesOutstanding ...
    assert stats["occupancy"] <= 5  # ... not in occupancy


def test_ghost_flood_without_presence_freezes_the_room(make_room, visitor, run, fill):
    room = make_room(ratePerMinute=600, maxConcurrent=5, presenceSec=None, queueMaxPerIp=None)
    fill(room, 200)
    real = visitor(room)
    real.join()
    run(60, each=real.status)
    assert real.state == "waiting"
    assert real.position > 150


def _promoted_while_polling(room, v, run):
    """Poll every second while waiting (status), stop as soon as promoted: never told."""
    for _ in range(600):
        if v.state == "passed":
            return v.ticket.pass_at
        run(1, each=lambda: v.status() if v.state == "waiting" else None)
    raise AssertionError("never promoted")


def test_never_told_holder_gives_the_slot_back_after_presence_sec(make_room, visitor, run):
    room = make_room(ratePerMinute=60, maxConcurrent=1, presenceSec=30, queueMaxPerIp=None)
    a, b = visitor(room), visitor(room)
    a.join()
    b.join()
    pass_at = _promoted_while_polling(room, a, run)
    assert not a.ticket.told and a.ticket.seen == pass_at
    run(29, each=b.status)
    assert a.ticket.slot and b.state == "waiting"
    run(1, each=b.status)  # unseen for 30 s, never told: the slot goes back
    assert not a.ticket.slot
    assert a.state == "passed"  # the pass itself stays valid
    assert b.state == "passed" and b.ticket.slot
    assert room.occupancy() == 1


def test_a_rejoin_counts_as_seen_but_does_not_tell(make_room, visitor, run):
    room = make_room(ratePerMinute=60, maxConcurrent=1, presenceSec=30, queueMaxPerIp=None)
    a = visitor(room)
    a.join()
    pass_at = _promoted_while_polling(room, a, run)
    run(20)
    assert a.join().ticket is a.ticket  # the waiting page reloads: seen, not told
    assert not a.ticket.told
    run(29)
    assert a.ticket.slot  # 49 s after promotion, 29 s after last seen
    run(1)
    assert not a.ticket.slot
    assert room.clock.mono_ms() == pass_at + 50_000


def test_told_holder_keeps_the_slot_for_the_whole_window(make_room, visitor, run):
    room = make_room(ratePerMinute=60, maxConcurrent=1, presenceSec=30, queueMaxPerIp=None)
    a, b = visitor(room), visitor(room)
    a.join()
    b.join()
    pass_at = _promoted_while_polling(room, a, run)
    a.status()  # told
    assert a.ticket.told
    run(119, each=b.status)  # a is never seen again
    assert a.ticket.slot and b.state == "waiting"
    run(1, each=b.status)
    assert room.clock.mono_ms() == pass_at + 120_000
    assert not a.ticket.slot
    assert b.state == "passed"


def test_status_before_promotion_does_not_count_as_told(make_room, visitor, run):
    room = make_room(ratePerMinute=60, maxConcurrent=1, presenceSec=30, queueMaxPerIp=None)
    a = visitor(room)
    a.join()
    a.status()
    _promoted_while_polling(room, a, run)
    assert not a.ticket.told


def test_presence_null_disables_the_early_release(make_room, visitor, run):
    room = make_room(ratePerMinute=60, maxConcurrent=1, presenceSec=None, queueMaxPerIp=None)
    a, b = visitor(room), visitor(room)
    a.join()
    b.join()
    pass_at = _promoted_while_polling(room, a, run)
    run(119)  # never told, never seen
    assert a.ticket.slot and b.state == "waiting"
    run(1)
    assert room.clock.mono_ms() == pass_at + 120_000
    assert not a.ticket.slot and b.state == "passed"


def test_returning_absent_holder_takes_a_slot_at_the_door(make_room, visitor, run, engine):
    room = make_room(ratePerMinute=60, maxConcurrent=2, state="paused", presenceSec=30, queueMaxPerIp=None)
    phone = visitor(room)
    phone.join()
    run(40)  # the phone was locked
    engine.upsert({"id": "r", "state": "active"})
    run(1)
    assert phone.state == "passed" and not phone.ticket.slot
    run(100)
    result = phone.check()  # back inside passedTtlSec: through, on a free slot
    assert result.admit
    assert room.occupancy() == 1
