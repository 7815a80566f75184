"""When a condition pages: the hold, the repeat, the resolved, and the outbox that survives a leader.

The state is one JSON document (``alerts:state`` in Valkey, fenced on the leader epoch):

* ``open``: every condition true at the last frame, by key (``event|roomId``), with ``since`` (when it
  began), ``fired`` (when it first paged, None while it still holds for ``ALERT_HOLD_SEC``) and
  ``paged`` (when it last paged);
* ``outbox``: pages decided and not yet delivered, each the webhook body plus its delivery attempts.

A page is written to the outbox, and the outbox saved, before it is sent, and it leaves the outbox
once a receiver has answered 2xx (or 4xx, which no retry mends). A leader killed between deciding
and sending leaves the page for its successor; one killed mid-incident leaves ``fired`` set, so the
successor neither pages the incident again nor forgets its resolved.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from queue_manager.jobs.conditions import Condition

SOURCE = "queue-manager"
OUTBOX_MAX = 200  # beyond it (a receiver down for hours) the oldest pages are dropped, and counted
RETRY_MAX_MS = 300_000  # a page that keeps failing is retried at ALERT_EVERY_MS, doubling up to 5 minutes

State = dict[str, Any]


def empty() -> State:
    return {"open": {}, "outbox": [], "dropped": 0}


def page(
    cond_event: str, status: str, severity: str, room_id: str | None, message: str, ts: int, since: int
) -> dict[str, Any]:
    """The webhook body, exactly the guide's fields."""
    return {
        "source": SOURCE,
        "event": cond_event,
        "status": status,
        "severity": severity,
        "roomId": room_id,
        "message": message,
        "ts": ts,
        "since": since,
        "text": f"[{SOURCE}] {'RESOLVED' if status == 'resolved' else severity.upper()}: {message}",
    }


def step(state: State, conditions: Iterable[Condition], now: int, hold_ms: int, repeat_ms: int) -> list[dict[str, Any]]:
    """Fold one frame's conditions into ``state``; returns the pages it decided (also queued in the outbox)."""
    open_: dict[str, dict[str, Any]] = state.setdefault("open", {})
    decided: list[dict[str, Any]] = []
    seen: set[str] = set()
    for cond in conditions:
        seen.add(cond.key)
        entry = open_.get(cond.key)
        if entry is None:
            entry = open_[cond.key] = {
                "event": cond.event,
                "roomId": cond.room_id,
                "since": now,
                "fired": None,
                "paged": None,
            }
        entry["severity"] = cond.severity
        entry["message"] = cond.message
        if entry["fired"] is None:
            if now - entry["since"] >= hold_ms:
                entry["fired"] = entry["paged"] = now
                decided.append(
                    page(cond.event, "firing", cond.severity, cond.room_id, cond.message, now, entry["since"])
                )
        elif now - entry["paged"] >= repeat_ms:
            entry["paged"] = now
            decided.append(page(cond.event, "firing", cond.severity, cond.room_id, cond.message, now, entry["since"]))
    for key in [k for k in open_ if k not in seen]:
        entry = open_.pop(key)
        if entry["fired"] is not None:
            decided.append(
                page(
                    entry["event"],
                    "resolved",
                    entry["severity"],
                    entry["roomId"],
                    entry["message"],
                    now,
                    entry["since"],
                )
            )
    enqueue(state, decided, now)
    return decided


def enqueue(state: State, pages: list[dict[str, Any]], now: int) -> None:
    outbox: list[dict[str, Any]] = state.setdefault("outbox", [])
    for body in pages:
        outbox.append({"id": page_id(body), "body": body, "attempts": 0, "due": now})
    if len(outbox) > OUTBOX_MAX:
        state["dropped"] = int(state.get("dropped") or 0) + len(outbox) - OUTBOX_MAX
        del outbox[: len(outbox) - OUTBOX_MAX]


def page_id(body: dict[str, Any]) -> str:
    return f"{body['event']}|{body['roomId'] or ''}|{body['status']}|{body['since']}|{body['ts']}"


def due(state: State, now: int) -> list[dict[str, Any]]:
    """The outbox entries to send now, oldest decision first."""
    return sorted((p for p in state.get("outbox", []) if p["due"] <= now), key=lambda p: p["body"]["ts"])


def settle(state: State, pid: str, delivered: bool, now: int, base_ms: int) -> None:
    """After a delivery attempt: drop the page (delivered, or refused for good) or schedule its retry."""
    outbox: list[dict[str, Any]] = state.get("outbox", [])
    for i, p in enumerate(outbox):
        if p["id"] != pid:
            continue
        if delivered:
            del outbox[i]
        else:
            p["attempts"] += 1
            p["due"] = now + min(RETRY_MAX_MS, max(1, base_ms) * 2 ** min(16, p["attempts"] - 1))
        return


def firing(state: State) -> list[dict[str, Any]]:
    """Conditions past their hold (paging), oldest first."""
    rows = [dict(e) for e in state.get("open", {}).values() if e.get("fired") is not None]
    return sorted(rows, key=lambda e: (e["since"], e["event"]))


def holding(state: State) -> list[dict[str, Any]]:
    """Conditions true now and still inside their hold."""
    rows = [dict(e) for e in state.get("open", {}).values() if e.get("fired") is None]
    return sorted(rows, key=lambda e: (e["since"], e["event"]))
