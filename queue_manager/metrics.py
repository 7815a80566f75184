"""Process counters (plain ints on the hot path) and their Prometheus exposition.

Exposition uses prometheus_client's text format writer over families built at scrape time, so
per-room gauges always read the store and nothing is registered globally.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest


@dataclass
class Counters:
    unknown_room_checks: int = 0
    blocked_return_urls: int = 0
    rejected_tokens: int = 0
    rejected_tokens_by_reason: dict[str, int] = field(default_factory=dict)
    refused_key_checks: int = 0
    rate_limited_checks: int = 0
    rate_limited_by_route: dict[str, int] = field(default_factory=dict)
    storage_write_errors: int = 0
    edge_refused: int = 0
    edge_client_ip_fallback: int = 0
    unscoped_checks: int = 0
    refused_origin_checks: dict[tuple[str, str], int] = field(default_factory=dict)
    # inline proxy (queue_manager/inline)
    inline_gated: int = 0
    inline_bypassed: int = 0
    origin_errors: dict[tuple[str, str], int] = field(default_factory=dict)  # (room, phase)
    visitor_disconnects: dict[str, int] = field(default_factory=dict)  # room
    backend_down: dict[str, int] = field(default_factory=dict)  # onBackendDown mode
    connections_shed: int = 0

    def reject_token(self, reason: str) -> None:
        self.rejected_tokens += 1
        self.rejected_tokens_by_reason[reason] = self.rejected_tokens_by_reason.get(reason, 0) + 1


_STATE_CODES = {"active": 1, "paused": 2, "bypass": 3, "scheduled": 4}


class _Snapshot:
    def __init__(self, metrics: list[Metric]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return iter(self._metrics)


def render(
    rooms: Iterable[dict[str, Any]],
    counters: Counters,
    *,
    uptime: float,
    start_time: float,
    sse_subscribers: int,
    shutting_down: bool,
    instance: str | None,
) -> bytes:
    labels = ["instance"] if instance else []
    inst = [instance] if instance else []

    def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
        g = GaugeMetricFamily(name, doc, labels=labels)
        g.add_metric(inst, value)
        return g

    def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
        c = CounterMetricFamily(name, doc, labels=labels)
        c.add_metric(inst, value)
        return c

    room_labels = ["room", *labels]
    per_room = {
        "qm_room_waiting": ("Visitors waiting in line", "waiting"),
        "qm_room_active_sessions": ("Live sessions on the protected site", "activeSessions"),
        "qm_room_pending_entry": ("Passes issued and not yet used", "pendingEntry"),
        "qm_room_occupancy": ("Capacity slots in use (sessions + passes inside the claim window)", "occupancy"),
        "qm_room_rate_per_minute": ("Configured outflow per minute", "ratePerMinute"),
        "qm_room_passed_last_minute": ("Passes issued in the last minute", "passedLastMinute"),
        "qm_room_oldest_wait_seconds": ("Wait of the visitor at the front of the line", "oldestWaitSec"),
    }
    families: dict[str, GaugeMetricFamily] = {
        name: GaugeMetricFamily(name, doc, labels=room_labels) for name, (doc, _) in per_room.items()
    }
    max_conc = GaugeMetricFamily("qm_room_max_concurrent", "Concurrency ceiling (-1 = none)", labels=room_labels)
    state = GaugeMetricFamily(
        "qm_room_state", "Effective state: 1 active, 2 paused, 3 bypass, 4 scheduled", labels=room_labels
    )
    count = 0
    for room in rooms:
        count += 1
        lab = [room["id"], *inst]
        for name, (_, key) in per_room.items():
            families[name].add_metric(lab, float(room.get(key) or 0))
        cap = room.get("maxConcurrent")
        max_conc.add_metric(lab, -1.0 if cap is None else float(cap))
        state.add_metric(lab, float(_STATE_CODES.get(room.get("effectiveState", ""), 0)))
    refused_origin = CounterMetricFamily(
        "qm_refused_origin_checks",
        "Door checks from an origin the room does not list",
        labels=["room", "origin", *labels],
    )
    for (room_id, origin), value in counters.refused_origin_checks.items():
        refused_origin.add_metric([room_id, origin, *inst], value)
    rejected = CounterMetricFamily(
        "qm_rejected_tokens_all_total", "Visitor tokens refused (bad, expired, future)", labels=labels
    )
    rejected.add_metric(inst, counters.rejected_tokens)
    metrics: list[Metric] = [
        *families.values(),
        max_conc,
        state,
        gauge("qm_rooms", "Rooms defined", count),
        gauge("qm_sse_subscribers", "Open visitor and console streams on this instance", sse_subscribers),
        gauge("qm_uptime_seconds", "Seconds since this process started", uptime),
        gauge("qm_process_start_time_seconds", "Start time of this process (Unix seconds)", start_time),
        gauge("qm_shutting_down", "1 while a stop is in progress", 1.0 if shutting_down else 0.0),
        counter("qm_storage_write_errors", "Journal commits that failed", counters.storage_write_errors),
        counter(
            "qm_unknown_room_checks", "Door checks naming a room that does not exist", counters.unknown_room_checks
        ),
        counter("qm_blocked_return_urls", "Return URLs refused by a room's policy", counters.blocked_return_urls),
        counter("qm_refused_key_checks_all", "Vouched checks refused for their key", counters.refused_key_checks),
        counter("qm_rate_limited_checks_all", "Door checks answered 429", counters.rate_limited_checks),
        gauge(
            "qm_edge_refused", "Requests refused for a missing or wrong edge secret (a count)", counters.edge_refused
        ),
        counter(
            "qm_edge_client_ip_fallback",
            "Edge requests without a usable cf-connecting-ip",
            counters.edge_client_ip_fallback,
        ),
        rejected,
        refused_origin,
        *_inline_families(counters, labels, inst),
    ]
    return generate_latest(_Snapshot(metrics))


def _inline_families(counters: Counters, labels: list[str], inst: list[str]) -> list[Metric]:
    gated = CounterMetricFamily("qm_inline_gated", "Inline requests that went through the gate", labels=labels)
    gated.add_metric(inst, counters.inline_gated)
    bypassed = CounterMetricFamily(
        "qm_inline_bypassed", "Inline static subresources forwarded without a queue check", labels=labels
    )
    bypassed.add_metric(inst, counters.inline_bypassed)
    errors = CounterMetricFamily(
        "qm_proxy_origin_errors",
        "Proxied requests the site behind the queue failed, per room and phase",
        labels=["room", "phase", *labels],
    )
    for (room_id, phase), value in counters.origin_errors.items():
        errors.add_metric([room_id, phase, *inst], value)
    gone = CounterMetricFamily(
        "qm_proxy_visitor_disconnects",
        "Proxied requests the visitor abandoned (not origin errors)",
        labels=["room", *labels],
    )
    for room_id, value in counters.visitor_disconnects.items():
        gone.add_metric([room_id, *inst], value)
    down = CounterMetricFamily(
        "qm_proxy_backend_down",
        "Inline requests answered while the backend was down, per onBackendDown mode",
        labels=["mode", *labels],
    )
    for mode in ("open", "closed"):
        down.add_metric([mode, *inst], counters.backend_down.get(mode, 0))
    shed = CounterMetricFamily(
        "qm_connections_shed", "Requests answered 503 at the MAX_CONNECTIONS ceiling", labels=labels
    )
    shed.add_metric(inst, counters.connections_shed)
    return [gated, bypassed, errors, gone, down, shed]
