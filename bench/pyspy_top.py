"""Summarise a py-spy ``--format raw`` profile (collapsed stacks): self and inclusive time per function.

    python bench/pyspy_top.py PROFILE.txt [--top 25] [--json OUT.json]

Functions are keyed by name and file (line numbers dropped), shown relative to the repository or to
site-packages. Inclusive time counts a function once per stack (recursion is not double-counted).
``areas`` buckets self time by where the code lives, for the "what dominates" note.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>.*?)(?::(?P<line>\d+))?\)$")

AREAS = [
    ("bench/hello", "hello-world app"),
    ("queue_manager/http/", "queue_manager http layer"),
    ("queue_manager/tokens", "queue_manager tokens"),
    ("queue_manager/engine/", "queue_manager engine"),
    ("queue_manager/store/", "queue_manager store"),
    ("queue_manager/", "queue_manager other"),
    ("uvicorn/", "uvicorn (protocol, ASGI glue)"),
    ("urllib/parse", "stdlib urllib.parse"),
    ("ipaddress", "stdlib ipaddress"),
    ("hashlib", "stdlib hashlib/hmac/secrets/base64"),
    ("hmac", "stdlib hashlib/hmac/secrets/base64"),
    ("secrets", "stdlib hashlib/hmac/secrets/base64"),
    ("base64", "stdlib hashlib/hmac/secrets/base64"),
    ("asyncio/", "asyncio/uvloop"),
    ("uvloop", "asyncio/uvloop"),
    ("dataclasses", "stdlib other"),
    ("python3.", "stdlib other"),
]


# this checkout's root, whatever it is called on the machine that took the profile's files
ROOT = str(Path(__file__).resolve().parents[1]) + "/"


def short(path: str) -> str:
    for marker in ("site-packages/", ROOT, "lib/python3.11/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def parse(path: Path, within: str | None = None) -> tuple[Counter[str], Counter[str], int]:
    self_t: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        if within is not None and within not in stack:
            continue
        total += count
        keys = []
        for frame in stack.split(";"):
            m = FRAME.match(frame.strip())
            keys.append(f"{m.group('func')} ({short(m.group('file'))})" if m else frame.strip())
        if keys:
            self_t[keys[-1]] += count
        for key in set(keys):
            incl[key] += count
    return self_t, incl, total


def area_of(key: str) -> str:
    for marker, name in AREAS:
        if marker in key:
            return name
    return "native / other"


def summarise(path: Path, top: int, within: str | None = None) -> dict[str, Any]:
    """``within``: keep only stacks with a frame containing it (e.g. "Server.run": the serving loop)."""
    self_t, incl, total = parse(path, within)
    areas: Counter[str] = Counter()
    for key, count in self_t.items():
        areas[area_of(key)] += count

    def pct(n: int) -> float:
        return round(100.0 * n / total, 1) if total else 0.0

    return {
        "samples": total,
        "self": [{"function": k, "pct": pct(v)} for k, v in self_t.most_common(top)],
        "inclusive": [{"function": k, "pct": pct(v)} for k, v in incl.most_common(top)],
        "areas": [{"area": k, "pct": pct(v)} for k, v in areas.most_common()],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("profile")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json")
    ap.add_argument("--within", help='keep only stacks containing this text, e.g. "Server.run"')
    args = ap.parse_args()
    s = summarise(Path(args.profile), args.top, args.within)
    if args.json:
        Path(args.json).write_bytes(orjson.dumps(s, option=orjson.OPT_INDENT_2))
    print(f"{s['samples']} samples")
    print("\nself time by area:")
    for a in s["areas"]:
        print(f"  {a['pct']:5.1f}%  {a['area']}")
    print("\nself time (top):")
    for f in s["self"]:
        print(f"  {f['pct']:5.1f}%  {f['function']}")
    print("\ninclusive time (top):")
    for f in s["inclusive"]:
        print(f"  {f['pct']:5.1f}%  {f['function']}")


if __name__ == "__main__":
    main()
