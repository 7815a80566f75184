"""The typed set of services a store brings: the same fields whichever store ``STORE`` names."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from queue_manager.access.authfail.base import AuthBudget
from queue_manager.access.records.base import AccessStore
from queue_manager.engine.model import ClientId
from queue_manager.engine.view import VisitorView
from queue_manager.engine.visitor import Presented
from queue_manager.services.sse import LiveReads
from queue_manager.sidestores.entrybook.base import EntryBook
from queue_manager.sidestores.entrycodes.base import EntryCodes
from queue_manager.sidestores.entrykeys.base import EntryKeys
from queue_manager.sidestores.history.writer import HourlyHistory
from queue_manager.sidestores.mailbook.base import AddressBook
from queue_manager.sidestores.maintenance.base import AdmissionMaintenance, JournalMaintenance
from queue_manager.sidestores.revocations.base import RevocationList
from queue_manager.sidestores.timeline.base import SharedTimeline
from queue_manager.store.base import Store

if TYPE_CHECKING:
    from queue_manager.fleet.parts import FleetParts

#: a visitor's status read without a coroutine
StatusNow = Callable[[str, ClientId, Presented | None], VisitorView]


@dataclass(frozen=True, slots=True)
class Parts:
    store: Store  # the rooms and their lines
    #: the store's status read without a coroutine, when it answers in this process (the memory store): a
    #: room's live streams then step inline; None: they read in batches (``Store.status_many``)
    status_now: StatusNow | None
    history: HourlyHistory  # the reports' hourly rows (this process's, or PostgreSQL's)
    timeline: SharedTimeline | None  # the marks every instance shares (None: this process's only)
    revocations: RevocationList  # revoked edge passes (this process's, or Valkey's)
    entry_keys: EntryKeys  # the rooms' invitation keys, sealed (this process's, or PostgreSQL's)
    entry_codes: EntryCodes  # the rooms' entry codes, hashed (this process's, or PostgreSQL's)
    entry_book: EntryBook  # spent invitations, user keys' places, entry counts (this process's, or Valkey's)
    addresses: AddressBook | None  # turn-e-mail sign-ups (memory or Valkey), with TURN_EMAILS only
    admission: AdmissionMaintenance  # admission maintenance (this process's, or the fleet's on Valkey)
    #: journal maintenance: the disk spool (STORE=valkey), or a flag alone (STORE=memory)
    journal_maintenance: JournalMaintenance
    access_records: AccessStore  # operators, monitor links, the audit trail
    auth_failures: AuthBudget  # the wrong-key budget (this process's, or the fleet's)
    fleet: FleetParts | None  # on STORE=valkey: the journal, the Valkey connection, the lease, recovery
    #: live streams' frames answered in this process while they can be (STORE=valkey: its replicas of the
    #: lines, store/valkey/live.py); None: every frame reads the store
    live_reads: LiveReads | None = None
