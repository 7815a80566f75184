"""An order-statistics set of line sequence numbers: which are present, and how many present ones are at
or below a given one (a waiting ticket's position), each in O(log n).

A Fenwick tree of 32-bit counts over a window ``[base, base + capacity)`` of sequence numbers, beside a
byte per number saying whether it is present: 5 bytes a number, so a line of 1,000,000 takes ~5-10 MB.
A number past the window grows it (doubling) and moves ``base`` up to the lowest number present, so the
numbers of tickets long gone are not kept. Numbers below ``base`` are never present.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable

MIN_CAPACITY = 1024


class LineIndex:
    __slots__ = ("base", "capacity", "count", "present", "tree")

    def __init__(self, seqs: Iterable[int] = (), *, base: int | None = None) -> None:
        ordered = sorted(seqs)
        self.base = ordered[0] if ordered else (1 if base is None else base)
        span = (ordered[-1] - self.base + 1) if ordered else 0
        self.capacity = max(MIN_CAPACITY, 2 * span)
        self.present = bytearray(self.capacity)
        for s in ordered:
            self.present[s - self.base] = 1
        self.count = len(ordered)
        self.tree = array("i")
        self._build()

    def _build(self) -> None:
        """The tree from ``present`` in O(capacity)."""
        size = self.capacity
        tree = array("i", bytes(4 * (size + 1)))
        present = self.present
        for i in range(1, size + 1):
            tree[i] += present[i - 1]
            j = i + (i & -i)
            if j <= size:
                tree[j] += tree[i]
        self.tree = tree

    def _grow(self, seq: int) -> None:
        """Room for ``seq``: the window starts at the lowest number present and is twice what it must hold."""
        first = self.present.find(1)
        low = seq if first < 0 else min(seq, self.base + first)
        keep = self.present[low - self.base :] if first >= 0 else bytearray()
        self.capacity = max(MIN_CAPACITY, 2 * (seq - low + 1))
        self.present = keep + bytearray(self.capacity - len(keep))
        self.base = low
        self._build()

    def _update(self, i: int, delta: int) -> None:
        tree = self.tree
        size = self.capacity
        i += 1
        while i <= size:
            tree[i] += delta
            i += i & -i

    def add(self, seq: int) -> None:
        if seq < self.base:
            if self.count:
                raise ValueError(f"line sequence {seq} below the window at {self.base}")
            self.base = seq  # an empty index moves its window down to the first number it is given
        if seq - self.base >= self.capacity:
            self._grow(seq)
        i = seq - self.base
        if not self.present[i]:
            self.present[i] = 1
            self.count += 1
            self._update(i, 1)

    def remove(self, seq: int) -> None:
        i = seq - self.base
        if 0 <= i < self.capacity and self.present[i]:
            self.present[i] = 0
            self.count -= 1
            self._update(i, -1)

    def __contains__(self, seq: int) -> bool:
        i = seq - self.base
        return 0 <= i < self.capacity and self.present[i] == 1

    def rank(self, seq: int) -> int:
        """How many numbers present are at or below ``seq`` (a present one's place, 1-based)."""
        i = min(seq - self.base + 1, self.capacity)
        tree = self.tree
        total = 0
        while i > 0:
            total += tree[i]
            i &= i - 1
        return total

    def clear(self) -> None:
        self.present = bytearray(self.capacity)
        self.tree = array("i", bytes(4 * (self.capacity + 1)))
        self.count = 0

    def __len__(self) -> int:
        return self.count
