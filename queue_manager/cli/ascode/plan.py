"""What applying a rooms document to a server would change, judged by the server's own room model.

Each room of the file is checked with ``engine.model`` (the code the server runs on a save) before
anything is sent, so a bad field is refused with the server's 400 code and message and no room is
half-applied for it. Both sides of a comparison are rendered by the same model: the server's room is
rebuilt from its read, the file's settings are merged into it as a save would merge them, and a field
is a change only when the two renderings differ. A default the server fills in, an origin written
another way, an instant in another zone, ``rate`` for ``ratePerMinute``: none of these is a change.
A field the file leaves out keeps the server's value, as with the admin API.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from queue_manager.cli.ascode.document import writable
from queue_manager.engine.brand import Logo
from queue_manager.engine.errors import EngineError
from queue_manager.engine.model import RoomConfig, apply_fields, check_room_id, normalise_body

Action = Literal["create", "update", "delete"]


class RoomInvalid(Exception):
    """A room of the file that the server would refuse: its id, the field and the server's code and message."""

    def __init__(self, room_id: str, code: str, message: str, field: str | None) -> None:
        where = f"room {room_id!r}" + (f", field {field}" if field else "")
        super().__init__(f"{where}: {code}: {message}")
        self.room_id, self.code, self.message, self.field = room_id, code, message, field


@dataclass(frozen=True, slots=True)
class Change:
    path: str  # the field, dotted into an object's keys (brand.accent)
    old: Any
    new: Any


@dataclass(slots=True)
class RoomStep:
    room_id: str
    action: Action
    changes: list[Change] = field(default_factory=list)
    body: dict[str, Any] | None = None  # what is POSTed (create, update): the file's value of each field changed


@dataclass(slots=True)
class Plan:
    steps: list[RoomStep]

    @property
    def empty(self) -> bool:
        return not self.steps

    def count(self, action: Action) -> int:
        return sum(1 for s in self.steps if s.action == action)


def _refused(room_id: str, exc: EngineError) -> RoomInvalid:
    where = exc.extra.get("field")
    if where is None and isinstance(exc.extra.get("fields"), list):
        where = ", ".join(str(f) for f in exc.extra["fields"])
    return RoomInvalid(room_id, exc.code, exc.message, None if where is None else str(where))


#: An access rule's header value the server holds but never reads back, standing in for it in a plan (never sent)
WITHHELD = "\x00withheld by the server"


def _view(cfg: RoomConfig) -> dict[str, Any]:
    """A config as the file's fields, the logo by type and hash (its bytes are never compared), an access
    rule's header value as whether it is the server's withheld one or one the file gives (never printed)."""
    public = cfg.to_public(logo_data=False)
    for rule in public.get("accessRules") or []:
        header = rule["match"].get("header")
        if header is not None:
            header["value"] = "(kept on the server)" if header["value"] == WITHHELD else "(given in the file)"
    view = writable(public)
    logo = cfg.brand.logo if cfg.brand is not None else None
    if logo is not None and isinstance(view.get("brand"), dict):
        view["brand"]["logo"] = {"type": logo.type, "sha256": logo.sha256}
    return view


def _server_config(room: Mapping[str, Any]) -> RoomConfig:
    """The server's room rebuilt from its read; its logo stands in by hash (a file's logo matches it by hash)."""
    cfg, _ = apply_fields(None, normalise_body(_withheld(writable(room))))
    brand = room.get("brand")
    held = brand.get("logo") if isinstance(brand, Mapping) else None
    if isinstance(held, Mapping) and cfg.brand is not None:
        cfg.brand = dataclasses.replace(cfg.brand, logo=Logo(str(held.get("type")), b"", str(held.get("sha256"))))
    return cfg


def _withheld(room: dict[str, Any]) -> dict[str, Any]:
    """A read's access rules with each withheld header value (``"set": true``) given a stand-in."""
    rules = room.get("accessRules")
    if isinstance(rules, list):
        room["accessRules"] = [_stand_in(rule) for rule in rules]
    return room


def _stand_in(rule: Any) -> Any:
    if not isinstance(rule, Mapping) or not isinstance(rule.get("match"), Mapping):
        return rule
    match: Mapping[str, Any] = rule["match"]
    header = match.get("header")
    if not isinstance(header, Mapping) or header.get("set") is not True or "value" in header:
        return rule
    return {**rule, "match": {**match, "header": {"name": header.get("name"), "value": WITHHELD}}}


def _diff(path: str, old: Any, new: Any) -> Iterator[Change]:
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for key in sorted(set(old) | set(new)):
            yield from _diff(f"{path}.{key}", old.get(key), new.get(key))
    elif old != new:
        yield Change(path, old, new)


def _wanted(room: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return normalise_body(dict(room))
    except EngineError as exc:
        raise _refused(str(room.get("id")), exc) from None


def room_step(room: Mapping[str, Any], current: Mapping[str, Any] | None) -> RoomStep | None:
    """The step that makes the server's room ``current`` (None: none yet) what the file's ``room`` says;
    None when it already is. Raises RoomInvalid for what the server would refuse."""
    room_id = str(room["id"])
    body = _wanted(room)
    try:
        if current is None:
            check_room_id(room_id)
            cfg, _ = apply_fields(None, body)
            view, bare = _view(cfg), _view(RoomConfig(id=room_id, target_url=cfg.target_url))
            shown = [k for k in sorted(body) if k == "targetUrl" or (k != "id" and view.get(k) != bare.get(k))]
            changes = [Change(k, None, view.get(k)) for k in shown]  # a field left at its default is not listed
            return RoomStep(room_id, "create", changes, {"id": room_id, **body})
        try:
            base = _server_config(current)
        except EngineError as exc:
            raise RoomInvalid(
                room_id,
                exc.code,
                f"the server's room cannot be read by this qm ({exc.message}); use the qm of the server's version.",
                exc.extra.get("field"),
            ) from None
        cfg, _ = apply_fields(base, body)
    except EngineError as exc:
        raise _refused(room_id, exc) from None
    before, after = _view(base), _view(cfg)
    changes = [c for k in sorted(body) if k != "id" for c in _diff(k, before.get(k), after.get(k))]
    if not changes:
        return None
    fields = sorted({c.path.split(".", 1)[0] for c in changes})
    return RoomStep(room_id, "update", changes, {"id": room_id, **{k: body[k] for k in fields}})


def make_plan(wanted: list[dict[str, Any]], server: list[dict[str, Any]], *, prune: bool) -> Plan:
    """Every room checked before any is planned: the first the server would refuse raises RoomInvalid."""
    held = {str(r["id"]): r for r in server}
    steps = [s for r in sorted(wanted, key=lambda r: str(r["id"])) if (s := room_step(r, held.get(str(r["id"]))))]
    if prune:
        named = {str(r["id"]) for r in wanted}
        steps += [RoomStep(i, "delete") for i in sorted(held) if i not in named]
    return Plan(steps)
