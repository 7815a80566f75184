"""``load_settings``: the environment in, a frozen :class:`Settings` out (or a refusal).

Settings are read in declaration order, then the rules across settings run. The outcome is the
same as reading and checking one step at a time: a rule runs right after the last setting it
reads, so the refusal reported is the first one met in that order, and warnings are listed in it.

Where each value comes from is kept too (``set_variables``, ``applied_variables``): a variable set
in the environment is applied unless its read warned and fell back to the unset value, or a rule
replaced its value (EDGE_SECRET setting TRUST_PROXY aside, an SMTP_FROM that holds no address).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from queue_manager.config import rules
from queue_manager.config.declare import Reader
from queue_manager.config.outcomes import ConfigRefusal, ConfigWarning
from queue_manager.config.settings import DECLARATIONS, Settings

__all__ = ["load_settings", "read_settings"]

#: The step of each declared setting, by field name: its position in the order settings are read.
_STEP = {field_name: step for step, field_name in enumerate(DECLARATIONS)}


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Read and validate the configuration. Raises :class:`ConfigRefusal` if it must not start."""
    env: Mapping[str, str] = os.environ if environ is None else environ
    r = Reader(env, tuple(DECLARATIONS.values()))

    # Each setting on its own. A refusal is kept (with its step) rather than raised, so a rule
    # that runs at an earlier step can still refuse first; the setting stands at its unset value.
    values: dict[str, Any] = {}
    refusals: list[tuple[int, ConfigRefusal]] = []
    applied: set[str] = set()
    for field_name, declaration in DECLARATIONS.items():
        r.step = _STEP[field_name]
        try:
            value = declaration.read(r, values)
        except ConfigRefusal as refusal:
            refusals.append((r.step, refusal))
            values[field_name] = declaration.unset(values)
            continue
        variable = declaration.env
        if r.raw(variable) is not None and not (r.warned(variable) and value == declaration.unset(values)):
            applied.add(variable)
        values[field_name] = value
    # The fields no variable sets are filled in from the others: the key flags now, the
    # warnings and the hardening list once every rule has run.
    settings = Settings(
        **values,
        admin_key_is_default=False,
        public_api_key_is_default=False,
        secret_is_default=False,
        instance_id_per_boot=r.raw("QM_INSTANCE_ID") is None,
        warnings=(),
        hardening=(),
        set_variables=frozenset(d.env for d in DECLARATIONS.values() if r.raw(d.env) is not None),
        applied_variables=frozenset(),
    )
    settings = rules.with_key_flags(settings)

    # Settings against one another, each rule right after the last setting it reads.
    for rule in sorted(rules.RULES, key=lambda rule: _STEP[rule.after]):
        r.step = _STEP[rule.after]
        if refusals and refusals[0][0] <= r.step:
            raise refusals[0][1]
        checked = rule.check(settings, r)
        if checked is not None:
            applied -= _replaced(settings, checked)
            settings = checked
    if refusals:
        raise refusals[0][1]

    return replace(
        settings, warnings=r.warnings, hardening=rules.hardening(settings), applied_variables=frozenset(applied)
    )


def _replaced(before: Settings, after: Settings) -> set[str]:
    """The variables whose value a rule replaced."""
    return {d.env for name, d in DECLARATIONS.items() if getattr(before, name) != getattr(after, name)}


def read_settings(
    *fields: str, environ: Mapping[str, str] | None = None
) -> tuple[dict[str, Any], tuple[ConfigWarning, ...]]:
    """A few settings on their own, by field name, each read and checked exactly as ``load_settings`` reads
    it (its default, bounds and warnings; a refusal is raised), with none of the rules across settings: what a
    tool that talks to a server (``qm rehearse``: HOST, PORT, ADMIN_KEY) needs of the server's environment,
    without being refused for a setting only the server uses. Only settings whose default is not derived
    from another one can be read this way."""
    env: Mapping[str, str] = os.environ if environ is None else environ
    wanted = [DECLARATIONS[name] for name in fields]
    r = Reader(env, tuple(wanted))
    values: dict[str, Any] = {}
    for name, declaration in zip(fields, wanted, strict=True):
        r.step = _STEP[name]
        values[name] = declaration.read(r, values)
    return values, r.warnings
