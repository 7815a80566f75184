"""The console chart's series and its marks: sampled in this process, the marks shared through PostgreSQL.

* ``base.py`` — the interfaces: ``MarkSink`` (where the recorder hands its marks) and ``TimelineView``
  (what the chart's route reads back);
* ``series.py`` — the series recorder, in this process always (STORE=memory and valkey alike): the
  bucketed series and this process's own marks;
* ``pg.py`` — the marks shared by the fleet in PostgreSQL (SIDESTORE=pg): ``TimelineNotes``, both a
  ``MarkSink`` and a ``TimelineView``.
"""
