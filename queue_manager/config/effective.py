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
* ``group`` — the part of the configuration the setting belongs to (``Core and storage``, ``Trust and
  access``, …): the sections of ``settings.py``, where each setting is declared, in the same order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from queue_manager.config.declare import Declaration
from queue_manager.config.settings import DECLARATIONS, Settings

__all__ = ["GROUPS", "EffectiveSetting", "Source", "Value", "effective_settings"]

Source = Literal["environment", "default", "derived"]
#: A value as JSON has it.
Value = bool | int | str | list[str] | None

#: The sections of settings.py, each as (its title, the first variable declared in it), in the order
#: settings are read: every setting belongs to the last section that starts at or before it.
GROUPS: tuple[tuple[str, str], ...] = (
    ("Core and storage", "PORT"),
    ("Trust and access", "TRUST_PROXY_IPS"),
    ("Keys and signing", "ADMIN_KEY"),
    ("Several instances", "VALKEY_PREFIX"),
    ("Rate limits", "JOIN_LIMIT_PER_MIN"),
    ("Connections, inline proxy and shutdown", "MAX_CONNECTIONS"),
    ("Bot protection", "PROTECTION_MODE"),
    ("Operations jobs", "ALERT_WEBHOOK_URL"),
)


@dataclass(frozen=True)
class EffectiveSetting:
    """One setting as it is in effect. ``value`` is None for a sensitive setting, always."""

    name: str
    value: Value
    source: Source
    sensitive: bool
    is_set: bool
    group: str

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "source": self.source,
            "sensitive": self.sensitive,
            "set": self.is_set,
            "group": self.group,
        }


def effective_settings(settings: Settings) -> tuple[EffectiveSetting, ...]:
    """Every declared setting, in the order they are read: its value in effect (masked when
    sensitive), its source and whether the environment sets it."""
    starts = {env: title for title, env in GROUPS}
    listing: list[EffectiveSetting] = []
    group = GROUPS[0][0]
    for name, declaration in DECLARATIONS.items():
        group = starts.get(declaration.env, group)
        listing.append(_effective(settings, name, declaration, group))
    return tuple(listing)


def _effective(settings: Settings, field_name: str, declaration: Declaration[Any], group: str) -> EffectiveSetting:
    env = declaration.env
    source: Source
    if env in settings.applied_variables:
        source = "environment"
    elif declaration.derived:
        source = "derived"
    else:
        source = "default"
    value = None if declaration.sensitive else _as_json(getattr(settings, field_name))
    return EffectiveSetting(env, value, source, declaration.sensitive, env in settings.set_variables, group)


def _as_json(value: Any) -> Value:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, tuple):  # addresses and ranges, host names
        return [str(item) for item in value]
    return str(value)
