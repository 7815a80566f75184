"""The parts for each store: :func:`memory_parts` (STORE=memory) or :func:`fleet_parts` (STORE=valkey with
SIDESTORE=pg); :func:`parts_for` picks by the settings. The fleet's modules are imported only on that path,
so a memory server never loads the Valkey client or the PostgreSQL driver."""

from __future__ import annotations

from queue_manager.access.authfail.memory import AuthFailures
from queue_manager.access.records.memory import MemoryAccessStore
from queue_manager.assembly.parts import Parts
from queue_manager.clock import SystemClock
from queue_manager.config import Settings
from queue_manager.sidestores.entrybook.memory import MemoryEntryBook
from queue_manager.sidestores.entrycodes.memory import MemoryEntryCodes
from queue_manager.sidestores.entrykeys.memory import MemoryEntryKeys
from queue_manager.sidestores.history.memory import MemoryRefusals, MemoryWarehouse
from queue_manager.sidestores.history.writer import HourlyHistory
from queue_manager.sidestores.mailbook.memory import MemoryAddressBook
from queue_manager.sidestores.maintenance.memory import MemoryAdmissionMaintenance, MemoryJournalMaintenance
from queue_manager.sidestores.revocations.memory import MemoryRevocations
from queue_manager.store.memory import MemoryStore


def parts_for(settings: Settings, clock: SystemClock) -> Parts:
    """The parts ``STORE`` names."""
    if settings.store == "memory":
        return memory_parts(settings, clock)
    return fleet_parts(settings, clock)


def _local_failures(settings: Settings, clock: SystemClock) -> AuthFailures:
    return AuthFailures(settings.admin_auth_fail_per_min, settings.rate_limit_max_keys, clock)


def memory_parts(settings: Settings, clock: SystemClock, store: MemoryStore | None = None) -> Parts:
    """Everything in this process: nothing survives a restart, nothing is shared."""
    store = store or MemoryStore(clock)
    return Parts(
        store=store,
        status_now=store.status_now,  # its calls never suspend
        history=HourlyHistory(
            MemoryWarehouse(),
            MemoryRefusals(),
            clock.wall_ms,
            retain_days=settings.history_retain_days,
            counters_from_boot=True,
        ),
        timeline=None,
        revocations=MemoryRevocations(clock),
        entry_keys=MemoryEntryKeys(clock),
        entry_book=MemoryEntryBook(clock),
        entry_codes=MemoryEntryCodes(),
        addresses=MemoryAddressBook(clock) if settings.turn_emails else None,
        admission=MemoryAdmissionMaintenance(store),
        journal_maintenance=MemoryJournalMaintenance(),
        access_records=MemoryAccessStore(),
        auth_failures=_local_failures(settings, clock),
        fleet=None,
    )


def fleet_parts(settings: Settings, clock: SystemClock) -> Parts:
    """The rooms in Valkey, the events journal and the side stores in PostgreSQL (or Valkey), on the one
    PostgreSQL pool the journal and the shared access records use."""
    from queue_manager.access.authfail.valkey import SharedAuthFailures
    from queue_manager.access.records.pg import SharedAccessStore
    from queue_manager.fleet.parts import build
    from queue_manager.journal.database import Database
    from queue_manager.sidestores.entrybook.valkey import ValkeyEntryBook
    from queue_manager.sidestores.entrycodes.pg import PgEntryCodes
    from queue_manager.sidestores.entrykeys.pg import PgEntryKeys
    from queue_manager.sidestores.history.pg import PgWarehouse
    from queue_manager.sidestores.history.valkey import SharedRefusals
    from queue_manager.sidestores.mailbook.valkey import ValkeyAddressBook
    from queue_manager.sidestores.maintenance.pg import PgJournalMaintenance
    from queue_manager.sidestores.maintenance.valkey import ValkeyAdmissionMaintenance
    from queue_manager.sidestores.revocations.valkey import ValkeyRevocations
    from queue_manager.sidestores.timeline.pg import TimelineNotes

    database = Database.from_settings(settings)
    fleet = build(settings, database)
    connection = fleet.connection
    store, redis, prefix, hints = connection.store, connection.redis, connection.prefix, connection.hints
    access_records = SharedAccessStore(database, redis, prefix, hints=hints, resync_ms=settings.resync_ms)
    # audit rows follow the journal into the disk spool while it spools
    access_records.spool_audit = fleet.journal.maintenance_spool.take_audit
    lease = connection.lease
    return Parts(
        store=store,
        status_now=None,  # a store over the network: a room's streams read their frames in batches
        # the reports' rows in PostgreSQL, written by the leader only from the fleet's counters
        history=HourlyHistory(
            PgWarehouse(database, clock.wall_ms),
            SharedRefusals(redis, prefix),
            clock.wall_ms,
            retain_days=settings.history_retain_days,
            leads=lambda: lease.leader,
        ),
        # the chart's marks: written to PostgreSQL about a second after each, read back by every instance
        timeline=TimelineNotes(database, clock),
        revocations=ValkeyRevocations(redis, prefix, clock),  # revoked edge passes, for the whole fleet
        entry_keys=PgEntryKeys(database, clock),  # invitation keys: durable, shared, sealed
        entry_book=ValkeyEntryBook(redis, prefix, clock),  # spent invitations, user keys' places, counts
        entry_codes=PgEntryCodes(database),  # entry codes: durable, shared, hashed
        addresses=ValkeyAddressBook(redis, prefix, clock) if settings.turn_emails else None,
        # admission maintenance: the fleet's flag in Valkey, announced by a hint, re-read every tick
        admission=ValkeyAdmissionMaintenance(
            store, redis, prefix, hints=hints, database=database, instance_id=settings.instance_id
        ),
        # journal maintenance: this instance's spool, the flag mirrored in PostgreSQL and announced by a hint
        journal_maintenance=PgJournalMaintenance(fleet.journal, hints=hints),
        access_records=access_records,
        # the fleet's wrong-key budget; this process's if Valkey is down
        auth_failures=SharedAuthFailures(
            redis,
            prefix,
            settings.admin_auth_fail_per_min,
            connection.clock,
            local=_local_failures(settings, clock),
            breaker=store.breaker,
            hints=hints,  # authlock: a lockout reaches every instance at once
            max_keys=settings.rate_limit_max_keys,
        ),
        fleet=fleet,
        # waiting visitors' frames from this instance's replicas of the lines (on a cluster too: each
        # room's feed is followed on the master that holds its slot)
        live_reads=store.lines,
    )
