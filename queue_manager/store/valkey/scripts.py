"""The Lua scripts: ``lua/prelude.lua`` (the engine's rules) + one file per operation, each loaded
once with SCRIPT LOAD and called with EVALSHA (reloaded on NOSCRIPT, e.g. after a Valkey restart).

Every script is ``#!lua`` (flags: none), so a Valkey over ``maxmemory`` refuses it before it runs
(OOM) instead of failing halfway through its writes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources

from queue_manager.store.valkey.keys import lua_key_table

OPERATIONS = (
    "join",
    "status",
    "check",
    "door_replay",
    "tick",
    "stats",
    "upsert",
    "schedule",
    "delete",
    "lookup",
    "eject",
    "purge",
    "blocked",
    "revoke",
    "export",
    "import",
    "cfg",
)


@dataclass(frozen=True, slots=True)
class Script:
    name: str
    source: str
    sha: str


def _read(name: str) -> str:
    return resources.files("queue_manager.store.valkey").joinpath("lua").joinpath(f"{name}.lua").read_text("utf-8")


def build(name: str) -> Script:
    source = "#!lua\n" + lua_key_table() + _read("prelude") + "\n-- ---- " + name + ".lua\n" + _read(name)
    return Script(name, source, hashlib.sha1(source.encode()).hexdigest())


def load_all() -> dict[str, Script]:
    return {name: build(name) for name in OPERATIONS}
