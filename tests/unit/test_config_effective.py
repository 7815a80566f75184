"""``effective_settings``: every setting's value in effect and its source, secrets masked.

The list ``qm config`` prints and ``/api/admin/health`` answers under ``settings``.
"""

from __future__ import annotations

import json
import os

import pytest

from queue_manager.config import DECLARATIONS, ENV_VARS, EffectiveSetting, effective_settings, load_settings

#: A value for every sensitive setting, each one a marker that must never be shown.
SECRETS = {
    "ADMIN_KEY": "admin-key-marker-0123456789abcdef",
    "SECRET": "secret-marker-0123456789abcdef0123456789",
    "SECRET_PREVIOUS": "previous-marker-0123456789abcdef0123456",
    "EDGE_SECRET": "edge-marker-0123456789,edge-marker-two-987654",
    "PUBLIC_API_KEY": "public-key-marker-0123456789abcdef",
    "VALKEY_URL": "redis://user:valkey-password-marker@valkey.example:6379/1",
    "DATABASE_URL": "postgres://user:pg-password-marker@pg.example:5432/qm",
    "ALERT_WEBHOOK_URL": "https://hooks.example/webhook-path-marker",
    "SMTP_URL": "smtp://user:smtp-password-marker@mail.example:587",
}
#: What of those values a leak could show: each marker, and each whole value.
MARKERS = ("marker", *SECRETS.values(), *SECRETS["EDGE_SECRET"].split(","))


def _by_name(environ: dict[str, str]) -> dict[str, EffectiveSetting]:
    return {s.name: s for s in effective_settings(load_settings(environ))}


def test_every_declared_setting_once_in_the_order_read() -> None:
    listing = effective_settings(load_settings({}))
    assert tuple(s.name for s in listing) == ENV_VARS
    assert len(listing) == len(DECLARATIONS)


def test_an_empty_environment_is_all_defaults() -> None:
    listing = _by_name({})
    assert not any(s.is_set for s in listing.values())
    derived = {name for name, s in listing.items() if s.source == "derived"}
    assert derived == {"SIDESTORE", "QM_INSTANCE_ID", "TOKEN_REFRESH_AFTER_MS"}
    assert {s.source for name, s in listing.items() if name not in derived} == {"default"}
    assert listing["PORT"].value == 8080
    assert listing["HOST"].value == "127.0.0.1"
    assert listing["SIDESTORE"].value == "none"
    assert listing["TOKEN_REFRESH_AFTER_MS"].value == 43_200_000
    assert listing["CTL_HINTS"].value is True
    assert listing["TRUST_PROXY_IPS"].value == []
    assert listing["SHUTDOWN_DRAIN_MS"].value is None


def test_an_empty_value_counts_as_unset() -> None:
    listing = _by_name(dict.fromkeys(ENV_VARS, ""))
    assert not any(s.is_set or s.source == "environment" for s in listing.values())


def test_a_value_set_and_in_effect_comes_from_the_environment() -> None:
    listing = _by_name(
        {
            "PORT": "9000",
            "HOST": " 0.0.0.0 ",
            "STORE": "MEMORY",
            "COOKIE_SECURE": "yes",
            "ADMIN_HOST": "A.example,b.example",
        }
    )
    assert (listing["PORT"].value, listing["PORT"].source, listing["PORT"].is_set) == (9000, "environment", True)
    assert listing["HOST"].value == "0.0.0.0"
    assert listing["STORE"].value == "memory"
    assert listing["COOKIE_SECURE"].value is True
    assert listing["ADMIN_HOST"].value == ["a.example", "b.example"]
    assert all(listing[n].source == "environment" for n in ("HOST", "STORE", "COOKIE_SECURE", "ADMIN_HOST"))


def test_the_default_value_set_explicitly_is_still_the_environments() -> None:
    assert _by_name({"PORT": "8080"})["PORT"].source == "environment"


def test_a_value_set_over_a_derived_default_comes_from_the_environment() -> None:
    listing = _by_name({"TOKEN_REFRESH_AFTER_MS": "60000", "QM_INSTANCE_ID": "qm-a"})
    assert (listing["TOKEN_REFRESH_AFTER_MS"].value, listing["TOKEN_REFRESH_AFTER_MS"].source) == (60000, "environment")
    assert (listing["QM_INSTANCE_ID"].value, listing["QM_INSTANCE_ID"].source) == ("qm-a", "environment")


def test_a_value_that_cannot_be_used_is_set_but_the_default_is_in_effect() -> None:
    listing = _by_name({"PORT": "eighty", "PROTECTION_MODE": "block", "TOKEN_REFRESH_AFTER_MS": "-5"})
    assert (listing["PORT"].value, listing["PORT"].source, listing["PORT"].is_set) == (8080, "default", True)
    assert (listing["PROTECTION_MODE"].value, listing["PROTECTION_MODE"].source) == ("monitor", "default")
    token = listing["TOKEN_REFRESH_AFTER_MS"]
    assert (token.value, token.source, token.is_set) == (43_200_000, "derived", True)


def test_a_list_with_an_entry_dropped_is_still_the_environments() -> None:
    allow = _by_name({"PROTECTION_ALLOW_IPS": "10.0.0.0/8, not-an-address"})["PROTECTION_ALLOW_IPS"]
    assert (allow.value, allow.source) == (["10.0.0.0/8"], "environment")
    nothing = _by_name({"PROTECTION_ALLOW_IPS": "nope"})["PROTECTION_ALLOW_IPS"]
    assert (nothing.value, nothing.source, nothing.is_set) == ([], "default", True)


def test_a_value_a_rule_sets_aside_is_not_the_environments() -> None:
    listing = _by_name(
        {"EDGE_SECRET": "e" * 32, "TRUST_PROXY": "2", "TRUST_PROXY_IPS": "10.0.0.0/8", "SMTP_FROM": "not an address"}
    )
    for name, value in (("TRUST_PROXY", 0), ("TRUST_PROXY_IPS", []), ("SMTP_FROM", None)):
        assert (listing[name].value, listing[name].source, listing[name].is_set) == (value, "default", True), name


def test_workers_auto_shows_the_number_in_effect() -> None:
    workers = _by_name(
        {"WORKERS": "auto", "STORE": "valkey", "VALKEY_URL": "redis://v", "DATABASE_URL": "postgres://p"}
    )
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert (workers["WORKERS"].value, workers["WORKERS"].source) == (cores, "environment")


def test_sensitive_settings_show_only_whether_they_are_set() -> None:
    environ = {**SECRETS, "STORE": "valkey", "SMTP_FROM": "queue@shop.example", "EMAIL_NOTIFY": "1"}
    settings = load_settings(environ)
    listing = effective_settings(settings)
    sensitive = {d.env for d in DECLARATIONS.values() if d.sensitive}
    assert sensitive == set(SECRETS), "a sensitive setting was added: give it a marker here"
    for s in listing:
        assert s.sensitive == (s.name in sensitive), s.name
        if s.sensitive:
            assert (s.value, s.is_set, s.source) == (None, True, "environment"), s.name
    shown = repr(listing) + json.dumps([s.as_json() for s in listing])
    leaked = [m for m in MARKERS if m in shown]
    assert not leaked, leaked


def test_an_unset_secret_is_shown_unset() -> None:
    listing = _by_name({})
    assert (listing["ADMIN_KEY"].value, listing["ADMIN_KEY"].is_set) == (None, False)
    assert "qm-dev-admin-key" not in repr(effective_settings(load_settings({})))


@pytest.mark.parametrize("environ", [{}, {**SECRETS, "STORE": "valkey", "TRUST_PROXY": "1"}])
def test_the_json_form_has_the_five_fields_and_plain_values(environ: dict[str, str]) -> None:
    for s in effective_settings(load_settings(environ)):
        item = json.loads(json.dumps(s.as_json()))
        assert set(item) == {"name", "value", "source", "sensitive", "set"}
        assert item["source"] in ("environment", "default", "derived")
        value = item["value"]
        assert value is None or isinstance(value, bool | int | str) or all(isinstance(v, str) for v in value)
