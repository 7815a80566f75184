"""A script's refusal (a reply of kind ``err``) as the EngineError the engine raises for it, with the
same status, code, message and details."""

from __future__ import annotations

from typing import Any

from queue_manager.engine.errors import EngineError
from queue_manager.engine.lanes import unknown_lane
from queue_manager.engine.visitor import identity_limit, queue_full, room_closed
from queue_manager.store.valkey import codec


def refusal(
    reply: dict[str, Any],
    query: str = "",
    stripped: str = "",
    room_id: str = "",
    now: tuple[int, int] = (0, 0),
) -> EngineError:
    code = reply["code"]
    if code == "queue_identity_limit":
        return identity_limit()
    if code == "queue_full":
        return queue_full()
    if code == "room_closed":
        return room_closed()
    if code == "unknown_lane":
        return unknown_lane(str(reply.get("lane")))
    if code == "no_ticket_long":
        return EngineError(404, "no_ticket", "No such ticket in this room.", query=stripped[:32])
    if code == "no_ticket_num":
        n = int(stripped)
        return EngineError(404, "no_ticket", f"No ticket {n} in this room's current generation.", ticket=n)
    if code == "no_ticket_ref":
        return EngineError(404, "no_ticket", f"No ticket {query!r} in this room's current generation.", query=query)
    if code == "no_ticket_engine":
        return EngineError(404, "no_ticket", f"No ticket {query!r} in this room.", query=query)
    if code == "ambiguous_ref":
        candidates = [codec.describe(room_id, int(reply["gen"]), c, *now) for c in reply.get("c") or []]
        return EngineError(
            409,
            "ambiguous_ref",
            "That Ref matches several tickets; eject by ticket number.",
            candidates=candidates,
        )
    raise AssertionError(f"unknown refusal {code!r}")  # pragma: no cover
