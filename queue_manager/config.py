"""Every environment variable the server reads, read and validated in one place.

``load_settings()`` turns the process environment (or any mapping handed to it) into a
frozen :class:`Settings`. Nothing else in the package reads ``os.environ``.

Two outcomes besides success:

* :class:`ConfigRefusal` — the server must not start. Raised for the few settings where
  starting would be worse than stopping (see "Refusals: when the server will not start" in
  the Operations Guide). The message names the setting and the way out.
* :class:`ConfigWarning` — the server starts, and the warning is reported on
  ``/api/admin/health``. A value that could not be applied as written is never silently
  substituted: the warning names the variable, what was set and what is in effect.

Secrets (ADMIN_KEY, SECRET, SECRET_PREVIOUS, EDGE_SECRET, PUBLIC_API_KEY) and URLs that can
carry credentials (VALKEY_URL, DATABASE_URL, ALERT_WEBHOOK_URL) are never copied into a
refusal, a warning or a hardening line.

An empty string counts as unset for every variable. Apart from the PG_CA_FILE existence check
and the random default QM_INSTANCE_ID, ``load_settings`` is a pure function of its mapping.

The human-readable table of all of this is docs/configuration.md; a unit test keeps the two
in step with :data:`ENV_VARS`.
"""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

__all__ = [
    "DEFAULT_ADMIN_KEY",
    "DEFAULT_SECRET",
    "ENV_VARS",
    "MIN_EDGE_SECRET_LEN",
    "MIN_SECRET_LEN",
    "ConfigRefusal",
    "ConfigWarning",
    "IPNetwork",
    "Settings",
    "load_settings",
]

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
StoreName = Literal["memory", "valkey"]
SidestoreName = Literal["none", "pg"]
ProtectionMode = Literal["monitor", "enforce"]

DEFAULT_ADMIN_KEY = "qm-dev-admin-key"
DEFAULT_SECRET = "qm-dev-secret-change-me"
MIN_SECRET_LEN = 32
MIN_EDGE_SECRET_LEN = 16
#: SHUTDOWN_DRAIN_MS when unset: plain install / with at least one inline room.
DEFAULT_SHUTDOWN_DRAIN_MS = 2000
INLINE_SHUTDOWN_DRAIN_FLOOR_MS = 15000

_INSTANCE_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,62}")
_UINT_RE = re.compile(r"[0-9]+")
# Largest integer a JSON consumer (the console, a Node port) can hold exactly.
_MAX_INT = 2**53 - 1

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})

#: Values of these variables never appear in a refusal, warning or hardening line.
_SENSITIVE = frozenset(
    {
        "ADMIN_KEY",
        "SECRET",
        "SECRET_PREVIOUS",
        "EDGE_SECRET",
        "PUBLIC_API_KEY",
        "VALKEY_URL",
        "DATABASE_URL",
        "ALERT_WEBHOOK_URL",
    }
)
_HIDDEN = "(hidden)"

HARDENING_EDGE_SECRET = "EDGE_SECRET is not set: requests that bypass Cloudflare are accepted"
HARDENING_ADMIN_KEY = (
    "ADMIN_KEY is the built-in default: anyone who has read the docs can administer this server. "
    "Set ADMIN_KEY to a long random value (openssl rand -hex 32)"
)
HARDENING_SECRET_DEFAULT = (
    "SECRET is the built-in default: anyone can sign tickets, passes and console sessions. "
    "Set SECRET to a long random value (openssl rand -hex 32), the same on every instance"
)
HARDENING_SECRET_SHORT = (
    f"SECRET is shorter than {MIN_SECRET_LEN} characters: set a longer random value "
    "(openssl rand -hex 32), rotating it with SECRET_PREVIOUS"
)
HARDENING_PUBLIC_API_KEY = (
    "PUBLIC_API_KEY is not set: server-side connectors can only vouch for visitors with ADMIN_KEY. "
    "Set PUBLIC_API_KEY and give connectors that key instead"
)


class ConfigRefusal(Exception):
    """A setting the server must not start with. ``message`` names the setting and the way out."""

    variable: str
    message: str

    def __init__(self, variable: str, message: str) -> None:
        super().__init__(message)
        self.variable = variable
        self.message = message

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class ConfigWarning:
    """A setting the server started with, but not the way it was written (or a risky one).

    ``set_value`` is what the environment held (``None`` when unset, ``"(hidden)"`` for a
    secret); ``effective`` is what is in effect (``None`` when nothing is).
    """

    variable: str
    set_value: str | None
    effective: str | None
    message: str


@dataclass(frozen=True)
class Settings:
    """The effective configuration. Build it with :func:`load_settings`."""

    # core
    port: int
    host: str
    store: StoreName
    sidestore: SidestoreName
    node_env: str
    docs_dir: str | None  # where /docs reads the guides; None = the checkout's docs/ folder
    # keys and signing
    admin_key: str
    admin_key_is_default: bool
    secret: str
    secret_is_default: bool
    secret_previous: str | None
    token_sign_v2: bool
    token_max_age_sec: int
    queue_cookie_max_age_sec: int
    token_refresh_after_ms: int
    monitor_token_ttl_sec: int
    # several instances
    instance_id: str
    valkey_url: str | None
    valkey_prefix: str
    database_url: str | None
    pg_schema: str
    spool_dir: str | None
    pg_ca_file: str | None
    resync_ms: int
    leader_lease_ms: int
    valkey_alert_after_ms: int
    journal_max_batch: int
    ctl_hints: bool
    checkpoint_every_events: int
    checkpoint_every_ms: int
    # trust and access
    trust_proxy: int
    trust_proxy_ips: tuple[IPNetwork, ...]
    cookie_secure: bool
    edge_secrets: tuple[str, ...]
    public_api_key: str | None
    public_url: str | None
    admin_hosts: tuple[str, ...]
    # rate limits (0 = off)
    join_limit_per_min: int
    check_limit_per_min: int
    waiting_limit_per_min: int
    notify_limit_per_min: int
    admin_auth_fail_per_min: int
    sse_per_ip: int
    sse_max_total: int
    rate_limit_max_keys: int
    # connections, inline proxy, shutdown
    max_connections: int
    connection_reserve: int
    proxy_timeout_ms: int
    proxy_allow_private: bool
    proxy_fast_path: bool
    shutdown_grace_ms: int
    shutdown_drain_ms: int | None
    # bot protection
    protection_mode: ProtectionMode
    protection_block_at: int
    protection_allow_ips: tuple[IPNetwork, ...]
    # operations jobs
    alert_webhook_url: str | None
    alert_every_ms: int
    alert_hold_sec: int
    alert_repeat_sec: int
    history_retain_days: int
    lapsed_ttl_ms: int
    email_notify: bool
    autotune: bool
    # diagnostics
    warnings: tuple[ConfigWarning, ...]
    hardening: tuple[str, ...]

    @property
    def is_production(self) -> bool:
        """NODE_ENV=production (compared case-insensitively)."""
        return self.node_env.lower() == "production"

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


#: Every variable load_settings() reads, in the order of docs/configuration.md.
ENV_VARS: tuple[str, ...] = (
    # core
    "PORT",
    "HOST",
    "STORE",
    "SIDESTORE",
    "NODE_ENV",
    "DOCS_DIR",
    # keys and signing
    "ADMIN_KEY",
    "SECRET",
    "SECRET_PREVIOUS",
    "TOKEN_SIGN_V2",
    "TOKEN_MAX_AGE_SEC",
    "QUEUE_COOKIE_MAX_AGE_SEC",
    "TOKEN_REFRESH_AFTER_MS",
    "MONITOR_TOKEN_TTL_SEC",
    # several instances
    "QM_INSTANCE_ID",
    "VALKEY_URL",
    "VALKEY_PREFIX",
    "DATABASE_URL",
    "PG_SCHEMA",
    "SPOOL_DIR",
    "PG_CA_FILE",
    "RESYNC_MS",
    "LEADER_LEASE_MS",
    "VALKEY_ALERT_AFTER_MS",
    "JOURNAL_MAX_BATCH",
    "CTL_HINTS",
    "CHECKPOINT_EVERY_EVENTS",
    "CHECKPOINT_EVERY_MS",
    # trust and access
    "TRUST_PROXY",
    "TRUST_PROXY_IPS",
    "COOKIE_SECURE",
    "EDGE_SECRET",
    "PUBLIC_API_KEY",
    "PUBLIC_URL",
    "ADMIN_HOST",
    # rate limits
    "JOIN_LIMIT_PER_MIN",
    "CHECK_LIMIT_PER_MIN",
    "WAITING_LIMIT_PER_MIN",
    "NOTIFY_LIMIT_PER_MIN",
    "ADMIN_AUTH_FAIL_PER_MIN",
    "SSE_PER_IP",
    "SSE_MAX_TOTAL",
    "RATE_LIMIT_MAX_KEYS",
    # connections, inline proxy, shutdown
    "MAX_CONNECTIONS",
    "CONNECTION_RESERVE",
    "PROXY_TIMEOUT_MS",
    "PROXY_ALLOW_PRIVATE",
    "PROXY_FAST_PATH",
    "SHUTDOWN_GRACE_MS",
    "SHUTDOWN_DRAIN_MS",
    # bot protection
    "PROTECTION_MODE",
    "PROTECTION_BLOCK_AT",
    "PROTECTION_ALLOW_IPS",
    # operations jobs
    "ALERT_WEBHOOK_URL",
    "ALERT_EVERY_MS",
    "ALERT_HOLD_SEC",
    "ALERT_REPEAT_SEC",
    "HISTORY_RETAIN_DAYS",
    "LAPSED_TTL_MS",
    "EMAIL_NOTIFY",
    "AUTOTUNE",
)


class _Reader:
    """Reads one mapping, collecting warnings. Only names in ENV_VARS may be read."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._env = environ
        self.warnings: list[ConfigWarning] = []

    def raw(self, name: str) -> str | None:
        assert name in ENV_VARS, f"{name} must be listed in ENV_VARS"
        value = self._env.get(name)
        if value is None or value == "":
            return None
        return value

    def shown(self, name: str) -> str | None:
        """The set value as it may be reported (secrets hidden)."""
        value = self.raw(name)
        if value is None:
            return None
        return _HIDDEN if name in _SENSITIVE else value

    def warn(self, name: str, effective: str | None, message: str, *, set_value: str | None = None) -> None:
        shown = self.shown(name) if set_value is None else set_value
        self.warnings.append(ConfigWarning(name, shown, effective, message))

    # -- typed readers -----------------------------------------------------------------

    def string(self, name: str, default: str) -> str:
        value = self.raw(name)
        return default if value is None else value

    def optional(self, name: str) -> str | None:
        return self.raw(name)

    def integer(self, name: str, default: int, unit: str, *, minimum: int = 0, maximum: int = _MAX_INT) -> int:
        value = self.optional_integer(name, str(default), unit, minimum=minimum, maximum=maximum)
        return default if value is None else value

    def optional_integer(
        self, name: str, default_text: str, unit: str, *, minimum: int = 0, maximum: int = _MAX_INT
    ) -> int | None:
        """The integer set, or None when unset or unusable (the latter with a warning whose
        effective value is ``default_text``)."""
        value = self.raw(name)
        if value is None:
            return None
        text = value.strip()
        if text.startswith("+"):
            text = text[1:]
        bounds = (
            f"a whole number of at least {minimum}"
            if maximum == _MAX_INT
            else f"a whole number between {minimum} and {maximum}"
        )
        if _UINT_RE.fullmatch(text):
            if minimum <= int(text) <= maximum:
                return int(text)
            rule = bounds
        elif text.startswith("-") and _UINT_RE.fullmatch(text[1:]):
            rule = bounds
        else:
            rule = "a whole number" + (f" of {unit}" if unit else "")
        in_effect = f"{name} {default_text}" if default_text.startswith("unset") else f"{name}={default_text}"
        self.warn(
            name,
            default_text,
            f'{name}="{value}" cannot be used: {name} must be {rule}. In effect: {in_effect}.',
        )
        return None

    def boolean(self, name: str, default: bool) -> bool:
        value = self.raw(name)
        if value is None:
            return default
        word = value.strip().lower()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
        shown = "1" if default else "0"
        self.warn(
            name,
            "true" if default else "false",
            f'{name}="{value}" is not a yes/no value (1/0, true/false, yes/no, on/off). '
            f"{name}={shown} ({'on' if default else 'off'}) is in effect.",
        )
        return default

    def networks(self, name: str, *, refuse: bool) -> tuple[IPNetwork, ...]:
        """Comma-separated addresses or CIDR ranges, IPv4 and IPv6; a single address becomes a
        /32 or /128. A malformed entry refuses start (``refuse=True``) or is dropped with a warning.
        """
        value = self.raw(name)
        if value is None:
            return ()
        result: list[IPNetwork] = []
        dropped: list[str] = []
        widened: list[tuple[str, IPNetwork]] = []
        for entry in (part.strip() for part in value.split(",")):
            if not entry:
                continue
            try:
                network = _parse_network(entry)
            except ValueError:
                if refuse:
                    raise ConfigRefusal(
                        name,
                        f"{_bad_entry(name, entry)} Fix that entry (entries are separated by commas, e.g. "
                        f"{name}=173.245.48.0/20,2400:cb00::/32) or unset {name}.",
                    ) from None
                dropped.append(entry)
                continue
            if "/" in entry and _has_host_bits(entry):
                widened.append((entry, network))
            result.append(network)
        networks = tuple(result)
        effective = ",".join(str(n) for n in networks) or None
        for entry in dropped:
            self.warn(name, effective, f"{_bad_entry(name, entry)} It is ignored; fix it to have it apply.")
        for entry, network in widened:
            self.warn(
                name,
                effective,
                f'{name} entry "{entry}" has host bits set; it is read as the range {network}. '
                f"Write {network} to say so, or a single address without a prefix length.",
            )
        if not networks and not dropped:
            self.warn(name, None, f'{name}="{value}" lists no address; it is treated as unset.')
        return networks


def _bad_entry(name: str, entry: str) -> str:
    hint = " (two entries missing their comma?)" if any(ch.isspace() for ch in entry) else ""
    return f'{name} entry "{entry}" is not an IP address or a CIDR range{hint}.'


def _parse_network(entry: str) -> IPNetwork:
    if "%" in entry or any(ch.isspace() for ch in entry):
        raise ValueError(entry)
    return ipaddress.ip_network(entry, strict=False)


def _has_host_bits(entry: str) -> bool:
    try:
        ipaddress.ip_network(entry, strict=True)
    except ValueError:
        return True
    return False


def _http_url(value: str) -> bool:
    try:
        parts = urlsplit(value.strip())
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Read and validate the configuration. Raises :class:`ConfigRefusal` if it must not start."""
    env: Mapping[str, str] = os.environ if environ is None else environ
    r = _Reader(env)

    port = r.integer("PORT", 8080, "", maximum=65535)
    host = r.string("HOST", "127.0.0.1").strip() or "127.0.0.1"

    # -- storage: the settings that refuse ------------------------------------------------
    store_raw = r.raw("STORE")
    store: StoreName = "memory"
    if store_raw is not None:
        word = store_raw.strip().lower()
        if word == "valkey":
            store = "valkey"
        elif word != "memory":
            raise ConfigRefusal(
                "STORE",
                f"STORE={store_raw} is not a store this build has (memory, valkey). Set STORE=memory or STORE=valkey.",
            )

    sidestore_raw = r.raw("SIDESTORE")
    sidestore: SidestoreName = "pg" if store == "valkey" else "none"
    if sidestore_raw is not None:
        word = sidestore_raw.strip().lower()
        if word == "pg":
            sidestore = "pg"
        elif word == "none":
            sidestore = "none"
        else:
            raise ConfigRefusal(
                "SIDESTORE",
                f"SIDESTORE={sidestore_raw} is not a side store this build has (none, pg). "
                "Set SIDESTORE=none or SIDESTORE=pg.",
            )
    if store == "valkey" and sidestore != "pg":
        raise ConfigRefusal(
            "SIDESTORE",
            f"STORE=valkey needs SIDESTORE=pg (SIDESTORE={sidestore_raw} is set): the events journal, "
            "operators and history live in Postgres. Set SIDESTORE=pg (or leave it unset) with "
            "DATABASE_URL, or use STORE=memory.",
        )

    node_env = r.string("NODE_ENV", "development").strip() or "development"
    if node_env.lower() == "production" and not (store == "valkey" and sidestore == "pg"):
        raise ConfigRefusal(
            "NODE_ENV",
            f"NODE_ENV=production refuses STORE={store} with SIDESTORE={sidestore}: that keeps nothing "
            "across a restart. Set STORE=valkey and SIDESTORE=pg (with VALKEY_URL and DATABASE_URL), "
            "or unset NODE_ENV for a development install.",
        )

    docs_dir = r.optional("DOCS_DIR")
    if docs_dir is not None and not os.path.isdir(docs_dir):
        r.warn(
            "DOCS_DIR",
            None,
            f"DOCS_DIR={docs_dir} names no directory this process can read. In effect: DOCS_DIR unset "
            "(the docs/ folder of the checkout the package runs from). Point it at a copy of the docs/ folder.",
        )
        docs_dir = None

    valkey_url = r.optional("VALKEY_URL")
    database_url = r.optional("DATABASE_URL")
    if store == "valkey" and valkey_url is None:
        raise ConfigRefusal(
            "VALKEY_URL",
            "STORE=valkey needs VALKEY_URL, the address of the shared Valkey "
            "(e.g. rediss://user:pass@host:6379/1). Set VALKEY_URL, or use STORE=memory for a single "
            "development instance.",
        )
    if sidestore == "pg" and database_url is None:
        raise ConfigRefusal(
            "DATABASE_URL",
            f"SIDESTORE=pg{' (STORE=valkey)' if store == 'valkey' else ''} needs DATABASE_URL, the Postgres "
            "connection string (e.g. postgres://user:pass@host:5432/qm). Set DATABASE_URL, or "
            + ("use STORE=memory for a single development instance." if store == "valkey" else "set SIDESTORE=none."),
        )
    if store == "memory" and valkey_url is not None:
        r.warn(
            "VALKEY_URL",
            None,
            "VALKEY_URL is set but STORE=memory, so it is not used and nothing is shared between instances. "
            "Set STORE=valkey (with SIDESTORE=pg and DATABASE_URL) to use it, or unset VALKEY_URL.",
        )
    if sidestore == "none" and database_url is not None:
        r.warn(
            "DATABASE_URL",
            None,
            "DATABASE_URL is set but SIDESTORE=none, so it is not used and nothing is written to Postgres. "
            "Set SIDESTORE=pg to use it, or unset DATABASE_URL.",
        )

    pg_schema = r.optional("PG_SCHEMA") or "qm"
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", pg_schema):
        raise ConfigRefusal(
            "PG_SCHEMA",
            f"PG_SCHEMA={pg_schema!r} is not a schema name this server uses (lower-case letters, digits and _, "
            "starting with a letter or _). Set PG_SCHEMA to e.g. qm, or unset it.",
        )
    spool_dir = r.optional("SPOOL_DIR")

    pg_ca_file = r.optional("PG_CA_FILE")
    if pg_ca_file is not None and not (os.path.isfile(pg_ca_file) and os.access(pg_ca_file, os.R_OK)):
        raise ConfigRefusal(
            "PG_CA_FILE",
            f"PG_CA_FILE={pg_ca_file} names no file this process can read. Point it at the CA certificate "
            "(PEM) of your Postgres server, or unset PG_CA_FILE.",
        )

    instance_raw = r.raw("QM_INSTANCE_ID")
    if instance_raw is None:
        instance_id = "i:" + secrets.token_hex(4)
    elif _INSTANCE_ID_RE.fullmatch(instance_raw):
        instance_id = instance_raw
    else:
        shown = instance_raw if len(instance_raw) <= 80 else instance_raw[:77] + "..."
        raise ConfigRefusal(
            "QM_INSTANCE_ID",
            f"QM_INSTANCE_ID={shown!r} is not a usable instance name: it must be 1-63 characters of "
            "letters, digits and . _ : -, starting with a letter or digit. Fix it, or unset QM_INSTANCE_ID "
            "for a random i:<hex> name per boot.",
        )

    # -- trust and access -----------------------------------------------------------------
    trust_proxy_ips = r.networks("TRUST_PROXY_IPS", refuse=True)
    edge_secrets = _edge_secrets(r)
    trust_proxy = r.integer("TRUST_PROXY", 0, "proxy hops")

    if edge_secrets:
        for name in ("TRUST_PROXY", "TRUST_PROXY_IPS"):
            if r.raw(name) is not None:
                r.warn(
                    name,
                    "ignored",
                    f"{name} is set but ignored because EDGE_SECRET is set: behind the Cloudflare edge "
                    "secret the client address is CF-Connecting-IP on every request that carries it. "
                    f"Unset {name}.",
                )
        trust_proxy = 0
        trust_proxy_ips = ()
    elif trust_proxy > 0 and not trust_proxy_ips:
        r.warn(
            "TRUST_PROXY_IPS",
            None,
            f"TRUST_PROXY={trust_proxy} is set but TRUST_PROXY_IPS is not, so X-Forwarded-For is believed "
            "from no peer: every visitor behind your proxy shares the proxy's address and one rate-limit "
            "bucket for the whole site. Set TRUST_PROXY_IPS to the address(es) or CIDR ranges your proxy "
            "connects from.",
        )
    elif trust_proxy_ips and trust_proxy == 0:
        r.warn(
            "TRUST_PROXY",
            "0",
            "TRUST_PROXY_IPS is set but TRUST_PROXY is not, so no forwarded hop is believed: every visitor "
            "behind your proxy shares the proxy's address and one rate-limit bucket for the whole site. "
            "Set TRUST_PROXY to the number of proxy hops in front of this server (TRUST_PROXY=1 for one CDN "
            "or load balancer).",
        )

    cookie_secure = r.boolean("COOKIE_SECURE", False)
    public_api_key = r.optional("PUBLIC_API_KEY")

    public_url_raw = r.optional("PUBLIC_URL")
    public_url: str | None = None
    if public_url_raw is not None:
        if _http_url(public_url_raw):
            public_url = public_url_raw.strip()
        else:
            r.warn(
                "PUBLIC_URL",
                None,
                f'PUBLIC_URL="{public_url_raw}" is not an http(s) URL with a host, so it is not used: '
                "absolute URLs name the request's host instead. Set it like PUBLIC_URL=https://queue.example.com.",
            )

    admin_hosts = _admin_hosts(r)

    # -- keys and signing -----------------------------------------------------------------
    admin_key = r.string("ADMIN_KEY", DEFAULT_ADMIN_KEY)
    admin_key_is_default = admin_key == DEFAULT_ADMIN_KEY
    if admin_key_is_default:
        r.warn(
            "ADMIN_KEY",
            "(default)",
            "ADMIN_KEY is the built-in default, which anyone who has read the docs knows. "
            "Set ADMIN_KEY to a long random value (openssl rand -hex 32).",
        )
    if public_api_key is not None and public_api_key == admin_key:
        r.warn(
            "PUBLIC_API_KEY",
            _HIDDEN,
            "PUBLIC_API_KEY is the same as ADMIN_KEY, so handing it to a connector hands out the admin key. "
            "Set PUBLIC_API_KEY to a different random value.",
        )

    secret = r.string("SECRET", DEFAULT_SECRET)
    secret_is_default = secret == DEFAULT_SECRET
    secret_is_short = not secret_is_default and len(secret) < MIN_SECRET_LEN
    if secret_is_default:
        r.warn(
            "SECRET",
            "(default)",
            "SECRET is the built-in default, so anyone can sign tickets, passes and console sessions. "
            "Set SECRET to a long random value (openssl rand -hex 32), the same on every instance.",
        )
    elif secret_is_short:
        r.warn(
            "SECRET",
            _HIDDEN,
            f"SECRET is shorter than {MIN_SECRET_LEN} characters; it is used as set, but a short signing "
            "key can be guessed. Set a longer random value (openssl rand -hex 32), rotating it with "
            "SECRET_PREVIOUS so nobody in line loses their place.",
        )
    secret_previous = r.optional("SECRET_PREVIOUS")
    if secret_previous is not None and secret_previous == secret:
        r.warn(
            "SECRET_PREVIOUS",
            _HIDDEN,
            "SECRET_PREVIOUS is the same as SECRET, so it accepts nothing extra. During a rotation it must "
            "hold the old SECRET; otherwise unset it.",
        )
    token_sign_v2 = r.boolean("TOKEN_SIGN_V2", False)

    token_max_age_sec = r.integer("TOKEN_MAX_AGE_SEC", 86400, "seconds", minimum=1)
    queue_cookie_max_age_sec = r.integer("QUEUE_COOKIE_MAX_AGE_SEC", 86400, "seconds", minimum=1)
    refresh_window_ms = min(token_max_age_sec, queue_cookie_max_age_sec) * 1000
    refresh_default_ms = max(1, refresh_window_ms // 2)
    token_refresh_after_ms = r.integer("TOKEN_REFRESH_AFTER_MS", refresh_default_ms, "milliseconds", minimum=1)
    if r.raw("TOKEN_REFRESH_AFTER_MS") is not None and token_refresh_after_ms >= refresh_window_ms:
        r.warn(
            "TOKEN_REFRESH_AFTER_MS",
            str(token_refresh_after_ms),
            f"TOKEN_REFRESH_AFTER_MS={token_refresh_after_ms} is not shorter than the token or queue-cookie "
            f"lifetime ({refresh_window_ms} ms), so a waiting visitor's place can lapse before it is "
            f"re-signed. It is used as set; unset it for half the lifetime ({refresh_default_ms}).",
        )
    monitor_token_ttl_sec = r.integer("MONITOR_TOKEN_TTL_SEC", 604800, "seconds", minimum=1)

    # -- several instances ----------------------------------------------------------------
    valkey_prefix = r.string("VALKEY_PREFIX", "qm:")
    resync_ms = r.integer("RESYNC_MS", 5000, "milliseconds", minimum=1)
    leader_lease_ms = r.integer("LEADER_LEASE_MS", 10000, "milliseconds", minimum=1)
    valkey_alert_after_ms = r.integer("VALKEY_ALERT_AFTER_MS", 30000, "milliseconds")
    # events per group commit; 1 = one transaction per acknowledged change (the benchmark's comparison)
    journal_max_batch = r.integer("JOURNAL_MAX_BATCH", 512, "events", minimum=1, maximum=10_000)
    # change hints over Valkey pub/sub (<prefix>ctl); off: instances catch up by the RESYNC_MS re-read alone
    ctl_hints = r.boolean("CTL_HINTS", True)
    # the leader's checkpoints (room_snapshots): after this many events of a room, or this long after the
    # oldest event no checkpoint holds yet, whichever comes first
    checkpoint_every_events = r.integer("CHECKPOINT_EVERY_EVENTS", 10_000, "events", minimum=1)
    checkpoint_every_ms = r.integer("CHECKPOINT_EVERY_MS", 600_000, "milliseconds", minimum=1)

    # -- rate limits (0 = off) -------------------------------------------------------------
    join_limit_per_min = r.integer("JOIN_LIMIT_PER_MIN", 600, "requests a minute (0 = off)")
    check_limit_per_min = r.integer("CHECK_LIMIT_PER_MIN", 1200, "requests a minute (0 = off)")
    waiting_limit_per_min = r.integer("WAITING_LIMIT_PER_MIN", 120, "requests a minute (0 = off)")
    notify_limit_per_min = r.integer("NOTIFY_LIMIT_PER_MIN", 10, "requests a minute (0 = off)")
    admin_auth_fail_per_min = r.integer("ADMIN_AUTH_FAIL_PER_MIN", 20, "failures a minute (0 = off)")
    sse_per_ip = r.integer("SSE_PER_IP", 20, "streams (0 = off)")
    sse_max_total = r.integer("SSE_MAX_TOTAL", 20000, "streams (0 = off)")
    rate_limit_max_keys = r.integer("RATE_LIMIT_MAX_KEYS", 200000, "addresses (0 = off)")

    # -- connections, inline proxy, shutdown ----------------------------------------------
    max_connections = r.integer("MAX_CONNECTIONS", 10000, "connections (0 = no ceiling)")
    connection_reserve = r.integer("CONNECTION_RESERVE", 64, "connections")
    if max_connections > 0 and connection_reserve >= max_connections:
        r.warn(
            "CONNECTION_RESERVE",
            str(connection_reserve),
            f"CONNECTION_RESERVE={connection_reserve} is not below MAX_CONNECTIONS={max_connections}: the "
            "thresholds are in the wrong order. Both are used as set; make CONNECTION_RESERVE a small "
            "fraction of MAX_CONNECTIONS (the defaults are 64 and 10000).",
        )
    proxy_timeout_ms = r.integer("PROXY_TIMEOUT_MS", 30000, "milliseconds", minimum=1)
    proxy_allow_private = r.boolean("PROXY_ALLOW_PRIVATE", False)
    proxy_fast_path = r.boolean("PROXY_FAST_PATH", True)
    shutdown_grace_ms = r.integer("SHUTDOWN_GRACE_MS", 2000, "milliseconds")
    # None = unset: 2000 ms, or a 15000 ms floor with an inline room (the caller decides).
    shutdown_drain_ms = r.optional_integer(
        "SHUTDOWN_DRAIN_MS", "unset (2000, or 15000 with an inline room)", "milliseconds"
    )
    if shutdown_drain_ms is not None and shutdown_drain_ms < shutdown_grace_ms:
        r.warn(
            "SHUTDOWN_DRAIN_MS",
            str(shutdown_drain_ms),
            f"SHUTDOWN_DRAIN_MS={shutdown_drain_ms} is below SHUTDOWN_GRACE_MS={shutdown_grace_ms}: the "
            "thresholds are in the wrong order. The drain is the hard ceiling on the whole stop, so the stop "
            "ends after SHUTDOWN_DRAIN_MS; raise it or lower SHUTDOWN_GRACE_MS.",
        )

    # -- bot protection -------------------------------------------------------------------
    protection_mode: ProtectionMode = "monitor"
    mode_raw = r.raw("PROTECTION_MODE")
    if mode_raw is not None:
        word = mode_raw.strip().lower()
        if word == "enforce":
            protection_mode = "enforce"
        elif word != "monitor":
            r.warn(
                "PROTECTION_MODE",
                "monitor",
                f'PROTECTION_MODE="{mode_raw}" is not a mode (monitor, enforce). PROTECTION_MODE=monitor '
                "is in effect: requests are scored and nothing is refused. Set PROTECTION_MODE=enforce "
                "to refuse.",
            )
    protection_block_at = r.integer("PROTECTION_BLOCK_AT", 80, "score points", maximum=100)
    protection_allow_ips = r.networks("PROTECTION_ALLOW_IPS", refuse=False)

    # -- operations jobs ------------------------------------------------------------------
    alert_raw = r.optional("ALERT_WEBHOOK_URL")
    alert_webhook_url: str | None = None
    if alert_raw is not None:
        if _http_url(alert_raw):
            alert_webhook_url = alert_raw.strip()
        else:
            r.warn(
                "ALERT_WEBHOOK_URL",
                None,
                "ALERT_WEBHOOK_URL is not an http(s) URL with a host, so no alert is delivered (conditions "
                "still show under Diagnostics). Set it to the webhook's https:// address.",
            )
    alert_every_ms = r.integer("ALERT_EVERY_MS", 5000, "milliseconds", minimum=1)
    alert_hold_sec = r.integer("ALERT_HOLD_SEC", 60, "seconds")
    alert_repeat_sec = r.integer("ALERT_REPEAT_SEC", 1800, "seconds", minimum=1)
    history_retain_days = r.integer("HISTORY_RETAIN_DAYS", 90, "days", minimum=1)
    lapsed_ttl_ms = r.integer("LAPSED_TTL_MS", 86_400_000, "milliseconds", minimum=1)
    email_notify = r.boolean("EMAIL_NOTIFY", False)
    autotune = r.boolean("AUTOTUNE", False)

    # -- hardening ------------------------------------------------------------------------
    hardening: list[str] = []
    if not edge_secrets and (store == "valkey" or node_env.lower() == "production"):
        hardening.append(HARDENING_EDGE_SECRET)
    if admin_key_is_default:
        hardening.append(HARDENING_ADMIN_KEY)
    if secret_is_default:
        hardening.append(HARDENING_SECRET_DEFAULT)
    elif secret_is_short:
        hardening.append(HARDENING_SECRET_SHORT)
    if public_api_key is None:
        hardening.append(HARDENING_PUBLIC_API_KEY)

    return Settings(
        port=port,
        host=host,
        store=store,
        sidestore=sidestore,
        node_env=node_env,
        docs_dir=docs_dir,
        admin_key=admin_key,
        admin_key_is_default=admin_key_is_default,
        secret=secret,
        secret_is_default=secret_is_default,
        secret_previous=secret_previous,
        token_sign_v2=token_sign_v2,
        token_max_age_sec=token_max_age_sec,
        queue_cookie_max_age_sec=queue_cookie_max_age_sec,
        token_refresh_after_ms=token_refresh_after_ms,
        monitor_token_ttl_sec=monitor_token_ttl_sec,
        instance_id=instance_id,
        valkey_url=valkey_url,
        valkey_prefix=valkey_prefix,
        database_url=database_url,
        pg_schema=pg_schema,
        spool_dir=spool_dir,
        pg_ca_file=pg_ca_file,
        resync_ms=resync_ms,
        leader_lease_ms=leader_lease_ms,
        valkey_alert_after_ms=valkey_alert_after_ms,
        journal_max_batch=journal_max_batch,
        ctl_hints=ctl_hints,
        checkpoint_every_events=checkpoint_every_events,
        checkpoint_every_ms=checkpoint_every_ms,
        trust_proxy=trust_proxy,
        trust_proxy_ips=trust_proxy_ips,
        cookie_secure=cookie_secure,
        edge_secrets=edge_secrets,
        public_api_key=public_api_key,
        public_url=public_url,
        admin_hosts=admin_hosts,
        join_limit_per_min=join_limit_per_min,
        check_limit_per_min=check_limit_per_min,
        waiting_limit_per_min=waiting_limit_per_min,
        notify_limit_per_min=notify_limit_per_min,
        admin_auth_fail_per_min=admin_auth_fail_per_min,
        sse_per_ip=sse_per_ip,
        sse_max_total=sse_max_total,
        rate_limit_max_keys=rate_limit_max_keys,
        max_connections=max_connections,
        connection_reserve=connection_reserve,
        proxy_timeout_ms=proxy_timeout_ms,
        proxy_allow_private=proxy_allow_private,
        proxy_fast_path=proxy_fast_path,
        shutdown_grace_ms=shutdown_grace_ms,
        shutdown_drain_ms=shutdown_drain_ms,
        protection_mode=protection_mode,
        protection_block_at=protection_block_at,
        protection_allow_ips=protection_allow_ips,
        alert_webhook_url=alert_webhook_url,
        alert_every_ms=alert_every_ms,
        alert_hold_sec=alert_hold_sec,
        alert_repeat_sec=alert_repeat_sec,
        history_retain_days=history_retain_days,
        lapsed_ttl_ms=lapsed_ttl_ms,
        email_notify=email_notify,
        autotune=autotune,
        warnings=tuple(r.warnings),
        hardening=tuple(hardening),
    )


def _edge_secrets(r: _Reader) -> tuple[str, ...]:
    value = r.raw("EDGE_SECRET")
    if value is None:
        return ()
    entries = [part.strip() for part in value.split(",")]
    entries = [e for e in entries if e]
    for index, entry in enumerate(entries, start=1):
        if len(entry) < MIN_EDGE_SECRET_LEN:
            # Never print the value, nor anything derived from it beyond its position.
            raise ConfigRefusal(
                "EDGE_SECRET",
                f"EDGE_SECRET entry {index} of {len(entries)} is shorter than {MIN_EDGE_SECRET_LEN} "
                "characters: a guessable edge secret is worse than none. Generate a long random value "
                "(openssl rand -hex 32), put it in the Cloudflare rule and in EDGE_SECRET, or unset "
                "EDGE_SECRET.",
            )
    if not entries:
        r.warn(
            "EDGE_SECRET",
            None,
            "EDGE_SECRET is set but holds no value (only commas or spaces), so no edge secret is enforced. "
            "Set it to the value of the Cloudflare X-QM-Edge rule, or unset it.",
        )
    return tuple(entries)


def _admin_hosts(r: _Reader) -> tuple[str, ...]:
    value = r.raw("ADMIN_HOST")
    if value is None:
        return ()
    hosts: list[str] = []
    dropped: list[str] = []
    for entry in (part.strip().lower() for part in value.split(",")):
        if not entry:
            continue
        if "/" in entry or any(ch.isspace() for ch in entry):
            dropped.append(entry)
        elif entry not in hosts:
            hosts.append(entry)
    effective = ",".join(hosts) or None
    for entry in dropped:
        r.warn(
            "ADMIN_HOST",
            effective,
            f'ADMIN_HOST entry "{entry}" is not a host name (write qm.example.com, without a scheme or '
            "path); it is ignored.",
        )
    return tuple(hosts)
