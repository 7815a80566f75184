"""What is kept beside the line, one package per concept.

Each package holds its twins side by side: the memory one (STORE=memory) and the shared one (Valkey or
PostgreSQL, STORE=valkey), behind the one interface the routes and jobs use (``base.py``).
"""
