"""Surge rehearsals and wait simulations: ``qm rehearse`` and ``qm simulate`` (docs/OPERATIONS.md)."""
