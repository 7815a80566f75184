"""Stores: where the engine's state lives. ``memory`` in one process; ``valkey`` (+ pg journal) shared."""

from queue_manager.store.base import Store, StoreUnavailable

__all__ = ["Store", "StoreUnavailable"]
