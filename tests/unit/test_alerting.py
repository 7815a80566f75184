"""The alert state machine and the conditions, as pure functions of a frame."""

from __future__ import annotations

from typing import Any

from queue_manager.jobs import alerting
from queue_manager.jobs.conditions import Condition, Frame, StorageReport, evaluate

HOLD, REPEAT = 60_000, 1_800_000
FROZEN = Condition("queue_frozen", "shop", "warning", "Shop: 3 waiting and the room is paused")


def statuses(pages: list[dict[str, Any]]) -> list[str]:
    return [p["status"] for p in pages]


def test_holds_then_fires_repeats_and_resolves_with_the_same_since() -> None:
    state = alerting.empty()
    assert alerting.step(state, [FROZEN], 1_000, HOLD, REPEAT) == []
    assert alerting.step(state, [FROZEN], 60_999, HOLD, REPEAT) == []
    assert alerting.holding(state)[0]["since"] == 1_000
    fired = alerting.step(state, [FROZEN], 61_000, HOLD, REPEAT)
    assert statuses(fired) == ["firing"] and fired[0]["since"] == 1_000 and fired[0]["ts"] == 61_000
    assert alerting.step(state, [FROZEN], 61_000 + REPEAT - 1, HOLD, REPEAT) == []
    again = alerting.step(state, [FROZEN], 61_000 + REPEAT, HOLD, REPEAT)
    assert statuses(again) == ["firing"] and again[0]["since"] == 1_000
    done = alerting.step(state, [], 61_000 + REPEAT + 5, HOLD, REPEAT)
    assert statuses(done) == ["resolved"] and done[0]["since"] == 1_000
    assert done[0]["text"] == "[queue-manager] RESOLVED: Shop: 3 waiting and the room is paused"
    assert alerting.firing(state) == [] and [p["body"]["status"] for p in state["outbox"]] == [
        "firing",
        "firing",
        "resolved",
    ]


def test_a_condition_that_clears_inside_its_hold_never_pages() -> None:
    state = alerting.empty()
    alerting.step(state, [FROZEN], 0, HOLD, REPEAT)
    assert alerting.step(state, [], 30_000, HOLD, REPEAT) == []
    assert state["outbox"] == [] and state["open"] == {}


def test_the_outbox_keeps_a_page_until_settled_and_retries_with_backoff() -> None:
    state = alerting.empty()
    alerting.step(state, [FROZEN], 0, 0, REPEAT)
    (entry,) = alerting.due(state, 0)
    alerting.settle(state, entry["id"], False, 10, 5_000)
    assert alerting.due(state, 5_009) == [] and alerting.due(state, 5_010)
    alerting.settle(state, entry["id"], False, 5_010, 5_000)
    assert state["outbox"][0]["due"] == 15_010  # doubled
    alerting.settle(state, entry["id"], True, 15_010, 5_000)
    assert state["outbox"] == []


def test_the_outbox_is_bounded_and_counts_what_it_dropped() -> None:
    state = alerting.empty()
    pages = [alerting.page("surge", "firing", "warning", f"r{i}", "m", i, i) for i in range(alerting.OUTBOX_MAX + 5)]
    alerting.enqueue(state, pages, 0)
    assert len(state["outbox"]) == alerting.OUTBOX_MAX and state["dropped"] == 5


def room(**kw: Any) -> dict[str, Any]:
    base = {"id": "shop", "name": "Shop", "effectiveState": "active", "state": "active", "waiting": 0}
    return {**base, "ratePerMinute": 60, "joinsLastMinute": 0, "passedLastMinute": 0, **kw}


def events(frame: Frame) -> list[str]:
    return [c.event for c in evaluate(frame)]


def test_outflow_stalled_only_while_the_room_admits() -> None:
    assert events(Frame(0, [room(waiting=412)])) == ["outflow_stalled"]
    assert evaluate(Frame(0, [room(waiting=412)]))[0].message == (
        "Shop: 412 waiting and nobody let through in the last minute"
    )
    assert events(Frame(0, [room(waiting=412, passedLastMinute=3)])) == []
    assert events(Frame(0, [room(waiting=4, effectiveState="paused", state="paused")])) == ["queue_frozen"]
    assert events(Frame(0, [room(waiting=4, ratePerMinute=0)])) == ["queue_frozen"]
    assert events(Frame(0, [room(waiting=0)])) == []


def test_surge_starts_at_four_times_the_rate_and_clears_under_twice() -> None:
    assert events(Frame(0, [room(joinsLastMinute=240, passedLastMinute=60)])) == ["surge"]
    assert events(Frame(0, [room(joinsLastMinute=19, ratePerMinute=1, passedLastMinute=1)])) == []
    assert events(Frame(0, [room(joinsLastMinute=150, passedLastMinute=60)])) == []
    held = Frame(0, [room(joinsLastMinute=150, passedLastMinute=60)], open_keys={"surge|shop"})
    assert events(held) == ["surge"]
    assert events(Frame(0, [room(joinsLastMinute=500, effectiveState="bypass", state="bypass")])) == []


def test_storage_pages_on_any_instance_and_resolves_when_all_are_healthy() -> None:
    ok = StorageReport("i:a", 1_000, True, False)
    bad = StorageReport("i:b", 1_000, False, True)
    recovering = StorageReport("i:b", 1_000, False, False)
    (cond,) = evaluate(Frame(1_000, [], storage=[ok, bad]))
    assert cond.event == "storage_failing" and "i:b" in cond.message and cond.room_id is None
    assert evaluate(Frame(1_000, [], storage=[ok, recovering])) == []  # one failure: degraded, no page
    still = Frame(1_000, [], storage=[ok, recovering], open_keys={"storage_failing|"})
    assert events(still) == ["storage_failing"]  # open: resolves only once every instance is healthy
    stale = Frame(100_000, [], storage=[bad], storage_window_ms=15_000)
    assert evaluate(stale) == []


def test_storage_pages_for_a_quarantined_spool_file_and_says_when_joins_are_spooled() -> None:
    spooled = StorageReport("i:a", 1_000, False, True, spooling=True)
    (cond,) = evaluate(Frame(1_000, [], storage=[spooled]))
    assert cond.message == (
        "storage failing on i:a: events journal commits to PostgreSQL fail, joins are spooled to disk"
    )
    poisoned = StorageReport("i:b", 1_000, True, False, quarantined=2)
    (cond,) = evaluate(Frame(1_000, [], storage=[poisoned]))
    assert cond.event == "storage_failing" and cond.severity == "critical"
    assert cond.message == (
        "2 spool files quarantined in failed/ on i:b: PostgreSQL refused their events (GET /api/v1/status/buffers)"
    )
    emptied = StorageReport("i:b", 1_000, True, False)
    assert evaluate(Frame(1_000, [], storage=[emptied], open_keys={"storage_failing|"})) == []


def test_a_failing_site_is_target_failing() -> None:
    (cond,) = evaluate(Frame(0, [room()], sites_failing={"shop": "HEAD https://shop.example → 503"}))
    assert cond.event == "target_failing" and cond.severity == "critical"
    assert cond.message == "Shop: the site is not answering (HEAD https://shop.example → 503)"


def test_the_webhook_address_shown_keeps_no_secret() -> None:
    from queue_manager.clock import FakeClock
    from queue_manager.config import load_settings
    from queue_manager.jobs.webhook import Webhook

    def shown(url: str) -> str | None:
        return Webhook(load_settings({"ALERT_WEBHOOK_URL": url}), FakeClock().wall_ms).where()

    assert shown("https://hooks.slack.com/services/T000/B000/XXXX") == "https://hooks.slack.com/…"
    assert shown("https://user:pw@alerts.example:8443/?token=abc") == "https://alerts.example:8443/…"
    assert shown("https://alerts.example") == "https://alerts.example/"


def test_a_journal_gap_pages_per_room_and_says_whether_anything_is_lost() -> None:
    from queue_manager.jobs.conditions import Frame, evaluate

    rooms = [{"id": "shop", "name": "Shop", "effectiveState": "active", "waiting": 0, "ratePerMinute": 60}]
    held = {"missing": 2, "seqs": [7, 8], "unrecoverable": [], "unrecoverableCount": 0, "generation": 1}
    lost = {"missing": 3, "seqs": [7, 8, 9], "unrecoverable": [9], "unrecoverableCount": 1, "generation": 1}
    (kept,) = [c for c in evaluate(Frame(now=0, rooms=rooms, journal_gaps={"shop": held})) if c.event == "journal_gap"]
    assert kept.room_id == "shop" and kept.severity == "critical"
    assert "misses 2 events" in kept.message and "kept in Valkey" in kept.message
    (gone,) = [c for c in evaluate(Frame(now=0, rooms=rooms, journal_gaps={"shop": lost})) if c.event == "journal_gap"]
    assert "1 of them held nowhere else" in gone.message
    assert not [c for c in evaluate(Frame(now=0, rooms=rooms)) if c.event == "journal_gap"]
