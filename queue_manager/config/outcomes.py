"""The two outcomes of reading the configuration besides success: a refusal and a warning."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ConfigRefusal", "ConfigWarning"]


class ConfigRefusal(Exception):
    """A setting the server must not start with. ``message`` names the setting and the way out."""

    variable: str
    message: str

    def __init__(self, variable: str, message: str) -> None:
        super().__init__(message)
        self.variable = variable
        self.message = message

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class ConfigWarning:
    """A setting the server started with, but not the way it was written (or a risky one).

    ``set_value`` is what the environment held (``None`` when unset, ``"(hidden)"`` for a
    secret); ``effective`` is what is in effect (``None`` when nothing is).
    """

    variable: str
    set_value: str | None
    effective: str | None
    message: str
