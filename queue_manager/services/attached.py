"""What is built over the context and read back through it: the inline proxy, the alert frames, the
turn-e-mail job.

Each of them is built from the context (they read its store, counters and settings), and the queue's own
routes read them back (health, readiness, the console's badges), so neither can be built first: the
composition root builds the context, then them, and attaches them here once, before the first request.
"""

from __future__ import annotations

from typing import Any, Protocol

from queue_manager.metrics import Counters


class HostsView(Protocol):
    def __bool__(self) -> bool: ...  # any inline room at all

    def lookup(self, host: bytes | None) -> object | None: ...  # the inline room this Host fronts, if any


class OriginWatch(Protocol):
    def failing(self) -> list[str]: ...


class InlineStatus(Protocol):
    """What the queue's own routes read of the inline proxy (health, readiness, which hosts it fronts)."""

    @property
    def index(self) -> HostsView: ...

    @property
    def probe(self) -> OriginWatch: ...

    def at_ceiling(self) -> bool: ...

    def health(self, counters: Counters | None = None) -> dict[str, object]: ...

    def console_host(self, host: bytes | None) -> bool: ...  # does the console answer there while rooms are inline


class AlertsView(Protocol):
    """What the queue's routes read of the alert frames and the leader's jobs (``jobs/alert_frame.py``)."""

    def view(self, *, full: bool) -> dict[str, Any]: ...

    async def test(self) -> dict[str, Any]: ...

    def badges(self) -> dict[str, dict[str, Any]]: ...


class TurnMailView(Protocol):
    """What health reads of the leader's turn-e-mail job (``jobs/turn_mail.py``)."""

    async def health(self) -> dict[str, Any]: ...


class AlreadyAttached(RuntimeError):
    pass


class Attached:
    """Filled once by the composition root; each is None until then, or when the server runs none."""

    __slots__ = ("alerts", "inline", "turn_mail")

    def __init__(self) -> None:
        self.inline: InlineStatus | None = None
        self.alerts: AlertsView | None = None
        self.turn_mail: TurnMailView | None = None

    def attach(self, *, inline: InlineStatus, alerts: AlertsView, turn_mail: TurnMailView | None) -> None:
        if self.inline is not None:
            raise AlreadyAttached("the inline proxy, the alert frames and the turn-e-mail job are attached once")
        self.inline, self.alerts, self.turn_mail = inline, alerts, turn_mail
