"""The rooms document: ``{version: 1, rooms: [...]}``, each room its writable settings only.

What a room read adds is left out, generically: the live figures and system fields (the model's
``READ_ONLY_FIELDS``), the ``rate`` alias (``ALIASES``), each rule's counters (``READ_ONLY_RULE_FIELDS``, URL
and access rules alike). An access rule's header value is never read back (``{"name", "set": true}``), so the
file keeps it that way: applied, it keeps the value the server holds.
A field the server gains later is exported as the read gives it. ``qm export`` also leaves out the
fields automation steers (``steered``): a room's rate under autotune, its active or bypass state under
threshold activation. The logo travels as its bytes only when asked (``--logos``); otherwise the brand
is written without its ``logo`` key, and applying such a file leaves each room's logo as it is. Rooms
are sorted by id, ``id`` first and every other key in alphabetical order at every depth, so the file
diffs cleanly.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Mapping
from typing import Any, Literal

import orjson
import yaml

from queue_manager.engine.model import ALIASES, READ_ONLY_FIELDS, READ_ONLY_RULE_FIELDS, ms_to_iso

VERSION = 1
Format = Literal["yaml", "json"]


class DocumentError(Exception):
    """The file is not a rooms document (its shape, not a room's settings: those the model judges)."""


def writable(room: Mapping[str, Any], *, logo: bytes | None = None) -> dict[str, Any]:
    """A room read (GET /api/admin/rooms) as the settings an operator writes.

    While a scheduled event is in force, each field it set and that still holds the event's value is
    given the value the event replaced: the file keeps the room's own settings, not the event's.
    ``logo``: the logo's bytes, written as ``{"type", "data"}``; None leaves the logo out."""
    out = {k: v for k, v in room.items() if k not in READ_ONLY_FIELDS and k not in ALIASES}
    for listed in ("rules", "accessRules"):
        if isinstance(out.get(listed), list):
            out[listed] = [
                {k: v for k, v in rule.items() if k not in READ_ONLY_RULE_FIELDS} if isinstance(rule, Mapping) else rule
                for rule in out[listed]
            ]
    _own_values(out, room.get("eventInForce"))
    brand = out.get("brand")
    if isinstance(brand, Mapping):
        kept = {k: v for k, v in brand.items() if k != "logo"}
        held = brand.get("logo")
        if logo is not None and isinstance(held, Mapping):
            kept["logo"] = {"type": held.get("type"), "data": base64.b64encode(logo).decode()}
        out["brand"] = kept
    return out


def exported(room: Mapping[str, Any], *, logo: bytes | None = None) -> dict[str, Any]:
    """What ``qm export`` writes of a room read: its writable settings less the fields automation steers."""
    out = writable(room, logo=logo)
    for name in steered(out):
        del out[name]
    return out


def steered(room: Mapping[str, Any]) -> list[str]:
    """The fields automation steers on this room, left out of the file so that applying it never undoes
    automation's work: ``ratePerMinute`` under autotune, ``state`` (active or bypass; paused is a person's
    decision) under threshold activation."""
    names = []
    autotune, activate = room.get("autotune"), room.get("autoActivate")
    if isinstance(autotune, Mapping) and autotune.get("enabled") is True and "ratePerMinute" in room:
        names.append("ratePerMinute")
    if isinstance(activate, Mapping) and activate.get("enabled") is True and room.get("state") in ("active", "bypass"):
        names.append("state")
    return names


def _own_values(room: dict[str, Any], in_force: Any) -> None:
    if not isinstance(in_force, Mapping):
        return
    applied, restore = in_force.get("applied"), in_force.get("restore")
    if not isinstance(applied, Mapping) or not isinstance(restore, Mapping):
        return
    for name, value in applied.items():
        if name not in restore:
            continue
        own = restore[name]
        if name == "message":
            brand = room.get("brand")
            if isinstance(brand, dict) and brand.get("message") == value:
                room["brand"] = {**brand, "message": own}
            continue
        if name == "opensAt":  # the event's instants are epoch ms; the room's read is ISO 8601
            value = ms_to_iso(value) if isinstance(value, int) else value
            own = ms_to_iso(own) if isinstance(own, int) else own
        if name in room and room[name] == value:
            room[name] = own


def ordered(value: Any) -> Any:
    """Keys in a stable order at every depth: ``id`` first, then alphabetical; lists keep their order."""
    if isinstance(value, Mapping):
        keys = sorted(value, key=lambda k: (k != "id", str(k)))
        return {k: ordered(value[k]) for k in keys}
    if isinstance(value, list | tuple):
        return [ordered(v) for v in value]
    return value


def document(rooms: list[dict[str, Any]]) -> dict[str, Any]:
    return {"version": VERSION, "rooms": [ordered(r) for r in sorted(rooms, key=lambda r: str(r.get("id")))]}


def render(doc: Mapping[str, Any], fmt: Format) -> str:
    if fmt == "json":
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n"
    text: str = yaml.safe_dump(dict(doc), sort_keys=False, allow_unicode=True, default_flow_style=False, width=100)
    return text


def _plain(value: Any) -> Any:
    """YAML's own types made JSON's: an unquoted timestamp is read back as the ISO 8601 text it was."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return value.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def parse(text: str, name: str) -> list[dict[str, Any]]:
    """The rooms of a document in YAML or JSON (JSON is YAML too; a ``.json`` file is read as JSON)."""
    try:
        raw = json.loads(text) if name.endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise DocumentError(f"{name} is not valid {'JSON' if name.endswith('.json') else 'YAML'}: {exc}") from None
    raw = _plain(raw)
    if not isinstance(raw, dict) or set(raw) - {"version", "rooms"}:
        raise DocumentError(f"{name}: the document is {{version: 1, rooms: [...]}} and nothing else.")
    if raw.get("version") != VERSION:
        raise DocumentError(f"{name}: version must be {VERSION} (this qm reads version {VERSION} documents).")
    rooms = raw.get("rooms")
    if rooms is None:
        rooms = []
    if not isinstance(rooms, list):
        raise DocumentError(f"{name}: rooms must be a list of rooms.")
    seen: set[str] = set()
    for index, room in enumerate(rooms):
        if not isinstance(room, dict):
            raise DocumentError(f"{name}: rooms[{index}] is not a room (a mapping of its settings).")
        room_id = room.get("id")
        if not isinstance(room_id, str) or not room_id:
            raise DocumentError(f"{name}: rooms[{index}] has no id.")
        if room_id in seen:
            raise DocumentError(f"{name}: room {room_id!r} is listed twice.")
        seen.add(room_id)
    return rooms
