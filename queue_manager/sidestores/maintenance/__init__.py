"""The two maintenance modes of the system surface: journal maintenance (the disk spool) and admission maintenance.

* ``base.py`` — the interfaces the system routes and the ticker use: ``JournalMaintenance`` and
  ``AdmissionMaintenance``;
* ``memory.py`` — both as this process's flags (STORE=memory): ``MemoryJournalMaintenance``,
  ``MemoryAdmissionMaintenance``;
* ``pg.py`` — journal maintenance on this instance's journal spool, mirrored in PostgreSQL and announced to
  the fleet (STORE=valkey): ``PgJournalMaintenance``;
* ``valkey.py`` — admission maintenance as the fleet's flag in Valkey, mirrored in PostgreSQL
  (STORE=valkey): ``ValkeyAdmissionMaintenance``.
"""
