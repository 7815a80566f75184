"""Several Prometheus text expositions merged into one (the scrape of a server run with WORKERS>1).

Each part is one worker's own exposition, as this server writes it (prometheus_client's writer: a
family is its ``# HELP`` line, its ``# TYPE`` line, then its samples), every series already labelled
with that worker's ``instance``. :func:`merge` keeps each family once — its ``# HELP`` and ``# TYPE``
from the first part that has it, in the order the families are first seen — followed by the samples
of every part, in the order the parts are given. A single part comes back byte for byte.

It works on the lines, without parsing the values: a scrape of many rooms on several workers is tens
of thousands of lines, which a full parse would spend a noticeable fraction of a second on. What it
does check is what a part cut short or not written by this server would get wrong: a part must end
with a newline, and every sample must follow the ``# HELP``/``# TYPE`` of a family whose name it
starts with; a part failing that raises ValueError and is left out by the caller.

A family whose ``# TYPE`` disagrees with the one seen first is left out of the later part (the first
part's type stands), and a sample whose name and labels an earlier part already gave is left out too:
a scrape never carries the same series twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["merge", "split"]


@dataclass
class Family:
    """One metric family of a part: its name, its ``# HELP``/``# TYPE`` lines and its sample lines."""

    name: bytes
    head: list[bytes] = field(default_factory=list)
    kind: bytes = b""
    samples: list[bytes] = field(default_factory=list)


def split(text: bytes) -> list[Family]:
    """The families of one exposition, in order. Raises ValueError when ``text`` is not one this server wrote."""
    if text and not text.endswith(b"\n"):
        raise ValueError("the exposition is cut short (no final newline)")
    families: list[Family] = []
    current: Family | None = None
    for line in text.split(b"\n")[:-1]:
        if line.startswith(b"# HELP ") or line.startswith(b"# TYPE "):
            words = line.split(b" ", 3)
            if len(words) < 3 or not words[2]:
                raise ValueError(f"a comment line without a metric name: {line[:80]!r}")
            name = words[2]
            if current is None or current.name != name:
                current = Family(name)
                families.append(current)
            current.head.append(line)
            if words[1] == b"TYPE":
                current.kind = words[3] if len(words) > 3 else b""
        elif not line or line.startswith(b"#"):
            continue
        elif current is None or not line.startswith(current.name):
            raise ValueError(f"a sample outside its family: {line[:80]!r}")
        else:
            current.samples.append(line)
    return families


def merge(parts: Sequence[Sequence[Family]]) -> bytes:
    """One exposition holding every part's families (see the module's description)."""
    merged: dict[bytes, Family] = {}
    seen: set[bytes] = set()
    for part in parts:
        for family in part:
            target = merged.get(family.name)
            if target is None:
                target = merged[family.name] = Family(family.name, family.head, family.kind)
            elif target.kind != family.kind:
                continue
            for line in family.samples:
                series = line.rpartition(b" ")[0]
                if series in seen:
                    continue
                seen.add(series)
                target.samples.append(line)
    lines = [line for family in merged.values() for line in (*family.head, *family.samples)]
    return b"\n".join(lines) + b"\n" if lines else b""
