"""The fleet's parts on STORE=valkey + SIDESTORE=pg, each with one job, built together by :func:`build`.

The composition root (``server.py``, through ``assembly/``) wires them into the context and starts and
stops them in the order ``boot.py`` keeps; the routes and jobs read the part they need.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from queue_manager.config import Settings
from queue_manager.fleet.checkpoints import Checkpoints
from queue_manager.fleet.connection import FleetConnection
from queue_manager.fleet.counters import FleetCounters
from queue_manager.fleet.gapwatch import GapWatch
from queue_manager.fleet.reconcile_loop import ReconcileLoop
from queue_manager.fleet.recovery import Recovery
from queue_manager.fleet.room_watch import RoomWatch
from queue_manager.fleet.storage_watch import StorageWatch
from queue_manager.fleet.void import JournalVoid
from queue_manager.journal.database import Database
from queue_manager.journal.gaps import JournalGaps
from queue_manager.journal.pg import PgJournal

# how long a seq may be missing from the journal before the leader commits it from the outbox (or RESYNC_MS x 2)
COMMIT_DEADLINE_MS = 10_000


@dataclass(frozen=True, slots=True)
class FleetParts:
    settings: Settings
    #: the instance's one PostgreSQL pool, shared by the journal and the access records
    database: Database
    journal: PgJournal  # the events journal in PostgreSQL
    connection: FleetConnection  # the Valkey store, the fleet's keys, the lease, the hints
    rooms: RoomWatch  # the rooms the journal says exist
    storage: StorageWatch  # every instance's storage health, in Valkey
    counters: FleetCounters  # each instance's counters in Valkey every 5 s: health shows the fleet's sum
    gaps: GapWatch  # the journal's gaps closed from the rooms' outboxes (the leader), reported to every instance
    recovery: Recovery  # rooms rebuilt from the journal, rooms ahead of it
    checkpoints: Checkpoints  # the leader's checkpoints
    void: JournalVoid  # seqs nobody can recover, closed by an operator
    loop: ReconcileLoop  # the round every RESYNC_MS


def build(settings: Settings, database: Database) -> FleetParts:
    """Every part of the fleet, on the one PostgreSQL pool the composition root owns (opened before
    ``boot.start`` and closed after ``boot.stop``)."""
    assert settings.valkey_url and settings.database_url
    spool = Path(settings.spool_dir) if settings.spool_dir else None
    journal = PgJournal(
        database,
        instance_id=settings.instance_id,
        spool_dir=spool,
        max_batch=settings.journal_max_batch,
        spool_on_failure=settings.spool_on_failure,
    )
    rooms = RoomWatch(journal)
    connection = FleetConnection(settings, rooms)
    storage = StorageWatch(
        journal,
        connection.redis,
        connection.prefix,
        settings.instance_id,
        settings.alert_every_ms,
        journal.clock,
        report_every_ms=settings.resync_ms,
    )
    breaker = connection.store.breaker
    counters = FleetCounters(
        connection.redis, connection.prefix, settings.instance_id, journal.clock, down=lambda: breaker.down
    )
    gaps = GapWatch(
        connection.redis,
        settings.valkey_prefix,
        connection.prefix,
        JournalGaps(database),
        journal.clock,
        deadline_ms=max(COMMIT_DEADLINE_MS, 2 * settings.resync_ms),
        publish_ms=3 * max(500, settings.resync_ms),
    )
    recovery = Recovery(settings, journal, connection, rooms, storage, gaps)
    checkpoints = Checkpoints(settings, journal)
    return FleetParts(
        settings=settings,
        database=database,
        journal=journal,
        connection=connection,
        rooms=rooms,
        storage=storage,
        counters=counters,
        gaps=gaps,
        recovery=recovery,
        checkpoints=checkpoints,
        void=JournalVoid(settings, journal, connection, storage, gaps, recovery),
        loop=ReconcileLoop(settings, journal, connection, storage, recovery, checkpoints),
    )
