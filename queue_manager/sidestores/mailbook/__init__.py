"""The turn-e-mail address book: in this process, or in Valkey for the fleet (never PostgreSQL).

* ``base.py`` — the interface, ``AddressBook``, and what it keeps (``Place``, ``Entry``);
* ``memory.py`` — this process's book (STORE=memory): ``MemoryAddressBook``;
* ``valkey.py`` — the fleet's book in Valkey (STORE=valkey): ``ValkeyAddressBook``.
"""
