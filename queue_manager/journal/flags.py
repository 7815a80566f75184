"""The keys of the flags PostgreSQL's ``system_state`` table mirrors for the fleet.

Plain names, in a module of their own so that a part which only names a flag (admission maintenance,
imported by every server) does not load the PostgreSQL driver with it.
"""

from __future__ import annotations

#: Journal maintenance mode (the disk spool), mirrored for every instance.
MAINTENANCE_KEY = "maintenance_mode"
#: Admission maintenance (POP maintenance), mirrored for every instance.
POP_MAINTENANCE_KEY = "pop_maintenance_mode"
