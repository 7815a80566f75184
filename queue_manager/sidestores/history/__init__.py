"""The hourly history behind the reports: rows folded from samples, kept in this process or in PostgreSQL.

* ``rows.py`` — one room's hour as stored (``HourRow``) and the fold of a sample into it;
* ``report.py`` — the report rows: hours merged into hour or day buckets, holes and partial rows;
* ``base.py`` — the interfaces the writer keeps the history through: ``Warehouse`` (the rows) and
  ``RefusalCounts`` (bot protection's blocked and warned per room and hour);
* ``memory.py`` — both in this process (STORE=memory): ``MemoryWarehouse``, ``MemoryRefusals``;
* ``pg.py`` — the rows in PostgreSQL for the fleet (SIDESTORE=pg): ``PgWarehouse``;
* ``valkey.py`` — the refusal counts in Valkey for the fleet (STORE=valkey): ``SharedRefusals``;
* ``writer.py`` — ``HourlyHistory``, the writer and reader every instance holds (``Context.history``).
"""
