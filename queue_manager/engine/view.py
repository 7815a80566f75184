"""What a visitor is told: a store-independent snapshot the HTTP layer renders."""

from __future__ import annotations

from dataclasses import dataclass

from queue_manager.engine.room import Lookup, Room
from queue_manager.engine.ticket import make_ref


@dataclass(slots=True)
class VisitorView:
    room_id: str
    gen: int
    state: str  # scheduled | waiting | passed | admitted | expired | bypass
    room_state: str
    target_url: str
    rate_per_minute: int
    position: int | None = None
    ticket: int | None = None
    handle: str | None = None
    ref: str | None = None
    eta_sec: int | None = None
    joined_ms: int | None = None
    opens_at_ms: int | None = None
    pre_count: int | None = None
    pass_expires_ms: int | None = None
    return_url: str | None = None
    reason: str | None = None
    new: bool = False

    @property
    def ahead(self) -> int | None:
        return None if self.position is None else self.position - 1


def visitor_view(room: Room, found: Lookup) -> VisitorView:
    cfg = room.cfg
    room_state = room.effective_state()
    view = VisitorView(
        room_id=cfg.id,
        gen=room.gen,
        state="expired",
        room_state=room_state,
        target_url=cfg.target_url,
        rate_per_minute=cfg.rate_per_minute,
        reason=found.reason,
        new=found.new,
        opens_at_ms=cfg.opens_at_ms,
    )
    if found.pre is not None:
        view.state = "scheduled"
        view.handle = found.pre.handle
        view.joined_ms = found.pre.joined_ms
        view.pre_count = len(room.prequeue)
        view.return_url = found.pre.return_url
        return view
    t = found.ticket
    if t is None:
        if room_state == "bypass" and found.finished is None and found.n is None:
            view.state = "bypass"
        if found.finished is not None:
            view.joined_ms = found.finished.joined_ms
        return view
    view.ticket = t.n
    view.ref = make_ref(cfg.id, room.gen, t.n)
    view.joined_ms = t.joined_ms
    view.return_url = t.return_url
    view.reason = t.reason if found.reason is None else found.reason
    if t.state == "waiting":
        view.state = "waiting"
        view.position = room.position(t)
        view.eta_sec = room.eta_sec(view.position)
    else:
        view.state = t.state
        if t.state == "passed":
            remaining = t.pass_at + cfg.passed_ttl_sec * 1000 - room.clock.mono_ms()
            view.pass_expires_ms = room.clock.wall_ms() + remaining
    return view
