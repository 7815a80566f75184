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

    @property
    def line(self) -> str:
        """The line the process prints on stderr when it refuses to start."""
        return f"queue-manager: refusing to start: {self.message}"


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

    @property
    def line(self) -> str:
        """What the server prints on stderr at start."""
        return f"WARNING {self.variable}: {self.message}"

    def as_json(self) -> dict[str, str | None]:
        """As ``/api/admin/health`` and ``qm config --json`` list it."""
        return {"variable": self.variable, "set": self.set_value, "effective": self.effective, "message": self.message}
