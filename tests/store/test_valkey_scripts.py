"""How the scripts are built: each carries only the part of the prelude it reaches (scripts.trim),
and the Ref window the join script cuts Refs from."""

from __future__ import annotations

import re

from queue_manager.engine.ticket import make_ref
from queue_manager.store.valkey import scripts
from queue_manager.store.valkey.keys import lua_key_table

PRELUDE = """local A = 12
local NOW = tonumber(ARGV[2])
REFS = nil
local function used(x)  -- calls helper
  return helper(x) + A
end
local function helper(x)
  return x
end
local function unused()  -- mentions used() only in this comment
  return NOW
end
local T = {
  a = 1,
}
"""


def _defined(text: str) -> set[str]:
    out: set[str] = set()
    for line in text.splitlines():
        m = re.match(r"local function (\w+)|local (\w+(?:, \w+)*)", line)
        if m:
            out.update(n.strip() for n in (m.group(1) or m.group(2)).split(","))
    return out


def test_trim_keeps_what_the_body_reaches_transitively_and_every_statement() -> None:
    out = scripts.trim(PRELUDE, "return used(1)")
    assert "local function used" in out and "local function helper" in out  # helper through used
    assert "local A = 12" in out and "REFS = nil" in out  # a name used; a statement defining nothing
    assert "local function unused" not in out and "local T" not in out and "local NOW" not in out


def test_trim_ignores_words_in_comments_but_not_code_after_a_dash_dash_string() -> None:
    assert "local function unused" not in scripts.trim(PRELUDE, "-- unused() is not called\nreturn 1")
    kept = scripts.trim(PRELUDE, "local s = '--' .. unused()")
    assert "local function unused" in kept and "local NOW" in kept


def test_trim_a_long_bracket_counts_every_word() -> None:
    assert "local function unused" in scripts.trim(PRELUDE, "--[[ unused ]] return 1")


def test_every_script_defines_every_prelude_name_its_code_uses() -> None:
    full = lua_key_table() + scripts._read("prelude")
    prelude_names = _defined(full)
    for name in scripts.OPERATIONS:
        source = scripts.build(name).source
        code = "\n".join(re.sub(r"(^|\s)--.*$", "", line) for line in source.splitlines())
        used = set(re.findall(r"[A-Za-z_]\w*", code)) & prelude_names
        missing = used - _defined(source)
        assert not missing, (name, missing)
    assert len(scripts.build("blocked").source) < len(full) // 10  # a script that needs none of it
    assert len(scripts.build("join").source) < len(full) + len(scripts._read("join"))


def test_the_ref_window_is_fixed_width_as_the_prelude_cuts_it() -> None:
    width = re.search(r"local REF_WIDTH = (\d+)", scripts._read("prelude"))
    assert width is not None
    refs = {make_ref(room, gen, n) for room in ("r", "a-much-longer-room-id") for gen in (1, 7) for n in range(2000)}
    assert {len(r) for r in refs} == {int(width.group(1))}
