"""A room's scheduled events over HTTP: ``/api/admin/rooms/{room}/events`` and ``…/events/{event}``.

The events are the room field ``events``; each route reads the room, changes the list and writes it back
as a compare-and-set on the list it read (``expect``), so two operators editing at once never lose one
another's change (a lost race is read again, up to ``ATTEMPTS`` times). The leader applies what they say
at each boundary (``jobs/room_events``).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from queue_manager.engine.errors import EngineError
from queue_manager.engine.model import ms_to_iso, parse_opens_at
from queue_manager.engine.room_events import EVENTS_MAX
from queue_manager.http.wire import HttpError, send_json
from queue_manager.routes.call import Call

ATTEMPTS = 5

Edit = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


def _room_id(call: Call) -> str:
    return call.req.params["room"]


def _status(event: dict[str, Any], in_force: dict[str, Any] | None, now_iso: str) -> str:
    """upcoming, prequeue, live or ended: as the room follows it (in force), else by the clock."""
    if in_force is not None and in_force.get("id") == event["id"]:
        return str(in_force["phase"])
    if event["endsAt"] <= now_iso:
        return "ended"
    return "upcoming"


def _listed(call: Call, room: dict[str, Any]) -> dict[str, Any]:
    now = call.ctx.clock.wall_ms()
    now_iso = ms_to_iso(now) or ""
    in_force = room.get("eventInForce")
    events = [{**e, "status": _status(e, in_force, now_iso)} for e in room.get("events") or []]
    drop = None
    if room.get("opensAt") is not None:  # the room's own drop (POST …/schedule): the simplest event
        drop = {"opensAt": room["opensAt"], "preQueue": room.get("preQueue", 0)}
    return {
        "roomId": room["id"],
        "events": events,
        "eventInForce": in_force,
        "drop": drop,
        "max": EVENTS_MAX,
        "now": now,
    }


async def events_list(call: Call) -> None:
    room = await call.ctx.store.get_room(_room_id(call))
    await send_json(call.send, 200, _listed(call, room), head=call.req.method == "HEAD")


async def event_get(call: Call) -> None:
    room = await call.ctx.store.get_room(_room_id(call))
    listed = _listed(call, room)
    for event in listed["events"]:
        if event["id"] == call.req.params["event"]:
            await send_json(call.send, 200, {"event": event}, head=call.req.method == "HEAD")
            return
    raise _no_event(call)


def _no_event(call: Call) -> HttpError:
    return HttpError(404, "no_event", f"Room {_room_id(call)!r} has no event {call.req.params['event']!r}.")


def _event_body(call: Call, body: dict[str, Any], event_id: str | None) -> dict[str, Any]:
    if event_id is not None:
        if "id" in body and body["id"] != event_id:
            raise HttpError(400, "invalid_event", "The event's id is the one in the path.", field="id")
        body = {**body, "id": event_id}
    elif "id" not in body:
        body = {**body, "id": "ev-" + secrets.token_hex(4)}
    return body


def _over(call: Call, event: dict[str, Any]) -> bool:
    """Whether a public event has ended by this server's clock."""
    return str(event.get("endsAt") or "") <= (ms_to_iso(call.ctx.clock.wall_ms()) or "")


async def _change(call: Call, edit: Edit) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Read the room, ``edit(events) -> new events`` and write the list back, compare-and-set on it."""
    room_id = _room_id(call)
    for _ in range(ATTEMPTS):
        room = await call.ctx.store.get_room(room_id)
        before = list(room.get("events") or [])
        after = edit([dict(e) for e in before])
        try:
            saved, _, _ = await call.ctx.store.upsert_room({"id": room_id, "events": after}, expect={"events": before})
        except EngineError as err:
            if err.code == "config_changed":
                continue
            raise
        await call.ctx.room_changes.announce(frozenset((room_id,)))
        return saved, before
    raise HttpError(409, "config_changed", "The room's events changed meanwhile, again and again: try again.")


def _check_future(call: Call, body: dict[str, Any]) -> None:
    ends = body.get("endsAt")
    if ends is None:
        return
    try:
        ms = parse_opens_at(ends, "endsAt")
    except EngineError:
        return  # the room's own check says what is wrong with it
    if ms is not None and ms <= call.ctx.clock.wall_ms():
        raise HttpError(400, "invalid_event", "This event would already be over (endsAt is past).", field="endsAt")


async def event_create(call: Call) -> None:
    body = _event_body(call, await call.req.json_object(), None)
    _check_future(call, body)
    event_id = body["id"]

    def add(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if any(e["id"] == event_id for e in events):
            raise HttpError(409, "event_exists", f"The room has an event {event_id!r} already; PUT changes it.")
        if len(events) >= EVENTS_MAX:  # ended events make way for a new one, oldest first
            ended = [e for e in events if _over(call, e)]
            for gone in ended[: len(events) - EVENTS_MAX + 1]:
                events.remove(gone)
        if len(events) >= EVENTS_MAX:
            raise HttpError(409, "too_many_events", f"A room holds at most {EVENTS_MAX} events not yet over.")
        return [*events, body]

    saved = await _audited(call, "create", event_id, add)
    await _answer(call, 201, saved, event_id)


async def event_put(call: Call) -> None:
    event_id = call.req.params["event"]
    body = _event_body(call, await call.req.json_object(), event_id)
    _check_future(call, body)

    def put(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not any(e["id"] == event_id for e in events):
            raise _no_event(call)
        return [body if e["id"] == event_id else e for e in events]

    saved = await _audited(call, "update", event_id, put)
    await _answer(call, 200, saved, event_id)


async def event_delete(call: Call) -> None:
    event_id = call.req.params["event"]
    await call.req.body()

    def drop(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not any(e["id"] == event_id for e in events):
            raise _no_event(call)
        return [e for e in events if e["id"] != event_id]

    await _audited(call, "delete", event_id, drop)
    await send_json(call.send, 200, {"ok": True, "deleted": event_id})


async def _audited(call: Call, op: str, event_id: str, edit: Edit) -> dict[str, Any]:
    room_id = _room_id(call)
    try:
        saved, _ = await _change(call, edit)
    except (EngineError, HttpError) as exc:
        await call.audit(
            "room.events", target=room_id, room_id=room_id, ok=False, op=op, event=event_id, refused=exc.code
        )
        raise
    await call.audit("room.events", target=room_id, room_id=room_id, op=op, event=event_id)
    return saved


async def _answer(call: Call, status: int, room: dict[str, Any], event_id: str) -> None:
    listed = _listed(call, room)
    event = next(e for e in listed["events"] if e["id"] == event_id)
    await send_json(call.send, status, {"ok": True, "event": event})
