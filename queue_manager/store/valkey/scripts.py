"""The Lua scripts: ``lua/prelude.lua`` (the engine's rules) + one file per operation, each loaded
once with SCRIPT LOAD and called with EVALSHA (reloaded on NOSCRIPT, e.g. after a Valkey restart).

Every script is ``#!lua`` (flags: none), so a Valkey over ``maxmemory`` refuses it before it runs
(OOM) instead of failing halfway through its writes.

Every call of a script runs its prelude again: each ``local function`` is a new closure (the
functions close over the call's own state, so they cannot live in a FUNCTION library loaded once),
and all of it is garbage for Lua's collector afterwards. So each script carries only the part of
the prelude it reaches (``trim``): the top-level definitions its own file names, and what those
name, transitively. A statement that defines nothing is always kept.

Scripts remove keys with ``UNLINK``: gone at once for every reader, a large key's memory reclaimed by
Valkey's background thread rather than inside the call.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

from queue_manager.store.valkey.keys import lua_key_table

OPERATIONS = (
    "join",
    "join_many",
    "status",
    "status_many",
    "seen",
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
    "flush",
    "session_revoke",
    "blocked",
    "access_hit",
    "access_prune",
    "revoke",
    "export",
    "draw_page",
    "draw_stage",
    "import",
    "import_part",
    "cfg",
    "shard_seal",
    "shard_page",
    "shard_drain",
    "prequeue_merge",
)

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LOCAL_FUNCTION = re.compile(r"local\s+function\s+([A-Za-z_][A-Za-z0-9_]*)")
_LOCAL_NAMES = re.compile(r"local\s+([A-Za-z_][A-Za-z0-9_]*(?:\s*,\s*[A-Za-z_][A-Za-z0-9_]*)*)")
# a quoted string (kept: a "--" in it is no comment) or a comment (dropped before words are counted)
_STRING_OR_COMMENT = re.compile(r"""'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*"|--[^\n]*""")
# a line at column 0 that does not start a statement: the end of a block, a table or a call
_CONTINUES = ("end", "}", ")", "--", "else", "elseif", "until")


@dataclass(frozen=True, slots=True)
class Script:
    name: str
    source: str
    sha: str


@dataclass(frozen=True, slots=True)
class _Chunk:
    text: str
    defines: frozenset[str]  # empty: a statement, always kept
    names: frozenset[str]  # every identifier-like word in it (an over-estimate of what it uses)


def _read(name: str) -> str:
    return resources.files("queue_manager.store.valkey").joinpath("lua").joinpath(f"{name}.lua").read_text("utf-8")


def _words(text: str) -> frozenset[str]:
    """Every identifier-like word outside comments (strings and field names included: an over-count)."""
    if "[[" in text or "[=" in text:  # a long string or comment: count every word, comments too
        return frozenset(_NAME.findall(text))
    code = _STRING_OR_COMMENT.sub(lambda m: "" if m.group().startswith("--") else m.group(), text)
    return frozenset(_NAME.findall(code))


def _chunks(prelude: str) -> list[_Chunk]:
    """The prelude's top-level statements, each with the locals it defines and the words it names."""
    groups: list[list[str]] = []
    for line in prelude.splitlines(keepends=True):
        starts = bool(line.strip()) and not line[0].isspace() and not line.startswith(_CONTINUES)
        if starts or not groups:
            groups.append([])
        groups[-1].append(line)
    out: list[_Chunk] = []
    for lines in groups:
        text = "".join(lines)
        head = lines[0]
        defines: set[str] = set()
        fn = _LOCAL_FUNCTION.match(head)
        if fn is not None:
            defines.add(fn.group(1))
        else:
            names = _LOCAL_NAMES.match(head)
            if names is not None:
                defines.update(n.strip() for n in names.group(1).split(","))
        out.append(_Chunk(text, frozenset(defines), _words(text)))
    return out


def trim(prelude: str, body: str) -> str:
    """``prelude`` without the top-level definitions ``body`` cannot reach.

    Lua locals cannot be reached by name at run time, so a definition no kept code names is dead.
    Words are over-counted (strings, field names), which only keeps more.
    """
    chunks = _chunks(prelude)
    keep = [not c.defines for c in chunks]
    wanted = set(_words(body))
    for i, c in enumerate(chunks):
        if keep[i]:
            wanted |= c.names
    changed = True
    while changed:
        changed = False
        for i, c in enumerate(chunks):
            if not keep[i] and c.defines & wanted:
                keep[i] = True
                wanted |= c.names
                changed = True
    return "".join(c.text for c, k in zip(chunks, keep, strict=True) if k)


def build(name: str) -> Script:
    body = _read(name)
    prelude = trim(lua_key_table() + _read("prelude"), body)
    source = "#!lua\n" + prelude + "\n-- ---- " + name + ".lua\n" + body
    return Script(name, source, hashlib.sha1(source.encode()).hexdigest())


def load_all() -> dict[str, Script]:
    return {name: build(name) for name in OPERATIONS}
