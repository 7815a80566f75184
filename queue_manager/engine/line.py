"""The waiting line: FIFO order with O(log n) position look-up and removal from anywhere.

Each place gets a line sequence number (``line_seq``, counting up from 1) when it joins or re-joins
at the back; it is unrelated to an event's ``seq``. A Fenwick tree over line sequence numbers counts
the live places, so a position is a prefix sum; the head is found through
a deque with lazy deletion.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Iterator


class Line:
    __slots__ = ("_last_line_seq", "_live", "_order", "_size", "_tree")

    def __init__(self) -> None:
        self._size = 1024
        self._tree = array("q", bytes(8 * (self._size + 1)))
        self._last_line_seq = 0
        self._live: dict[int, int] = {}  # line_seq -> ticket number
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
            self._tree.frombytes(bytes(8 * old))  # raw zeros: ``old`` more nodes (extend would add one per byte)
            self._tree[self._size] = len(self._live)
            return
        self._tree = array("q", bytes(8 * (self._size + 1)))
        for line_seq in self._live:
            self._add(line_seq, 1)

    def push(self, ticket: int) -> int:
        """Put ``ticket`` at the back; returns its sequence number."""
        self._last_line_seq += 1
        line_seq = self._last_line_seq
        if line_seq > self._size:
            self._grow()
        self._live[line_seq] = ticket
        self._order.append(line_seq)
        self._add(line_seq, 1)
        return line_seq

    def remove(self, line_seq: int) -> None:
        if self._live.pop(line_seq, None) is not None:
            self._add(line_seq, -1)

    def position(self, line_seq: int) -> int | None:
        """1-based position of the place with ``line_seq``; None when it is not in line."""
        if line_seq not in self._live:
            return None
        total, i, tree = 0, line_seq, self._tree
        while i > 0:
            total += tree[i]
            i -= i & -i
        return total

    def head(self) -> tuple[int, int] | None:
        """(line_seq, ticket) at the front, or None when the line is empty."""
        order, live = self._order, self._live
        while order:
            line_seq = order[0]
            ticket = live.get(line_seq)
            if ticket is not None:
                return line_seq, ticket
            order.popleft()
        return None

    def nth(self, k: int) -> int:
        """The ticket at 1-based position ``k`` (1 ≤ k ≤ len): a descent of the tree, O(log n)."""
        tree, size = self._tree, self._size
        i, step = 0, 1 << (size.bit_length() - 1)
        while step:
            j = i + step
            if j <= size and tree[j] < k:
                i = j
                k -= tree[j]
            step >>= 1
        return self._live[i + 1]

    def __iter__(self) -> Iterator[int]:
        """Ticket numbers front to back."""
        for line_seq in self._order:
            ticket = self._live.get(line_seq)
            if ticket is not None:
                yield ticket

    def clear(self) -> list[int]:
        tickets = list(self._live.values())
        self._live.clear()
        self._order.clear()
        self._tree = array("q", bytes(8 * (self._size + 1)))
        return tickets
