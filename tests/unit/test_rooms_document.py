"""The rooms document and its plan without a server: what is left out, the order, YAML's own types, and
which differences are changes (queue_manager/cli/ascode/)."""

from __future__ import annotations

from typing import Any

import pytest

from queue_manager.cli.ascode.document import DocumentError, document, exported, parse, render, writable
from queue_manager.cli.ascode.plan import RoomInvalid, make_plan, room_step
from queue_manager.engine.model import RoomConfig, apply_fields, normalise_body


def read_of(body: dict[str, Any]) -> dict[str, Any]:
    """A room as the admin API reads it back: its settings plus a few live figures."""
    cfg, _ = apply_fields(None, normalise_body(body))
    return {**cfg.to_public(logo_data=False), "waiting": 3, "generation": 1, "autoSelf": None}


def test_a_read_keeps_only_what_an_operator_writes() -> None:
    room = read_of({"id": "a", "targetUrl": "https://a.example/", "rules": [{"pattern": "/x/*", "action": "queue"}]})
    room["rules"][0]["matchCount"] = 7
    out = writable(room)
    assert "waiting" not in out and "generation" not in out and "rate" not in out and "eventInForce" not in out
    assert out["rules"] == [{"id": "r1", "pattern": "/x/*", "action": "queue"}]


def test_during_an_event_the_file_keeps_the_rooms_own_values() -> None:
    room = read_of({"id": "a", "targetUrl": "https://a.example/", "ratePerMinute": 500})
    room["eventInForce"] = {
        "id": "e",
        "phase": "live",
        "applied": {"ratePerMinute": 500},
        "restore": {"ratePerMinute": 60},
    }
    assert writable(room)["ratePerMinute"] == 60
    room["ratePerMinute"] = 90  # changed by hand while the event was in force: that change stands
    assert writable(room)["ratePerMinute"] == 90


def test_the_document_is_sorted_and_reads_back_as_written() -> None:
    rooms = [
        writable(read_of({"id": i, "targetUrl": f"https://{i}.example/", "opensAt": "2030-01-01T00:00:00Z"}))
        for i in ("b", "a")
    ]
    doc = document(rooms)
    assert [r["id"] for r in doc["rooms"]] == ["a", "b"]
    keys = list(doc["rooms"][0])
    assert keys[0] == "id" and keys[1:] == sorted(keys[1:])
    text = render(doc, "yaml")
    assert parse(text, "rooms.yaml") == doc["rooms"]
    assert parse(render(doc, "json"), "rooms.json") == doc["rooms"]


def test_an_unquoted_yaml_instant_is_read_as_its_text() -> None:
    rooms = parse("version: 1\nrooms:\n- id: a\n  opensAt: 2030-01-01T09:00:00+07:00\n", "rooms.yaml")
    assert rooms[0]["opensAt"] == "2030-01-01T02:00:00.000Z"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("rooms: []", "version must be 1"),
        ("version: 1\nrooms: {}", "rooms must be a list"),
        ("version: 1\nrooms:\n- targetUrl: x", "has no id"),
        ("version: 1\nrooms:\n- id: a\n- id: a", "listed twice"),
        ("version: 1\nextra: 1", "nothing else"),
    ],
)
def test_a_document_of_the_wrong_shape_is_refused(text: str, said: str) -> None:
    with pytest.raises(DocumentError, match=said):
        parse(text, "rooms.yaml")


def test_defaults_aliases_and_spellings_are_not_changes() -> None:
    server = read_of({"id": "a", "targetUrl": "https://a.example/", "opensAt": "2030-01-01T00:00:00Z"})
    file = {"id": "a", "targetUrl": "https://a.example/", "rate": 60, "opensAt": "2030-01-01T07:00:00+07:00"}
    assert room_step(file, server) is None
    step = room_step({**file, "rate": 90}, server)
    assert step is not None and step.action == "update"
    assert [(c.path, c.old, c.new) for c in step.changes] == [("ratePerMinute", 60, 90)]
    assert step.body == {"id": "a", "ratePerMinute": 90}


def test_a_brand_change_is_listed_by_its_key_and_the_logo_left_out_is_kept() -> None:
    colours = {"background": "#ffffff", "accent": "#0b5394"}
    server = read_of({"id": "a", "targetUrl": "https://a.example/", "brand": colours})
    server["brand"]["logo"] = {"type": "image/png", "sha256": "ab" * 32, "bytes": 10}
    same = room_step({"id": "a", "brand": colours}, server)
    assert same is None
    step = room_step({"id": "a", "brand": {"accent": "#000000"}}, server)
    assert step is not None and [c.path for c in step.changes] == ["brand.accent"]
    logo_off = room_step({"id": "a", "brand": {"logo": None}}, server)
    assert logo_off is not None and [c.path for c in logo_off.changes] == ["brand.logo"]


def test_every_room_is_checked_before_a_plan_is_made() -> None:
    good = {"id": "a", "targetUrl": "https://a.example/"}
    with pytest.raises(RoomInvalid) as refused:
        make_plan([good, {"id": "b", "targetUrl": "ftp://b"}], [], prune=False)
    assert (refused.value.room_id, refused.value.field, refused.value.code) == ("b", "targetUrl", "invalid_target_url")
    plan = make_plan([good], [read_of({"id": "z", "targetUrl": "https://z.example/"})], prune=True)
    assert [(s.action, s.room_id) for s in plan.steps] == [("create", "a"), ("delete", "z")]
    assert RoomConfig(id="a", target_url="https://a.example/").rate_per_minute == 60


def test_export_leaves_out_what_automation_steers_and_a_plan_still_sees_it() -> None:
    room = read_of(
        {
            "id": "a",
            "targetUrl": "https://a.example/",
            "state": "bypass",
            "ratePerMinute": 340,
            "autotune": {"enabled": True, "minRate": 10, "maxRate": 600},
            "autoActivate": {"enabled": True},
        }
    )
    out = exported(room)
    assert "ratePerMinute" not in out and "state" not in out and out["autotune"]["enabled"] is True
    assert room_step(out, room) is None  # left out: the server's values stand
    step = room_step({**out, "ratePerMinute": 100}, room)  # written by hand: a change like any other
    assert step is not None and [(c.path, c.old, c.new) for c in step.changes] == [("ratePerMinute", 340, 100)]
    assert "state" in exported({**room, "state": "paused"})  # paused is a person's decision, kept
    assert "ratePerMinute" in exported({**room, "autotune": {**room["autotune"], "enabled": False}})


def test_access_rules_travel_without_counters_or_the_header_secret() -> None:
    """An access rule's counters are left out and its header value, which a read never gives, stays withheld:
    the file applied again is no change; a file that gives a value is one (the value itself never shown)."""
    secret = "document-probe-secret"
    rules = [
        {"id": "probe", "action": "bypass", "match": {"header": {"name": "X-Probe", "value": secret}}},
        {"id": "geo", "action": "block", "match": {"countries": ["DE"]}},
    ]
    cfg, _ = apply_fields(None, normalise_body({"id": "a", "targetUrl": "https://a.example/", "accessRules": rules}))
    room = {**cfg.to_public(logo_data=False, secrets=False), "waiting": 0}
    room["accessRules"] = [{**r, "matchCount": 4, "lastMatchAt": 1} for r in room["accessRules"]]
    out = writable(room)
    assert out["accessRules"][0] == {
        "id": "probe",
        "action": "bypass",
        "match": {"header": {"name": "x-probe", "set": True}},
    }
    assert "matchCount" not in repr(out) and secret not in repr(out)
    assert room_step(out, room) is None
    given = {**out, "accessRules": [{**rules[0]}, out["accessRules"][1]]}
    step = room_step(given, room)
    assert step is not None and step.action == "update" and "accessRules" in step.body
    assert secret not in repr(step.changes)
    assert room_step({**out, "accessRules": out["accessRules"][:1]}, room) is not None  # a rule removed


def test_lanes_travel_and_their_figures_stay_behind() -> None:
    """A room's lanes are written to the file as set; the read's laneStats are not; the same lanes are no
    change, other shares are one."""
    lanes = [{"id": "public", "share": 30}, {"id": "members", "share": 70}]
    room = read_of({"id": "a", "targetUrl": "https://a.example/", "lanes": lanes})
    room["laneStats"] = [{"id": "public", "waiting": 3, "sharePct": 30, "etaSec": 10, "releasedLastMinute": 2}]
    out = writable(room)
    assert out["lanes"] == lanes and "laneStats" not in out
    assert room_step(out, room) is None
    step = room_step({**out, "lanes": [{"id": "public", "share": 50}, {"id": "members", "share": 50}]}, room)
    assert step is not None and step.action == "update" and [c.path for c in step.changes] == ["lanes"]
