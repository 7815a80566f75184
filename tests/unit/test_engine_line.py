"""The Line (the 100k-ticket hot path) against a plain Python list: push / remove / position / head /
iteration / len / clear, including growth of the Fenwick tree past its initial size."""

from __future__ import annotations

import random
from array import array

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from queue_manager.engine.line import Line


def small_line(size: int) -> Line:
    """A Line whose tree starts at ``size`` slots, so that growth is exercised with few pushes."""
    line = Line()
    line._size = size
    line._tree = array("q", bytes(8 * (size + 1)))
    return line


class LineMachine(RuleBasedStateMachine):
    """Model: a list of (seq, ticket) front to back; plus every seq ever handed out."""

    @initialize(size=st.sampled_from([1, 2, 3, 8, 1024]))
    def start(self, size: int) -> None:
        self.line = small_line(size)
        self.model: list[tuple[int, int]] = []
        self.issued: list[int] = []
        self.next_ticket = 1

    @rule(k=st.integers(1, 6))
    def push(self, k: int) -> None:
        for _ in range(k):
            seq = self.line.push(self.next_ticket)
            assert seq not in self.issued
            assert not self.issued or seq > max(self.issued)
            self.model.append((seq, self.next_ticket))
            self.issued.append(seq)
            self.next_ticket += 1

    @rule(ticket=st.integers(1, 10_000))
    def push_number(self, ticket: int) -> None:
        """Re-queue an existing number at the back (an eject), or any number."""
        seq = self.line.push(ticket)
        self.model.append((seq, ticket))
        self.issued.append(seq)

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def remove_live(self, data: st.DataObject) -> None:
        i = data.draw(st.integers(0, len(self.model) - 1))
        seq, _ = self.model.pop(i)
        self.line.remove(seq)

    @precondition(lambda self: self.issued)
    @rule(data=st.data())
    def remove_any_issued(self, data: st.DataObject) -> None:
        """Removing a seq that already left (or twice) is a no-op."""
        seq = data.draw(st.sampled_from(self.issued))
        self.model = [(s, t) for s, t in self.model if s != seq]
        self.line.remove(seq)

    @rule(seq=st.integers(-3, 0) | st.integers(10**6, 10**7))
    def remove_unknown(self, seq: int) -> None:
        self.line.remove(seq)

    @precondition(lambda self: self.model)
    @rule()
    def pop_head(self) -> None:
        """What promotion does: read the head, then remove it."""
        head = self.line.head()
        assert head == self.model[0]
        self.line.remove(head[0])
        self.model.pop(0)

    @rule()
    def clear(self) -> None:
        tickets = self.line.clear()
        assert sorted(tickets) == sorted(t for _, t in self.model)
        self.model = []

    @invariant()
    def agrees_with_the_model(self) -> None:
        assert len(self.line) == len(self.model)
        assert list(self.line) == [t for _, t in self.model]
        assert self.line.head() == (self.model[0] if self.model else None)
        for pos, (seq, _) in enumerate(self.model, start=1):
            assert self.line.position(seq) == pos
        live = {s for s, _ in self.model}
        for seq in self.issued[-20:]:
            if seq not in live:
                assert self.line.position(seq) is None


LineMachine.TestCase.settings = settings(max_examples=120, stateful_step_count=50, deadline=None)
TestLineAgainstAList = LineMachine.TestCase


def test_many_places_past_the_initial_tree_size():
    rng = random.Random(7)
    line = Line()
    model: list[tuple[int, int]] = []
    for n in range(1, 5001):
        model.append((line.push(n), n))
    for _ in range(1500):
        i = rng.randrange(len(model))
        line.remove(model.pop(i)[0])
    for n in range(5001, 6001):
        model.append((line.push(n), n))
    assert len(line) == len(model) == 4500
    assert list(line) == [t for _, t in model]
    for pos in list(range(1, 50)) + list(range(4450, 4501)) + rng.sample(range(1, 4501), 200):
        seq, _ = model[pos - 1]
        assert line.position(seq) == pos
    assert line.head() == model[0]


def test_the_tree_grows_by_as_many_nodes_as_it_doubles_to():
    """Growing doubles the tree's nodes, no more: 8 bytes a node, so a line of 300,000 holds a tree of
    4 MB (a growth that added a node per byte held 33 MB)."""
    line = Line()
    for n in range(1, 300_001):
        line.push(n)
    assert len(line._tree) == line._size + 1 == 524_289
    assert line.position(300_000) == 300_000 and line.position(1) == 1


def test_empty_line():
    line = Line()
    assert len(line) == 0 and line.head() is None and list(line) == [] and line.clear() == []
    assert line.position(1) is None


def test_positions_after_clear_restart_at_one():
    line = Line()
    for n in range(10):
        line.push(n)
    line.clear()
    seq = line.push(99)
    assert line.position(seq) == 1 and line.head() == (seq, 99) and list(line) == [99]
