"""Revoked edge passes per room: in this process, or in Valkey for the fleet.

* ``base.py`` — the interface the edge-pass routes use, ``RevocationList``;
* ``memory.py`` — this process's list (STORE=memory): ``MemoryRevocations``;
* ``valkey.py`` — the fleet's list in Valkey (STORE=valkey): ``ValkeyRevocations``.
"""
