"""Inline deployment: Queue Manager as the reverse proxy in front of the app (see docs/OPERATIONS.md)."""
