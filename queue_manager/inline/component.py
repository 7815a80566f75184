"""The inline component: the host index, the upstream pool, the counters, and the index refresh.

The queue's own rules reach it as callables (:class:`QueueSide`), handed in by the composition root:
the inline proxy never imports the queue's routes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from queue_manager.background import Job
from queue_manager.context import Context
from queue_manager.engine.brand import Brand
from queue_manager.engine.visitor import CheckResult, Presented
from queue_manager.http.wire import Request, Send
from queue_manager.inline.client import Pool
from queue_manager.inline.deadlines import Deadlines
from queue_manager.inline.hosts import DOWN_PAGE_KEY, HostIndex
from queue_manager.inline.origin_health import OriginProbe
from queue_manager.inline.surface import console_host
from queue_manager.metrics import Counters
from queue_manager.services.identity import Identity
from queue_manager.store.base import StoreUnavailable

log = logging.getLogger("queue_manager.inline")

REFRESH_SEC = 1.0
#: While Valkey and Postgres are both unreachable at boot, the Postgres read of the inline host index is
#: retried after 1 s, the wait doubling after each failure up to 30 s (back to 1 s once a read lands).
PG_RETRY_FIRST_SEC = 1.0
PG_RETRY_MAX_SEC = 30.0


def pg_retry_delay(failures: int) -> float:
    """The wait before the next Postgres read after ``failures`` failed reads in a row: 1, 2, 4, 8, 16, 30, 30… s."""
    if failures < 1:
        return 0.0
    return min(PG_RETRY_MAX_SEC, PG_RETRY_FIRST_SEC * 2.0 ** min(failures - 1, 16))


#: The door check: (ctx, request, identity, room id, the ticket presented, the door key, the visitor's URL).
DoorCheck = Callable[
    [Context, Request, Identity, str, Presented | None, str | None, str], Coroutine[Any, Any, CheckResult]
]
#: The app's ``X-QM-Command: revoke``: (ctx, room id, the ticket presented, the door key) -> whether a
#: live session ended.
RevokeSession = Callable[[Context, str, Presented | None, str | None], Coroutine[Any, Any, bool]]
#: A room's waiting page: (ctx, request, send, room id, the API prefix its script calls).
WaitingPage = Callable[[Context, Request, Send, str, str], Awaitable[None]]
#: A branded room's origin-down page (one self-contained file), rendered when the host index is rebuilt.
OriginDownPage = Callable[[Brand], bytes]
#: A block rule's "not allowed" page for this request (its language) in the room's brand (None: plain).
BlockedPage = Callable[[Request, Brand | None], bytes]


@dataclass(frozen=True, slots=True)
class QueueSide:
    """What the inline proxy asks of the queue: the gate, and the page shown to those still waiting."""

    door_check: DoorCheck
    waiting_page: WaitingPage
    origin_down_page: OriginDownPage | None = None
    revoke_session: RevokeSession | None = None
    blocked_page: BlockedPage | None = None


class Inline:
    def __init__(self, ctx: Context, queue: QueueSide) -> None:
        s = ctx.settings
        self.ctx = ctx
        self.queue = queue
        self.index = HostIndex()
        self.pool = Pool(allow_private=s.proxy_allow_private, connect_timeout=s.proxy_timeout_ms / 1000.0)
        self.timeout = s.proxy_timeout_ms / 1000.0
        self.deadlines = Deadlines(self.timeout)  # response heads awaited on the fast path
        self.active_proxied = 0  # proxied responses and sockets in flight (what a stop waits for)
        self.connection_count: Callable[[], int] | None = None  # set by the server (cli)
        # closes connections waiting for a request head, past the ceiling (inline/heads.py; set by the cli)
        self.make_room: Callable[[], None] | None = None
        self.probe = OriginProbe(self.pool, self.index, self.timeout)
        self._refresher_job = Job("qm-inline-index", self._refresher)
        self._probe_job = Job("qm-inline-probe", self.probe.run)
        self._both_down_logged = False
        # a room's settings changed (a save here, or another instance's): the index is read again at once
        ctx.room_changes.subscribe(self._rooms_changed)
        self._pg_failures = 0  # Postgres reads of the index failed in a row (both stores down)
        self._pg_next_at = 0.0  # when (clock.mono) the next one may be made
        self.revoking: set[asyncio.Task[bool]] = set()  # sessions the apps ended, being ended in the store

    # ---------------------------------------------------------------- the index

    async def refresh(self) -> None:
        try:
            rooms = await self.ctx.store.list_rooms()
        except StoreUnavailable:
            if self.index.source == "none" and self.ctx.clock.mono() >= self._pg_next_at:
                await self._from_journal()  # booted during an outage: the durable room configs instead
            return  # otherwise keep the last index for the outage
        for room in rooms:
            if room.get("proxyOrigin") and room.get("brand") is not None:  # a read lacks the logo's bytes
                try:
                    policy = await self.ctx.store.room_policy(str(room["id"]))
                except StoreUnavailable:
                    policy = None
                brand = None if policy is None else policy.brand
                render = self.queue.origin_down_page
                room[DOWN_PAGE_KEY] = None if brand is None or render is None else render(brand)
        fleet = self.ctx.fleet
        rebuilding = fleet.recovery.recovering_rooms() if fleet is not None else set()
        self.index.rebuild(rooms, "valkey" if self.ctx.store.kind == "valkey" else "memory", keep=rebuilding)

    async def _from_journal(self) -> None:
        fleet = self.ctx.fleet
        if fleet is None:
            return
        try:
            rows = await fleet.journal.rooms()
        except Exception as exc:  # both stores down: gate nothing (404s), retry after a growing wait
            self._pg_failures += 1
            self._pg_next_at = self.ctx.clock.mono() + pg_retry_delay(self._pg_failures)
            if not self._both_down_logged:
                log.warning("Valkey and Postgres are both unreachable: %s", exc)
                self._both_down_logged = True
            return
        self._pg_failures, self._pg_next_at = 0, 0.0
        self.index.rebuild([{**config, "id": room_id} for room_id, _gen, config in rows], "postgres")
        log.warning("inline host index built from Postgres (%d inline rooms)", len(self.index.by_room))

    async def _rooms_changed(self, rooms: frozenset[str]) -> None:
        """A room was created, changed or deleted (a save here awaits this before it answers; another
        instance's save arrives by its ``rooms`` hint): the index is read again now, so the next request sees
        the change. The REFRESH_SEC re-read still runs, for anything a hint never said."""
        await self.refresh()

    def console_host(self, host: bytes | None) -> bool:
        """May the console answer on this host (one that fronts no inline room) while inline rooms exist?"""
        return console_host(self.ctx.settings, host)

    async def start(self) -> None:
        try:
            await self.refresh()
        except Exception:  # never a reason not to start: the refresher tries again every second
            log.exception("inline host index: first read failed")
        self._refresher_job.start()
        self._probe_job.start()

    async def stop(self) -> None:
        await self._refresher_job.stop()
        await self._probe_job.stop()
        self.pool.close_all()

    async def _refresher(self) -> None:
        while True:
            await asyncio.sleep(REFRESH_SEC)
            try:
                await self.refresh()
            except Exception:  # pragma: no cover - logged, the loop goes on
                log.exception("inline host index refresh failed")

    def health(self, counters: Counters | None = None) -> dict[str, object]:
        """The ``inline`` block of /api/admin/health (absent while no room is inline). ``counters`` is the
        fleet's sum where health has one; in-flight requests, the pool and the probe are this instance's."""
        c = self.ctx.counters if counters is None else counters
        per_room: dict[str, dict[str, int]] = {}
        for (room_id, phase), n in c.origin_errors.items():
            per_room.setdefault(room_id, {})[phase] = n
        return {
            "rooms": sorted(self.index.by_room),
            "hosts": sorted(self.index.by_host),
            "indexFrom": self.index.source,
            "gatedTotal": c.inline_gated,
            "bypassedTotal": c.inline_bypassed,
            "originErrorsTotal": sum(c.origin_errors.values()),
            "originErrors": per_room,
            "visitorDisconnectsTotal": sum(c.visitor_disconnects.values()),
            "visitorDisconnects": dict(c.visitor_disconnects),
            "backendDownOpenTotal": c.backend_down.get("open", 0),
            "backendDownClosedTotal": c.backend_down.get("closed", 0),
            "proxiedInFlight": self.active_proxied,
            "connectionsShedTotal": c.connections_shed,
            "upstreamConnectionsOpened": self.pool.connections_opened,
            "origins": {r: res.as_json(0) for r, res in sorted(self.probe.results.items())},
        }

    # ---------------------------------------------------------------- the app's commands

    def revoke(self, room_id: str, session: tuple[str | None, str | None] | None) -> None:
        """The app answered ``X-QM-Command: revoke``: end the session of the visitor the response went to
        (``session``: the ticket token and door key the gate read), beside the response, which goes on."""
        end = self.queue.revoke_session
        if end is None or session is None:
            return
        token, door_key = session
        presented, _ = self.ctx.read_ticket(room_id, token)
        task = asyncio.get_running_loop().create_task(end(self.ctx, room_id, presented, door_key))
        self.revoking.add(task)
        task.add_done_callback(self._revoked)

    def _revoked(self, task: asyncio.Task[bool]) -> None:
        self.revoking.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("an app's X-QM-Command: revoke was not applied: %s", task.exception())

    # ---------------------------------------------------------------- limits

    def at_ceiling(self) -> bool:
        """More than MAX_CONNECTIONS open, after closing those that were only waiting for a request head."""
        limit = self.ctx.settings.max_connections
        count = self.connection_count
        if not limit or count is None or count() <= limit:
            return False
        if self.make_room is not None:
            self.make_room()
        return count() > limit
