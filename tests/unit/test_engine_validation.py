"""Room validation through engine.upsert (model.py): unknown and conflicting fields, the rate alias,
reserved ids, bad values and their codes, proxy_origin_loop; a refused body changes nothing."""

from __future__ import annotations

import pytest

from queue_manager.engine import report
from queue_manager.engine.errors import EngineError
from queue_manager.engine.model import ALIASES, READ_ONLY_FIELDS, READ_ONLY_RULE_FIELDS, RESERVED_IDS, ROOM_FIELDS
from queue_manager.store.memory import room_summary

from .conftest import TARGET


def refused(engine, body):
    with pytest.raises(EngineError) as info:
        engine.upsert(body)
    return info.value


def create(engine, **fields):
    return engine.upsert({"id": "r", "targetUrl": TARGET, **fields})[0]


# ---------------------------------------------------------------------- fields


def test_unknown_field_on_create(engine):
    err = refused(engine, {"id": "r", "targetUrl": TARGET, "ratePerMinut": 5, "colour": "red"})
    assert (err.status, err.code) == (400, "unknown_field")
    assert err.extra["fields"] == ["colour", "ratePerMinut"]
    assert "r" not in engine.rooms


def test_unknown_field_on_update_changes_nothing(engine):
    room = create(engine, ratePerMinute=30)
    err = refused(engine, {"id": "r", "ratePerMinute": 90, "maxconcurrent": 5})
    assert err.code == "unknown_field"
    assert room.cfg.rate_per_minute == 30
    assert room.cfg.max_concurrent is None


def test_rate_alias_is_accepted(engine):
    room = create(engine, rate=42)
    assert room.cfg.rate_per_minute == 42
    engine.upsert({"id": "r", "rate": 7})
    assert room.cfg.rate_per_minute == 7
    assert room.cfg.to_public()["rate"] == room.cfg.to_public()["ratePerMinute"] == 7


def test_rate_and_rate_per_minute_agreeing_is_fine(engine):
    room = create(engine, rate=42, ratePerMinute=42)
    assert room.cfg.rate_per_minute == 42


def test_rate_and_rate_per_minute_disagreeing_is_conflicting_field(engine):
    err = refused(engine, {"id": "r", "targetUrl": TARGET, "rate": 5, "ratePerMinute": 6})
    assert (err.status, err.code) == (400, "conflicting_field")
    room = create(engine, ratePerMinute=10)
    err = refused(engine, {"id": "r", "rate": 5, "ratePerMinute": 6})
    assert err.code == "conflicting_field"
    assert room.cfg.rate_per_minute == 10


def test_a_room_read_back_can_be_posted_back_unchanged(engine):
    room = create(engine, ratePerMinute=33, maxConcurrent=4, returnOrigins=["https://*.shop.example"])
    public = room.cfg.to_public()
    _, created, _ = engine.upsert(public)
    assert not created
    assert room.cfg.to_public() == public


def test_only_the_fields_sent_are_changed(engine):
    room = create(engine, ratePerMinute=33, maxConcurrent=4, presenceSec=12)
    _, _, changed = engine.upsert({"id": "r", "maxConcurrent": 9})
    assert changed == ["maxConcurrent"]
    assert (room.cfg.rate_per_minute, room.cfg.max_concurrent, room.cfg.presence_sec) == (33, 9, 12)


def test_defaults(engine):
    cfg = create(engine).cfg
    assert cfg.state == "active"
    assert cfg.passed_ttl_sec == 600 and cfg.session_ttl_sec == 1800
    assert cfg.queue_max_per_ip == 16 and cfg.prequeue_max_per_ip == 16
    assert cfg.max_concurrent is None and cfg.tag_origins is None and cfg.opens_at_ms is None
    assert cfg.claim_window_sec == 120


def test_null_fields_keep_null(engine):
    cfg = create(engine, queueMaxPerIp=None, preQueueMaxPerIp=None, presenceSec=None, maxConcurrent=None).cfg
    assert (cfg.queue_max_per_ip, cfg.prequeue_max_per_ip, cfg.presence_sec, cfg.max_concurrent) == (
        None,
        None,
        None,
        None,
    )


# ---------------------------------------------------------------------- ids


@pytest.mark.parametrize("room_id", ["dk_x", "dk_", "meta_a", "notify_shop", "email_1", *sorted(RESERVED_IDS)])
def test_reserved_ids_are_invalid_room_id(engine, room_id):
    err = refused(engine, {"id": room_id, "targetUrl": TARGET})
    assert (err.status, err.code) == (400, "invalid_room_id")
    assert room_id not in engine.rooms


def test_the_reserved_list_is_the_guides():
    assert RESERVED_IDS == {
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


@pytest.mark.parametrize(
    "room_id",
    [
        "Console",
        "CONSOLE",
        "DK_x",
        "Dk_x",
        "Meta_a",
        "consoles",
        "console2",
        "xdk_y",
        "my_console",
        "Admin_key",
        "dk",
        "email",
        "lang-th",
    ],
)
def test_near_misses_are_allowed(engine, room_id):
    room, created, _ = engine.upsert({"id": room_id, "targetUrl": TARGET})
    assert created and room.cfg.id == room_id


@pytest.mark.parametrize("room_id", ["", "_x", "-x", "a b", "a/b", "x" * 65, "é", 5, None, ["r"]])
def test_malformed_ids(engine, room_id):
    err = refused(engine, {"id": room_id, "targetUrl": TARGET})
    assert (err.status, err.code) == (400, "invalid_room_id")


def test_missing_id(engine):
    err = refused(engine, {"targetUrl": TARGET})
    assert (err.status, err.code) == (400, "invalid_room_id")


def test_64_character_id_is_fine(engine):
    assert create_id(engine, "a" * 64)


def create_id(engine, room_id):
    return engine.upsert({"id": room_id, "targetUrl": TARGET})[1]


# ---------------------------------------------------------------------- values


@pytest.mark.parametrize(
    ("field", "value", "code"),
    [
        ("ratePerMinute", "60", "invalid_rate"),
        ("ratePerMinute", -1, "invalid_rate"),
        ("ratePerMinute", 1.5, "invalid_rate"),
        ("ratePerMinute", True, "invalid_rate"),
        ("ratePerMinute", None, "invalid_rate"),
        ("rate", "fast", "invalid_rate"),
        ("maxConcurrent", 0, "invalid_field"),
        ("maxConcurrent", "5", "invalid_field"),
        ("passedTtlSec", "600", "invalid_field"),
        ("passedTtlSec", None, "invalid_field"),
        ("passedTtlSec", 5, "invalid_field"),
        ("sessionTtlSec", 0, "invalid_field"),
        ("sessionMaxSec", 1, "invalid_field"),
        ("presenceSec", 1.5, "invalid_field"),
        ("presenceSec", False, "invalid_field"),
        ("queueMaxPerIp", 0, "invalid_field"),
        ("queueMaxPerIp", "16", "invalid_field"),
        ("preQueueMaxPerIp", -3, "invalid_field"),
        ("state", "open", "invalid_state"),
        ("state", "scheduled", "invalid_state"),
        ("state", None, "invalid_state"),
        ("targetUrl", "ftp://shop.example", "invalid_target_url"),
        ("targetUrl", "/relative", "invalid_target_url"),
        ("targetUrl", "https://user:pw@shop.example", "invalid_target_url"),
        ("targetUrl", 5, "invalid_target_url"),
        ("opensAt", "soon", "invalid_opens_at"),
        ("opensAt", True, "invalid_opens_at"),
        ("returnOrigins", "https://shop.example", "invalid_origin"),
        ("returnOrigins", ["https://shop.example/path"], "invalid_origin"),
        ("returnOrigins", ["https://*shop.example"], "invalid_origin"),
        ("returnOrigins", None, "invalid_origin"),
        ("tagOrigins", [5], "invalid_origin"),
        ("rules", "all", "invalid_rules"),
        ("rules", [{"pattern": "/x", "action": "block"}], "invalid_rules"),
        ("proxyOrigin", "http://10.0.0.5:3000/app", "invalid_proxy_origin"),
        ("proxyOrigin", "https://*.internal.example", "invalid_proxy_origin"),
        ("onBackendDown", "maybe", "invalid_on_backend_down"),
        ("onBackendDown", None, "invalid_on_backend_down"),
        ("protection", {"mode": "block"}, "invalid_protection"),
        ("protection", "enforce", "invalid_protection"),
        ("autoActivate", {"enabled": "yes"}, "invalid_auto_activate"),
        ("autoActivate", {"joinsPerMin": -1}, "invalid_auto_activate"),
        ("autoActivate", {"bogus": 1}, "invalid_auto_activate"),
        ("autotune", {"enabled": True}, "invalid_autotune"),
        ("autotune", {"minRate": 10}, "invalid_autotune"),
        ("autotune", {"minRate": 0, "maxRate": 10}, "invalid_autotune"),
        ("autotune", {"minRate": 20, "maxRate": 10}, "invalid_autotune"),
        ("autotune", {"minRate": 1, "maxRate": 10, "maxErrorRate": 1.5}, "invalid_autotune"),
        ("autotune", {"minRate": 1, "maxRate": 10, "maxErrorRate": True}, "invalid_autotune"),
        ("autotune", {"minRate": 1, "maxRate": 10, "targetLatencyMs": 0}, "invalid_autotune"),
        ("autotune", {"minRate": 1, "maxRate": 10, "stepSec": 2.5}, "invalid_autotune"),
        ("autotune", {"minRate": 1, "maxRate": 10, "enabled": 1}, "invalid_autotune"),
        ("autotune", {"minRate": 1, "maxRate": 10, "bogus": 1}, "invalid_autotune"),
        ("autotune", True, "invalid_autotune"),
        ("name", 5, "invalid_field"),
    ],
)
def test_bad_values_are_400_with_a_code(engine, field, value, code):
    err = refused(engine, {"id": "r", "targetUrl": TARGET, field: value})
    assert (err.status, err.code) == (400, code)
    assert "r" not in engine.rooms
    room = create(engine, ratePerMinute=11)
    before = room.cfg.to_public()
    err = refused(engine, {"id": "r", field: value})
    assert (err.status, err.code) == (400, code)
    assert room.cfg.to_public() == before


def test_create_needs_a_target_url(engine):
    err = refused(engine, {"id": "r"})
    assert (err.status, err.code) == (400, "invalid_target_url")


@pytest.mark.parametrize("value", ["open", "closed"])
def test_on_backend_down_values(engine, value):
    assert create(engine, onBackendDown=value).cfg.on_backend_down == value


def test_on_backend_down_defaults_to_closed(engine):
    assert create(engine).cfg.on_backend_down == "closed"


@pytest.mark.parametrize(
    "proxy", ["https://shop.example", "http://shop.example:8080", "https://SHOP.example", "http://shop.example"]
)
def test_proxy_origin_pointing_back_at_the_public_host_is_a_loop(engine, proxy):
    err = refused(engine, {"id": "r", "targetUrl": TARGET, "proxyOrigin": proxy})
    assert (err.status, err.code) == (400, "proxy_origin_loop")


def test_proxy_origin_loop_is_caught_when_the_target_moves(engine):
    create(engine, proxyOrigin="http://app.internal.example:3000")
    err = refused(engine, {"id": "r", "targetUrl": "https://app.internal.example"})
    assert err.code == "proxy_origin_loop"


def test_a_bare_proxy_origin_is_accepted(engine):
    room = create(engine, proxyOrigin="http://app.internal.example:3000")
    assert room.cfg.proxy_origin == "http://app.internal.example:3000"
    engine.upsert({"id": "r", "proxyOrigin": None})
    assert room.cfg.proxy_origin is None


def test_a_refused_update_leaves_everything_as_it_was(engine):
    room = create(engine, ratePerMinute=20, maxConcurrent=3)
    before = room.cfg.to_public()
    refused(engine, {"id": "r", "ratePerMinute": 50, "maxConcurrent": 9, "state": "sleeping"})
    assert room.cfg.to_public() == before


def test_autotune_takes_its_defaults_and_is_published(engine):
    room = create(engine, autotune={"enabled": True, "minRate": 10, "maxRate": 200})
    expected = {
        "enabled": True,
        "minRate": 10,
        "maxRate": 200,
        "targetLatencyMs": 1000,
        "maxErrorRate": 0.05,
        "stepSec": 10,
    }
    assert room.cfg.to_public()["autotune"] == expected
    room = engine.upsert({"id": "r", "autotune": {**expected, "maxErrorRate": 0, "minRate": 200}})[0]
    assert room.cfg.autotune["maxErrorRate"] == 0.0 and room.cfg.autotune["minRate"] == 200
    assert engine.upsert({"id": "r", "autotune": None})[0].cfg.to_public()["autotune"] is None


def test_a_refused_autotune_names_its_field(engine):
    err = refused(engine, {"id": "r", "targetUrl": TARGET, "autotune": {"minRate": 5, "maxRate": 1}})
    assert (err.status, err.code, err.extra["field"]) == (400, "invalid_autotune", "autotune")


def test_a_room_read_posted_straight_back_changes_nothing(engine):
    room = create(
        engine,
        name="Shop",
        maxConcurrent=5,
        rules=[{"id": "sale", "pattern": "/sale/*", "action": "queue"}],
        autotune={"minRate": 10, "maxRate": 100},
        autoActivate={"enabled": True},
        lanes=[{"id": "members", "share": 70}, {"id": "public", "share": 30}],  # laneStats: only with lanes
    )
    read = {**room_summary(room), "autoSelf": None, "entryCounts": {}}  # what GET /api/admin/rooms/<id> answers
    # every name a read adds to the settings is one a write accepts and ignores: a new figure in the
    # read must join READ_ONLY_FIELDS (or become a setting), or this fails
    assert set(read) - ROOM_FIELDS - set(ALIASES) == READ_ONLY_FIELDS
    assert all(set(rule) - {"id", "pattern", "action"} == READ_ONLY_RULE_FIELDS for rule in read["rules"])
    before = room.cfg.to_public()
    same, created, _ = engine.upsert(read)
    assert same is room and not created
    assert room.cfg.to_public() == before


def test_read_only_figures_are_ignored_whatever_their_values(engine):
    room = create(engine, ratePerMinute=30)
    engine.upsert({"id": "r", "waiting": 999, "generation": 7, "autoSelf": {"x": 1}, "rate": 30})
    assert room.cfg.rate_per_minute == 30
    assert report.stats(room)["waiting"] == 0
    err = refused(engine, {"id": "r", "waiting": 1, "bogus": 1})
    assert (err.code, err.extra["fields"]) == ("unknown_field", ["bogus"])
    err = refused(engine, {"id": "r", "rules": [{"pattern": "/a/*", "hits": 3}]})
    assert err.code == "invalid_rules"
