"""Errors the engine raises; the HTTP layer maps each to a status and the spec's ``code``."""

from __future__ import annotations

from typing import Any


class EngineError(Exception):
    """A refusal with a stable machine code (``unknown_field``, ``no_room`` …) and an HTTP status."""

    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.extra = extra
        self.headers: dict[str, str] = {}


def bad_field(field: str, message: str, code: str = "invalid_field") -> EngineError:
    return EngineError(400, code, message, field=field)


def no_room(room_id: str) -> EngineError:
    return EngineError(404, "no_room", f"No room with id {room_id!r}.", roomId=room_id)
