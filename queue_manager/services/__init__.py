"""The services one process keeps for its routes: live streams, per-address budgets, identity, peers, edge checks."""
