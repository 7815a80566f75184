#!/usr/bin/env python3
"""Check a Queue Manager drop draw (qm-draw-v1) without trusting the server.

    python3 scripts/verify_draw.py http://localhost:8080 drop
    python3 scripts/verify_draw.py --file draw.json
    python3 scripts/verify_draw.py http://localhost:8080 drop --handle 9f2c4e0b1d7a5e63

Reads GET /api/rooms/<room>/draw (or a saved copy of its body), checks that the revealed seed is the
one committed to before the draw (sha256(seed) == commitment) and recomputes the order from the seed,
the handles and their groups, exactly as docs/fairness.md describes. Prints OK, or every check that
failed. Exit code 0 when the draw checks out, 1 otherwise. Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from typing import Any

ALGORITHM = "qm-draw-v1"


# ------------------------------------------------------------------------- the algorithm (qm-draw-v1)


def _words(seed: bytes, digest: bytes) -> Iterator[int]:
    counter = 0
    while True:
        block = hmac.new(seed, ALGORITHM.encode() + digest + counter.to_bytes(4, "big"), hashlib.sha256).digest()
        for i in range(0, 32, 4):
            yield int.from_bytes(block[i : i + 4], "big")
        counter += 1


def recompute(seed: bytes, handles: Sequence[str], groups: Sequence[int]) -> list[str]:
    """The order qm-draw-v1 gives for this seed and this frozen pre-queue."""
    digest = hashlib.sha256("".join(f"{h}:{g}\n" for h, g in zip(handles, groups, strict=True)).encode()).digest()
    words = _words(seed, digest)

    def below(m: int) -> int:
        limit = 2**32 - 2**32 % m
        while True:
            x = next(words)
            if x < limit:
                return x % m

    def shuffle(items: list[str]) -> None:
        for i in range(len(items) - 1, 0, -1):
            j = below(i + 1)
            items[i], items[j] = items[j], items[i]

    members: list[list[str]] = [[] for _ in range(max(groups, default=-1) + 1)]
    for handle, group in zip(handles, groups, strict=True):
        members[group].append(handle)
    for group_handles in members:
        shuffle(group_handles)
    order: list[str] = []
    depth = 0
    while True:
        round_ = [m[depth] for m in members if len(m) > depth]
        if not round_:
            return order
        shuffle(round_)
        order.extend(round_)
        depth += 1


# ------------------------------------------------------------------------------------ the checks


def check(doc: Any) -> list[str]:
    """Every way ``doc`` (the route's body) fails to be a correct qm-draw-v1 draw; empty when it is one."""
    if not isinstance(doc, dict):
        return ["the document is not a JSON object"]
    if doc.get("algorithm") != ALGORITHM:
        return [f"algorithm is {doc.get('algorithm')!r}, this checker knows {ALGORITHM!r} only"]
    state = doc.get("state")
    if state == "committed":
        return [
            f"nothing to check yet: the draw has not happened (state committed, commitment {doc.get('commitment')})"
        ]
    if state not in ("drawn", "empty"):
        return [f"state is {state!r}, not drawn"]
    problems: list[str] = []
    commitment = doc.get("commitment")
    seed_hex = doc.get("seed")
    seed = b""
    if not isinstance(seed_hex, str) or len(seed_hex) != 64:
        problems.append(f"seed must be 64 hex characters (32 bytes), got {seed_hex!r}")
    else:
        try:
            seed = bytes.fromhex(seed_hex)
        except ValueError:
            problems.append(f"seed is not hex: {seed_hex!r}")
    if seed and hashlib.sha256(seed).hexdigest() != commitment:
        problems.append(
            f"commitment mismatch: sha256(seed) = {hashlib.sha256(seed).hexdigest()}, "
            f"the published commitment is {commitment}"
        )
    handles, groups, order = doc.get("handles"), doc.get("groups"), doc.get("order")
    if not isinstance(handles, list) or not all(isinstance(h, str) for h in handles):
        return [*problems, "handles must be a list of strings"]
    if not isinstance(groups, list) or not all(isinstance(g, int) and not isinstance(g, bool) for g in groups):
        return [*problems, "groups must be a list of integers"]
    if not isinstance(order, list) or not all(isinstance(h, str) for h in order):
        return [*problems, "order must be a list of strings"]
    if len(groups) != len(handles):
        return [*problems, f"{len(handles)} handles but {len(groups)} groups"]
    bad = [h for h in handles if not h or ":" in h or "\n" in h]
    if bad:
        problems.append(f"handles may not be empty or hold ':' or a newline: {bad[:3]}")
    for i in range(1, len(handles)):
        if handles[i - 1] >= handles[i]:
            problems.append(
                f"handles are not sorted and unique: {handles[i - 1]!r} (#{i}) before {handles[i]!r} (#{i + 1})"
            )
            break
    top = -1
    for i, g in enumerate(groups):
        if g < 0 or g > top + 1:
            problems.append(f"groups are not numbered in order of first appearance: group {g} at #{i + 1}")
            break
        top = max(top, g)
    if problems:
        return problems
    expected = recompute(seed, handles, groups)
    if order != expected:
        missing = sorted(set(handles) - set(order))
        extra = sorted(set(order) - set(handles))
        if missing or extra or len(order) != len(handles):
            problems.append(
                f"the order is not the handles drawn: {len(order)} entries for {len(handles)} handles"
                + (f"; missing {missing[:3]}" if missing else "")
                + (f"; not among the handles {extra[:3]}" if extra else "")
            )
        else:
            first = next(i for i, (a, b) in enumerate(zip(order, expected, strict=True)) if a != b)
            wrong = sum(1 for a, b in zip(order, expected, strict=True) if a != b)
            problems.append(
                f"order mismatch: {wrong} of {len(order)} places differ; the first is place {first + 1}: "
                f"published {order[first]!r}, recomputed {expected[first]!r}"
            )
    return problems


def fetch(base: str, room: str) -> Any:
    url = f"{base.rstrip('/')}/api/rooms/{urllib.parse.quote(room, safe='')}/draw"
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.load(response)
    except urllib.error.HTTPError as err:
        body = err.read().decode("utf-8", "replace")
        raise SystemExit(f"{url}: HTTP {err.code}: {body[:300]}") from None
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise SystemExit(f"{url}: {err}") from None


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check a Queue Manager drop draw (qm-draw-v1).")
    parser.add_argument("server", nargs="?", help="the server's base URL, e.g. http://localhost:8080")
    parser.add_argument("room", nargs="?", help="the room id")
    parser.add_argument("--file", help="a saved body of GET /api/rooms/<room>/draw instead of fetching it")
    parser.add_argument("--handle", help="also say where this handle (yours, from the waiting page) was drawn")
    args = parser.parse_args(argv)
    if args.file:
        try:
            with open(args.file, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError) as err:
            print(f"cannot read {args.file}: {err}", file=sys.stderr)
            return 1
    elif args.server and args.room:
        try:
            doc = fetch(args.server, args.room)
        except SystemExit as err:
            print(err, file=sys.stderr)
            return 1
    else:
        parser.print_usage(sys.stderr)
        print("give a server and a room, or --file", file=sys.stderr)
        return 1
    problems = check(doc)
    if problems:
        for problem in problems:
            print(f"MISMATCH: {problem}")
        return 1
    order = doc["order"]
    groups = len(set(doc["groups"]))
    print(f"OK: room {doc.get('roomId')!r}: sha256(seed) is the commitment {doc['commitment']}")
    counted = f"{_count(len(order), 'handle', 'handles')} ({_count(groups, 'identity', 'identities')})"
    print(f"OK: the order of {counted} is qm-draw-v1 of the seed")
    previous = doc.get("previousCommitments") or []
    if previous:
        n = len(previous)
        which = "1 earlier commitment was" if n == 1 else f"{n} earlier commitments were"
        print(f"note: {which} replaced by a reschedule before {'its' if n == 1 else 'their'} draw")
    if args.handle:
        if args.handle in order:
            place = order.index(args.handle) + 1
            first = doc.get("firstTicket")
            ticket = f", ticket {first + place - 1}" if isinstance(first, int) else ""
            print(f"handle {args.handle} was drawn at place {place} of {len(order)}{ticket}")
        else:
            print(f"handle {args.handle} is not in this draw")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
