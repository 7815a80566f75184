"""The fault drill (``make chaos``, ``python -m tests.chaos.drill``) and what its short test shares with it.

``reconcile.py``: the joins a drill makes and the reconciliation of every acknowledged one against the
live line and the events journal, before and after a rebuild. ``drill.py``: the drill itself.
"""
