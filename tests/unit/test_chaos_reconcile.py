"""The fault drill's reconciliation (tests/chaos/reconcile.py) finds what it is there to find: a drill whose
checks cannot fail would pass on any build. Pure: made-up joins, places and journal, no server."""

from __future__ import annotations

from collections import Counter

from tests.chaos.reconcile import Gap, Join, JournalRoom, Seen, inversions, reconcile, refusals, spans


def _join(index: int, ticket: int | None, sent: float, done: float, room: str = "r", code: str = "ok") -> Join:
    return Join(index, room, "a", sent, done, code, ticket, f"token-{index}", None)


def _clean(joins: list[Join]) -> tuple[dict[int, Seen], dict[str, JournalRoom]]:
    live = {j.index: Seen(200, "waiting", j.ticket, k + 1) for k, j in enumerate(joins)}
    journal = {"r": JournalRoom(1, Counter(j.ticket for j in joins if j.ticket is not None))}
    return live, journal


def test_a_clean_run_passes() -> None:
    joins = [_join(i, i, i, i + 0.5) for i in range(1, 6)]
    live, journal = _clean(joins)
    result = reconcile(joins, live, journal, live, {"r": True}, [])
    assert result.ok, result.render()
    assert result.total.acknowledged == result.total.in_line == result.total.in_journal == 5
    assert result.total.after_rebuild == 5
    assert "RESULT: PASS" in result.render()


def test_ticket_numbers_may_have_gaps_and_overlapping_joins_may_come_in_any_order() -> None:
    # 1 and 2 were in flight together (neither acknowledged before the other was sent): either order holds
    joins = [_join(1, 7, 0.0, 1.0), _join(2, 4, 0.5, 1.5), _join(3, 9, 2.0, 2.5)]
    live = {1: Seen(200, "waiting", 7, 2), 2: Seen(200, "waiting", 4, 1), 3: Seen(200, "waiting", 9, 3)}
    journal = {"r": JournalRoom(1, Counter({4: 1, 7: 1, 9: 1}), {5, 6})}
    assert reconcile(joins, live, journal, live, {"r": True}, []).ok


def test_loss_duplicates_and_inversions_are_each_found() -> None:
    joins = [_join(1, 1, 0, 1), _join(2, 2, 2, 3), _join(3, 3, 4, 5), _join(4, 3, 6, 7)]
    live, journal = _clean(joins)
    journal["r"].joins[2] = 0  # ticket 2 never reached the journal
    live[3] = Seen(200, "waiting", 3, 9)  # ticket 3 behind ticket 4's place, though acknowledged first
    result = reconcile(joins, live, journal, live, {"r": True}, [])
    t = result.total
    assert t.lost == 1 and "ticket 2" in result.lost[0] and "journal: 0 join events" in result.lost[0]
    assert t.duplicated >= 2  # ticket 3 acknowledged twice, and journaled twice
    assert any("acknowledged 2 times" in d for d in result.duplicated)
    assert any("journaled 2 times" in d for d in result.duplicated)
    assert t.inversions >= 1 and any("later place" in i for i in result.inversions)
    assert not result.ok and "RESULT: FAIL" in result.render()


def test_a_revoked_join_is_not_in_the_journal() -> None:
    joins = [_join(1, 1, 0, 1)]
    live, journal = _clean(joins)
    journal["r"].revoked.add(1)
    result = reconcile(joins, live, journal, live, {"r": True}, [])
    assert result.total.lost == 1 and "join.revoke" in result.lost[0]


def test_a_room_that_stays_503_is_unrebuildable_and_gaps_fail_the_run() -> None:
    joins = [_join(1, 1, 0, 1), _join(2, 2, 2, 3)]
    live, journal = _clean(joins)
    gap = Gap("r", 1, 12, (5, 6, 7, 10))
    result = reconcile(joins, live, journal, {}, {"r": False}, [gap], {"r": "gap"})
    assert result.unrebuildable == {"r": "gap"}
    assert result.total.unanswered == 2 and result.total.lost == 0  # unanswered, not counted as lost
    problems = result.problems()
    assert any("gaps" in p for p in problems) and any("could not be rebuilt" in p for p in problems)
    assert str(gap) == "r gen 1: seq 5–7, 10 missing (of 1–12)"


def test_a_place_lost_in_the_rebuild_of_a_room_that_answers_is_lost() -> None:
    joins = [_join(1, 1, 0, 1)]
    live, journal = _clean(joins)
    result = reconcile(joins, live, journal, {1: Seen(200, "expired", None, None)}, {"r": True}, [])
    assert result.total.lost == 1 and "after the rebuild" in result.lost[0]


def test_inversions_pairs_only_joins_acknowledged_before_the_other_was_sent() -> None:
    a, b, c = _join(1, 5, 0, 1), _join(2, 3, 0.5, 2), _join(3, 4, 3, 4)
    found = inversions([(a, 5), (b, 3), (c, 4)], ties=False)
    assert [(x.index, y.index) for x, y in found] == [(1, 3)]  # b overlapped a; c came after both


def test_spans_and_refusals_read_well() -> None:
    assert spans([7, 1, 2, 3, 9, 10]) == "1–3, 7, 9–10"
    joins = [_join(1, None, 0, 1, code="storage_unavailable")] * 3 + [_join(2, None, 0, 1, code="connect_error")]
    assert refusals(joins) == "storage_unavailable ×3, connect_error ×1"
    assert refusals([_join(3, 1, 0, 1)]) == "—"
