"""What the log says about take-backs: the compensations that undo a change whose journal commit failed.

A join (or pre-queue join, or admission) is acknowledged only once its events are journaled; when the
commit fails the visitor is answered 503 and the store takes the change back in Valkey (``revoke.lua``).
While PostgreSQL is failing that happens to every change, so the log gets:

* one DEBUG line per take-back (the room, what was taken back, why);
* a WARNING summary at most every ``REPORT_EVERY_SEC``: how many changes of each kind were taken back
  since the previous summary, and the last journal error. The first take-back after a quiet spell is
  reported at once; the rest of a burst is reported by the next take-back or by ``flush`` (the store's
  tick calls it every second), so nothing is left unsaid for more than ``REPORT_EVERY_SEC``;
* a WARNING line per take-back that really failed: Valkey could not be reached or refused it. What
  was minted then stays until it lapses like a closed tab.

A take-back's own event (``join.revoke`` …) is journaled like any other; when that commit fails too it
is held with the failed commits and written once the journal answers, after the change it undoes.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable

log = logging.getLogger("queue_manager.store.valkey")

REPORT_EVERY_SEC = 10.0

#: How a summary names each kind of change taken back (``what`` of revoke.lua).
_NAMES = {
    "join": ("join", "joins"),
    "prequeue": ("pre-queue join", "pre-queue joins"),
    "admit": ("admission", "admissions"),
}


class TakeBacks:
    def __init__(self, every_sec: float = REPORT_EVERY_SEC, clock: Callable[[], float] = time.monotonic) -> None:
        self.every_sec = every_sec
        self.clock = clock
        self.total = 0  # take-backs made (for health and tests)
        self.failed = 0  # take-backs that could not be made
        self._pending: Counter[str] = Counter()  # taken back since the last summary, by kind
        self._last_error = ""
        self._reported_at: float | None = None

    def took_back(self, room_id: str, what: str, why: BaseException | str) -> None:
        """``what`` was taken back in Valkey because its journal commit failed with ``why``."""
        self.total += 1
        self._pending[what] += 1
        self._last_error = _text(why)
        log.debug("room %s: took back a %s (journal commit failed: %s)", room_id, _name(what, 1), self._last_error)
        self.flush()

    def could_not(self, room_id: str, what: str, why: BaseException | str, error: BaseException) -> None:
        """The take-back itself failed: what was minted stays until it lapses."""
        self.failed += 1
        log.warning(
            "room %s: could not take back a %s whose journal commit failed (%s): %s; it lapses like a closed tab",
            room_id,
            _name(what, 1),
            _text(why),
            _text(error),
        )

    def flush(self, *, force: bool = False) -> None:
        """Write the summary of the take-backs not yet reported, when it is due (or ``force``)."""
        if not self._pending:
            return
        now = self.clock()
        if not force and self._reported_at is not None and now - self._reported_at < self.every_sec:
            return
        counts = ", ".join(f"{n} {_name(what, n)}" for what, n in sorted(self._pending.items()))
        log.warning(
            "took back %s whose journal commit failed (answered 503; nothing was acknowledged); last error: %s",
            counts,
            self._last_error,
        )
        self._pending.clear()
        self._reported_at = now


def _name(what: str, count: int) -> str:
    one, many = _NAMES.get(what, (what, what))
    return one if count == 1 else many


def _text(value: BaseException | str) -> str:
    if isinstance(value, str):
        return value
    return str(value) or type(value).__name__
