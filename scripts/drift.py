"""What `make test-latest` installs that the lock does not: each package whose version moved, locked -> latest.

Usage: python scripts/drift.py LOCKED.txt LATEST.txt
(LOCKED: `uv export --no-hashes` of uv.lock; LATEST: `uv pip freeze` of the venv on the newest versions.)
Run it with that venv's Python: a locked package whose markers do not hold there (another platform, another
Python) is not counted as gone.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from packaging.markers import Marker

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)")


def pins(path: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        requirement, _, markers = line.strip().partition(";")
        found = _PIN.match(requirement.strip())
        if found and (not markers.strip() or Marker(markers.strip()).evaluate()):
            out[re.sub(r"[-_.]+", "-", found.group(1)).lower()] = found.group(2)
    return out


def main(locked_file: str, latest_file: str) -> int:
    locked, latest = pins(locked_file), pins(latest_file)
    moved = sorted(name for name in locked.keys() & latest.keys() if locked[name] != latest[name])
    added = sorted(latest.keys() - locked.keys())
    dropped = sorted(locked.keys() - latest.keys())
    print(f"test-latest: {len(moved)} moved, {len(added)} new, {len(dropped)} gone against uv.lock")
    for name in moved:
        print(f"  {name} {locked[name]} -> {latest[name]}")
    for name in added:
        print(f"  {name} (new) {latest[name]}")
    for name in dropped:
        print(f"  {name} (gone) {locked[name]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
