"""The access records (operators, monitor links, revocations, stream tickets, audit).

* ``base.py`` — the interface ``Access`` keeps them through (``AccessStore``) and the records themselves;
* ``memory.py`` — kept in this process (STORE=memory): ``MemoryAccessStore``;
* ``pg.py`` — kept in PostgreSQL with Valkey beside it, for the fleet (STORE=valkey): ``SharedAccessStore``.
"""
