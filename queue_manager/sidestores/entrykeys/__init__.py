"""Each room's entry keys (the keys its invitation tokens are signed with), kept sealed.

* ``base.py`` — the interface, ``EntryKeys``, and ``SealedKey``;
* ``memory.py`` — this process's keys (STORE=memory): ``MemoryEntryKeys``;
* ``pg.py`` — the fleet's keys in PostgreSQL (STORE=valkey), durable and shared: ``PgEntryKeys``.
"""
