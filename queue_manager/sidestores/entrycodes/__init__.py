"""Each room's entry codes, kept as salted hashes with their lane and uses.

* ``base.py`` — the interface, ``EntryCodes``, and what a redemption answers;
* ``memory.py`` — this process's codes (STORE=memory): ``MemoryEntryCodes``;
* ``pg.py`` — the fleet's codes in PostgreSQL (STORE=valkey), durable and shared: ``PgEntryCodes``.
"""
