"""One room's waiting line as an instance follows it: the line sequences of the tickets waiting, kept from
the room's line feed (keys.py, ``lf``) in feed order, so a waiting ticket's position is answered here.

A replica is in sync once loaded from a snapshot (``load``); it applies each feed message whose sequence is
the next one. A message that skips a sequence, names another generation or says the room was replaced
(``x``) takes it out of sync: its follower (live.py) loads a new snapshot. Messages that arrive while a
snapshot is on its way are kept and applied after it (those the snapshot already holds are skipped).
"""

from __future__ import annotations

from queue_manager.store.valkey.fenwick import LineIndex

BUFFER_MAX = 10_000  # messages kept while a snapshot is on its way; more: the snapshot is read again


class LineReplica:
    __slots__ = ("buffer", "cv", "gen", "index", "lf", "stale", "synced", "wanted", "wanted_since")

    def __init__(self) -> None:
        self.gen = 0
        self.lf = 0  # the feed sequence applied
        self.cv = 0  # the config version of the last message applied
        self.index = LineIndex()
        self.synced = False
        self.stale = True  # a snapshot is needed (and not yet asked for)
        self.buffer: list[bytes] = []
        self.wanted = 0  # the highest feed sequence a store read saw (ahead of ``lf``: a message may be lost)
        self.wanted_since = 0.0

    def unsync(self) -> None:
        """Out of sync: nothing is answered until the next snapshot."""
        self.synced = False
        self.stale = True
        self.buffer.clear()

    def load(self, gen: int, lf: int, cv: int, seqs: list[int]) -> None:
        """In sync from a snapshot, then the messages that came meanwhile."""
        self.gen, self.lf, self.cv = gen, lf, cv
        self.index = LineIndex(seqs)
        self.synced = True
        self.stale = False
        pending, self.buffer = self.buffer, []
        for message in pending:
            if not self.apply(message):
                return

    def apply(self, message: bytes) -> bool:
        """Apply one feed message; False: the replica is out of sync (a snapshot is needed)."""
        if not self.synced:
            if not self.stale:  # a snapshot is on its way: kept for after it
                if len(self.buffer) >= BUFFER_MAX:
                    self.unsync()
                    return False
                self.buffer.append(message)
            return True
        parts = message.split()
        if len(parts) < 3:  # "x": the room was deleted or replaced
            self.unsync()
            return False
        gen, lf = int(parts[0]), int(parts[1])
        if gen == self.gen and lf <= self.lf:
            return True  # already in the snapshot
        if gen != self.gen or lf != self.lf + 1:
            self.unsync()
            return False
        index = self.index
        for op in parts[3:]:
            if op[0] == 43:  # b"+"
                index.add(int(op[1:]))
            elif op[0] == 45:  # b"-"
                index.remove(int(op[1:]))
            else:  # b"c": the line emptied
                index.clear()
        self.lf = lf
        self.cv = int(parts[2])
        return True

    def saw(self, lf: int) -> None:
        """A store read saw feed sequence ``lf``: a replica that stays behind it lost a message."""
        if lf > self.wanted:
            self.wanted = lf

    def holds(self, gen: int, lf: int, cv: int, lseq: int) -> bool:
        """Whether this replica answers for the waiting ticket with line sequence ``lseq``, whose store read saw
        generation ``gen``, feed sequence ``lf`` and config version ``cv``; False: only the store can (out of
        sync, behind that read, another generation or config, or the ticket no longer waits)."""
        if not self.synced or gen != self.gen:
            return False
        if lf > self.lf:
            self.saw(lf)
            return False
        return cv == self.cv and lseq in self.index

    def position(self, gen: int, lf: int, cv: int, lseq: int) -> int | None:
        """The ticket's position when this replica ``holds`` it; else None."""
        return self.index.rank(lseq) if self.holds(gen, lf, cv, lseq) else None
