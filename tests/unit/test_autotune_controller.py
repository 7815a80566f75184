"""Autotune (jobs/autotune.py): the controller's decisions as pure functions, and one frame over rooms
against a recording store."""

from __future__ import annotations

from typing import Any

import pytest

from queue_manager.engine.errors import EngineError
from queue_manager.jobs import autotune
from queue_manager.jobs.autotune import Decision, Measurement, Signals, Step, decide
from queue_manager.store.base import StoreUnavailable

NOW = 1_767_225_600_000
CFG = {"enabled": True, "minRate": 10, "maxRate": 200, "targetLatencyMs": 300, "maxErrorRate": 0.05, "stepSec": 1}
URL = "https://shop.example/"


def probe(
    *, ok: bool = True, latency: int | None = 100, age_ms: int = 500, failure: str = "target failing: x"
) -> Measurement:
    return Measurement("target", NOW - age_ms, ok, latency, failure, 120_000)


def step(rate: int = 100, m: Measurement | None = None, **kw: Any) -> Decision:
    return decide(Step(rate=rate, cfg=kw.pop("cfg", CFG), measurement=m, now=NOW, **kw))


# ---------------------------------------------------------------------- decisions


def test_a_slow_site_decreases_the_rate_multiplicatively() -> None:
    d = step(100, probe(latency=800))
    assert (d.kind, d.rate) == ("decrease", 70)
    assert d.reason == "target latency 800 ms above 300 ms"


def test_a_failing_site_decreases_the_rate() -> None:
    d = step(100, probe(ok=False, latency=None, failure="target failing: HEAD https://shop.example/ → 503"))
    assert (d.kind, d.rate) == ("decrease", 70)
    assert d.reason == "target failing: HEAD https://shop.example/ → 503"


def test_origin_errors_above_the_rate_decrease_it_and_a_few_do_not() -> None:
    d = step(100, probe(), errors=5, sessions=10)  # 0.5 errors per session on the site > 0.05
    assert (d.kind, d.rate) == ("decrease", 70)
    assert d.reason == "5 origin errors in 1 s against 10 sessions on the site, above 5 %"
    assert step(100, probe(), errors=1, sessions=100).kind == "increase"  # 0.01 ≤ 0.05
    assert step(100, None, errors=1, sessions=0).kind == "decrease"  # errors need no probe


def test_a_healthy_site_increases_the_rate_additively() -> None:
    d = step(100, probe(latency=120))
    assert (d.kind, d.rate) == ("increase", 110)  # max(1, round(0.05 × maxRate))
    assert d.reason == "target healthy: 120 ms within 300 ms"
    small = {**CFG, "minRate": 1, "maxRate": 8}
    assert step(5, probe(), cfg=small).rate == 6  # at least 1


def test_the_rate_stays_within_min_and_max() -> None:
    assert step(12, probe(latency=800)).rate == 10  # floor(8.4) is below minRate
    at_min = step(10, probe(latency=800))
    assert at_min.kind == "hold" and at_min.rate == 10 and "already at minRate 10/min" in at_min.reason
    assert step(195, probe()).rate == 200
    at_max = step(200, probe())
    assert at_max.kind == "hold" and "already at maxRate 200/min" in at_max.reason


def test_a_rate_outside_the_range_is_brought_inside_first() -> None:
    assert step(500, probe(latency=800)) == Decision("clamp", 200, "rate 500/min outside the autotune range 10–200/min")
    assert step(5, probe()) == Decision("clamp", 10, "rate 5/min outside the autotune range 10–200/min")


def test_a_rate_of_zero_is_the_operators_and_is_held() -> None:
    d = step(0, probe(latency=800))
    assert d.kind == "hold" and d.rate == 0


def test_one_measurement_decreases_once() -> None:
    slow = probe(latency=800)
    held = step(70, slow, acted_on=slow.at)
    assert held.kind == "hold" and "already acted on" in held.reason
    newer = probe(latency=800, age_ms=-1000)  # a probe taken after the one acted on
    assert step(70, newer, acted_on=slow.at).kind == "decrease"
    healthy = probe(latency=50)  # a healthy reading of the same probe still lets the rate climb
    assert step(70, healthy, acted_on=healthy.at).kind == "increase"


def test_no_measurement_or_an_old_one_holds() -> None:
    assert step(100, None) == Decision("hold", 100, "no measurement of the site yet")
    old = step(100, probe(age_ms=130_000))
    assert old.kind == "hold" and "130 s old" in old.reason
    assert step(100, probe(latency=800, age_ms=130_000)).kind == "hold"


def test_a_room_at_its_concurrency_ceiling_holds() -> None:
    full = step(100, probe(), occupancy=90, capacity=100)
    assert full.kind == "hold" and "occupancy 90/100" in full.reason
    assert step(100, probe(), occupancy=89, capacity=100).kind == "increase"
    assert step(100, probe(latency=800), occupancy=100, capacity=100).kind == "decrease"


# ---------------------------------------------------------------------- the signals


def test_a_refused_or_outdated_target_probe_is_no_measurement() -> None:
    room = {"id": "shop", "targetUrl": URL, "proxyOrigin": None}
    result = {"url": URL, "ok": True, "latencyMs": 40, "checkedAt": NOW - 1000, "summary": f"HEAD {URL} → 200"}
    m = autotune.measurement(room, Signals(targets={"shop": result}), NOW)
    assert m is not None and (m.source, m.ok, m.latency_ms, m.at) == ("target", True, 40, NOW - 1000)
    refused = {**result, "ok": False, "refused": "shop.example resolves to 10.0.0.5, …"}
    assert autotune.measurement(room, Signals(targets={"shop": refused}), NOW) is None
    moved = {**result, "url": "https://old.example/"}
    assert autotune.measurement(room, Signals(targets={"shop": moved}), NOW) is None


def test_an_inline_room_reads_its_origin_probe() -> None:
    room = {"id": "shop", "targetUrl": URL, "proxyOrigin": "http://10.0.0.5:3000"}
    origin = {"ok": False, "status": None, "phase": "timeout", "error": "no answer", "latencyMs": None}
    m = autotune.measurement(room, Signals(origins={"shop": {**origin, "checkedAgoSec": 2.0}}), NOW)
    assert m is not None and (m.source, m.ok, m.at) == ("origin", False, NOW - 2000)
    assert m.failure == "origin probe failing (timeout)"
    answered = {**origin, "ok": False, "status": 503, "phase": "status", "checkedAgoSec": 0.0}
    m = autotune.measurement(room, Signals(origins={"shop": answered}), NOW)
    assert m is not None and m.failure == "origin answered 503"
    refused = {**origin, "phase": "refused", "checkedAgoSec": 0.0}
    assert autotune.measurement(room, Signals(origins={"shop": refused}), NOW) is None


# ---------------------------------------------------------------------- one frame


class Store:
    """Records rate changes; ``fail`` makes the next change raise it."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, Any], str | None]] = []
        self.fail: Exception | None = None

    async def upsert_room(self, body: dict[str, Any], *, expect_state: str | None = None) -> Any:
        self.calls.append((body, expect_state))
        if self.fail is not None:
            raise self.fail
        return body, False, ["ratePerMinute"]


class Audit:
    def __init__(self) -> None:
        self.rows: list[tuple[Any, str, dict[str, Any]]] = []

    async def __call__(self, actor: Any, action: str, **detail: Any) -> None:
        self.rows.append((actor, action, detail))


async def run(store: Any, audit: Audit, doc: dict[str, Any], rooms: list[dict[str, Any]], now: int, s: Signals) -> bool:
    return await autotune.run(store, audit, doc, rooms, now, s)


def room(**fields: Any) -> dict[str, Any]:
    base = {
        "id": "shop",
        "targetUrl": URL,
        "proxyOrigin": None,
        "state": "active",
        "effectiveState": "active",
        "ratePerMinute": 100,
        "waiting": 40,
        "activeSessions": 0,
        "occupancy": 0,
        "capacity": None,
        "autotune": CFG,
    }
    return {**base, **fields}


def slow_target(at: int = NOW - 100, latency: int = 800) -> Signals:
    result = {"url": URL, "ok": True, "latencyMs": latency, "checkedAt": at, "summary": f"HEAD {URL} → 200"}
    return Signals(targets={"shop": result}, instance="i:a")


async def test_a_step_changes_the_rate_by_compare_and_set_and_audits_it() -> None:
    store, audit, doc = Store(), Audit(), {}
    changed = await run(store, audit, doc, [room()], NOW, slow_target())
    assert changed is True
    assert store.calls == [({"id": "shop", "ratePerMinute": 70}, "active")]
    assert audit.rows == [
        (
            None,
            "room.autotune",
            {
                "target": "shop",
                "room_id": "shop",
                "from": 100,
                "to": 70,
                "reason": "target latency 800 ms above 300 ms",
            },
        )
    ]
    mine = doc["autotune"]["shop"]
    assert mine["at"] == NOW and mine["actedOn"] == NOW - 100
    assert mine["last"] == {"at": NOW, "from": 100, "to": 70, "reason": "target latency 800 ms above 300 ms"}


async def test_steps_are_stepsec_apart() -> None:
    store, audit, doc = Store(), Audit(), {}
    await run(store, audit, doc, [room()], NOW, slow_target())
    newer = slow_target(at=NOW + 900)
    await run(store, audit, doc, [room(ratePerMinute=70)], NOW + 999, newer)
    assert len(store.calls) == 1
    await run(store, audit, doc, [room(ratePerMinute=70)], NOW + 1000, newer)
    assert [body["ratePerMinute"] for body, _ in store.calls] == [70, 49]


@pytest.mark.parametrize(
    "fields",
    [
        {"state": "paused", "effectiveState": "paused"},
        {"state": "bypass", "effectiveState": "bypass"},
        {"state": "active", "effectiveState": "scheduled"},
        {"waiting": 0},
        {"autotune": {**CFG, "enabled": False}},
        {"autotune": None},
    ],
    ids=["paused", "bypass", "scheduled", "not-queueing", "disabled", "no-settings"],
)
async def test_a_room_that_is_not_tuned_is_never_touched(fields: dict[str, Any]) -> None:
    store, audit, doc = Store(), Audit(), {}
    for n in range(3):
        await run(store, audit, doc, [room(**fields)], NOW + n * 1000, slow_target())
    assert store.calls == [] and audit.rows == []


async def test_a_room_changed_meanwhile_is_left_alone_without_an_audit_row() -> None:
    for failure in (
        EngineError(409, "state_changed", "shop is paused now, not active"),
        EngineError(404, "no_room", "no room"),
        StoreUnavailable("down"),
    ):
        store, audit, doc = Store(), Audit(), {}
        store.fail = failure
        await run(store, audit, doc, [room()], NOW, slow_target())
        assert len(store.calls) == 1 and audit.rows == []
        assert "last" not in doc["autotune"]["shop"]


async def test_origin_errors_count_from_the_last_step_on_the_same_instance() -> None:
    inline = room(proxyOrigin="http://10.0.0.5:3000", activeSessions=10)
    healthy = {"ok": True, "status": 200, "phase": None, "error": None, "latencyMs": 20, "checkedAgoSec": 0.1}

    def signals(errors: int, instance: str = "i:a") -> Signals:
        return Signals(origins={"shop": healthy}, origin_errors={("shop", "connect"): errors}, instance=instance)

    store, audit, doc = Store(), Audit(), {}
    await run(store, audit, doc, [inline], NOW, signals(50))
    assert store.calls[-1][0]["ratePerMinute"] == 110  # errors before the first step are not counted
    await run(store, audit, doc, [inline], NOW + 1000, signals(55))
    assert store.calls[-1][0]["ratePerMinute"] == 70  # 5 errors / 10 sessions
    assert audit.rows[-1][2]["reason"] == "5 origin errors in 1 s against 10 sessions on the site, above 5 %"
    await run(store, audit, doc, [inline], NOW + 2000, signals(3, "i:b"))
    assert store.calls[-1][0]["ratePerMinute"] == 110  # a new leader's counts start afresh


async def test_rooms_gone_or_disabled_leave_the_document() -> None:
    store, audit, doc = Store(), Audit(), {}
    await run(store, audit, doc, [room()], NOW, slow_target())
    assert set(doc["autotune"]) == {"shop"}
    assert await run(store, audit, doc, [], NOW + 1000, slow_target()) is True
    assert doc["autotune"] == {}
