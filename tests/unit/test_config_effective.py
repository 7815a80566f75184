"""``effective_settings``: every setting's value in effect and its source, secrets masked.

The list ``qm config`` prints and ``/api/admin/health`` answers under ``settings``.
"""

from __future__ import annotations

import ast
import json
import os
import re
from dataclasses import fields
from pathlib import Path

import pytest

from queue_manager.config import (
    DECLARATIONS,
    ENV_VARS,
    EffectiveSetting,
    Settings,
    effective_settings,
    load_settings,
)
from queue_manager.config.effective import GROUPS

CONFIG = Path(__file__).resolve().parents[2] / "queue_manager" / "config"
#: The fields of Settings that no variable sets: worked out from the others once they are read.
NOT_READ = {
    "instance_id_per_boot",
    "admin_key_is_default",
    "secret_is_default",
    "public_api_key_is_default",
    "warnings",
    "hardening",
    "set_variables",
    "applied_variables",
}

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
def test_the_json_form_has_the_six_fields_and_plain_values(environ: dict[str, str]) -> None:
    for s in effective_settings(load_settings(environ)):
        item = json.loads(json.dumps(s.as_json()))
        assert set(item) == {"name", "value", "source", "sensitive", "set", "group"}
        assert item["source"] in ("environment", "default", "derived")
        value = item["value"]
        assert value is None or isinstance(value, bool | int | str) or all(isinstance(v, str) for v in value)


def _variables_named_in_the_config_package() -> set[str]:
    """Every environment variable the config package reads, found in its source rather than in DECLARATIONS: the
    first argument of every call in settings.py whose first argument is an upper-case name (the declaration
    factories: ``integer("PORT", ...)``), and every ``r.raw("NAME")`` anywhere in the package."""
    names: set[str] = set()
    for path in CONFIG.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            first = node.args[0]
            if not isinstance(first, ast.Constant) or not isinstance(first.value, str):
                continue
            raw = isinstance(node.func, ast.Attribute) and node.func.attr == "raw"
            if (path.name == "settings.py" or raw) and re.fullmatch(r"[A-Z][A-Z0-9_]+", first.value):
                names.add(first.value)
    return names


def test_every_variable_the_config_package_reads_is_listed() -> None:
    """A setting declared (or read raw) anywhere in queue_manager/config/ and missing from the list would be a
    setting health and qm config leave out: read from the source, independently of DECLARATIONS."""
    named = _variables_named_in_the_config_package()
    assert {"PORT", "ADMIN_KEY", "TARGET_PROBE_EVERY_MS", "WORKERS", "QM_INSTANCE_ID"} <= named  # the scan sees them
    listed = {s.name for s in effective_settings(load_settings({}))}
    assert named - listed == set(), f"settings read but missing from the effective list: {sorted(named - listed)}"
    assert listed == named


def test_every_field_of_settings_is_a_declared_setting_or_worked_out_from_them() -> None:
    undeclared = {f.name for f in fields(Settings)} - set(DECLARATIONS) - NOT_READ
    assert not undeclared, f"Settings fields with no declaration, so missing from the effective list: {undeclared}"


def test_each_setting_is_in_the_group_of_its_section_in_settings_py() -> None:
    """The groups follow the ``# -- title ---`` sections of settings.py: a new section needs its line in GROUPS."""
    source = (CONFIG / "settings.py").read_text(encoding="utf-8")
    headings = [
        (n, m.group(1)) for n, line in enumerate(source.splitlines(), 1) if (m := re.match(r"\s*# -- (.+?) -+$", line))
    ]
    expected: dict[str, str] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            name = node.args[0].value
            above = [title for n, title in headings if n < node.lineno]
            if name in ENV_VARS and above:
                expected[name] = above[-1]
    assert set(expected) == set(ENV_VARS)

    def words(title: str) -> str:  # "connections, inline proxy, shutdown" is "Connections, inline proxy and shutdown"
        return re.sub(r"\band\b|[^a-z]", "", title.split(" (")[0].lower())  # and "rate limits (0 = off)" "Rate limits"

    for s in effective_settings(load_settings({})):
        assert words(expected[s.name]) == words(s.group), (s.name, expected[s.name], s.group)
    assert [title for title, _ in GROUPS] == list(dict.fromkeys(s.group for s in effective_settings(load_settings({}))))
