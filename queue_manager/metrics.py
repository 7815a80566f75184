"""Process counters (plain ints on the hot path) and their Prometheus exposition.

Exposition uses prometheus_client's text format writer over families built at scrape time, so
per-room gauges always read the store and nothing is registered globally.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields
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
    refused_edge_passes: int = 0  # edge passes a door check carried that the queue would refuse
    rate_limited_checks: int = 0
    rate_limited_by_route: dict[str, int] = field(default_factory=dict)
    entry_refused: dict[str, int] = field(default_factory=dict)  # joins refused by a room's entry, per code
    storage_write_errors: int = 0
    edge_refused: int = 0
    edge_client_ip_fallback: int = 0
    unscoped_checks: int = 0
    refused_origin_checks: dict[tuple[str, str], int] = field(default_factory=dict)
    access_rule_hits: dict[tuple[str, str], int] = field(default_factory=dict)  # (room, action): access rules matched
    # inline proxy (queue_manager/inline)
    inline_gated: int = 0
    inline_bypassed: int = 0
    origin_errors: dict[tuple[str, str], int] = field(default_factory=dict)  # (room, phase)
    visitor_disconnects: dict[str, int] = field(default_factory=dict)  # room
    backend_down: dict[str, int] = field(default_factory=dict)  # onBackendDown mode
    gate_checks: dict[str, int] = field(default_factory=dict)  # /api/gate answers, by X-QM-Decision
    connections_shed: int = 0
    # request heads (inline/heads.py): heads refused, per reason (too_large, too_many_fields, timeout), and
    # connections closed while waiting for a head, per reason (idle, ceiling)
    heads_refused: dict[str, int] = field(default_factory=dict)
    waiting_closed: dict[str, int] = field(default_factory=dict)
    # turn e-mails (jobs/turn_mail.py, on the leader): sent, given up after the last try, tries repeated
    turn_emails_sent: int = 0
    turn_emails_failed: int = 0
    turn_emails_retried: int = 0
    # bot protection (assessed, blocked, warned, allowlisted, crawlers): kept by the protection itself and
    # copied in when this process's counters are written for the fleet view (``fleet/counters.py``)
    protection: dict[str, int] = field(default_factory=dict)

    def reject_token(self, reason: str) -> None:
        self.rejected_tokens += 1
        self.rejected_tokens_by_reason[reason] = self.rejected_tokens_by_reason.get(reason, 0) + 1


#: The counters keyed by a pair ((room, phase), (room, origin)): on the wire each entry is ``[a, b, count]``.
_PAIR_KEYED = frozenset({"refused_origin_checks", "origin_errors", "access_rule_hits"})


def to_wire(c: Counters) -> dict[str, Any]:
    """``c`` as JSON-ready data (what each instance writes to ``<prefix>ctr:<instance id>``)."""
    out: dict[str, Any] = {}
    for f in fields(c):
        value = getattr(c, f.name)
        if f.name in _PAIR_KEYED:
            out[f.name] = [[a, b, n] for (a, b), n in value.items()]
        elif isinstance(value, dict):
            out[f.name] = dict(value)
        else:
            out[f.name] = value
    return out


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def from_wire(data: object) -> Counters:
    """The counters another instance wrote; a field missing, unknown or malformed counts as zero (an
    instance running another version writes what it knows)."""
    c = Counters()
    if not isinstance(data, dict):
        return c
    for f in fields(c):
        value = data.get(f.name)
        if f.name in _PAIR_KEYED:
            pairs: dict[tuple[str, str], int] = {}
            for entry in value if isinstance(value, list) else []:
                if isinstance(entry, list) and len(entry) == 3 and all(isinstance(x, str) for x in entry[:2]):
                    pairs[(entry[0], entry[1])] = _count(entry[2])
            setattr(c, f.name, pairs)
        elif isinstance(getattr(c, f.name), dict):
            setattr(c, f.name, {str(k): _count(n) for k, n in value.items()} if isinstance(value, dict) else {})
        else:
            setattr(c, f.name, _count(value))
    return c


def total(parts: Iterable[Counters]) -> Counters:
    """The sum of several instances' counters, field by field (a keyed counter per key)."""
    out = Counters()
    for part in parts:
        for f in fields(out):
            mine, theirs = getattr(out, f.name), getattr(part, f.name)
            if isinstance(mine, dict):
                for key, n in theirs.items():
                    mine[key] = mine.get(key, 0) + n
            else:
                setattr(out, f.name, mine + theirs)
    return out


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
    spool: tuple[int, int, bool] = (0, 0, False),
    journal: tuple[int, int, dict[str, int]] = (0, 0, {}),
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
    refused_full = CounterMetricFamily(
        "qm_room_refused_full",
        "New joins refused because the line was full (maxWaiting, maxWaitSec)",
        labels=room_labels,
    )
    sessions_revoked = CounterMetricFamily(
        "qm_sessions_revoked",
        "Live sessions the site ended (X-QM-Command: revoke, POST /api/sessions/revoke)",
        labels=room_labels,
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
        refused_full.add_metric(lab, float(room.get("refusedFull") or 0))
        sessions_revoked.add_metric(lab, float(room.get("sessionsRevoked") or 0))
    refused_origin = CounterMetricFamily(
        "qm_refused_origin_checks",
        "Door checks from an origin the room does not list",
        labels=["room", "origin", *labels],
    )
    for (room_id, origin), value in counters.refused_origin_checks.items():
        refused_origin.add_metric([room_id, origin, *inst], value)
    access_hits = CounterMetricFamily(
        "qm_access_rule_hits",
        "Requests a room's access rule decided, per room and action (bypass, queue, block)",
        labels=["room", "action", *labels],
    )
    for (room_id, action), value in counters.access_rule_hits.items():
        access_hits.add_metric([room_id, action, *inst], value)
    rejected = CounterMetricFamily(
        "qm_rejected_tokens_all_total", "Visitor tokens refused (bad, expired, future)", labels=labels
    )
    rejected.add_metric(inst, counters.rejected_tokens)
    gaps = GaugeMetricFamily(
        "qm_journal_gap_events",
        "Seqs of the room's journal missing past the commit deadline (the fleet's view, from the leader)",
        labels=room_labels,
    )
    for room_id, missing in sorted(journal[2].items()):
        gaps.add_metric([room_id, *inst], float(missing))
    metrics: list[Metric] = [
        *families.values(),
        gaps,
        counter(
            "qm_journal_rolled_forward_total",
            "Events committed by this instance as leader from a room's outbox (their writer never committed them)",
            journal[0],
        ),
        counter(
            "qm_journal_voided_total", "Journal seqs closed by an operator as unrecoverable (seq.void)", journal[1]
        ),
        max_conc,
        state,
        refused_full,
        sessions_revoked,
        gauge("qm_rooms", "Rooms defined", count),
        gauge("qm_sse_subscribers", "Open visitor and console streams on this instance", sse_subscribers),
        gauge("qm_uptime_seconds", "Seconds since this process started", uptime),
        gauge("qm_process_start_time_seconds", "Start time of this process (Unix seconds)", start_time),
        gauge("qm_shutting_down", "1 while a stop is in progress", 1.0 if shutting_down else 0.0),
        gauge("qm_file_buffer_pending", "Events in this instance's active disk spool file", spool[0]),
        gauge("qm_file_buffer_failed", "Events in finished spool files waiting to drain", spool[1]),
        gauge("qm_maintenance_mode_enabled", "1 while journal maintenance mode is on", 1.0 if spool[2] else 0.0),
        counter("qm_storage_write_errors", "Journal commits that failed", counters.storage_write_errors),
        counter(
            "qm_unknown_room_checks", "Door checks naming a room that does not exist", counters.unknown_room_checks
        ),
        counter("qm_blocked_return_urls", "Return URLs refused by a room's policy", counters.blocked_return_urls),
        counter("qm_refused_key_checks_all", "Vouched checks refused for their key", counters.refused_key_checks),
        counter("qm_rate_limited_checks_all", "Door checks answered 429", counters.rate_limited_checks),
        counter(
            "qm_refused_edge_passes",
            "Edge passes a door check carried that the queue would refuse",
            counters.refused_edge_passes,
        ),
        gauge(
            "qm_edge_refused", "Requests refused for a missing or wrong edge secret (a count)", counters.edge_refused
        ),
        counter(
            "qm_edge_client_ip_fallback",
            "Edge requests without a usable cf-connecting-ip",
            counters.edge_client_ip_fallback,
        ),
        counter("qm_turn_emails_sent", "Turn e-mails handed to the SMTP server", counters.turn_emails_sent),
        counter("qm_turn_emails_failed", "Turn e-mails given up after the last try", counters.turn_emails_failed),
        counter(
            "qm_turn_emails_retried", "Turn e-mail tries that failed and were repeated", counters.turn_emails_retried
        ),
        rejected,
        refused_origin,
        access_hits,
        *_inline_families(counters, labels, inst),
        *_head_families(counters, labels, inst),
        _entry_family(counters, labels, inst),
    ]
    return generate_latest(_Snapshot(metrics))


def workers_exposition(server: str, workers: int, scraped: int) -> bytes:
    """What a scrape on the shared port of a WORKERS>1 server adds after its workers' own metrics: how many
    workers the server runs and how many are in this scrape, under the server's own ``instance``."""
    configured = GaugeMetricFamily("qm_workers", "Worker processes this server runs (WORKERS)", labels=["instance"])
    configured.add_metric([server], workers)
    answered = GaugeMetricFamily(
        "qm_workers_scraped",
        "Workers whose metrics are in this scrape (the others did not answer within 1 s)",
        labels=["instance"],
    )
    answered.add_metric([server], scraped)
    return generate_latest(_Snapshot([configured, answered]))


#: The reasons each head family always shows (at 0 until it happens), so a dashboard's query has a series.
HEAD_REFUSALS = ("too_large", "too_many_fields", "timeout")
WAITING_CLOSES = ("idle", "ceiling")


#: the codes a room's entry refuses a join with, each shown (at 0 until it happens) so a query has a series
ENTRY_REFUSALS = (
    "token_required",
    "token_invalid",
    "token_expired",
    "token_used",
    "token_wrong_room",
    "token_ip_mismatch",
    "code_required",
    "code_invalid",
    "code_used_up",
    "code_rate_limited",
)


def _entry_family(counters: Counters, labels: list[str], inst: list[str]) -> Metric:
    refused = CounterMetricFamily(
        "qm_entry_refused",
        "Joins refused by a room's entry (invitation token or code), per refusal code",
        labels=["code", *labels],
    )
    for code in ENTRY_REFUSALS:
        refused.add_metric([code, *inst], counters.entry_refused.get(code, 0))
    return refused


def _head_families(counters: Counters, labels: list[str], inst: list[str]) -> list[Metric]:
    refused = CounterMetricFamily(
        "qm_request_heads_refused",
        "Request heads refused: over MAX_HEADER_BYTES or MAX_HEADER_COUNT (431), or not whole within "
        "HEADER_TIMEOUT_MS (408)",
        labels=["reason", *labels],
    )
    for reason in HEAD_REFUSALS:
        refused.add_metric([reason, *inst], counters.heads_refused.get(reason, 0))
    closed = CounterMetricFamily(
        "qm_waiting_connections_closed",
        "Connections closed while waiting for a request head: sent nothing in time (idle), or closed to make "
        "room at MAX_CONNECTIONS (ceiling)",
        labels=["reason", *labels],
    )
    for reason in WAITING_CLOSES:
        closed.add_metric([reason, *inst], counters.waiting_closed.get(reason, 0))
    return [refused, closed]


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
    gate = CounterMetricFamily(
        "qm_gate_checks", "Forward-auth checks (/api/gate), per decision", labels=["decision", *labels]
    )
    for decision, value in sorted(counters.gate_checks.items()):
        gate.add_metric([decision, *inst], value)
    shed = CounterMetricFamily(
        "qm_connections_shed", "Requests answered 503 at the MAX_CONNECTIONS ceiling", labels=labels
    )
    shed.add_metric(inst, counters.connections_shed)
    return [gated, bypassed, errors, gone, down, gate, shed]
