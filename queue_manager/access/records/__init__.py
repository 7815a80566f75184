"""The access records (operators, monitor links, revocations, stream tickets, audit).

Kept in this process (memory.py) or in PostgreSQL with Valkey beside it (pg.py).
"""
