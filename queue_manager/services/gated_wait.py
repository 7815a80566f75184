"""The gated wait: what a gated address answers, instead of the waiting page, to a request that asks for JSON.

One body for every gate (the inline proxy, ``/api/check?wait=1`` for the edge Worker and the Node
connector): the legacy queued envelope (``error``, ``code``, ``reason``, ``reload``) and the wait itself
(``state``, ``position``, ``etaSec``, ``retryAfterSec``, ``waitingUrl``). ``state`` is one of
:data:`STATES`; ``waiting``, ``scheduled`` and ``passed`` are the names ``/api/status`` uses.
A random room (queueing random) shows no position: its wait adds ``positionRange`` (the turns of the middle
half, ⌈N/4⌉ … ⌈3N/4⌉ of the N waiting) and ``etaRange`` (the same in seconds, the page's p25–p75 range).
"""

from __future__ import annotations

from typing import Any, Literal

from queue_manager.engine.view import VisitorView

WaitState = Literal[
    "waiting", "scheduled", "passed", "paused", "not_in_line", "backend_down", "rate_limited", "full", "closed"
]
STATES: tuple[WaitState, ...] = (
    "waiting",  # a place in line: position and etaSec
    "scheduled",  # in the pre-queue before the room opens: opensAt
    "passed",  # the visitor's turn, but the site is at capacity this moment: retry
    "paused",  # the room is paused (or its admissions held): the place is kept
    "not_in_line",  # no place in line (none yet, or it lapsed): take one at waitingUrl
    "backend_down",  # the queue cannot reach its storage and the room's onBackendDown is closed
    "rate_limited",  # the queue shed this door check: retry after retryAfterSec
    "full",  # the line is full: a new place is refused (the join's queue_full answer says so)
    "closed",  # the room is closed (queueing reject): nobody joins; waitingUrl is its closed page
)
#: the Retry-After (s) of a queued answer: the waiting page's own (inline) and the connectors'
RETRY_AFTER_SEC = 5
QUEUED_TEXT = "You are in the waiting room for this site; reload the page to see your place."
DOWN_TEXT = "The waiting room cannot reach its storage; retry shortly."


def state_of(reason: str | None, view: VisitorView | None) -> WaitState:
    """The wait's state from the door's refusal ``reason`` and, when a token was presented, its status view."""
    if reason in ("backend_down", "rate_limited"):
        return reason  # type: ignore[return-value]
    if reason == "room_closed":
        return "closed"
    if view is not None and view.state in ("waiting", "passed", "scheduled"):
        if reason == "paused" or view.room_state == "paused":
            return "paused"
        return view.state
    if reason == "paused":
        return "paused"
    if reason == "at_capacity":
        return "passed"
    if reason == "waiting" and view is None:
        return "waiting"
    return "not_in_line"


def body(
    room_id: str,
    reason: str | None,
    waiting_url: str | None,
    view: VisitorView | None = None,
    retry_after_sec: int = RETRY_AFTER_SEC,
) -> dict[str, Any]:
    """The GatedWait JSON object (the OpenAPI document's component of that name)."""
    state = state_of(reason, view)
    waiting = view is not None and view.state == "waiting"
    out: dict[str, Any] = {
        "error": DOWN_TEXT if state == "backend_down" else QUEUED_TEXT,
        "code": "storage_unavailable" if state == "backend_down" else "queued",
        "roomId": room_id,
        "state": state,
        "reason": reason or "waiting",
        "position": view.position if waiting and view is not None else None,
        "etaSec": view.eta_sec if waiting and view is not None else None,
        "roomState": None if view is None else view.room_state,
        "opensAt": view.opens_at_ms if view is not None and state == "scheduled" else None,
        "retryAfterSec": retry_after_sec,
        "waitingUrl": waiting_url,
        "reload": True,
    }
    if waiting and view is not None and view.waiting is not None:  # a random line: ranges, not a place
        n = view.waiting
        out["positionRange"] = [-(-n // 4), -(-3 * n // 4)]
        if view.eta_low_sec is not None and view.eta_high_sec is not None:
            out["etaRange"] = [view.eta_low_sec, view.eta_high_sec]
    return out
