"""Every setting, declared once: the fields of :class:`Settings`.

A declared field names its environment variable, default, bounds or choices and a one-line
description (see :mod:`queue_manager.config.declare`); the field's annotation is its Python type.
From these come the environment read, the refusal or warning for a bad value, and
:data:`ENV_VARS`. Settings that depend on one another are checked in
:mod:`queue_manager.config.rules`; docs/configuration.md describes every setting for operators.

Settings are declared in the order ``load_settings`` reads them: a setting comes after those its
default depends on, and the order decides which refusal is reported when several apply and the
order of the warnings.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any, Literal

from queue_manager.config.declare import (
    Declaration,
    Derived,
    IPNetwork,
    choice,
    declarations,
    flag,
    host_names,
    http_url,
    identifier,
    integer,
    networks,
    optional_integer,
    optional_text,
    path,
    process_count,
    secret_list,
    settings_class,
    smtp_server,
    text,
)
from queue_manager.config.outcomes import ConfigWarning

__all__ = [
    "DECLARATIONS",
    "DEFAULT_ADMIN_KEY",
    "DEFAULT_PUBLIC_API_KEY",
    "DEFAULT_SECRET",
    "DEFAULT_SHUTDOWN_DRAIN_MS",
    "ENV_VARS",
    "INLINE_SHUTDOWN_DRAIN_FLOOR_MS",
    "MAX_WORKERS",
    "MIN_EDGE_SECRET_LEN",
    "MIN_SECRET_LEN",
    "PassSigning",
    "ProtectionMode",
    "Settings",
    "SidestoreName",
    "StoreName",
]

StoreName = Literal["memory", "valkey"]
SidestoreName = Literal["none", "pg"]
ProtectionMode = Literal["monitor", "enforce"]
PassSigning = Literal["hmac", "ed25519"]
TicketRecords = Literal["short", "full"]

DEFAULT_ADMIN_KEY = "qm-dev-admin-key"
#: The Public API key a server on the development defaults (ADMIN_KEY unset) accepts when PUBLIC_API_KEY is unset,
#: so a connector can be tried against ``make run`` without a restart (which on STORE=memory loses every room).
DEFAULT_PUBLIC_API_KEY = "qm-dev-public-key"
DEFAULT_SECRET = "qm-dev-secret-change-me"
MIN_SECRET_LEN = 32
MIN_EDGE_SECRET_LEN = 16
#: SHUTDOWN_DRAIN_MS when unset: plain install / with at least one inline room.
DEFAULT_SHUTDOWN_DRAIN_MS = 2000
INLINE_SHUTDOWN_DRAIN_FLOOR_MS = 15000

#: The most server processes WORKERS may start.
MAX_WORKERS = 256

_PER_MIN = "requests a minute (0 = off)"


def _sidestore_default(earlier: Mapping[str, Any]) -> SidestoreName:
    return "pg" if earlier["store"] == "valkey" else "none"


def _random_instance_id(earlier: Mapping[str, Any]) -> str:
    return "i:" + secrets.token_hex(4)


def _half_the_shorter_lifetime_ms(earlier: Mapping[str, Any]) -> int:
    lifetime_sec: int = min(earlier["token_max_age_sec"], earlier["queue_cookie_max_age_sec"])
    return max(1, lifetime_sec * 1000 // 2)


@settings_class
class Settings:
    """The effective configuration. Build it with :func:`~queue_manager.config.load_settings`."""

    # -- core and storage -------------------------------------------------------------------
    port: int = integer("PORT", 8080, "TCP port to listen on.", maximum=65535)
    host: str = text("HOST", "127.0.0.1", "Address to bind.", strip=True)
    store: StoreName = choice(
        "STORE", "memory", ("memory", "valkey"), "Where the live queue is kept.", noun="store", refuse=True
    )
    sidestore: SidestoreName = choice(
        "SIDESTORE",
        Derived(_sidestore_default, "none with STORE=memory, pg with STORE=valkey"),
        ("none", "pg"),
        "Where operators, the audit trail, the events journal and history are kept.",
        noun="side store",
        refuse=True,
    )
    node_env: str = text("NODE_ENV", "development", "production declares a production install.", strip=True)
    docs_dir: str | None = path(
        "DOCS_DIR",
        "The folder /docs renders the guides from; None: the guides installed with the server.",
        directory=True,
        refuse=False,
        way_out="In effect: DOCS_DIR unset (the guides installed with the server). "
        "Point it at a copy of the docs/ folder.",
    )
    valkey_url: str | None = optional_text("VALKEY_URL", "Address of the shared Valkey.", sensitive=True)
    database_url: str | None = optional_text(
        "DATABASE_URL", "Postgres connection string for SIDESTORE=pg.", sensitive=True
    )
    pg_schema: str = identifier(
        "PG_SCHEMA",
        "qm",
        "The PostgreSQL schema of the events journal and the shared records.",
        pattern=r"[a-z_][a-z0-9_]{0,62}",
        refusal="a schema name this server uses (lower-case letters, digits and _, starting with a letter "
        "or _). Set PG_SCHEMA to e.g. qm, or unset it.",
    )
    spool_dir: str | None = optional_text(
        "SPOOL_DIR", "Where the journal's disk spool appends events; None: the journal's own default."
    )
    spool_on_failure: bool = flag(
        "SPOOL_ON_FAILURE", False, "A journal commit that fails transiently goes to the disk spool instead of a 503."
    )
    pg_ca_file: str | None = path(
        "PG_CA_FILE",
        "The CA certificate (PEM) the Postgres server's certificate is checked against.",
        directory=False,
        refuse=True,
        way_out="Point it at the CA certificate (PEM) of your Postgres server, or unset PG_CA_FILE.",
    )
    instance_id: str = identifier(
        "QM_INSTANCE_ID",
        Derived(_random_instance_id, "i: + 8 random hex characters, new on each boot"),
        "This instance's display name on /metrics, health and alerts.",
        pattern=r"[A-Za-z0-9][A-Za-z0-9._:-]{0,62}",
        refusal="a usable instance name: it must be 1-63 characters of letters, digits and . _ : -, starting "
        "with a letter or digit. Fix it, or unset QM_INSTANCE_ID for a random i:<hex> name per boot.",
        shown_length=80,
    )
    #: QM_INSTANCE_ID unset: the id is new on each boot, so no run before this one had it.
    instance_id_per_boot: bool
    workers: int = process_count(
        "WORKERS",
        1,
        "Server processes on the one port (auto: one per core); more than 1 needs STORE=valkey.",
        maximum=MAX_WORKERS,
    )

    # -- trust and access -------------------------------------------------------------------
    trust_proxy_ips: tuple[IPNetwork, ...] = networks(
        "TRUST_PROXY_IPS", "Addresses and ranges the trusted proxy hops connect from.", refuse=True
    )
    edge_secrets: tuple[str, ...] = secret_list(
        "EDGE_SECRET",
        "Values of X-QM-Edge that every request must carry (two to rotate).",
        min_length=MIN_EDGE_SECRET_LEN,
        too_short="a guessable edge secret is worse than none. Generate a long random value "
        "(openssl rand -hex 32), put it in the Cloudflare rule and in EDGE_SECRET, or unset EDGE_SECRET.",
        empty="no edge secret is enforced. Set it to the value of the Cloudflare X-QM-Edge rule, or unset it.",
    )
    trust_proxy: int = integer(
        "TRUST_PROXY", 0, "Number of proxy hops between the client and this server.", unit="proxy hops"
    )
    cookie_secure: bool = flag("COOKIE_SECURE", False, "Every cookie carries Secure, TLS seen or not.")
    public_api_key: str | None = optional_text(
        "PUBLIC_API_KEY",
        f"The key for server-side connectors (instead of ADMIN_KEY); {DEFAULT_PUBLIC_API_KEY} while ADMIN_KEY is the "
        "default.",
        sensitive=True,
    )
    public_api_key_is_default: bool
    public_url: str | None = http_url(
        "PUBLIC_URL",
        "This server's public base URL, for absolute URLs and the console host.",
        otherwise="it is not used: absolute URLs name a listed proxy's X-Forwarded-Host, or the request's Host. "
        "Set it like PUBLIC_URL=https://queue.example.com.",
    )
    admin_hosts: tuple[str, ...] = host_names("ADMIN_HOST", "Host names on which the console and admin API answer.")

    # -- keys and signing -------------------------------------------------------------------
    admin_key: str = text(
        "ADMIN_KEY", DEFAULT_ADMIN_KEY, "The shared full-access key (console, admin API, /metrics).", sensitive=True
    )
    admin_key_is_default: bool
    secret: str = text("SECRET", DEFAULT_SECRET, "Root of every signature the server makes.", sensitive=True)
    secret_is_default: bool
    secret_previous: str | None = optional_text(
        "SECRET_PREVIOUS", "The SECRET being rotated out (still verifies).", sensitive=True
    )
    token_sign_v2: bool = flag("TOKEN_SIGN_V2", False, "Write tokens in the v2 form (per-purpose keys).")
    token_max_age_sec: int = integer(
        "TOKEN_MAX_AGE_SEC", 86400, "Longest life of a visitor ticket.", unit="seconds", minimum=1
    )
    pass_signing: PassSigning = choice(
        "PASS_SIGNING",
        "hmac",
        ("hmac", "ed25519"),
        "ed25519: admitted visitors also get an Ed25519-signed edge pass a connector checks itself.",
        noun="signing form",
        note="no edge passes are issued and the key set is empty.",
    )
    edge_pass_ttl_sec: int = integer(
        "EDGE_PASS_TTL_SEC",
        120,
        "Longest life of an edge pass (the bound on a revocation it misses).",
        unit="seconds",
        minimum=30,
        maximum=600,
    )
    queue_cookie_max_age_sec: int = integer(
        "QUEUE_COOKIE_MAX_AGE_SEC", 86400, "Lifetime of the visitor's queue cookie.", unit="seconds", minimum=1
    )
    entry_key_overlap_sec: int = integer(
        "ENTRY_KEY_OVERLAP_SEC",
        86400,
        "How long a room's entry key stays valid after a new one replaces it.",
        unit="seconds",
        minimum=0,
    )
    token_refresh_after_ms: int = integer(
        "TOKEN_REFRESH_AFTER_MS",
        Derived(_half_the_shorter_lifetime_ms, "half the shorter of TOKEN_MAX_AGE_SEC and QUEUE_COOKIE_MAX_AGE_SEC"),
        "How long after issue a waiting page's stream is ended so the place is re-signed.",
        unit="milliseconds",
        minimum=1,
    )
    monitor_token_ttl_sec: int = integer(
        "MONITOR_TOKEN_TTL_SEC", 604800, "Lifetime of a Share monitor link.", unit="seconds", minimum=1
    )

    # -- several instances ------------------------------------------------------------------
    valkey_prefix: str = text("VALKEY_PREFIX", "qm:", "Prefix of every Valkey key this install uses.")
    resync_ms: int = integer(
        "RESYNC_MS",
        5000,
        "How often shared records are re-read in case a hint was lost.",
        unit="milliseconds",
        minimum=1,
    )
    leader_lease_ms: int = integer(
        "LEADER_LEASE_MS", 10000, "Length of the leader lease.", unit="milliseconds", minimum=1
    )
    valkey_alert_after_ms: int = integer(
        "VALKEY_ALERT_AFTER_MS",
        30000,
        "How long Valkey is unreachable before this instance alerts.",
        unit="milliseconds",
    )
    # 1 = one transaction per acknowledged change (the benchmark's comparison)
    journal_max_batch: int = integer(
        "JOURNAL_MAX_BATCH",
        512,
        "Most events per group commit of the journal.",
        unit="events",
        minimum=1,
        maximum=10_000,
    )
    # off: instances catch up by the RESYNC_MS re-read alone
    ctl_hints: bool = flag("CTL_HINTS", True, "Change hints over Valkey pub/sub (<prefix>ctl).")
    # the leader checkpoints a room after this many events, or this long after the oldest event no
    # checkpoint holds yet, whichever comes first
    checkpoint_every_events: int = integer(
        "CHECKPOINT_EVERY_EVENTS", 10_000, "Events after which a room is checkpointed.", unit="events", minimum=1
    )
    checkpoint_every_ms: int = integer(
        "CHECKPOINT_EVERY_MS",
        600_000,
        "Longest wait before a room's events are checkpointed.",
        unit="milliseconds",
        minimum=1,
    )

    # -- rate limits (0 = off) --------------------------------------------------------------
    join_limit_per_min: int = integer("JOIN_LIMIT_PER_MIN", 600, "Joins per address per minute.", unit=_PER_MIN)
    check_limit_per_min: int = integer(
        "CHECK_LIMIT_PER_MIN", 1200, "Door checks per address per minute.", unit=_PER_MIN
    )
    waiting_limit_per_min: int = integer(
        "WAITING_LIMIT_PER_MIN", 120, "Waiting-page loads per address per minute.", unit=_PER_MIN
    )
    notify_limit_per_min: int = integer(
        "NOTIFY_LIMIT_PER_MIN", 10, "Turn-e-mail sign-ups and cancellations per address per minute.", unit=_PER_MIN
    )
    code_tries_per_min: int = integer(
        "CODE_TRIES_PER_MIN", 10, "Entry codes tried per address per minute (a code room's join).", unit=_PER_MIN
    )
    code_tries_per_room_per_min: int = integer(
        "CODE_TRIES_PER_ROOM_PER_MIN", 3000, "Entry codes tried per room per minute, all addresses.", unit=_PER_MIN
    )
    admin_auth_fail_per_min: int = integer(
        "ADMIN_AUTH_FAIL_PER_MIN",
        20,
        "Failed admin authentications per address per minute.",
        unit="failures a minute (0 = off)",
    )
    sse_per_ip: int = integer("SSE_PER_IP", 20, "Open event streams per address.", unit="streams (0 = off)")
    sse_max_total: int = integer("SSE_MAX_TOTAL", 8000, "Open event streams in this process.", unit="streams (0 = off)")
    ticket_records: TicketRecords = choice(
        "TICKET_RECORDS",
        "short",
        ("short", "full"),
        "full: ticket records in Valkey keep every field, for a rolling deploy from a release that reads only those.",
        noun="record form",
    )
    presence_mark_sec: int = integer(
        "PRESENCE_MARK_SEC",
        10,
        "Most seconds between the presence marks of a visitor whose stream frames a replica answers.",
        unit="seconds",
        minimum=1,
        maximum=60,
    )
    rate_limit_max_keys: int = integer(
        "RATE_LIMIT_MAX_KEYS", 200000, "Addresses each rate-limit map holds.", unit="addresses (0 = off)"
    )

    # -- connections, inline proxy, shutdown ------------------------------------------------
    max_connections: int = integer(
        "MAX_CONNECTIONS", 10000, "Connection ceiling; past it requests get 503.", unit="connections (0 = no ceiling)"
    )
    connection_reserve: int = integer(
        "CONNECTION_RESERVE", 64, "Sockets kept to answer 503 past MAX_CONNECTIONS.", unit="connections"
    )
    max_header_bytes: int = integer(
        "MAX_HEADER_BYTES",
        16384,
        "Largest request head (request line and header fields); past it 431.",
        unit="bytes",
        minimum=1024,
        maximum=1048576,
    )
    max_header_count: int = integer(
        "MAX_HEADER_COUNT",
        100,
        "Most header fields in one request; past it 431.",
        unit="fields",
        minimum=8,
        maximum=10000,
    )
    header_timeout_ms: int = integer(
        "HEADER_TIMEOUT_MS",
        10000,
        "Longest a connection may take to send a whole request head.",
        unit="milliseconds",
        minimum=100,
        maximum=600000,
    )
    proxy_timeout_ms: int = integer(
        "PROXY_TIMEOUT_MS",
        30000,
        "Inline: longest wait to connect to the origin and for its answer's head.",
        unit="milliseconds",
        minimum=1,
    )
    proxy_allow_private: bool = flag(
        "PROXY_ALLOW_PRIVATE", False, "Inline: a proxyOrigin may connect to private and internal addresses."
    )
    proxy_fast_path: bool = flag(
        "PROXY_FAST_PATH", True, "Inline: relay what the gate lets through without the ASGI request cycle."
    )
    shutdown_grace_ms: int = integer(
        "SHUTDOWN_GRACE_MS", 2000, "On a clean stop, how long idle and SSE connections get.", unit="milliseconds"
    )
    # None = unset: 2000 ms, or a 15000 ms floor with an inline room (effective_shutdown_drain_ms decides)
    shutdown_drain_ms: int | None = optional_integer(
        "SHUTDOWN_DRAIN_MS",
        "Hard ceiling on the whole stop.",
        unset_text=f"unset ({DEFAULT_SHUTDOWN_DRAIN_MS}, or {INLINE_SHUTDOWN_DRAIN_FLOOR_MS} with an inline room)",
        unit="milliseconds",
    )

    # -- bot protection ---------------------------------------------------------------------
    protection_mode: ProtectionMode = choice(
        "PROTECTION_MODE",
        "monitor",
        ("monitor", "enforce"),
        "Server-wide default for scoring joins.",
        noun="mode",
        note="requests are scored and nothing is refused. Set PROTECTION_MODE=enforce to refuse.",
    )
    protection_block_at: int = integer(
        "PROTECTION_BLOCK_AT", 80, "Score above which enforce refuses.", unit="score points", maximum=100
    )
    protection_allow_ips: tuple[IPNetwork, ...] = networks(
        "PROTECTION_ALLOW_IPS", "Addresses and ranges never scored.", refuse=False
    )
    country_header: str | None = optional_text(
        "COUNTRY_HEADER",
        "Header a trusted CDN names the visitor's country in (CF-IPCountry), for access rules' countries.",
    )
    dns_resolver: str | None = optional_text(
        "DNS_RESOLVER", "DNS server (host or host:port) verified-crawler look-ups ask; unset: the system's."
    )
    crawler_dns_timeout_ms: int = integer(
        "CRAWLER_DNS_TIMEOUT_MS",
        1000,
        "Longest wait for a crawler's reverse and forward look-ups.",
        unit="milliseconds",
        minimum=50,
        maximum=10_000,
    )
    crawler_cache_sec: int = integer(
        "CRAWLER_CACHE_SEC",
        3600,
        "How long a crawler address's verdict is kept.",
        unit="seconds",
        minimum=1,
        maximum=86_400,
    )

    # -- operations jobs --------------------------------------------------------------------
    alert_webhook_url: str | None = http_url(
        "ALERT_WEBHOOK_URL",
        "Where alert events are POSTed as JSON.",
        otherwise="no alert is delivered (conditions still show under Diagnostics). "
        "Set it to the webhook's https:// address.",
        sensitive=True,
    )
    alert_allow_private: bool = flag(
        "ALERT_ALLOW_PRIVATE", False, "ALERT_WEBHOOK_URL may be a private or internal address."
    )
    alert_every_ms: int = integer(
        "ALERT_EVERY_MS", 5000, "How often alert conditions are evaluated.", unit="milliseconds", minimum=1
    )
    alert_hold_sec: int = integer("ALERT_HOLD_SEC", 60, "How long a condition holds before it fires.", unit="seconds")
    alert_repeat_sec: int = integer(
        "ALERT_REPEAT_SEC", 1800, "How often a condition still firing is paged again.", unit="seconds", minimum=1
    )
    history_retain_days: int = integer(
        "HISTORY_RETAIN_DAYS", 90, "Days of hourly report rows kept.", unit="days", minimum=1
    )
    lapsed_ttl_ms: int = integer(
        "LAPSED_TTL_MS", 86_400_000, "How long a lapsed ticket's leftovers are kept.", unit="milliseconds", minimum=1
    )
    email_notify: bool = flag("EMAIL_NOTIFY", False, "The waiting page offers an e-mail when the turn comes.")
    smtp_url: str | None = smtp_server(
        "SMTP_URL",
        "The SMTP server turn e-mails are sent through (smtp:// STARTTLS, smtps:// TLS, smtp+plain:// none).",
        otherwise="no turn e-mail is sent and the waiting page does not offer one. "
        "Set it like SMTP_URL=smtp://user:password@mail.example.com:587.",
    )
    smtp_from: str | None = optional_text("SMTP_FROM", "The From address of turn e-mails.")
    smtp_ca_file: str | None = path(
        "SMTP_CA_FILE",
        "The CA certificate (PEM) the SMTP server's certificate is checked against.",
        directory=False,
        refuse=True,
        way_out="Point it at the CA certificate (PEM) of your SMTP server, or unset SMTP_CA_FILE.",
    )
    autotune: bool = flag("AUTOTUNE", False, "The leader adjusts the outflow rate of queueing rooms.")
    target_probe: bool = flag("TARGET_PROBE", True, "The leader probes each snippet room's targetUrl.")
    target_probe_every_ms: int = integer(
        "TARGET_PROBE_EVERY_MS",
        30_000,
        "How often the leader probes each snippet room's targetUrl.",
        unit="milliseconds",
        minimum=1000,
    )

    # -- diagnostics ------------------------------------------------------------------------
    warnings: tuple[ConfigWarning, ...]
    hardening: tuple[str, ...]
    #: The variables the environment holds a value for (an empty value counts as unset).
    set_variables: frozenset[str]
    #: Those of them whose value is in effect: not set aside for the default by a warning or a rule.
    applied_variables: frozenset[str]

    @property
    def is_production(self) -> bool:
        """NODE_ENV=production (compared case-insensitively)."""
        return self.node_env.lower() == "production"

    @property
    def turn_emails(self) -> bool:
        """EMAIL_NOTIFY is on and there is a way to send: SMTP_URL and SMTP_FROM (both usable)."""
        return self.email_notify and self.smtp_url is not None and self.smtp_from is not None

    @property
    def edge_enforced(self) -> bool:
        """True when EDGE_SECRET is set (every request must carry X-QM-Edge)."""
        return bool(self.edge_secrets)

    def effective_shutdown_drain_ms(self, has_inline_room: bool) -> int:
        """SHUTDOWN_DRAIN_MS in effect: an explicit value always wins; unset means 2 s, or a
        15 s floor while at least one inline room exists."""
        if self.shutdown_drain_ms is not None:
            return self.shutdown_drain_ms
        return INLINE_SHUTDOWN_DRAIN_FLOOR_MS if has_inline_room else DEFAULT_SHUTDOWN_DRAIN_MS


#: Every declared setting, by field name, in the order they are read.
DECLARATIONS: Mapping[str, Declaration[Any]] = declarations(Settings)

#: Every variable load_settings() reads, in the order they are read.
ENV_VARS: tuple[str, ...] = tuple(d.env for d in DECLARATIONS.values())
