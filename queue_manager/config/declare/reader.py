"""The environment as the settings read it: by declared variable name only, secrets hidden from
what is reported, and the warnings it gave, in the order the settings are read."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from queue_manager.config.outcomes import ConfigWarning

if TYPE_CHECKING:
    from queue_manager.config.declare.base import Declaration

#: What a warning shows instead of the value of a sensitive setting.
HIDDEN = "(hidden)"


class Reader:
    """One environment mapping, read by declared variable name only, and the warnings it gave.

    ``step`` is the position, in the order settings are read, of what is being read or checked;
    :attr:`warnings` lists the warnings in step order (in the order given within a step).
    """

    def __init__(self, environ: Mapping[str, str], declared: Sequence[Declaration[Any]]) -> None:
        self._env = environ
        self._known = frozenset(d.env for d in declared)
        self._sensitive = frozenset(d.env for d in declared if d.sensitive)
        self.step = 0
        self._warnings: list[tuple[int, ConfigWarning]] = []

    def raw(self, name: str) -> str | None:
        """The value set, or None when unset or empty."""
        assert name in self._known, f"{name} must be declared in queue_manager/config/settings.py"
        value = self._env.get(name)
        if value is None or value == "":
            return None
        return value

    def shown(self, name: str) -> str | None:
        """The set value as it may be reported (secrets hidden)."""
        value = self.raw(name)
        if value is None:
            return None
        return HIDDEN if name in self._sensitive else value

    def warn(self, name: str, effective: str | None, message: str, *, set_value: str | None = None) -> None:
        shown = self.shown(name) if set_value is None else set_value
        self._warnings.append((self.step, ConfigWarning(name, shown, effective, message)))

    @property
    def warnings(self) -> tuple[ConfigWarning, ...]:
        return tuple(w for _, w in sorted(self._warnings, key=lambda item: item[0]))

    def warned(self, name: str) -> bool:
        """Whether a warning so far names ``name``."""
        return any(w.variable == name for _, w in self._warnings)
