"""The durable record: the PostgreSQL events journal, its migrations and the maintenance spool.

``PgJournal`` group-commits engine events to PostgreSQL (or, in maintenance mode, to an append-only
disk spool drained into PostgreSQL afterwards), reads a room generation's journal back for a
rebuild (``queue_manager.engine.replay``) and keeps the checkpoints that make a rebuild short.
"""

from queue_manager.journal.migrations import LATEST as SCHEMA_VERSION
from queue_manager.journal.migrations import migrate
from queue_manager.journal.pg import MAINTENANCE_KEY, POP_MAINTENANCE_KEY, PgJournal
from queue_manager.journal.spool import Spool, SpoolCorrupt

__all__ = [
    "MAINTENANCE_KEY",
    "POP_MAINTENANCE_KEY",
    "SCHEMA_VERSION",
    "PgJournal",
    "Spool",
    "SpoolCorrupt",
    "migrate",
]
