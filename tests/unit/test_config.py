"""queue_manager.config: refusals, warnings, defaults, parsing, and the docs guard."""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
from pathlib import Path

import pytest

from queue_manager.config import (
    DECLARATIONS,
    DEFAULT_ADMIN_KEY,
    DEFAULT_PUBLIC_API_KEY,
    DEFAULT_SECRET,
    ENV_VARS,
    HARDENING_PUBLIC_API_KEY,
    HARDENING_PUBLIC_API_KEY_DEFAULT,
    ConfigRefusal,
    ConfigWarning,
    Settings,
    load_settings,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
TEST_ONLY_VARS = frozenset(
    {
        "QM_SERVER_CMD",
        "TEST_VALKEY_URL",
        "TEST_VALKEY_CLUSTER_URL",
        "TEST_DATABASE_URL",
        "QM_REQUIRE_VALKEY",
        "QM_TEST_STORES",
    }
)

GOOD_SECRET = "s" * 48
GOOD_ADMIN_KEY = "k" * 40
EDGE_A = "e" * 32
EDGE_B = "f" * 20
VALKEY = {"STORE": "valkey", "VALKEY_URL": "redis://127.0.0.1:6379/1", "DATABASE_URL": "postgres://u:p@db/qm"}


def load(**env: str) -> Settings:
    return load_settings(env)


def refusal(**env: str) -> ConfigRefusal:
    with pytest.raises(ConfigRefusal) as info:
        load_settings(env)
    return info.value


def warnings_for(settings: Settings, variable: str) -> list[ConfigWarning]:
    return [w for w in settings.warnings if w.variable == variable]


def only_warning(settings: Settings, variable: str) -> ConfigWarning:
    found = warnings_for(settings, variable)
    assert len(found) == 1, settings.warnings
    return found[0]


def quiet(**env: str) -> Settings:
    """A configuration that should warn about nothing but what a test adds."""
    base = {"ADMIN_KEY": GOOD_ADMIN_KEY, "SECRET": GOOD_SECRET, "PUBLIC_API_KEY": "p" * 40}
    base.update(env)
    return load_settings(base)


# --------------------------------------------------------------------------------------- defaults


def test_defaults() -> None:
    s = load()
    assert s.port == 8080
    assert s.host == "127.0.0.1"
    assert s.store == "memory"
    assert s.sidestore == "none"
    assert s.node_env == "development"
    assert not s.is_production
    assert s.admin_key == DEFAULT_ADMIN_KEY == "qm-dev-admin-key"
    assert s.admin_key_is_default
    assert s.secret == DEFAULT_SECRET == "qm-dev-secret-change-me"
    assert s.secret_is_default
    assert s.secret_previous is None
    assert s.token_sign_v2 is False
    assert s.token_max_age_sec == 86400
    assert s.queue_cookie_max_age_sec == 86400
    assert s.token_refresh_after_ms == 43_200_000
    assert s.monitor_token_ttl_sec == 604800
    assert re.fullmatch(r"i:[0-9a-f]{8}", s.instance_id)
    assert s.valkey_url is None
    assert s.valkey_prefix == "qm:"
    assert s.database_url is None
    assert s.pg_ca_file is None
    assert (s.resync_ms, s.leader_lease_ms, s.valkey_alert_after_ms) == (5000, 10000, 30000)
    assert s.trust_proxy == 0
    assert s.trust_proxy_ips == ()
    assert s.cookie_secure is False
    assert s.edge_secrets == ()
    assert not s.edge_enforced
    assert s.public_api_key == DEFAULT_PUBLIC_API_KEY == "qm-dev-public-key"  # with the default ADMIN_KEY only
    assert s.public_api_key_is_default
    assert s.public_url is None
    assert s.admin_hosts == ()
    assert s.join_limit_per_min == 600
    assert s.check_limit_per_min == 1200
    assert s.waiting_limit_per_min == 120
    assert s.notify_limit_per_min == 10
    assert s.admin_auth_fail_per_min == 20
    assert s.sse_per_ip == 20
    assert s.sse_max_total == 8000
    assert s.rate_limit_max_keys == 200000
    assert s.max_connections == 10000
    assert s.connection_reserve == 64
    assert s.proxy_timeout_ms == 30000
    assert s.proxy_allow_private is False
    assert s.shutdown_grace_ms == 2000
    assert s.shutdown_drain_ms is None
    assert s.protection_mode == "monitor"
    assert s.protection_block_at == 80
    assert s.protection_allow_ips == ()
    assert s.alert_webhook_url is None
    assert (s.alert_every_ms, s.alert_hold_sec, s.alert_repeat_sec) == (5000, 60, 1800)
    assert s.history_retain_days == 90
    assert s.lapsed_ttl_ms == 86_400_000
    assert s.email_notify is False
    assert s.autotune is False
    # Only the default keys warn on a bare install (the development Public API key comes with the admin key's).
    assert sorted(w.variable for w in s.warnings) == ["ADMIN_KEY", "PUBLIC_API_KEY", "SECRET"]


def test_instance_id_default_is_random_per_load() -> None:
    assert load().instance_id != load().instance_id


def test_empty_string_counts_as_unset_for_every_variable() -> None:
    s = load_settings(dict.fromkeys(ENV_VARS, ""))
    defaults = load()
    for field in dataclasses.fields(Settings):
        if field.name in ("instance_id", "warnings"):
            continue
        assert getattr(s, field.name) == getattr(defaults, field.name), field.name
    assert [w.variable for w in s.warnings] == [w.variable for w in defaults.warnings]


def test_given_mapping_is_the_only_input(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STORE", "bogus")
    monkeypatch.setenv("PORT", "9999")
    s = load_settings({})
    assert s.store == "memory" and s.port == 8080
    with pytest.raises(ConfigRefusal):
        load_settings()  # no mapping: os.environ


def test_default_mapping_is_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PORT", "9123")
    assert load_settings().port == 9123


def test_env_vars_lists_each_name_once() -> None:
    assert len(ENV_VARS) == len(set(ENV_VARS))
    assert all(re.fullmatch(r"[A-Z][A-Z0-9_]*", name) for name in ENV_VARS)


def test_settings_is_frozen() -> None:
    s = load()
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.port = 1  # type: ignore[misc]


# --------------------------------------------------------------------------------------- refusals


def test_unknown_store_refuses_with_the_way_out() -> None:
    err = refusal(STORE="foo")
    assert err.variable == "STORE"
    assert err.message == (
        "STORE=foo is not a store this build has (memory, valkey). Set STORE=memory or STORE=valkey."
    )
    assert str(err) == err.message


def test_unknown_sidestore_refuses() -> None:
    err = refusal(SIDESTORE="mysql")
    assert err.variable == "SIDESTORE"
    assert "SIDESTORE=mysql" in err.message and "SIDESTORE=pg" in err.message


def test_valkey_without_pg_sidestore_refuses() -> None:
    err = refusal(**VALKEY, SIDESTORE="none")
    assert err.variable == "SIDESTORE"
    assert "SIDESTORE=pg" in err.message


def test_valkey_defaults_sidestore_to_pg() -> None:
    s = load(**VALKEY)
    assert (s.store, s.sidestore) == ("valkey", "pg")
    assert s.valkey_url == VALKEY["VALKEY_URL"] and s.database_url == VALKEY["DATABASE_URL"]


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"STORE": "memory"},
        {"STORE": "memory", "SIDESTORE": "pg", "DATABASE_URL": "postgres://db/qm"},
    ],
)
def test_production_refuses_anything_but_valkey_and_pg(env: dict[str, str]) -> None:
    err = refusal(NODE_ENV="production", **env)
    assert err.variable == "NODE_ENV"
    assert "STORE=valkey" in err.message and "SIDESTORE=pg" in err.message


def test_production_on_valkey_and_pg_starts() -> None:
    s = load(NODE_ENV="production", **VALKEY)
    assert s.is_production and s.store == "valkey"


def test_valkey_without_valkey_url_refuses() -> None:
    err = refusal(STORE="valkey", DATABASE_URL="postgres://db/qm")
    assert err.variable == "VALKEY_URL"
    assert "Set VALKEY_URL" in err.message


def test_valkey_without_database_url_refuses() -> None:
    err = refusal(STORE="valkey", VALKEY_URL="redis://127.0.0.1:6379/1")
    assert err.variable == "DATABASE_URL"
    assert "Set DATABASE_URL" in err.message


def test_pg_sidestore_without_database_url_refuses() -> None:
    err = refusal(SIDESTORE="pg")
    assert err.variable == "DATABASE_URL"


@pytest.mark.parametrize("bad", ["-leading-dash", "a" * 64, "has space", "semi;colon", "ünïcode", "x\n", ":x"])
def test_malformed_instance_id_refuses(bad: str) -> None:
    err = refusal(QM_INSTANCE_ID=bad)
    assert err.variable == "QM_INSTANCE_ID"
    assert "QM_INSTANCE_ID" in err.message and "unset QM_INSTANCE_ID" in err.message


@pytest.mark.parametrize("good", ["a", "web-1", "i:0a1b2c3d", "pod.eu_west:7", "A" * 63])
def test_well_formed_instance_id_is_kept(good: str) -> None:
    assert load(QM_INSTANCE_ID=good).instance_id == good


def test_workers_default_to_one_process() -> None:
    assert load().workers == 1
    assert load(**VALKEY, WORKERS="4").workers == 4


def test_workers_auto_is_the_cores_this_process_may_use() -> None:
    assert load(**VALKEY, WORKERS="auto").workers == min(256, len(os.sched_getaffinity(0)))
    assert load(**VALKEY, WORKERS=" AUTO ").workers == min(256, len(os.sched_getaffinity(0)))


@pytest.mark.parametrize("bad", ["0", "-2", "two", "1.5", "257"])
def test_unusable_workers_warns_and_runs_one(bad: str) -> None:
    s = load(**VALKEY, WORKERS=bad)
    assert s.workers == 1
    w = only_warning(s, "WORKERS")
    assert "In effect: WORKERS=1." in w.message


def test_more_than_one_worker_on_the_memory_store_refuses() -> None:
    err = refusal(WORKERS="2")
    assert err.variable == "WORKERS"
    assert err.message.startswith("WORKERS=2 needs STORE=valkey")
    assert load(WORKERS="1").workers == 1


def test_an_instance_id_too_long_for_its_worker_ids_refuses() -> None:
    assert load(**VALKEY, WORKERS="9", QM_INSTANCE_ID="a" * 60).workers == 9  # a-...-w9 is 63
    err = refusal(**VALKEY, WORKERS="10", QM_INSTANCE_ID="a" * 60)
    assert err.variable == "QM_INSTANCE_ID"
    assert "WORKERS=10" in err.message


def test_missing_pg_ca_file_refuses(tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    err = refusal(PG_CA_FILE=str(missing))
    assert err.variable == "PG_CA_FILE"
    assert str(missing) in err.message and "unset PG_CA_FILE" in err.message


def test_pg_ca_file_naming_a_directory_refuses(tmp_path: Path) -> None:
    assert refusal(PG_CA_FILE=str(tmp_path)).variable == "PG_CA_FILE"


def test_existing_pg_ca_file_is_kept(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    assert load(PG_CA_FILE=str(ca)).pg_ca_file == str(ca)


@pytest.mark.parametrize(
    "entry",
    [
        "173.245.48.0/33",
        "10.0.0.1 10.0.0.2",
        "proxy.example.com",
        "10.0.0.300",
        "2400:cb00::/129",
        "fe80::1%eth0",
    ],
)
def test_malformed_trust_proxy_ips_entry_refuses_naming_it(entry: str) -> None:
    err = refusal(TRUST_PROXY="1", TRUST_PROXY_IPS=f"103.21.244.0/22,{entry}")
    assert err.variable == "TRUST_PROXY_IPS"
    assert f'"{entry}"' in err.message
    assert "103.21.244.0/22" not in err.message.split("e.g.")[0]


def test_missing_comma_refusal_hints_at_the_comma() -> None:
    assert "comma" in refusal(TRUST_PROXY_IPS="10.0.0.1 10.0.0.2").message


def test_short_edge_secret_refuses_without_printing_it() -> None:
    short = "tooShort123"
    err = refusal(EDGE_SECRET=short)
    assert err.variable == "EDGE_SECRET"
    assert short not in err.message and short not in str(err) and short not in repr(err)
    assert "16" in err.message and "unset EDGE_SECRET" in err.message


def test_any_short_edge_secret_entry_refuses() -> None:
    short = "abc12345"
    err = refusal(EDGE_SECRET=f"{EDGE_A},{short}")
    assert "entry 2 of 2" in err.message
    assert short not in err.message and EDGE_A not in err.message


def test_every_refusal_names_its_setting_and_a_way_out(tmp_path: Path) -> None:
    cases: list[dict[str, str]] = [
        {"STORE": "foo"},
        {"SIDESTORE": "foo"},
        {**VALKEY, "SIDESTORE": "none"},
        {"NODE_ENV": "production"},
        {"STORE": "valkey", "DATABASE_URL": "postgres://db/qm"},
        {"STORE": "valkey", "VALKEY_URL": "redis://h/1"},
        {"QM_INSTANCE_ID": "bad id"},
        {"PG_CA_FILE": str(tmp_path / "missing.pem")},
        {"TRUST_PROXY_IPS": "173.245.48.0/33"},
        {"EDGE_SECRET": "short"},
    ]
    for env in cases:
        err = refusal(**env)
        assert err.variable in err.message, env
        assert "Set " in err.message or "unset " in err.message, env


def test_refusals_never_print_connection_strings() -> None:
    err = refusal(STORE="valkey", VALKEY_URL="redis://user:hunter2@h/1")
    assert "hunter2" not in err.message


# --------------------------------------------------------------------------------------- warnings


@pytest.mark.parametrize("value", ["abc", "-5", "1.5", "6OO", "1e3", "0x10"])
def test_unusable_number_warns_and_keeps_the_default(value: str) -> None:
    s = load(JOIN_LIMIT_PER_MIN=value)
    assert s.join_limit_per_min == 600
    w = only_warning(s, "JOIN_LIMIT_PER_MIN")
    assert (w.set_value, w.effective) == (value, "600")
    assert "JOIN_LIMIT_PER_MIN" in w.message and value in w.message and "600" in w.message


def test_numbers_tolerate_surrounding_whitespace() -> None:
    s = quiet(CHECK_LIMIT_PER_MIN=" 90 ")
    assert s.check_limit_per_min == 90
    assert not warnings_for(s, "CHECK_LIMIT_PER_MIN")


@pytest.mark.parametrize(
    "name",
    [
        "JOIN_LIMIT_PER_MIN",
        "CHECK_LIMIT_PER_MIN",
        "WAITING_LIMIT_PER_MIN",
        "NOTIFY_LIMIT_PER_MIN",
        "ADMIN_AUTH_FAIL_PER_MIN",
        "SSE_PER_IP",
        "SSE_MAX_TOTAL",
        "RATE_LIMIT_MAX_KEYS",
        "MAX_CONNECTIONS",
    ],
)
def test_zero_turns_a_limit_off_without_warning(name: str) -> None:
    s = quiet(**{name: "0"})
    assert getattr(s, name.lower()) == 0
    assert s.warnings == ()


@pytest.mark.parametrize(
    ("name", "value", "default"),
    [
        ("PORT", "70000", 8080),
        ("PROTECTION_BLOCK_AT", "101", 80),
        ("TOKEN_MAX_AGE_SEC", "0", 86400),
        ("ALERT_EVERY_MS", "0", 5000),
        ("HISTORY_RETAIN_DAYS", "-1", 90),
    ],
)
def test_out_of_range_number_warns_and_keeps_the_default(name: str, value: str, default: int) -> None:
    s = load(**{name: value})
    assert getattr(s, name.lower()) == default
    w = only_warning(s, name)
    assert (w.set_value, w.effective) == (value, str(default))


@pytest.mark.parametrize("word", ["1", "true", "TRUE", "yes", "Yes", "on", "ON", " true "])
def test_boolean_true_words(word: str) -> None:
    mail = {"SMTP_URL": "smtp+plain://127.0.0.1:25", "SMTP_FROM": "q@shop.example", "PUBLIC_URL": "https://q.example"}
    s = quiet(
        COOKIE_SECURE=word, AUTOTUNE=word, EMAIL_NOTIFY=word, TOKEN_SIGN_V2=word, PROXY_ALLOW_PRIVATE=word, **mail
    )
    assert s.cookie_secure and s.autotune and s.email_notify and s.token_sign_v2 and s.proxy_allow_private
    assert s.warnings == ()


@pytest.mark.parametrize("word", ["0", "false", "False", "no", "NO", "off", "Off"])
def test_boolean_false_words(word: str) -> None:
    s = quiet(COOKIE_SECURE=word, AUTOTUNE=word)
    assert not s.cookie_secure and not s.autotune
    assert s.warnings == ()


@pytest.mark.parametrize("word", ["maybe", "2", "enable", "y"])
def test_unrecognised_boolean_warns_and_stays_off(word: str) -> None:
    s = load(AUTOTUNE=word)
    assert s.autotune is False
    w = only_warning(s, "AUTOTUNE")
    assert (w.set_value, w.effective) == (word, "false")
    assert "AUTOTUNE" in w.message


def test_unknown_protection_mode_warns_and_monitors() -> None:
    s = load(PROTECTION_MODE="block")
    assert s.protection_mode == "monitor"
    w = only_warning(s, "PROTECTION_MODE")
    assert (w.set_value, w.effective) == ("block", "monitor")


def test_protection_mode_enforce() -> None:
    s = quiet(PROTECTION_MODE="Enforce", PROTECTION_BLOCK_AT="95")
    assert (s.protection_mode, s.protection_block_at) == ("enforce", 95)
    assert s.warnings == ()


def test_connection_reserve_not_below_max_connections_warns() -> None:
    s = load(MAX_CONNECTIONS="64", CONNECTION_RESERVE="64")
    assert (s.max_connections, s.connection_reserve) == (64, 64)
    w = only_warning(s, "CONNECTION_RESERVE")
    assert "MAX_CONNECTIONS" in w.message and w.effective == "64"


def test_connection_reserve_with_no_ceiling_does_not_warn() -> None:
    assert quiet(MAX_CONNECTIONS="0", CONNECTION_RESERVE="5000").warnings == ()


def test_shutdown_drain_below_grace_warns() -> None:
    s = load(SHUTDOWN_GRACE_MS="5000", SHUTDOWN_DRAIN_MS="1000")
    assert s.shutdown_drain_ms == 1000
    assert only_warning(s, "SHUTDOWN_DRAIN_MS").effective == "1000"


def test_trust_proxy_without_ips_warns() -> None:
    s = load(TRUST_PROXY="1")
    assert s.trust_proxy == 1
    w = only_warning(s, "TRUST_PROXY_IPS")
    assert "TRUST_PROXY_IPS" in w.message and "bucket" in w.message


def test_trust_proxy_ips_without_trust_proxy_warns() -> None:
    s = load(TRUST_PROXY_IPS="10.0.0.7")
    assert s.trust_proxy == 0 and s.trust_proxy_ips == (ipaddress.ip_network("10.0.0.7/32"),)
    w = only_warning(s, "TRUST_PROXY")
    assert w.effective == "0" and "TRUST_PROXY=1" in w.message


def test_complete_proxy_configuration_does_not_warn() -> None:
    s = quiet(TRUST_PROXY="2", TRUST_PROXY_IPS="10.0.0.7")
    assert s.trust_proxy == 2
    assert s.warnings == ()


def test_edge_secret_ignores_proxy_settings_and_says_so() -> None:
    s = load(EDGE_SECRET=EDGE_A, TRUST_PROXY="1", TRUST_PROXY_IPS="10.0.0.7")
    assert s.edge_secrets == (EDGE_A,) and s.edge_enforced
    assert s.trust_proxy == 0 and s.trust_proxy_ips == ()
    for name in ("TRUST_PROXY", "TRUST_PROXY_IPS"):
        w = only_warning(s, name)
        assert w.effective == "ignored" and "EDGE_SECRET" in w.message
    assert all(EDGE_A not in (w.message + str(w.set_value) + str(w.effective)) for w in s.warnings)


def test_edge_secret_list_is_trimmed_and_skips_empty_entries() -> None:
    s = quiet(EDGE_SECRET=f"  {EDGE_A} , ,{EDGE_B},")
    assert s.edge_secrets == (EDGE_A, EDGE_B)
    assert s.warnings == ()


def test_edge_secret_of_only_commas_warns_and_enforces_nothing() -> None:
    s = load(EDGE_SECRET=" , ,")
    assert s.edge_secrets == ()
    w = only_warning(s, "EDGE_SECRET")
    assert w.set_value == "(hidden)"


def test_default_admin_key_and_secret_warn() -> None:
    s = load()
    assert only_warning(s, "ADMIN_KEY").set_value is None
    assert only_warning(s, "SECRET").set_value is None


def test_short_secret_starts_with_a_warning() -> None:
    short = "only-twenty-chars-xx"
    s = load(SECRET=short, ADMIN_KEY=GOOD_ADMIN_KEY)
    assert s.secret == short and not s.secret_is_default
    w = only_warning(s, "SECRET")
    assert "32" in w.message
    assert w.set_value == "(hidden)"


def test_secret_of_32_characters_is_quiet() -> None:
    s = quiet(SECRET="x" * 32)
    assert s.warnings == () and s.hardening == ()


def test_explicit_default_values_still_count_as_default() -> None:
    s = load(ADMIN_KEY=DEFAULT_ADMIN_KEY, SECRET=DEFAULT_SECRET)
    assert s.admin_key_is_default and s.secret_is_default


def test_warnings_never_contain_secret_values() -> None:
    secrets_set = {
        "ADMIN_KEY": "admin-key-value-xyz",
        "SECRET": "short-secret-value",
        "SECRET_PREVIOUS": "short-secret-value",
        "PUBLIC_API_KEY": "admin-key-value-xyz",
        "ALERT_WEBHOOK_URL": "ftp://hooks.example/T0KEN-value",
        "VALKEY_URL": "redis://user:valkey-pass@h/1",
        "DATABASE_URL": "postgres://user:pg-pass@h/db",
    }
    s = load_settings(secrets_set)
    assert {w.variable for w in s.warnings} >= {
        "SECRET",
        "SECRET_PREVIOUS",
        "PUBLIC_API_KEY",
        "ALERT_WEBHOOK_URL",
        "VALKEY_URL",
        "DATABASE_URL",
    }
    text = repr(s.warnings) + repr(s.hardening)
    for needle in ("admin-key-value-xyz", "short-secret-value", "T0KEN-value", "valkey-pass", "pg-pass"):
        assert needle not in text


def test_public_url_must_be_http() -> None:
    assert quiet(PUBLIC_URL="https://queue.example.com").public_url == "https://queue.example.com"
    for bad in ("queue.example.com", "ftp://queue.example.com", "https://"):
        s = load(PUBLIC_URL=bad)
        assert s.public_url is None
        w = only_warning(s, "PUBLIC_URL")
        assert (w.set_value, w.effective) == (bad, None)


def test_admin_host_is_split_and_lowercased() -> None:
    s = quiet(ADMIN_HOST=" QM.Example.com, admin.example.com ,,")
    assert s.admin_hosts == ("qm.example.com", "admin.example.com")
    assert s.warnings == ()


def test_admin_host_entry_with_a_scheme_warns_and_is_dropped() -> None:
    s = load(ADMIN_HOST="https://qm.example.com,ok.example.com")
    assert s.admin_hosts == ("ok.example.com",)
    assert only_warning(s, "ADMIN_HOST").effective == "ok.example.com"


def test_malformed_protection_allow_ips_entry_warns_and_is_dropped() -> None:
    s = load(PROTECTION_ALLOW_IPS="192.0.2.10, not-an-ip ,2001:db8::/48")
    assert s.protection_allow_ips == (
        ipaddress.ip_network("192.0.2.10/32"),
        ipaddress.ip_network("2001:db8::/48"),
    )
    w = only_warning(s, "PROTECTION_ALLOW_IPS")
    assert "not-an-ip" in w.message
    assert w.effective == "192.0.2.10/32,2001:db8::/48"


def test_unused_store_urls_warn() -> None:
    s = load(VALKEY_URL="redis://h/1", DATABASE_URL="postgres://db/qm")
    assert only_warning(s, "VALKEY_URL").set_value == "(hidden)"
    assert only_warning(s, "DATABASE_URL").set_value == "(hidden)"


# ------------------------------------------------------------------------------------ CIDR parsing


def test_trust_proxy_ips_parses_v4_and_v6_addresses_and_ranges() -> None:
    s = quiet(
        TRUST_PROXY="1",
        TRUST_PROXY_IPS=" 173.245.48.0/20,103.21.244.0/22 , 2400:cb00::/32,10.0.0.7,::1,",
    )
    assert s.trust_proxy_ips == (
        ipaddress.IPv4Network("173.245.48.0/20"),
        ipaddress.IPv4Network("103.21.244.0/22"),
        ipaddress.IPv6Network("2400:cb00::/32"),
        ipaddress.IPv4Network("10.0.0.7/32"),
        ipaddress.IPv6Network("::1/128"),
    )
    assert s.warnings == ()


def test_single_addresses_become_host_networks() -> None:
    s = quiet(TRUST_PROXY="1", TRUST_PROXY_IPS="192.0.2.1,2001:db8::1")
    assert [n.prefixlen for n in s.trust_proxy_ips] == [32, 128]


def test_entry_with_host_bits_is_read_as_its_network_with_a_warning() -> None:
    s = load(TRUST_PROXY="1", TRUST_PROXY_IPS="10.0.0.1/8")
    assert s.trust_proxy_ips == (ipaddress.IPv4Network("10.0.0.0/8"),)
    w = only_warning(s, "TRUST_PROXY_IPS")
    assert "10.0.0.0/8" in w.message


def test_ip_matching_works_on_parsed_networks() -> None:
    s = load(TRUST_PROXY="1", TRUST_PROXY_IPS="173.245.48.0/20,2400:cb00::/32")
    peers = [ipaddress.ip_address("173.245.63.255"), ipaddress.ip_address("2400:cb00:1::5")]
    assert all(any(p in n for n in s.trust_proxy_ips) for p in peers)
    assert not any(ipaddress.ip_address("173.245.64.0") in n for n in s.trust_proxy_ips)


# ---------------------------------------------------------------------------------------- hardening


def test_hardening_lists_what_production_should_fix() -> None:
    s = load(**VALKEY)
    assert "EDGE_SECRET is not set: requests that bypass Cloudflare are accepted" in s.hardening
    assert any(h.startswith("ADMIN_KEY") for h in s.hardening)
    assert any(h.startswith("SECRET") for h in s.hardening)
    assert any(h.startswith("PUBLIC_API_KEY") for h in s.hardening)


def test_missing_edge_secret_is_hardening_under_production_too() -> None:
    s = load(NODE_ENV="production", **VALKEY)
    assert "EDGE_SECRET is not set: requests that bypass Cloudflare are accepted" in s.hardening


def test_missing_edge_secret_is_not_hardening_on_a_dev_memory_install() -> None:
    assert not any(h.startswith("EDGE_SECRET") for h in load().hardening)


def test_fully_hardened_valkey_install_has_no_hardening_items() -> None:
    s = quiet(EDGE_SECRET=EDGE_A, **VALKEY)
    assert s.hardening == ()
    assert s.warnings == ()


def test_the_development_public_api_key_comes_with_the_default_admin_key_only() -> None:
    """On the development defaults a connector can be tried at once (make run prints the key); once ADMIN_KEY is
    set, an unset PUBLIC_API_KEY is unset again, and the development key, set on purpose, is still named."""
    dev = load()
    assert dev.public_api_key == DEFAULT_PUBLIC_API_KEY and dev.public_api_key_is_default
    assert HARDENING_PUBLIC_API_KEY_DEFAULT in dev.hardening and HARDENING_PUBLIC_API_KEY not in dev.hardening
    (warning,) = [w for w in dev.warnings if w.variable == "PUBLIC_API_KEY"]
    assert "development key" in warning.message and DEFAULT_PUBLIC_API_KEY not in warning.message
    real = load(ADMIN_KEY=GOOD_ADMIN_KEY)
    assert real.public_api_key is None and not real.public_api_key_is_default
    assert HARDENING_PUBLIC_API_KEY in real.hardening and HARDENING_PUBLIC_API_KEY_DEFAULT not in real.hardening
    assert not any(w.variable == "PUBLIC_API_KEY" for w in real.warnings)
    chosen = load(ADMIN_KEY=GOOD_ADMIN_KEY, PUBLIC_API_KEY=DEFAULT_PUBLIC_API_KEY)
    assert chosen.public_api_key_is_default and HARDENING_PUBLIC_API_KEY_DEFAULT in chosen.hardening
    own = load(PUBLIC_API_KEY="p" * 40)  # the default ADMIN_KEY with a key of one's own: that key, as set
    assert own.public_api_key == "p" * 40 and not own.public_api_key_is_default


def test_short_secret_is_a_hardening_item() -> None:
    assert any(h.startswith("SECRET") for h in quiet(SECRET="abc").hardening)


# -------------------------------------------------------------------- token refresh and shutdown


def test_token_refresh_default_is_half_the_shorter_lifetime() -> None:
    assert load().token_refresh_after_ms == 86400 * 1000 // 2
    assert load(TOKEN_MAX_AGE_SEC="600").token_refresh_after_ms == 300_000
    assert load(TOKEN_MAX_AGE_SEC="600", QUEUE_COOKIE_MAX_AGE_SEC="100").token_refresh_after_ms == 50_000
    assert load(QUEUE_COOKIE_MAX_AGE_SEC="3600").token_refresh_after_ms == 1_800_000


def test_token_refresh_default_follows_the_lifetime_in_effect() -> None:
    # An unusable TOKEN_MAX_AGE_SEC falls back to 86400, and the refresh follows that.
    s = load(TOKEN_MAX_AGE_SEC="soon", QUEUE_COOKIE_MAX_AGE_SEC="200000")
    assert s.token_refresh_after_ms == 43_200_000


def test_explicit_token_refresh_wins() -> None:
    s = quiet(TOKEN_REFRESH_AFTER_MS="1000")
    assert s.token_refresh_after_ms == 1000
    assert s.warnings == ()


def test_token_refresh_not_shorter_than_the_lifetime_warns() -> None:
    s = load(TOKEN_MAX_AGE_SEC="60", TOKEN_REFRESH_AFTER_MS="60000")
    assert s.token_refresh_after_ms == 60000
    assert only_warning(s, "TOKEN_REFRESH_AFTER_MS").effective == "60000"


def test_shutdown_drain_unset_lets_the_caller_decide() -> None:
    s = load()
    assert s.shutdown_drain_ms is None
    assert s.effective_shutdown_drain_ms(has_inline_room=False) == 2000
    assert s.effective_shutdown_drain_ms(has_inline_room=True) == 15000


def test_explicit_shutdown_drain_always_wins() -> None:
    s = quiet(SHUTDOWN_DRAIN_MS="3000")
    assert s.shutdown_drain_ms == 3000
    assert s.effective_shutdown_drain_ms(has_inline_room=True) == 3000
    assert s.effective_shutdown_drain_ms(has_inline_room=False) == 3000


def test_unusable_shutdown_drain_warns_and_stays_unset() -> None:
    s = load(SHUTDOWN_DRAIN_MS="soon")
    assert s.shutdown_drain_ms is None
    w = only_warning(s, "SHUTDOWN_DRAIN_MS")
    assert w.set_value == "soon" and w.effective is not None and "unset" in w.effective


# ------------------------------------------------------------------------------------- docs guard


def _table_first_column_names(text: str) -> set[str]:
    names: set[str] = set()
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("|") or re.fullmatch(r"\|[\s|:-]*\|", line):
            continue
        first = line.strip("|").split("|")[0]
        names.update(re.findall(r"`([A-Z][A-Z0-9_]*)`", first))
    return names


def _table_rows(text: str) -> dict[str, list[str]]:
    """The cells of each table row, by the variable its first column names."""
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("|") or re.fullmatch(r"\|[\s|:-]*\|", line):
            continue
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        for name in re.findall(r"`([A-Z][A-Z0-9_]*)`", cells[0]):
            rows[name] = cells
    return rows


def test_every_variable_is_documented() -> None:
    text = DOCS.read_text(encoding="utf-8")
    missing = [name for name in ENV_VARS if f"`{name}`" not in text]
    assert not missing, f"undocumented in {DOCS.name}: {missing}"
    no_row = sorted(set(ENV_VARS) - _table_first_column_names(text))
    assert not no_row, f"no table row in {DOCS.name}: {no_row}"


def test_documented_variables_exist() -> None:
    names = _table_first_column_names(DOCS.read_text(encoding="utf-8"))
    assert names, "no table rows found"
    unknown = sorted(names - set(ENV_VARS) - TEST_ONLY_VARS)
    assert not unknown, f"documented but not read by queue_manager.config: {unknown}"


def test_test_only_variables_are_documented_and_not_read_by_the_server() -> None:
    names = _table_first_column_names(DOCS.read_text(encoding="utf-8"))
    assert names >= TEST_ONLY_VARS
    assert not TEST_ONLY_VARS & set(ENV_VARS)


def test_env_vars_are_the_declared_settings() -> None:
    assert tuple(d.env for d in DECLARATIONS.values()) == ENV_VARS
    assert set(DECLARATIONS) <= {f.name for f in dataclasses.fields(Settings)}
    assert all(d.doc.strip() for d in DECLARATIONS.values())


def test_documented_defaults_match_the_declarations() -> None:
    rows = _table_rows(DOCS.read_text(encoding="utf-8"))
    for declaration in DECLARATIONS.values():
        spellings = declaration.documented_defaults()
        if spellings:
            default_cell = rows[declaration.env][1]
            assert default_cell.startswith(spellings), (declaration.env, default_cell, spellings)


def test_every_setting_that_refuses_on_its_own_says_so() -> None:
    rows = _table_rows(DOCS.read_text(encoding="utf-8"))
    refusing = [d.env for d in DECLARATIONS.values() if d.refuses]
    assert refusing
    unmarked = [name for name in refusing if "refuses start" not in rows[name][2].lower()]
    assert not unmarked, f"no 'Refuses start' in the {DOCS.name} row of {unmarked}"


def test_documented_secrets_are_the_sensitive_settings() -> None:
    text = DOCS.read_text(encoding="utf-8")
    paragraph = text[text.index("**Secrets are never echoed.**") :].split("\n\n")[0].split("\n* ")[0]
    documented = set(re.findall(r"`([A-Z][A-Z0-9_]*)`", paragraph))
    assert documented == {d.env for d in DECLARATIONS.values() if d.sensitive}
