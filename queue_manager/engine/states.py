"""The states a ticket, a room and a visitor's view can be in: the same strings the wire carries.

Each alias is a ``Literal``, so mypy checks every assignment and comparison against the list.
"""

from __future__ import annotations

from typing import Literal

TicketState = Literal["waiting", "passed", "admitted"]
"""A live ticket: in line, holding a pass, or inside with a session (a finished one is a record)."""

RoomState = Literal["active", "paused", "bypass"]
"""What an operator sets (``RoomConfig.state``)."""

EffectiveState = Literal["active", "paused", "bypass", "scheduled"]
"""What the room does now: the configured state, or ``scheduled`` before ``opensAt``."""

ViewState = Literal["scheduled", "waiting", "passed", "admitted", "expired", "bypass"]
"""What a visitor is told they hold (``VisitorView.state``)."""

DoorState = Literal["admitted", "bypass", "unprotected"]
"""Why the door let somebody in (``CheckResult.state``)."""
