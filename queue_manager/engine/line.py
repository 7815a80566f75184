"""The waiting line: FIFO order with O(log n) position look-up and removal from anywhere.

Each place gets a sequence number when it joins (or re-joins at the back). A Fenwick tree over
sequence numbers counts the live places, so a position is a prefix sum; the head is found through
a deque with lazy deletion.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Iterator


class Line:
    __slots__ = ("_live", "_order", "_seq", "_size", "_tree")

    def __init__(self) -> None:
        self._size = 1024
        self._tree = array("q", bytes(8 * (self._size + 1)))
        self._seq = 0
        self._live: dict[int, int] = {}  # seq -> ticket number
        self._order: deque[int] = deque()

    def __len__(self) -> int:
        return len(self._live)

    def _add(self, i: int, delta: int) -> None:
        tree, size = self._tree, self._size
        while i <= size:
            tree[i] += delta
            i += i & -i

    def _grow(self) -> None:
        """Double the tree in O(size) C-level work: every new node covers only empty positions, except
        the new top node, which covers everything and holds the live count."""
        old = self._size
        self._size = old * 2
        if old & (old - 1) == 0:  # a power of two: the new top node covers (0, 2·old]
            self._tree.extend(bytes(8 * old))
            self._tree[self._size] = len(self._live)
            return
        self._tree = array("q", bytes(8 * (self._size + 1)))
        for seq in self._live:
            self._add(seq, 1)

    def push(self, ticket: int) -> int:
        """Put ``ticket`` at the back; returns its sequence number."""
        self._seq += 1
        seq = self._seq
        if seq > self._size:
            self._grow()
        self._live[seq] = ticket
        self._order.append(seq)
        self._add(seq, 1)
        return seq

    def remove(self, seq: int) -> None:
        if self._live.pop(seq, None) is not None:
            self._add(seq, -1)

    def position(self, seq: int) -> int | None:
        """1-based position of the place with ``seq``; None when it is not in line."""
        if seq not in self._live:
            return None
        total, i, tree = 0, seq, self._tree
        while i > 0:
            total += tree[i]
            i -= i & -i
        return total

    def head(self) -> tuple[int, int] | None:
        """(seq, ticket) at the front, or None when the line is empty."""
        order, live = self._order, self._live
        while order:
            seq = order[0]
            ticket = live.get(seq)
            if ticket is not None:
                return seq, ticket
            order.popleft()
        return None

    def __iter__(self) -> Iterator[int]:
        """Ticket numbers front to back."""
        for seq in self._order:
            ticket = self._live.get(seq)
            if ticket is not None:
                yield ticket

    def clear(self) -> list[int]:
        tickets = list(self._live.values())
        self._live.clear()
        self._order.clear()
        self._tree = array("q", bytes(8 * (self._size + 1)))
        return tickets
