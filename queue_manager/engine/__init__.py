"""The queue's rules: pure, clock injected, no I/O.

``Room`` holds one room's live state and the transitions that change it; the operations that decide
them sit beside it (``visitor``: join, status, the door; ``operator``: eject, purge, flush;
``outflow``: the tick; ``drop``: the draw), and ``report``/``view`` read a room for its readers.
``Engine`` keeps the rooms of one store, their generations and the finished-ticket look-up. Every
state change is an ``Event`` — the unit a journal stores and a rebuild replays.
"""

from queue_manager.engine.errors import EngineError
from queue_manager.engine.events import Event
from queue_manager.engine.model import ClientId, RoomConfig

__all__ = ["ClientId", "EngineError", "Event", "RoomConfig"]
