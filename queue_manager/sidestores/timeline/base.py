"""The chart's marks beyond this process, as the recorder and the chart's route see them.

* :class:`MarkSink` — where the series recorder (``series.py``) hands every mark it makes;
* :class:`TimelineView` — what ``GET /api/admin/series/<room>`` reads back (``Context.timeline``);
* :class:`SharedTimeline` — both, with the writer's start and stop: what the fleet's parts hold.

The recorder keeps its own marks in this process, always; with SIDESTORE=pg the shared timeline
(``pg.TimelineNotes``) is both of these, so the marks outlive the process and every instance shows the same.
"""

from __future__ import annotations

from typing import Any, Protocol


class MarkSink(Protocol):
    """Where the recorder's marks go beyond this process (``pg.TimelineNotes``)."""

    def mark(self, room_id: str, t: int, kind: str, note: str) -> None: ...

    def block(self, room_id: str, minute: int, n: int = 1) -> None: ...


class TimelineView(Protocol):
    """The chart's marks kept in PostgreSQL for the fleet (``pg.py``), with SIDESTORE=pg."""

    async def read(self, room_id: str, since_s: int) -> list[dict[str, Any]]: ...

    def stats(self) -> dict[str, int]: ...


class SharedTimeline(MarkSink, TimelineView, Protocol):
    """The marks kept in PostgreSQL for the fleet (``pg.TimelineNotes``), with SIDESTORE=pg: written about a
    second after each mark by one job, read back by every instance."""

    def start(self) -> None: ...

    async def stop(self) -> None: ...
