"""A room's settings, their validation, and the client identity the engine binds tickets to."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, get_args

from queue_manager.engine.access_rules import AccessRule, parse_access_rules
from queue_manager.engine.brand import Brand, apply_brand, same_logo
from queue_manager.engine.errors import EngineError, bad_field
from queue_manager.engine.lanes import Lane, parse_lanes
from queue_manager.engine.languages import parse_languages
from queue_manager.engine.origins import OriginPattern, is_absolute_http_url, origin_of, parse_origin_pattern
from queue_manager.engine.room_events import OVERRIDABLE, EventInForce, RoomEvent, parse_events, parse_in_force
from queue_manager.engine.states import RoomState
from queue_manager.engine.targeting import TargetRule, parse_rules

ROOM_STATES: tuple[RoomState, ...] = get_args(RoomState)
ROOM_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
RESERVED_PREFIXES = ("dk_", "meta_", "notify_", "email_")
RESERVED_IDS = frozenset(
    {
        "console",
        "theme",
        "lang",
        "admin_key",
        "autotune",
        "autotune_cfg",
        "wait_samples",
        "hidden_series",
        "selected_room",
        "alerts",
        "offline_attempts",
        "origin_down_attempts",
    }
)

DEFAULT_RATE_PER_MINUTE = 60
DEFAULT_PASSED_TTL_SEC = 600
DEFAULT_SESSION_TTL_SEC = 1800
DEFAULT_PRESENCE_SEC = 30
DEFAULT_QUEUE_MAX_PER_IP = 16
DEFAULT_PREQUEUE_MAX_PER_IP = 16
CLAIM_WINDOW_SEC = 120
PREQUEUE_SHARDS_MAX = 16
MAX_RATE_PER_MINUTE = 1_000_000
#: how a room lets people in: fifo (a line, first come first served), random (a line drawn from at each
#: release), passthrough (no line: everyone admitted at once, counted), reject (closed: nobody joins)
QUEUEING_METHODS = ("fifo", "random", "passthrough", "reject")
REJECT_STATUSES = (200, 503)
#: who may join a room: anyone (open), the holder of an invitation token signed with the room's entry key
#: (token), or of a code the operator issued; a code room takes a valid invitation token too (code)
ENTRY_MODES = ("open", "token", "code")

# Every field a room may carry (plus the `rate` alias); anything else is 400 unknown_field.
ROOM_FIELDS = frozenset(
    {
        "id",
        "name",
        "targetUrl",
        "state",
        "ratePerMinute",
        "maxConcurrent",
        "passedTtlSec",
        "sessionTtlSec",
        "sessionMaxSec",
        "presenceSec",
        "queueMaxPerIp",
        "preQueueMaxPerIp",
        "preQueueShards",
        "maxWaiting",
        "maxWaitSec",
        "queueing",
        "rejectStatus",
        "entry",
        "opensAt",
        "returnOrigins",
        "tagOrigins",
        "rules",
        "accessRules",
        "proxyOrigin",
        "onBackendDown",
        "protection",
        "autoActivate",
        "autotune",
        "brand",
        "events",
        "lanes",
        "languages",
    }
)
ALIASES = {"rate": "ratePerMinute"}

# What a room read adds to the settings: the live figures of ``engine.view.render_stats`` and the
# AUTO · SELF badge the admin API adds (``autoSelf``). A body read from GET /api/admin/rooms/<id>
# and POSTed straight back carries them, so they are accepted and their values ignored; any other
# name is still unknown_field. Each rule is read back with its counters, ignored the same way.
# (tests/unit/test_engine_validation.py holds this set to what the read renders.)
READ_ONLY_FIELDS = frozenset(
    {
        "effectiveState",
        "generation",
        "waiting",
        "preQueue",
        "activeSessions",
        "pendingEntry",
        "passesOutstanding",
        "holdingPasses",
        "occupancy",
        "capacity",
        "joinsLastMinute",
        "passedLastMinute",
        "oldestWaitSec",
        "estWaitSec",
        "joinsTotal",
        "passesTotal",
        "unscopedChecks",
        "blockedReturnUrls",
        "refusedFull",
        "sessionsRevoked",
        "nextTicket",
        "createdAt",
        "autoSelf",
        "eventInForce",
        "entryCounts",
        "laneStats",
    }
)
# Written by automation only (the room's events), kept by the journal and the stores: a body sent to the
# admin API may carry them back from a read (ignored, as the read-only figures are).
SYSTEM_FIELDS = frozenset({"eventInForce"})
READ_ONLY_RULE_FIELDS = frozenset({"matchCount", "lastMatchAt"})


@dataclass(frozen=True, slots=True)
class ClientId:
    """Who is asking, computed once per request by the HTTP layer.

    ``ident`` is the resolved client address (per-address ceilings charge it); ``fp`` the strict
    fingerprint (socket peer + forwarded identity + User-Agent); ``fp2`` the second tier (without
    the socket peer; only behind a listed proxy); ``cookie`` the hash of the ``qms_<room>`` value.
    """

    ident: str
    fp: bytes
    fp2: bytes | None = None
    cookie: bytes | None = None


@dataclass(slots=True)
class RoomConfig:
    id: str
    target_url: str
    name: str | None = None
    state: RoomState = "active"
    rate_per_minute: int = DEFAULT_RATE_PER_MINUTE
    max_concurrent: int | None = None
    passed_ttl_sec: int = DEFAULT_PASSED_TTL_SEC
    session_ttl_sec: int = DEFAULT_SESSION_TTL_SEC
    session_max_sec: int | None = None
    presence_sec: int | None = DEFAULT_PRESENCE_SEC
    queue_max_per_ip: int | None = DEFAULT_QUEUE_MAX_PER_IP
    prequeue_max_per_ip: int | None = DEFAULT_PREQUEUE_MAX_PER_IP
    # slots a drop's pre-queue takes its sign-ups in on the Valkey store (store/valkey/shards.py): the
    # room's own and preQueueShards - 1 more, each on its own hash slot; the draw merges them
    prequeue_shards: int = 1
    max_waiting: int | None = None
    max_wait_sec: int | None = None
    queueing: str = "fifo"  # fifo | random | passthrough | reject (QUEUEING_METHODS)
    reject_status: int = 503  # what a closed (reject) room's page answers: 200, or 503 with Retry-After
    entry: str = "open"  # open | token | code (ENTRY_MODES): who may take a new place
    opens_at_ms: int | None = None
    return_origins: tuple[OriginPattern, ...] = ()
    tag_origins: tuple[OriginPattern, ...] | None = None
    rules: tuple[TargetRule, ...] = ()
    access_rules: tuple[AccessRule, ...] = ()
    proxy_origin: str | None = None
    on_backend_down: str = "closed"
    protection: dict[str, Any] | None = None
    auto_activate: dict[str, Any] | None = None
    autotune: dict[str, Any] | None = None
    brand: Brand | None = None
    events: tuple[RoomEvent, ...] = ()
    event_in_force: EventInForce | None = None
    lanes: tuple[Lane, ...] = ()  # empty: one implicit lane (engine/lanes.py)
    languages: tuple[str, ...] = ()  # the visitor pages' languages, the first the default; empty: all (languages.py)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_event(self, before: RoomConfig | None) -> dict[str, Any]:
        """The config a room change's event (and the ``rooms`` table) carries: the whole public config,
        with the logo's bytes only when the logo is new to the room (set or replaced); a logo unchanged
        from ``before`` goes by reference (type, sha256, bytes), resolved by a rebuild against the
        logo the room holds (engine/replay.py)."""
        unchanged = before is not None and same_logo(before.brand, self.brand)
        return self.to_public(logo_data=not unchanged)

    @property
    def claim_window_sec(self) -> int:
        return min(CLAIM_WINDOW_SEC, self.passed_ttl_sec)

    def to_public(self, *, logo_data: bool = True, secrets: bool = True) -> dict[str, Any]:
        """The room's settings by their API names. ``logo_data`` False: the logo by type, hash and size
        only (what a room read shows; the stored, journaled and exported forms carry the bytes).
        ``secrets`` False: an access rule's header value withheld (what a room read shows)."""
        return {
            "id": self.id,
            "name": self.name,
            "targetUrl": self.target_url,
            "state": self.state,
            "ratePerMinute": self.rate_per_minute,
            "rate": self.rate_per_minute,
            "maxConcurrent": self.max_concurrent,
            "passedTtlSec": self.passed_ttl_sec,
            "sessionTtlSec": self.session_ttl_sec,
            "sessionMaxSec": self.session_max_sec,
            "presenceSec": self.presence_sec,
            "queueMaxPerIp": self.queue_max_per_ip,
            "preQueueMaxPerIp": self.prequeue_max_per_ip,
            "preQueueShards": self.prequeue_shards,
            "maxWaiting": self.max_waiting,
            "maxWaitSec": self.max_wait_sec,
            "queueing": self.queueing,
            "rejectStatus": self.reject_status,
            "entry": self.entry,
            "opensAt": ms_to_iso(self.opens_at_ms),
            "returnOrigins": [str(p) for p in self.return_origins],
            "tagOrigins": None if self.tag_origins is None else [str(p) for p in self.tag_origins],
            "rules": [r.to_public() for r in self.rules],
            "accessRules": [r.to_public(secrets=secrets) for r in self.access_rules],
            "proxyOrigin": self.proxy_origin,
            "onBackendDown": self.on_backend_down,
            "protection": self.protection,
            "autoActivate": self.auto_activate,
            "autotune": self.autotune,
            "brand": None if self.brand is None else self.brand.to_public(with_data=logo_data),
            "events": [e.to_public(ms_to_iso) for e in self.events],
            "eventInForce": None if self.event_in_force is None else self.event_in_force.to_public(),
            "lanes": [lane.to_public() for lane in self.lanes],
            "languages": list(self.languages),
        }


def ms_to_iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def check_room_id(room_id: Any) -> str:
    if not isinstance(room_id, str) or not ROOM_ID_RE.match(room_id):
        raise EngineError(
            400,
            "invalid_room_id",
            "A room id is 1-64 characters: letters, digits, '-' and '_', starting with a letter or digit.",
            field="id",
        )
    if room_id in RESERVED_IDS or room_id.startswith(RESERVED_PREFIXES):
        raise EngineError(
            400,
            "invalid_room_id",
            f"Room id {room_id!r} is reserved: its ticket cookie qm_{room_id} would collide with a name "
            "the queue already uses.",
            field="id",
        )
    return room_id


def normalise_body(body: dict[str, Any], *, system: bool = False) -> dict[str, Any]:
    """Refuse unknown fields, drop the read-only figures a room read adds (``READ_ONLY_FIELDS``, and
    each rule's counters), and resolve the ``rate`` alias (``conflicting_field`` when they disagree).
    ``system``: automation's own change, which keeps the ``SYSTEM_FIELDS`` it sends."""
    unknown = sorted(k for k in body if k not in ROOM_FIELDS and k not in ALIASES and k not in READ_ONLY_FIELDS)
    if unknown:
        raise EngineError(
            400,
            "unknown_field",
            f"Unknown room field(s): {', '.join(unknown)}. Nothing was changed.",
            fields=unknown,
        )
    out = {k: v for k, v in body.items() if k not in READ_ONLY_FIELDS or (system and k in SYSTEM_FIELDS)}
    for listed in ("rules", "accessRules"):
        if isinstance(out.get(listed), list):
            out[listed] = [
                {k: v for k, v in rule.items() if k not in READ_ONLY_RULE_FIELDS} if isinstance(rule, dict) else rule
                for rule in out[listed]
            ]
    for alias, canonical in ALIASES.items():
        if alias in out:
            value = out.pop(alias)
            if canonical in out and out[canonical] != value:
                raise EngineError(
                    400,
                    "conflicting_field",
                    f"{alias} and {canonical} name the same setting and disagree ({value!r} vs {out[canonical]!r}).",
                    fields=[alias, canonical],
                )
            out[canonical] = value
    return out


# (lowest, highest, null allowed) of each whole-number room field: what apply_fields enforces, and
# what the room table in docs/OPERATIONS.md states (tests/unit/test_docs_ranges.py holds them together)
INT_FIELDS: dict[str, tuple[int, int, bool]] = {
    "ratePerMinute": (0, MAX_RATE_PER_MINUTE, False),
    "maxConcurrent": (1, 10_000_000, True),
    "passedTtlSec": (10, 86_400, False),
    "sessionTtlSec": (10, 7 * 86_400, False),
    "sessionMaxSec": (10, 30 * 86_400, True),
    "presenceSec": (5, 86_400, True),
    "queueMaxPerIp": (1, 10_000_000, True),
    "preQueueMaxPerIp": (1, 10_000_000, True),
    "preQueueShards": (1, PREQUEUE_SHARDS_MAX, False),
    "maxWaiting": (1, 10_000_000, True),
    "maxWaitSec": (1, 30 * 86_400, True),
}
AUTO_ACTIVATE_MAX = 10_000_000
NAME_MAX = 120
ORIGINS_MAX = 100


def _int(body: dict[str, Any], key: str, code: str = "invalid_field") -> Any:
    lo, hi, nullable = INT_FIELDS[key]
    value = body[key]
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        extra = " or null" if nullable else ""
        raise bad_field(key, f"{key} must be a whole number from {lo} to {hi}{extra}.", code)
    return value


# opensAt must lie between 2000-01-01 and 2100-01-01 (UTC): anything else is a typo, not a drop.
OPENS_AT_MIN_MS = 946_684_800_000
OPENS_AT_MAX_MS = 4_102_444_800_000


def parse_opens_at(value: Any, field_name: str = "opensAt") -> int | None:
    if value is None:
        return None
    ms = _opens_at_ms(value, field_name)
    if not OPENS_AT_MIN_MS <= ms < OPENS_AT_MAX_MS:
        raise bad_field(field_name, "opensAt must lie between the years 2000 and 2100.", "invalid_opens_at")
    return ms


def _opens_at_ms(value: Any, field_name: str) -> int:
    if isinstance(value, bool):
        raise bad_field(
            field_name, "opensAt must be an ISO 8601 time, epoch milliseconds, or null.", "invalid_opens_at"
        )
    if isinstance(value, int):
        if 0 < value < 10**14:
            return value
    elif isinstance(value, str) and len(value) <= 64:
        try:
            dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            dt = None
        if dt is not None:
            if dt.tzinfo is None:
                dt = dt.replace(tzinfo=UTC)
            try:
                return int(dt.timestamp() * 1000)
            except (OverflowError, ValueError, OSError):
                pass
    raise bad_field(field_name, "opensAt must be an ISO 8601 time, epoch milliseconds, or null.", "invalid_opens_at")


def _origins(body: dict[str, Any], key: str, *, nullable: bool) -> tuple[OriginPattern, ...] | None:
    value = body[key]
    if value is None and nullable:
        return None
    if not isinstance(value, list) or len(value) > ORIGINS_MAX:
        raise bad_field(key, f"{key} must be a list of origins (at most {ORIGINS_MAX}).", "invalid_origin")
    out = []
    for item in value:
        pattern = parse_origin_pattern(item) if isinstance(item, str) else None
        if pattern is None:
            raise bad_field(
                key,
                f"{item!r} in {key} is not an origin: use scheme://host[:port] or scheme://*.domain[:port].",
                "invalid_origin",
            )
        out.append(pattern)
    return tuple(out)


def bare_origin(value: Any) -> str:
    if isinstance(value, str) and len(value) <= 300:
        o = origin_of(value)
        parsed = parse_origin_pattern(value)
        if o is not None and parsed is not None and not parsed.wildcard:
            return str(parsed)
    raise bad_field(
        "proxyOrigin", "proxyOrigin must be a bare origin: scheme, host, port, nothing else.", "invalid_proxy_origin"
    )


def apply_fields(base: RoomConfig | None, body: dict[str, Any]) -> tuple[RoomConfig, list[str]]:
    """Validate ``body`` (already normalised) and return the new config and the names of the fields set.

    ``base`` None means a create: ``targetUrl`` is required then.
    """
    room_id = body["id"]
    changed: list[str] = []
    if base is None:
        if "targetUrl" not in body:
            raise bad_field("targetUrl", "targetUrl is required when creating a room.", "invalid_target_url")
        cfg = RoomConfig(id=room_id, target_url="")
    else:
        cfg = replace(base)
    for key in body:
        if key == "id":
            continue
        changed.append(key)
        value = body[key]
        if key == "name":
            if value is not None and (not isinstance(value, str) or len(value) > NAME_MAX):
                raise bad_field(key, f"name must be a string of at most {NAME_MAX} characters, or null.")
            cfg.name = value
        elif key == "targetUrl":
            if not isinstance(value, str) or not is_absolute_http_url(value):
                raise bad_field(
                    key, "targetUrl must be an absolute http(s) URL without credentials.", "invalid_target_url"
                )
            cfg.target_url = value
        elif key == "state":
            if value not in ROOM_STATES:
                raise bad_field(key, "state must be one of active, paused, bypass.", "invalid_state")
            cfg.state = value
        elif key == "ratePerMinute":
            cfg.rate_per_minute = _int(body, key, "invalid_rate")
        elif key == "maxConcurrent":
            cfg.max_concurrent = _int(body, key)
        elif key == "passedTtlSec":
            cfg.passed_ttl_sec = _int(body, key)
        elif key == "sessionTtlSec":
            cfg.session_ttl_sec = _int(body, key)
        elif key == "sessionMaxSec":
            cfg.session_max_sec = _int(body, key)
        elif key == "presenceSec":
            cfg.presence_sec = _int(body, key)
        elif key == "queueMaxPerIp":
            cfg.queue_max_per_ip = _int(body, key)
        elif key == "preQueueMaxPerIp":
            cfg.prequeue_max_per_ip = _int(body, key)
        elif key == "preQueueShards":
            cfg.prequeue_shards = _int(body, key)
        elif key == "maxWaiting":
            cfg.max_waiting = _int(body, key)
        elif key == "maxWaitSec":
            cfg.max_wait_sec = _int(body, key)
        elif key == "opensAt":
            cfg.opens_at_ms = parse_opens_at(value)
        elif key == "returnOrigins":
            cfg.return_origins = _origins(body, key, nullable=False) or ()
        elif key == "tagOrigins":
            cfg.tag_origins = _origins(body, key, nullable=True)
        elif key == "rules":
            cfg.rules = parse_rules(value)
        elif key == "accessRules":
            cfg.access_rules = parse_access_rules(value, cfg.access_rules)
        elif key == "proxyOrigin":
            cfg.proxy_origin = None if value is None else bare_origin(value)
        elif key == "languages":
            cfg.languages = parse_languages(value)
        elif key == "queueing":
            if value not in QUEUEING_METHODS:
                raise bad_field(key, "queueing must be fifo, random, passthrough or reject.", "invalid_queueing")
            cfg.queueing = value
        elif key == "entry":
            if value not in ENTRY_MODES:
                raise bad_field(key, "entry must be open, token or code.", "invalid_entry")
            cfg.entry = value
        elif key == "rejectStatus":
            if type(value) is not int or value not in REJECT_STATUSES:
                raise bad_field(key, "rejectStatus must be 200 or 503.", "invalid_reject_status")
            cfg.reject_status = value
        elif key == "onBackendDown":
            if value not in ("open", "closed"):
                raise bad_field(key, "onBackendDown must be open or closed.", "invalid_on_backend_down")
            cfg.on_backend_down = value
        elif key == "protection":
            if value is not None and (
                not isinstance(value, dict) or set(value) - {"mode"} or value.get("mode") not in ("monitor", "enforce")
            ):
                raise bad_field(key, 'protection must be {"mode": "monitor"|"enforce"} or null.', "invalid_protection")
            cfg.protection = value
        elif key == "autoActivate":
            cfg.auto_activate = _auto_activate(value)
        elif key == "autotune":
            cfg.autotune = _autotune(value)
        elif key == "brand":
            cfg.brand = apply_brand(cfg.brand, value)
        elif key == "events":
            cfg.events = parse_events(value, _check_override, _event_time)
        elif key == "eventInForce":
            cfg.event_in_force = parse_in_force(value)
        elif key == "lanes":
            cfg.lanes = parse_lanes(value)
    if cfg.proxy_origin is not None:
        target = origin_of(cfg.target_url)
        proxy = origin_of(cfg.proxy_origin)
        if target is not None and proxy is not None and target[1] == proxy[1]:
            raise bad_field(
                "proxyOrigin",
                "proxyOrigin points back at the room's public host: that is a loop through your CDN.",
                "proxy_origin_loop",
            )
    return cfg, changed


def _auto_activate(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    keys = {"enabled", "joinsPerMin", "sustainSec", "releaseAfterSec"}
    if not isinstance(value, dict) or set(value) - keys:
        raise bad_field("autoActivate", f"autoActivate takes {sorted(keys)} or null.", "invalid_auto_activate")
    out: dict[str, Any] = {"enabled": False, "joinsPerMin": 120, "sustainSec": 60, "releaseAfterSec": 300}
    for k, v in value.items():
        if k == "enabled":
            if not isinstance(v, bool):
                raise bad_field("autoActivate", "autoActivate.enabled must be true or false.", "invalid_auto_activate")
        elif isinstance(v, bool) or not isinstance(v, int) or v < 0 or v > AUTO_ACTIVATE_MAX:
            raise bad_field(
                "autoActivate",
                f"autoActivate.{k} must be a whole number from 0 to {AUTO_ACTIVATE_MAX}.",
                "invalid_auto_activate",
            )
        out[k] = v
    return out


AUTOTUNE_KEYS = ("enabled", "minRate", "maxRate", "targetLatencyMs", "maxErrorRate", "stepSec")
AUTOTUNE_DEFAULTS: dict[str, Any] = {"enabled": False, "targetLatencyMs": 1000, "maxErrorRate": 0.05, "stepSec": 10}
# (lowest, highest) of each whole-number knob; maxRate's lowest is the room's minRate
AUTOTUNE_RANGES = {
    "minRate": (1, MAX_RATE_PER_MINUTE),
    "maxRate": (1, MAX_RATE_PER_MINUTE),
    "targetLatencyMs": (1, 60_000),
    "stepSec": (1, 3600),
}


def _autotune(value: Any) -> dict[str, Any] | None:
    """``autotune``: null, or the range the leader may move the rate in and what it counts as healthy."""
    if value is None:
        return None

    def bad(message: str) -> EngineError:
        return bad_field("autotune", message, "invalid_autotune")

    if not isinstance(value, dict) or set(value) - set(AUTOTUNE_KEYS):
        raise bad(f"autotune takes {list(AUTOTUNE_KEYS)} or null.")
    out = dict(AUTOTUNE_DEFAULTS)
    for k, v in value.items():
        if k == "enabled":
            if not isinstance(v, bool):
                raise bad("autotune.enabled must be true or false.")
        elif k == "maxErrorRate":
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= 1:
                raise bad("autotune.maxErrorRate must be a number from 0 to 1.")
            v = float(v)
        else:
            lo, hi = AUTOTUNE_RANGES[k]
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise bad(f"autotune.{k} must be a whole number from {lo} to {hi}.")
        out[k] = v
    missing = [k for k in ("minRate", "maxRate") if k not in out]
    if missing:
        raise bad(f"autotune needs {' and '.join(missing)}: the range it may move the rate in.")
    if out["maxRate"] < out["minRate"]:
        raise bad("autotune.maxRate must be at least autotune.minRate.")
    return {k: out[k] for k in AUTOTUNE_KEYS}


def check_schedule_body(body: Any) -> dict[str, Any]:
    """The schedule route's body: only opensAt and preQueueMaxPerIp, and at least one of them."""
    if not isinstance(body, dict):
        raise EngineError(400, "bad_request", "The body must be a JSON object.")
    unknown = sorted(set(body) - {"opensAt", "preQueueMaxPerIp"})
    if unknown:
        raise EngineError(400, "unknown_field", f"Unknown schedule field(s): {', '.join(unknown)}.", fields=unknown)
    if not body:
        raise EngineError(
            400,
            "nothing_to_change",
            "Send opensAt (null cancels the drop) and/or preQueueMaxPerIp; the body had neither.",
        )
    return body


_SCRATCH = RoomConfig(id="scratch", target_url="https://scratch.invalid/")


def _check_override(key: str, value: Any) -> Any:
    """An event's override checked as the room field itself would be (``message``: the brand's message by
    language), in the form the room's read shows it."""
    try:
        if key == "message":
            cfg, _ = apply_fields(_SCRATCH, {"id": _SCRATCH.id, "brand": {"message": value}})
            return dict(cfg.brand.message) if cfg.brand is not None else {}
        cfg, _ = apply_fields(_SCRATCH, {"id": _SCRATCH.id, key: value})
        return cfg.to_public(logo_data=False)[key]
    except EngineError as err:
        raise bad_field("events", f"An event's {key}: {err.message}", "invalid_event") from None


def _event_time(value: Any, name: str) -> int | None:
    try:
        return parse_opens_at(value, name)
    except EngineError:
        raise bad_field(
            "events", f"{name} must be an ISO 8601 time or epoch milliseconds between 2000 and 2100.", "invalid_event"
        ) from None


def event_fields(cfg: RoomConfig) -> dict[str, Any]:
    """The room's current values of every field its events set, as ``room_events.step`` compares them."""
    public = cfg.to_public(logo_data=False)
    out = {key: public[key] for key in OVERRIDABLE if key in public}
    out["message"] = dict(cfg.brand.message) if cfg.brand is not None else {}
    out["state"] = cfg.state
    out["opensAt"] = cfg.opens_at_ms
    return out
