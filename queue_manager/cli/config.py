"""`qm config`: the settings the server would start with, where each comes from, and what it would say.

The environment is read exactly as ``qm serve`` reads it (``load_settings``), and the server's own
check of the settings before it connects to anything is made too (``server.settings_refusal``: an
alert webhook on a private address, whose name is resolved). Nothing is connected to: the refusals
only a connection finds (Valkey's credentials, host and certificate; PostgreSQL's certificate) are
not seen here.

Text: one line per setting (variable, source, value in effect; a secret only as set or unset), then
the warnings as the server prints them at start and the hardening list. ``--json``: one object,
``{"settings": [...], "warnings": [...], "hardening": [...]}``, the settings and warnings in the
form ``/api/admin/health`` answers them. A refusal: the server's refusal line on stderr, exit 2
(with ``--json``, ``{"refusal": {"variable", "message"}}`` on stdout as well).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from queue_manager.config import ConfigRefusal, EffectiveSetting, Settings, effective_settings, load_settings
from queue_manager.server import settings_refusal

__all__ = ["render", "report", "run"]

_SOURCE_WIDTH = len("environment")


def run(args: argparse.Namespace) -> int:
    """Print the settings in effect; 0 when the server would start with them, 2 when it would refuse."""
    try:
        settings = load_settings()
        refusal = settings_refusal(settings)
        if refusal is not None:
            raise refusal
    except ConfigRefusal as refused:
        if args.json:
            _write({"refusal": {"variable": refused.variable, "message": refused.message}})
        print(refused.line, file=sys.stderr, flush=True)
        return 2
    if args.json:
        _write(report(settings))
    else:
        print(render(settings), flush=True)
    return 0


def report(settings: Settings) -> dict[str, Any]:
    """``qm config --json``."""
    return {
        "settings": [setting.as_json() for setting in effective_settings(settings)],
        "warnings": [warning.as_json() for warning in settings.warnings],
        "hardening": list(settings.hardening),
    }


def render(settings: Settings) -> str:
    """``qm config``: a line per setting, then the warnings and the hardening list."""
    listing = effective_settings(settings)
    width = max(len(setting.name) for setting in listing)
    lines = [f"{'VARIABLE':<{width}}  {'SOURCE':<{_SOURCE_WIDTH}}  VALUE"]
    for setting in listing:
        shown = _shown(setting)
        if setting.name == "QM_INSTANCE_ID" and settings.instance_id_per_boot:
            shown += " (random: a new one on each start)"
        lines.append(f"{setting.name:<{width}}  {setting.source:<{_SOURCE_WIDTH}}  {shown}")
    if settings.warnings or settings.hardening:
        lines.append("")
    lines += [warning.line for warning in settings.warnings]
    lines += [f"HARDENING: {item}" for item in settings.hardening]
    return "\n".join(lines)


def _shown(setting: EffectiveSetting) -> str:
    if setting.sensitive:
        return "set (hidden)" if setting.is_set else "unset"
    value = setting.value
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        return ",".join(value) or "none"
    return str(value)


def _write(document: dict[str, Any]) -> None:
    sys.stdout.buffer.write(orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")
    sys.stdout.flush()
