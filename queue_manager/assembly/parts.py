"""The typed set of services a store brings: the same fields whichever store ``STORE`` names."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from queue_manager.access.authfail.memory import AuthBudget
from queue_manager.access.records.memory import AccessStore
from queue_manager.engine.model import ClientId
from queue_manager.engine.room import Presented
from queue_manager.engine.view import VisitorView
from queue_manager.sidestores.history.hourly import HourlyHistory
from queue_manager.sidestores.mailbook.memory import AddressBook
from queue_manager.sidestores.maintenance.admission import PopMaintenance
from queue_manager.sidestores.maintenance.journal import JournalMaintenance
from queue_manager.sidestores.revocations.memory import RevocationList
from queue_manager.store.base import Store

if TYPE_CHECKING:
    from queue_manager.fleet.parts import FleetParts

#: a visitor's status read without a coroutine
StatusNow = Callable[[str, ClientId, Presented | None], VisitorView]


class SharedTimeline(Protocol):
    """The chart's marks kept in PostgreSQL for the fleet (``sidestores/timeline/pg.py``), with SIDESTORE=pg:
    written about a second after each mark, read back by every instance."""

    def mark(self, room_id: str, t: int, kind: str, note: str) -> None: ...

    def block(self, room_id: str, minute: int, n: int = 1) -> None: ...

    async def read(self, room_id: str, since_s: int) -> list[dict[str, Any]]: ...

    def stats(self) -> dict[str, int]: ...

    def start(self) -> None: ...

    async def stop(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Parts:
    store: Store  # the rooms and their lines
    #: the store's status read without a coroutine, when it answers in this process (the memory store): a
    #: room's live streams then step inline; None: they read in batches (``Store.status_many``)
    status_now: StatusNow | None
    history: HourlyHistory  # the reports' hourly rows (this process's, or PostgreSQL's)
    timeline: SharedTimeline | None  # the marks every instance shares (None: this process's only)
    revocations: RevocationList  # revoked edge passes (this process's, or Valkey's)
    addresses: AddressBook | None  # turn-e-mail sign-ups (memory or Valkey), with TURN_EMAILS only
    admission: PopMaintenance  # admission maintenance (this process's, or the fleet's on Valkey)
    #: journal maintenance: the disk spool (STORE=valkey), or a flag alone (STORE=memory)
    journal_maintenance: JournalMaintenance
    access_records: AccessStore  # operators, monitor links, the audit trail
    auth_failures: AuthBudget  # the wrong-key budget (this process's, or the fleet's)
    fleet: FleetParts | None  # on STORE=valkey: the journal, the Valkey connection, the lease, recovery
