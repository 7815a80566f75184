"""The durable record: the PostgreSQL events journal, its migrations and the maintenance spool.

``Database`` is the one PostgreSQL pool of an instance (built once, handed to every part that uses
PostgreSQL). ``PgJournal`` composes the journal's parts on it: the group-commit writer
(``writer.py``), the reader (``reader.py``) that serves a rebuild (``queue_manager.engine.replay``),
the checkpoint policy that keeps a rebuild short (``checkpoints.py``), maintenance mode with its
disk spool (``maintenance.py``, ``spool.py``) and the health of its writes (``health.py``). Every
table and column comes from ``migrations.py``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from queue_manager.journal.database import Database
    from queue_manager.journal.flags import MAINTENANCE_KEY, POP_MAINTENANCE_KEY
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

# The package's names load on first use: a memory server imports the maintenance keys without the
# PostgreSQL driver.
_LAZY = {
    "MAINTENANCE_KEY": ("flags", "MAINTENANCE_KEY"),
    "POP_MAINTENANCE_KEY": ("flags", "POP_MAINTENANCE_KEY"),
    "SCHEMA_VERSION": ("migrations", "LATEST"),
    "Database": ("database", "Database"),
    "PgJournal": ("pg", "PgJournal"),
    "Spool": ("spool", "Spool"),
    "SpoolCorrupt": ("spool", "SpoolCorrupt"),
    "migrate": ("migrations", "migrate"),
}


if not TYPE_CHECKING:  # mypy reads the names from the imports above, and still checks each use

    def __getattr__(name: str) -> Any:
        where = _LAZY.get(name)
        if where is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{__name__}.{where[0]}"), where[1])
        globals()[name] = value
        return value
