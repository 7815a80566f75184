"""The durable record: the PostgreSQL events journal, its migrations and the maintenance spool.

``Database`` is the one PostgreSQL pool of an instance (built once, handed to every part that uses
PostgreSQL). ``PgJournal`` composes the journal's parts on it: the group-commit writer
(``writer.py``), the reader (``reader.py``) that serves a rebuild (``queue_manager.engine.replay``),
the checkpoint policy that keeps a rebuild short (``checkpoints.py``), maintenance mode with its
disk spool (``maintenance.py``, ``spool.py``) and the health of its writes (``health.py``). Every
table and column comes from ``migrations.py``.
"""

from queue_manager.journal.database import Database
from queue_manager.journal.maintenance import MAINTENANCE_KEY, POP_MAINTENANCE_KEY
from queue_manager.journal.migrations import LATEST as SCHEMA_VERSION
from queue_manager.journal.migrations import migrate
from queue_manager.journal.pg import PgJournal
from queue_manager.journal.spool import Spool, SpoolCorrupt

__all__ = [
    "MAINTENANCE_KEY",
    "POP_MAINTENANCE_KEY",
    "SCHEMA_VERSION",
    "Database",
    "PgJournal",
    "Spool",
    "SpoolCorrupt",
    "migrate",
]
