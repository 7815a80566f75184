"""State the fleet shares: what the leader decided, and what each instance reports.

Two kinds of document:

* **fenced** (``alerts:state``, ``autopilot``): written by the leader only, stored with the leader
  epoch that wrote it. A save is refused unless the writer's epoch is the fleet's current one and is
  not older than the epoch saved with the document, so a leader that paused past its lease can never
  overwrite its successor's state, and a reset of ``leader:epoch`` alone cannot roll the state back;
* **reports** (``alerts:storage``, ``targets``): one field per instance or room, JSON.

``MemoryShared`` keeps both in this process (``STORE=memory``: the one process is the leader);
``ValkeyShared`` keeps them in Valkey under ``VALKEY_PREFIX``.
"""

from __future__ import annotations

from typing import Any, Protocol

import orjson

Doc = dict[str, Any]


class Leadership(Protocol):
    """Whether this instance runs the fleet's jobs, and under which epoch."""

    @property
    def leader(self) -> bool: ...

    @property
    def epoch(self) -> int: ...


class Solo:
    """STORE=memory: the one process is always the leader."""

    leader = True
    epoch = 1


class Shared(Protocol):
    leadership: Leadership
    #: What a read raises when the copy cannot be reached (the Valkey driver's errors on STORE=valkey);
    #: the alert frame catches these besides OSError and StoreUnavailable.
    errors: tuple[type[Exception], ...]

    async def load(self, name: str) -> Doc | None:
        """A fenced document (``alerts:state`` or ``autopilot``); None when there is none yet."""

    async def save(self, name: str, doc: Doc) -> bool:
        """Write a fenced document; False when this instance is not (or no longer) the leader."""

    async def report(self, name: str, field: str, doc: Doc | None) -> None:
        """Set (or, with None, remove) one field of a report hash."""

    async def reports(self, name: str) -> dict[str, Doc]:
        """Every field of a report hash."""


class MemoryShared:
    errors: tuple[type[Exception], ...] = ()  # this process's copy is always there

    def __init__(self) -> None:
        self.leadership: Leadership = Solo()
        self._docs: dict[str, Doc] = {}
        self._reports: dict[str, dict[str, Doc]] = {}

    async def load(self, name: str) -> Doc | None:
        doc = self._docs.get(name)
        return None if doc is None else orjson.loads(orjson.dumps(doc))

    async def save(self, name: str, doc: Doc) -> bool:
        self._docs[name] = orjson.loads(orjson.dumps(doc))
        return True

    async def report(self, name: str, field: str, doc: Doc | None) -> None:
        hash_ = self._reports.setdefault(name, {})
        if doc is None:
            hash_.pop(field, None)
        else:
            hash_[field] = doc

    async def reports(self, name: str) -> dict[str, Doc]:
        return dict(self._reports.get(name, {}))
