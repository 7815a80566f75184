"""The verifiable draw (qm-draw-v1): a committed seed, and the order as a function of it.

When a drop is scheduled the server draws a secret 32-byte seed and publishes its commitment,
``sha256(seed)`` in hex. At the open instant the pre-queue is frozen into a public list of handles
(sorted), each with a group number (the handles one identity holds share a group; the identities
themselves are never published), and the order is computed from the seed and that list alone.
After the draw the seed is revealed, so anyone can check that the seed is the committed one and
recompute the order. ``docs/fairness.md`` states the algorithm for implementers; this module is the
reference. Pure: no clock, no I/O.

Example::

    handles, groups = freeze([("9f2c…", "203.0.113.7"), ("04aa…", "198.51.100.2")])
    order = draw_order(seed, handles, groups)
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

ALGORITHM = "qm-draw-v1"
SEED_BYTES = 32
_DOMAIN = ALGORITHM.encode()
_SPAN = 1 << 32


def commitment(seed: bytes) -> str:
    """What is published before the draw: SHA-256 of the seed, lowercase hex."""
    return hashlib.sha256(seed).hexdigest()


def freeze(entries: Iterable[tuple[str, str]]) -> tuple[list[str], list[int]]:
    """The draw's public input from the pre-queue's ``(handle, identity)`` pairs.

    Handles sorted ascending; each one's group is the number of its identity, the identities numbered
    0, 1, 2 … in the order they first appear in the sorted list.
    """
    pairs = sorted(entries)
    numbers: dict[str, int] = {}
    groups = [numbers.setdefault(ident, len(numbers)) for _, ident in pairs]
    return [h for h, _ in pairs], groups


def input_digest(handles: Sequence[str], groups: Sequence[int]) -> bytes:
    """SHA-256 of the lines ``<handle>:<group>\\n``, in list order: every handle and group moves the stream."""
    digest = hashlib.sha256()
    for handle, group in zip(handles, groups, strict=True):
        digest.update(f"{handle}:{group}\n".encode())
    return digest.digest()


def _words(seed: bytes, digest: bytes) -> Iterator[int]:
    """The random stream: HMAC-SHA256(seed, "qm-draw-v1" || digest || block counter, 4 bytes big-endian),
    blocks 0, 1, 2 … each read as eight big-endian 32-bit integers."""
    counter = 0
    while True:
        block = hmac.new(seed, _DOMAIN + digest + counter.to_bytes(4, "big"), hashlib.sha256).digest()
        for i in range(0, 32, 4):
            yield int.from_bytes(block[i : i + 4], "big")
        counter += 1


class _Stream:
    __slots__ = ("_words",)

    def __init__(self, seed: bytes, digest: bytes) -> None:
        self._words = _words(seed, digest)

    def below(self, m: int) -> int:
        """A uniform integer in [0, m): words at or above the largest multiple of m are skipped."""
        limit = _SPAN - _SPAN % m
        while True:
            x = next(self._words)
            if x < limit:
                return x % m

    def shuffle(self, items: list[str]) -> None:
        """Fisher–Yates from the end: position i swaps with below(i + 1), for i = n-1 down to 1."""
        for i in range(len(items) - 1, 0, -1):
            j = self.below(i + 1)
            items[i], items[j] = items[j], items[i]


def draw_order(seed: bytes, handles: Sequence[str], groups: Sequence[int]) -> list[str]:
    """qm-draw-v1: the order the pre-queue becomes the line in.

    Each group's handles (in list order) are shuffled, group 0 first; then round k takes the k-th
    handle of every group that has one (groups in ascending order), shuffles it and appends it, for
    k = 0, 1, … — so an identity's second entry is drawn behind every identity's first.
    """
    stream = _Stream(seed, input_digest(handles, groups))
    members: list[list[str]] = [[] for _ in range(max(groups, default=-1) + 1)]
    for handle, group in zip(handles, groups, strict=True):
        members[group].append(handle)
    for group_handles in members:
        stream.shuffle(group_handles)
    order: list[str] = []
    depth = 0
    while True:
        round_ = [group_handles[depth] for group_handles in members if len(group_handles) > depth]
        if not round_:
            return order
        stream.shuffle(round_)
        order.extend(round_)
        depth += 1


@dataclass(slots=True)
class Drawn:
    """What a draw used and made: the frozen input, the order, when, and the first ticket it minted."""

    handles: list[str]
    groups: list[int]
    order: list[str]
    at_ms: int
    first_ticket: int


@dataclass(slots=True)
class DrawRecord:
    """A drop's committed seed and, once drawn, the draw. ``previous``: the commitments a reschedule
    replaced before they were used, each with the wall ms it was replaced at."""

    seed: bytes
    committed_ms: int
    opens_at_ms: int | None
    previous: list[tuple[str, int]] = field(default_factory=list)
    drawn: Drawn | None = None
    commitment: str = field(init=False)  # sha256(seed), hex: computed once (a status poll shows it)

    def __post_init__(self) -> None:
        self.commitment = commitment(self.seed)

    def replaced(self, seed: bytes, now_ms: int, opens_at_ms: int | None) -> DrawRecord:
        """The record a (re)schedule makes: a commitment not yet drawn is listed as replaced; after a
        draw a new drop starts a list of its own."""
        previous = [] if self.drawn is not None else [*self.previous, (self.commitment, now_ms)]
        return DrawRecord(seed, now_ms, opens_at_ms, previous)

    def to_doc(self) -> dict[str, Any]:
        """The record as JSON (the checkpoint's ``draw``)."""
        drawn = self.drawn
        return {
            "seed": self.seed.hex(),
            "at": self.committed_ms,
            "opensAt": self.opens_at_ms,
            "previous": [[c, at] for c, at in self.previous],
            "drawn": None
            if drawn is None
            else {
                "handles": drawn.handles,
                "groups": drawn.groups,
                "order": drawn.order,
                "at": drawn.at_ms,
                "first": drawn.first_ticket,
            },
        }

    @staticmethod
    def from_doc(doc: Mapping[str, Any]) -> DrawRecord:
        seed = bytes.fromhex(str(doc["seed"]))
        if len(seed) != SEED_BYTES:
            raise ValueError(f"a draw seed is {SEED_BYTES} bytes, not {len(seed)}")
        opens = doc.get("opensAt")
        d = doc.get("drawn")
        return DrawRecord(
            seed,
            int(doc["at"]),
            None if opens is None else int(opens),
            [(str(c), int(at)) for c, at in doc.get("previous") or []],
            None
            if d is None
            else Drawn(
                [str(h) for h in d["handles"]],
                [int(g) for g in d["groups"]],
                [str(h) for h in d["order"]],
                int(d["at"]),
                int(d["first"]),
            ),
        )


def public_view(room_id: str, record: DrawRecord, *, scheduled: bool, pre_count: int) -> dict[str, Any]:
    """What ``GET /api/rooms/<id>/draw`` answers. Before the draw: the commitment and no seed.

    ``scheduled``: the doors are still shut. Instants are epoch milliseconds, as on ``/api/status``.
    ``state``: ``committed`` (not drawn yet), ``drawn`` (the seed and the draw revealed) or ``empty``
    (the doors opened, or the drop was cancelled, with nobody in the pre-queue: nothing was drawn, and
    the seed is revealed since nothing depends on it any more).
    """
    out: dict[str, Any] = {
        "roomId": room_id,
        "algorithm": ALGORITHM,
        "commitment": record.commitment,
        "committedAt": record.committed_ms,
        "opensAt": record.opens_at_ms,
        "previousCommitments": [{"commitment": c, "replacedAt": at} for c, at in record.previous],
    }
    drawn = record.drawn
    if drawn is not None:
        out.update(
            state="drawn",
            seed=record.seed.hex(),
            drawnAt=drawn.at_ms,
            firstTicket=drawn.first_ticket,
            handles=drawn.handles,
            groups=drawn.groups,
            order=drawn.order,
        )
    elif scheduled:
        out.update(state="committed", preCount=pre_count)
    else:
        out.update(state="empty", seed=record.seed.hex(), handles=[], groups=[], order=[])
    return out


@dataclass(frozen=True, slots=True)
class DrawState:
    """A room's draw as a store hands it out: the record (None: never scheduled), whether the doors
    are still shut, and how many are in the pre-queue now."""

    record: DrawRecord | None
    scheduled: bool
    pre_count: int
