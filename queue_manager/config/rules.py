"""Checks across settings: one setting judged against another, and what they derive.

Each rule looks at the settings read so far and refuses start, warns, or hands back settings with
a value replaced. :data:`RULES` pairs each rule with the setting it runs right after (the last
setting it reads), so its refusal or warnings come in the order load_settings reads settings.
Secrets and connection strings never appear in a message.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from email.utils import parseaddr

from queue_manager.config.declare import HIDDEN, Reader
from queue_manager.config.outcomes import ConfigRefusal
from queue_manager.config.settings import (
    DEFAULT_ADMIN_KEY,
    DEFAULT_PUBLIC_API_KEY,
    DEFAULT_SECRET,
    MIN_SECRET_LEN,
    Settings,
)

__all__ = [
    "HARDENING_ADMIN_KEY",
    "HARDENING_EDGE_SECRET",
    "HARDENING_PUBLIC_API_KEY",
    "HARDENING_PUBLIC_API_KEY_DEFAULT",
    "HARDENING_SECRET_DEFAULT",
    "HARDENING_SECRET_SHORT",
    "RULES",
    "Rule",
    "hardening",
    "with_key_flags",
]

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
HARDENING_PUBLIC_API_KEY_DEFAULT = (
    "PUBLIC_API_KEY is the built-in development key: anyone who has read the docs can vouch for visitors. "
    "Set PUBLIC_API_KEY to a long random value (openssl rand -hex 32) and give connectors that key"
)


# --------------------------------------------------------------------------------- storage


def valkey_needs_pg_sidestore(s: Settings, r: Reader) -> None:
    if s.store == "valkey" and s.sidestore != "pg":
        raise ConfigRefusal(
            "SIDESTORE",
            f"STORE=valkey needs SIDESTORE=pg (SIDESTORE={r.raw('SIDESTORE')} is set): the events journal, "
            "operators and history live in Postgres. Set SIDESTORE=pg (or leave it unset) with "
            "DATABASE_URL, or use STORE=memory.",
        )


def workers_need_valkey(s: Settings, r: Reader) -> None:
    if s.workers > 1 and s.store != "valkey":
        raw = (r.raw("WORKERS") or "").strip()
        shown = f"{raw} ({s.workers} cores)" if raw.lower() == "auto" else str(s.workers)
        raise ConfigRefusal(
            "WORKERS",
            f"WORKERS={shown} needs STORE=valkey: with STORE={s.store} each worker process would keep a queue "
            "of its own. Set STORE=valkey (with VALKEY_URL and DATABASE_URL), or WORKERS=1.",
        )


def worker_ids_fit(s: Settings, r: Reader) -> None:
    longest = f"{s.instance_id}-w{s.workers}"
    if s.workers > 1 and len(longest) > 63:
        raise ConfigRefusal(
            "QM_INSTANCE_ID",
            f"QM_INSTANCE_ID is too long for WORKERS={s.workers}: worker {s.workers} would be named {longest!r}, "
            "longer than 63 characters. Shorten QM_INSTANCE_ID.",
        )


def production_needs_valkey_and_pg(s: Settings, r: Reader) -> None:
    if s.is_production and not (s.store == "valkey" and s.sidestore == "pg"):
        raise ConfigRefusal(
            "NODE_ENV",
            f"NODE_ENV=production refuses STORE={s.store} with SIDESTORE={s.sidestore}: that keeps nothing "
            "across a restart. Set STORE=valkey and SIDESTORE=pg (with VALKEY_URL and DATABASE_URL), "
            "or unset NODE_ENV for a development install.",
        )


def valkey_needs_valkey_url(s: Settings, r: Reader) -> None:
    if s.store == "valkey" and s.valkey_url is None:
        raise ConfigRefusal(
            "VALKEY_URL",
            "STORE=valkey needs VALKEY_URL, the address of the shared Valkey "
            "(e.g. rediss://user:pass@host:6379/1). Set VALKEY_URL, or use STORE=memory for a single "
            "development instance.",
        )


def pg_needs_database_url(s: Settings, r: Reader) -> None:
    if s.sidestore == "pg" and s.database_url is None:
        valkey = s.store == "valkey"
        raise ConfigRefusal(
            "DATABASE_URL",
            f"SIDESTORE=pg{' (STORE=valkey)' if valkey else ''} needs DATABASE_URL, the Postgres "
            "connection string (e.g. postgres://user:pass@host:5432/qm). Set DATABASE_URL, or "
            + ("use STORE=memory for a single development instance." if valkey else "set SIDESTORE=none."),
        )


def unused_valkey_url(s: Settings, r: Reader) -> None:
    if s.store == "memory" and s.valkey_url is not None:
        r.warn(
            "VALKEY_URL",
            None,
            "VALKEY_URL is set but STORE=memory, so it is not used and nothing is shared between instances. "
            "Set STORE=valkey (with SIDESTORE=pg and DATABASE_URL) to use it, or unset VALKEY_URL.",
        )


def unused_database_url(s: Settings, r: Reader) -> None:
    if s.sidestore == "none" and s.database_url is not None:
        r.warn(
            "DATABASE_URL",
            None,
            "DATABASE_URL is set but SIDESTORE=none, so it is not used and nothing is written to Postgres. "
            "Set SIDESTORE=pg to use it, or unset DATABASE_URL.",
        )


# ------------------------------------------------------------------------- trust and access


def edge_secret_overrides_proxy_trust(s: Settings, r: Reader) -> Settings | None:
    """Behind EDGE_SECRET the client address is CF-Connecting-IP: TRUST_PROXY(_IPS) are set aside."""
    if not s.edge_secrets:
        return None
    for name in ("TRUST_PROXY", "TRUST_PROXY_IPS"):
        if r.raw(name) is not None:
            r.warn(
                name,
                "ignored",
                f"{name} is set but ignored because EDGE_SECRET is set: behind the Cloudflare edge "
                "secret the client address is CF-Connecting-IP on every request that carries it. "
                f"Unset {name}.",
            )
    return replace(s, trust_proxy=0, trust_proxy_ips=())


def proxy_hops_need_proxy_ips(s: Settings, r: Reader) -> None:
    if s.trust_proxy > 0 and not s.trust_proxy_ips:
        r.warn(
            "TRUST_PROXY_IPS",
            None,
            f"TRUST_PROXY={s.trust_proxy} is set but TRUST_PROXY_IPS is not, so X-Forwarded-For is believed "
            "from no peer: every visitor behind your proxy shares the proxy's address and one rate-limit "
            "bucket for the whole site. Set TRUST_PROXY_IPS to the address(es) or CIDR ranges your proxy "
            "connects from.",
        )


def proxy_ips_need_proxy_hops(s: Settings, r: Reader) -> None:
    if s.trust_proxy_ips and s.trust_proxy == 0:
        r.warn(
            "TRUST_PROXY",
            "0",
            "TRUST_PROXY_IPS is set but TRUST_PROXY is not, so no forwarded hop is believed: every visitor "
            "behind your proxy shares the proxy's address and one rate-limit bucket for the whole site. "
            "Set TRUST_PROXY to the number of proxy hops in front of this server (TRUST_PROXY=1 for one CDN "
            "or load balancer).",
        )


# ------------------------------------------------------------------------- keys and signing


def with_key_flags(s: Settings) -> Settings:
    """``admin_key_is_default``, ``secret_is_default`` and ``public_api_key_is_default`` (an explicit default
    value counts too). On the development defaults (ADMIN_KEY unset) an unset PUBLIC_API_KEY is the development
    key, so ``make run`` can be tried with a connector at once; once ADMIN_KEY is set it must be set too."""
    admin_default = s.admin_key == DEFAULT_ADMIN_KEY
    public = s.public_api_key
    if public is None and admin_default:
        public = DEFAULT_PUBLIC_API_KEY
    return replace(
        s,
        admin_key_is_default=admin_default,
        secret_is_default=s.secret == DEFAULT_SECRET,
        public_api_key=public,
        public_api_key_is_default=public == DEFAULT_PUBLIC_API_KEY,
    )


def _secret_is_short(s: Settings) -> bool:
    return not s.secret_is_default and len(s.secret) < MIN_SECRET_LEN


def default_admin_key_warns(s: Settings, r: Reader) -> None:
    if s.admin_key_is_default:
        r.warn(
            "ADMIN_KEY",
            "(default)",
            "ADMIN_KEY is the built-in default, which anyone who has read the docs knows. "
            "Set ADMIN_KEY to a long random value (openssl rand -hex 32).",
        )


def default_public_api_key_warns(s: Settings, r: Reader) -> None:
    if s.public_api_key_is_default:
        r.warn(
            "PUBLIC_API_KEY",
            "(default)",
            "PUBLIC_API_KEY is the built-in development key, which anyone who has read the docs "
            "knows. Set PUBLIC_API_KEY to a long random value (openssl rand -hex 32) and give connectors that key.",
        )


def public_api_key_differs_from_admin_key(s: Settings, r: Reader) -> None:
    if s.public_api_key is not None and s.public_api_key == s.admin_key:
        r.warn(
            "PUBLIC_API_KEY",
            HIDDEN,
            "PUBLIC_API_KEY is the same as ADMIN_KEY, so handing it to a connector hands out the admin key. "
            "Set PUBLIC_API_KEY to a different random value.",
        )


def default_or_short_secret_warns(s: Settings, r: Reader) -> None:
    if s.secret_is_default:
        r.warn(
            "SECRET",
            "(default)",
            "SECRET is the built-in default, so anyone can sign tickets, passes and console sessions. "
            "Set SECRET to a long random value (openssl rand -hex 32), the same on every instance.",
        )
    elif _secret_is_short(s):
        r.warn(
            "SECRET",
            HIDDEN,
            f"SECRET is shorter than {MIN_SECRET_LEN} characters; it is used as set, but a short signing "
            "key can be guessed. Set a longer random value (openssl rand -hex 32), rotating it with "
            "SECRET_PREVIOUS so nobody in line loses their place.",
        )


def secret_previous_differs_from_secret(s: Settings, r: Reader) -> None:
    if s.secret_previous is not None and s.secret_previous == s.secret:
        r.warn(
            "SECRET_PREVIOUS",
            HIDDEN,
            "SECRET_PREVIOUS is the same as SECRET, so it accepts nothing extra. During a rotation it must "
            "hold the old SECRET; otherwise unset it.",
        )


def token_refresh_before_lifetime_ends(s: Settings, r: Reader) -> None:
    window_ms = min(s.token_max_age_sec, s.queue_cookie_max_age_sec) * 1000
    if r.raw("TOKEN_REFRESH_AFTER_MS") is not None and s.token_refresh_after_ms >= window_ms:
        r.warn(
            "TOKEN_REFRESH_AFTER_MS",
            str(s.token_refresh_after_ms),
            f"TOKEN_REFRESH_AFTER_MS={s.token_refresh_after_ms} is not shorter than the token or queue-cookie "
            f"lifetime ({window_ms} ms), so a waiting visitor's place can lapse before it is "
            f"re-signed. It is used as set; unset it for half the lifetime ({max(1, window_ms // 2)}).",
        )


# --------------------------------------------------------------------- connections, shutdown


def reserve_below_connection_ceiling(s: Settings, r: Reader) -> None:
    if s.max_connections > 0 and s.connection_reserve >= s.max_connections:
        r.warn(
            "CONNECTION_RESERVE",
            str(s.connection_reserve),
            f"CONNECTION_RESERVE={s.connection_reserve} is not below MAX_CONNECTIONS={s.max_connections}: the "
            "thresholds are in the wrong order. Both are used as set; make CONNECTION_RESERVE a small "
            "fraction of MAX_CONNECTIONS (the defaults are 64 and 10000).",
        )


def drain_not_below_grace(s: Settings, r: Reader) -> None:
    if s.shutdown_drain_ms is not None and s.shutdown_drain_ms < s.shutdown_grace_ms:
        r.warn(
            "SHUTDOWN_DRAIN_MS",
            str(s.shutdown_drain_ms),
            f"SHUTDOWN_DRAIN_MS={s.shutdown_drain_ms} is below SHUTDOWN_GRACE_MS={s.shutdown_grace_ms}: the "
            "thresholds are in the wrong order. The drain is the hard ceiling on the whole stop, so the stop "
            "ends after SHUTDOWN_DRAIN_MS; raise it or lower SHUTDOWN_GRACE_MS.",
        )


# ------------------------------------------------------------------------------ turn e-mails


def _mailbox(value: str) -> str | None:
    """The address in an RFC 5322 From value ("Shop queue <queue@shop.example>" or a bare address), or None."""
    _, address = parseaddr(value)
    local, at, domain = address.rpartition("@")
    if not at or not local or "." not in domain or any(ch.isspace() for ch in address):
        return None
    return address


def smtp_from_is_an_address(s: Settings, r: Reader) -> Settings | None:
    if s.smtp_from is not None and _mailbox(s.smtp_from) is None:
        r.warn(
            "SMTP_FROM",
            None,
            f'SMTP_FROM="{s.smtp_from}" is not an e-mail address, so no turn e-mail is sent and the waiting page '
            "does not offer one. Set it like SMTP_FROM=queue@shop.example or "
            'SMTP_FROM="Shop queue <queue@shop.example>".',
        )
        return replace(s, smtp_from=None)
    return None


def email_notify_needs_smtp(s: Settings, r: Reader) -> None:
    if not s.email_notify:
        return
    missing = [name for name, value in (("SMTP_URL", s.smtp_url), ("SMTP_FROM", s.smtp_from)) if value is None]
    if missing:
        r.warn(
            "EMAIL_NOTIFY",
            "0",
            f"EMAIL_NOTIFY=1 without {' and '.join(missing)}: there is no way to send, so the waiting page does "
            "not offer turn e-mails and the sign-up route answers 404. Set SMTP_URL and SMTP_FROM.",
        )
    elif s.public_url is None:
        r.warn(
            "PUBLIC_URL",
            None,
            "EMAIL_NOTIFY=1 without PUBLIC_URL: the link in each turn e-mail names the host the visitor's "
            "browser (or a listed proxy) gave at sign-up. Set PUBLIC_URL to this server's public address.",
        )


# ------------------------------------------------------------------------------ the list


@dataclass(frozen=True)
class Rule:
    #: The field name of the setting the rule runs right after.
    after: str
    check: Callable[[Settings, Reader], Settings | None]


#: Every rule, in the order they run (rules after the same setting run in this order).
RULES: tuple[Rule, ...] = (
    Rule("sidestore", valkey_needs_pg_sidestore),
    Rule("node_env", production_needs_valkey_and_pg),
    Rule("database_url", valkey_needs_valkey_url),
    Rule("database_url", pg_needs_database_url),
    Rule("database_url", unused_valkey_url),
    Rule("database_url", unused_database_url),
    Rule("workers", workers_need_valkey),
    Rule("workers", worker_ids_fit),
    Rule("trust_proxy", edge_secret_overrides_proxy_trust),
    Rule("trust_proxy", proxy_hops_need_proxy_ips),
    Rule("trust_proxy", proxy_ips_need_proxy_hops),
    Rule("admin_key", default_admin_key_warns),
    Rule("admin_key", public_api_key_differs_from_admin_key),
    Rule("admin_key", default_public_api_key_warns),
    Rule("secret", default_or_short_secret_warns),
    Rule("secret_previous", secret_previous_differs_from_secret),
    Rule("token_refresh_after_ms", token_refresh_before_lifetime_ends),
    Rule("connection_reserve", reserve_below_connection_ceiling),
    Rule("shutdown_drain_ms", drain_not_below_grace),
    Rule("smtp_from", smtp_from_is_an_address),
    Rule("smtp_from", email_notify_needs_smtp),
)


def hardening(s: Settings) -> tuple[str, ...]:
    """What a production install should fix, listed on /api/admin/health."""
    items: list[str] = []
    if not s.edge_secrets and (s.store == "valkey" or s.is_production):
        items.append(HARDENING_EDGE_SECRET)
    if s.admin_key_is_default:
        items.append(HARDENING_ADMIN_KEY)
    if s.secret_is_default:
        items.append(HARDENING_SECRET_DEFAULT)
    elif _secret_is_short(s):
        items.append(HARDENING_SECRET_SHORT)
    if s.public_api_key is None:
        items.append(HARDENING_PUBLIC_API_KEY)
    elif s.public_api_key_is_default:
        items.append(HARDENING_PUBLIC_API_KEY_DEFAULT)
    return tuple(items)
