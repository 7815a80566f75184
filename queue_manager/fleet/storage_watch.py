"""Readiness on a failing events journal (the guide's "Readiness (/healthz)", storage part).

Every ALERT_EVERY_MS an *alert frame* looks at this instance's journal:

* while the journal is failing (its newest failure is newer than its newest landed commit or
  probe), the frame probes it (the commit's insert for one row, rolled back), so a fault recovers
  by itself with no traffic to prove it, and reads which other instances report their storage ok;
* a frame *saw a new failure* when a commit or its own probe failed since the previous frame.

Every RESYNC_MS (in the fleet's round, ``reconcile_loop.py``: ``report``) this instance's storage is
reported to the fleet as ok (a hash ``<prefix>storage:ok``, instance → wall ms) when the journal
reads healthy (``PgJournal.storage_ok``) and is not failing. A report counts for 3 × ALERT_EVERY_MS
(3 × RESYNC_MS when that is longer, so a report is never older than its window between two).

With the same report each instance says how many events its disk spool holds that PostgreSQL has not
yet (``<prefix>spool:held``, instance → ``<wall ms>:<events>``; quarantined files are not counted).
``spool_held`` reads the fleet's: the reconciler rebuilds no room from the journal while any instance
holds spooled events, since the journal lacks them.

Readiness goes out (``out_of_rotation``) only on a hard failure of *this* instance: no commit or
probe has landed since the newest failure, the last two frames in a row each saw a new failure,
and another instance reported its storage ok within that window. It comes back at the first
commit or probe that lands. With no other instance ok (the shared PostgreSQL is down, a fleet of
one, Valkey unreachable) the instance stays in: taking it out would move no join anywhere it could
be persisted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from typing import TYPE_CHECKING

from queue_manager.background import Job, stop_if_cancelled
from queue_manager.clock import Clock
from queue_manager.journal.pg import PgJournal
from queue_manager.store.base import StoreUnavailable
from queue_manager.store.valkey.keys import spool_held_key, storage_ok_key

if TYPE_CHECKING:
    from redis.asyncio import Redis

log = logging.getLogger("queue_manager.storage")


class StorageWatch:
    def __init__(
        self,
        journal: PgJournal,
        redis: Redis,
        prefix: str,
        instance_id: str,
        alert_every_ms: int,
        clock: Clock,
        report_every_ms: int = 0,
    ) -> None:
        self.journal = journal
        self.redis = redis
        self.key = storage_ok_key(prefix)
        self.held_key = spool_held_key(prefix)
        self.instance_id = instance_id
        self.every_ms = max(1, alert_every_ms)
        self.report_every_ms = max(0, report_every_ms)
        self.clock = clock
        self.frames_failing = 0  # consecutive frames that each saw a new failure
        self.others_ok = False  # another instance reported its storage ok within the window
        self._seen_error_at: int | None = None  # the newest failure the previous frame knew of
        self._failure_frames: deque[int] = deque(maxlen=8)  # wall ms of the frames that saw a new failure
        self.job = Job("qm-storage-watch", self._run)

    @property
    def window_ms(self) -> int:
        return 3 * max(self.every_ms, self.report_every_ms)

    def failing(self) -> bool:
        """No commit or probe has landed since the journal's newest failure."""
        return self.journal.status.failing()

    def paging(self, now_ms: int) -> bool:
        """storage_failing pages: two alert frames within 3 x ALERT_EVERY_MS saw new failures (one failed
        commit is degraded, not a page; an intermittent fault, or one still there at the next probe, is)."""
        return sum(1 for at in self._failure_frames if now_ms - at < self.window_ms) >= 2

    @property
    def out_of_rotation(self) -> bool:
        return self.failing() and self.frames_failing >= 2 and self.others_ok

    async def frame(self) -> None:
        """One alert frame (see the module docstring)."""
        if self.failing():
            with contextlib.suppress(StoreUnavailable):
                await self.journal.probe()
        newest = self.journal.last_error_at
        saw_new = newest is not None and newest != self._seen_error_at
        self._seen_error_at = newest
        if saw_new:
            self._failure_frames.append(self.clock.wall_ms())
        if self.failing() and saw_new:
            self.frames_failing += 1
        else:
            self.frames_failing = 0
        if not self.failing():
            self.others_ok = False  # only asked while this instance's journal fails
            return
        now = self.clock.wall_ms()
        try:
            await self.redis.hdel(self.key, self.instance_id)  # an instance whose commits fail is not ok
            reports = await self.redis.hgetall(self.key)
        except Exception:  # Valkey unreachable: nobody can be known to be ok, so stay in
            self.others_ok = False
            return
        others = False
        stale = []
        for raw_id, raw_at in reports.items():
            who = raw_id.decode() if isinstance(raw_id, bytes) else str(raw_id)
            at = int(raw_at)
            if now - at >= self.window_ms:
                stale.append(raw_id)
            elif who != self.instance_id:
                others = True
        if stale:
            with contextlib.suppress(Exception):
                await self.redis.hdel(self.key, *stale)
        if others != self.others_ok or (self.out_of_rotation and self.frames_failing == 2):
            log.warning(
                "storage: this instance's journal %s; another instance's storage ok: %s; ready: %s",
                "failing" if self.failing() else "healthy",
                others,
                not (self.failing() and self.frames_failing >= 2 and others),
            )
        self.others_ok = others

    async def report(self) -> None:
        """Tell the fleet whether this instance's storage is ok, and what its spool holds (called every
        RESYNC_MS)."""
        now = self.clock.wall_ms()
        if not self.failing() and self.journal.storage_ok(now, 3 * self.every_ms):
            await self.redis.hset(self.key, self.instance_id, str(now))
        else:
            await self.redis.hdel(self.key, self.instance_id)
        held = await self.spooled()
        if held:
            await self.redis.hset(self.held_key, self.instance_id, f"{now}:{held}")
        else:
            await self.redis.hdel(self.held_key, self.instance_id)

    async def spooled(self) -> int:
        """Events this instance's spool holds that PostgreSQL has not (the active file and finished files)."""
        stats = await asyncio.to_thread(self.journal.maintenance_spool.stats)
        return int(stats["pendingCount"]) + int(stats["failedCount"])

    async def spool_held(self) -> dict[str, int]:
        """Instance -> spooled events, for every instance that reported some within its window (this
        one as it is now)."""
        now = self.clock.wall_ms()
        out: dict[str, int] = {}
        for raw_id, raw in (await self.redis.hgetall(self.held_key)).items():
            who = raw_id.decode() if isinstance(raw_id, bytes) else str(raw_id)
            text = raw.decode() if isinstance(raw, bytes) else str(raw)
            at, _, count = text.partition(":")
            with contextlib.suppress(ValueError):
                if who != self.instance_id and now - int(at) < self.window_ms and int(count) > 0:
                    out[who] = int(count)
        own = await self.spooled()
        if own:
            out[self.instance_id] = own
        return out

    def start(self) -> None:
        self.job.start()

    async def stop(self) -> None:
        await self.job.stop()
        with contextlib.suppress(Exception):
            await self.redis.hdel(self.key, self.instance_id)
        # the spool's files stay on this instance's disk: a stop with events in them keeps the fleet's
        # rebuilds waiting only as long as the report is fresh, then drains at this instance's next start

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.every_ms / 1000)
            try:
                await self.frame()
            except Exception as exc:
                log.warning("storage frame: %s", exc)
            stop_if_cancelled()  # a driver mid-call may take the stop's cancel for its own: the loop ends anyway
