"""What a room's entry remembers: spent invitation ids, each user key's place, the entry counts.

* ``base.py`` — the interface the join uses, ``EntryBook``;
* ``memory.py`` — this process's book (STORE=memory): ``MemoryEntryBook``;
* ``valkey.py`` — the fleet's book in Valkey (STORE=valkey): ``ValkeyEntryBook``.
"""
