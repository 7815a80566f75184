"""The value in effect of every setting and where it comes from, secrets masked.

One list, two readers: ``qm config`` prints it, and ``GET /api/admin/health`` answers it under
``settings``. Every declared setting is in it once, in the order settings are read, named by its
environment variable:

* ``value`` — what is in effect, as JSON: a number, a yes/no as a boolean, text, a list of addresses
  or host names, ``null`` when nothing is in effect (the variable unset and no default). A sensitive
  setting (declared ``sensitive=True``) never shows its value, nor anything derived from it:
  ``value`` is ``null`` and ``set`` alone says whether the environment holds one.
* ``source`` — ``environment``: the value set is the one in effect; ``default``: the variable is
  unset, or set but not usable (a warning says why), and the declared default is in effect;
  ``derived``: the same, with a default computed from other settings (SIDESTORE from STORE,
  TOKEN_REFRESH_AFTER_MS from the lifetimes, a random QM_INSTANCE_ID per boot).
* ``set`` — whether the environment holds a value (an empty value counts as unset).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from queue_manager.config.declare import Declaration
from queue_manager.config.settings import DECLARATIONS, Settings

__all__ = ["EffectiveSetting", "Source", "Value", "effective_settings"]

Source = Literal["environment", "default", "derived"]
#: A value as JSON has it.
Value = bool | int | str | list[str] | None


@dataclass(frozen=True)
class EffectiveSetting:
    """One setting as it is in effect. ``value`` is None for a sensitive setting, always."""

    name: str
    value: Value
    source: Source
    sensitive: bool
    is_set: bool

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "source": self.source,
            "sensitive": self.sensitive,
            "set": self.is_set,
        }


def effective_settings(settings: Settings) -> tuple[EffectiveSetting, ...]:
    """Every declared setting, in the order they are read: its value in effect (masked when
    sensitive), its source and whether the environment sets it."""
    return tuple(_effective(settings, name, declaration) for name, declaration in DECLARATIONS.items())


def _effective(settings: Settings, field_name: str, declaration: Declaration[Any]) -> EffectiveSetting:
    env = declaration.env
    source: Source
    if env in settings.applied_variables:
        source = "environment"
    elif declaration.derived:
        source = "derived"
    else:
        source = "default"
    value = None if declaration.sensitive else _as_json(getattr(settings, field_name))
    return EffectiveSetting(env, value, source, declaration.sensitive, env in settings.set_variables)


def _as_json(value: Any) -> Value:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, tuple):  # addresses and ranges, host names
        return [str(item) for item in value]
    return str(value)
