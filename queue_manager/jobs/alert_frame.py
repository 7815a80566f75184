"""The alert frame: every ``ALERT_EVERY_MS`` on this instance, whether or not a webhook is set.

Each frame

1. reports this instance's storage (``alerts:storage``) and the inline origins failing here;
2. on ``STORE=valkey``, raises this instance's own ``valkey_unreachable`` once Valkey has been out of
   reach for ``VALKEY_ALERT_AFTER_MS`` and delivers it itself (nobody leads while Valkey is down);
3. reads every room (fleet-wide numbers) and, on the leader, folds the conditions into the shared
   alert state (``alerting.step``), saves it fenced on the leader epoch, then delivers what is due;
   the other instances read that state, so *Firing now* is the same on every one of them;
4. on the leader, runs threshold activation, autotune and the target probes.

Deliveries run beside the frames (a slow receiver never delays the next frame); each one settles its
page in the shared state when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from queue_manager.background import Job, cancel_all, stop_if_cancelled
from queue_manager.jobs import activation, alerting, autotune
from queue_manager.jobs.conditions import Frame, StorageReport, evaluate, valkey_unreachable
from queue_manager.jobs.shared_state import MemoryShared, Shared
from queue_manager.jobs.targets import TargetProbe
from queue_manager.jobs.webhook import Webhook
from queue_manager.store.base import StoreUnavailable

if TYPE_CHECKING:
    from queue_manager.context import Context
    from queue_manager.fleet.parts import FleetParts

log = logging.getLogger("queue_manager.alerts")

SITE_ERROR_WINDOW_MS = 120_000  # an inline origin whose error count grew this recently is failing


class Autopilot:
    def __init__(self, ctx: Context, shared: Shared, fleet: FleetParts | None = None) -> None:
        self.ctx = ctx
        self.settings = settings = ctx.settings
        self.shared = shared
        # what a frame takes as the shared copy being away: OSError and the copy's own errors
        self._away: tuple[type[Exception], ...] = (OSError, *shared.errors)
        self._report_away: tuple[type[Exception], ...] = (StoreUnavailable, *self._away)
        self.fleet = fleet
        self.instance = settings.instance_id
        self.webhook = Webhook(settings, ctx.clock.wall_ms)
        self.targets = TargetProbe(settings, shared, ctx.clock)
        self.every_ms = max(1, settings.alert_every_ms)
        self.hold_ms = settings.alert_hold_sec * 1000
        self.repeat_ms = settings.alert_repeat_sec * 1000
        self.state: alerting.State = alerting.empty()  # the fleet's alert state as last read or written
        self.auto: dict[str, Any] = {}  # the autopilot document as last read or written
        self.local: alerting.State = alerting.empty()  # valkey_unreachable: this instance's own
        self.last_frame_at: int | None = None
        self.frames = 0
        self._valkey_down_since: int | None = None
        self._origin_seen: dict[str, tuple[int, int]] = {}  # room -> (error count, wall ms it last grew)
        self._lock = asyncio.Lock()
        self._in_flight: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.job = Job("qm-alert-frames", self._run)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self.job.start()

    async def stop(self) -> None:
        await self.job.stop()
        await cancel_all(self._tasks)
        await self.webhook.close()
        await self.targets.close()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            next_at += self.every_ms / 1000
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            try:
                await self.frame()
            except Exception:
                log.exception("alert frame failed")
            stop_if_cancelled()  # a driver mid-call may take the stop's cancel for its own: the loop ends anyway
            if loop.time() - next_at > 5 * self.every_ms / 1000:
                next_at = loop.time()

    @property
    def leader(self) -> bool:
        """Holds the lease, and Valkey answers (nobody leads while it is away)."""
        return self.shared.leadership.leader and (self.fleet is None or self.fleet.connection.up)

    # ------------------------------------------------------------------ one frame

    async def frame(self) -> None:
        now = self.ctx.clock.wall_ms()
        self.last_frame_at = now
        self.frames += 1
        await self._valkey_frame(now)
        if self.fleet is not None and not self.fleet.connection.up:
            return  # nothing shared can be read or written, and nobody leads
        try:
            await self._report(now)
            rooms = await self.ctx.store.list_rooms()
        except self._report_away as exc:
            log.debug("alert frame: %s", exc)
            return
        try:
            await self._fleet_frame(rooms, now)
        except self._away as exc:
            log.debug("alert frame: %s", exc)

    async def _fleet_frame(self, rooms: list[dict[str, Any]], now: int) -> None:
        reports = await self.shared.reports("alerts:storage")  # every instance's frame report, read once
        storage = self._storage_reports(reports)
        targets = self.targets.seen = await self.shared.reports("targets")
        sites = self._sites_failing(rooms, targets, reports, now)
        if not self.leader:
            self.state = await self.shared.load("alerts:state") or alerting.empty()
            self.auto = await self.shared.load("autopilot") or {}
            return
        async with self._lock:
            state = await self.shared.load("alerts:state") or alerting.empty()
            frame = Frame(
                now=now,
                rooms=rooms,
                open_keys=set(state.get("open", {})),
                storage=storage,
                storage_window_ms=3 * self.every_ms,
                sites_failing=sites,
                journal_gaps=self.fleet.gaps.fleet if self.fleet is not None else {},
            )
            alerting.step(state, evaluate(frame), now, self.hold_ms, self.repeat_ms)
            if not self.webhook.configured:
                state["outbox"] = []  # nobody to page: the panel is the alerting
            if not await self.shared.save("alerts:state", state):
                return  # no longer the leader
            self.state = state
        self._deliver_due(now)
        auto = self.auto = await self.shared.load("autopilot") or {}  # read by badges() while the jobs run
        changed = await activation.run(self.ctx.store, self.ctx.access.audit, auto, rooms, now)
        if self.settings.autotune:
            changed = (
                await autotune.run(self.ctx.store, self.ctx.access.audit, auto, rooms, now, self.signals(targets))
                or changed
            )
        if changed:
            await self.shared.save("autopilot", auto)
        self.auto = auto
        await self.targets.round(rooms, now)

    # ------------------------------------------------------------------ what the frame reads

    async def _report(self, now: int) -> None:
        """This instance's storage and the inline origins failing here, for the leader to read."""
        doc: dict[str, Any] = {"at": now, "ok": True, "paging": False, "originFailing": self._origins_failing_here(now)}
        fleet = self.fleet
        if fleet is not None:
            watch = fleet.storage
            doc["ok"] = not watch.failing() and fleet.journal.storage_ok(now, 3 * self.every_ms)
            doc["paging"] = watch.paging(now)
            spool = fleet.journal.maintenance_spool
            doc["spooling"] = spool.spooling
            doc["quarantined"] = len(await asyncio.to_thread(spool.spool.quarantined))
        await self.shared.report("alerts:storage", self.instance, doc)

    def _storage_reports(self, reports: dict[str, dict[str, Any]]) -> list[StorageReport]:
        if self.fleet is None:
            return []
        out = []
        for instance, doc in reports.items():
            with contextlib.suppress(KeyError, TypeError, ValueError):
                out.append(
                    StorageReport(
                        instance,
                        int(doc["at"]),
                        bool(doc["ok"]),
                        bool(doc["paging"]),
                        int(doc.get("quarantined") or 0),
                        bool(doc.get("spooling")),
                    )
                )
        return out

    def _origins_failing_here(self, now: int) -> list[str]:
        inline = self.ctx.attached.inline
        if inline is None or not inline.index:
            return []
        failing = set(inline.probe.failing())
        counts: dict[str, int] = {}
        for (room_id, _phase), n in self.ctx.counters.origin_errors.items():
            counts[room_id] = counts.get(room_id, 0) + n
        for room_id, n in counts.items():
            seen, grew = self._origin_seen.get(room_id, (0, 0))
            if n > seen:
                grew = now
            self._origin_seen[room_id] = (n, grew)
            if grew and now - grew < SITE_ERROR_WINDOW_MS:
                failing.add(room_id)
        return sorted(failing)

    def _sites_failing(
        self,
        rooms: list[dict[str, Any]],
        targets: dict[str, dict[str, Any]],
        reports: dict[str, dict[str, Any]],
        now: int,
    ) -> dict[str, str]:
        out: dict[str, str] = {}
        window = 3 * self.every_ms
        for instance, doc in reports.items():
            if now - int(doc.get("at") or 0) >= window:
                continue
            for room_id in doc.get("originFailing") or []:
                out.setdefault(str(room_id), f"its origin fails on {instance}")
        live = {str(r["id"]) for r in rooms}
        for room_id, result in targets.items():
            if room_id in live and result.get("ok") is False and not result.get("refused"):
                out.setdefault(room_id, result.get("summary") or "its target URL fails")
        return {k: v for k, v in out.items() if k in live}

    def signals(self, targets: dict[str, dict[str, Any]]) -> autotune.Signals:
        """What autotune reads of each room's site: the probes' latency and failures, inline origin errors."""
        inline = self.ctx.attached.inline
        origins: dict[str, dict[str, Any]] = {}
        if inline is not None and inline.index:
            raw = inline.health().get("origins")
            if isinstance(raw, dict):
                origins = {str(room_id): dict(result) for room_id, result in raw.items()}
        return autotune.Signals(
            targets=targets,
            origins=origins,
            origin_errors=dict(self.ctx.counters.origin_errors),
            instance=self.instance,
            target_every_ms=self.settings.target_probe_every_ms,
        )

    # ------------------------------------------------------------------ valkey_unreachable

    async def _valkey_frame(self, now: int) -> None:
        fleet = self.fleet
        if fleet is None:
            return
        conditions = []
        if fleet.connection.up:
            self._valkey_down_since = None
        else:
            if self._valkey_down_since is None:
                self._valkey_down_since = now
            conditions.append(valkey_unreachable(self.instance, now - self._valkey_down_since))
        # its hold is VALKEY_ALERT_AFTER_MS; it never repeats faster than the others
        alerting.step(self.local, conditions, now, self.settings.valkey_alert_after_ms, self.repeat_ms)
        if not self.webhook.configured:
            self.local["outbox"] = []
        for entry in alerting.due(self.local, now):
            if entry["id"] in self._in_flight:
                continue
            self._spawn(self._deliver_local(entry))

    async def _deliver_local(self, entry: dict[str, Any]) -> None:
        self._in_flight.add(entry["id"])
        try:
            delivery = await self.webhook.send(entry["body"], attempt=entry["attempts"] + 1)
            alerting.settle(self.local, entry["id"], Webhook.final(delivery), self.ctx.clock.wall_ms(), self.every_ms)
        finally:
            self._in_flight.discard(entry["id"])

    # ------------------------------------------------------------------ delivery

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _deliver_due(self, now: int) -> None:
        for entry in alerting.due(self.state, now):
            if entry["id"] not in self._in_flight:
                self._in_flight.add(entry["id"])
                self._spawn(self._deliver(entry))

    async def _deliver(self, entry: dict[str, Any]) -> None:
        try:
            delivery = await self.webhook.send(entry["body"], attempt=entry["attempts"] + 1)
            async with self._lock:
                try:
                    state = await self.shared.load("alerts:state") or alerting.empty()
                except self._away:
                    return  # the page stays in the outbox; the next leader frame retries it
                alerting.settle(state, entry["id"], Webhook.final(delivery), self.ctx.clock.wall_ms(), self.every_ms)
                if await self.shared.save("alerts:state", state):
                    self.state = state
        finally:
            self._in_flight.discard(entry["id"])

    async def test(self) -> dict[str, Any]:
        """POST /api/admin/alerts: a test page, sent now by this instance."""
        now = self.ctx.clock.wall_ms()
        body = alerting.page(
            "test",
            "firing",
            "info",
            None,
            f"Test alert from {self.instance}: the webhook path works",
            now,
            now,
        )
        delivery = await self.webhook.send(body, test=True)
        return {"body": body, "delivery": delivery}

    # ------------------------------------------------------------------ what the routes read

    def view(self, *, full: bool) -> dict[str, Any]:
        now = self.ctx.clock.wall_ms()
        s = self.settings
        firing = alerting.firing(self.state) + alerting.firing(self.local)
        holding = alerting.holding(self.state) + alerting.holding(self.local)
        out: dict[str, Any] = {
            "configured": self.webhook.configured,
            "webhook": self.webhook.where() if full else None,
            "everyMs": self.every_ms,
            "holdSec": s.alert_hold_sec,
            "repeatSec": s.alert_repeat_sec,
            "valkeyAlertAfterMs": s.valkey_alert_after_ms if self.fleet is not None else None,
            "instance": self.instance,
            "leader": self.leader,
            "delivering": self.leader and self.webhook.configured,
            "lastFrameAt": self.last_frame_at,
            "firing": [_row(e, now) for e in firing],
            "holding": [_row(e, now) for e in holding],
            "outbox": len(self.state.get("outbox", [])) + len(self.local.get("outbox", [])),
            "dropped": int(self.state.get("dropped") or 0),
            "sent": self.webhook.sent,
            "failed": self.webhook.failed,
            "deliveries": [d.public(full=full) for d in self.webhook.log],
            "targets": self.targets.view(full=full),
        }
        if not full:
            del out["webhook"]
        return out

    def badges(self) -> dict[str, dict[str, Any]]:
        """Rooms threshold activation acted on in the last 15 minutes (the card's AUTO · SELF)."""
        return activation.badges(self.auto, self.ctx.clock.wall_ms())


def _row(entry: dict[str, Any], now: int) -> dict[str, Any]:
    return {
        "event": entry["event"],
        "roomId": entry["roomId"],
        "severity": entry.get("severity"),
        "message": entry.get("message"),
        "since": entry["since"],
        "firedAt": entry.get("fired"),
        "lastPagedAt": entry.get("paged"),
        "forSec": round((now - entry["since"]) / 1000, 1),
    }


def shared_for(ctx: Context, fleet: FleetParts | None) -> Shared:
    """The fleet's shared state: Valkey (fenced on the lease) on STORE=valkey, this process otherwise."""
    if fleet is None:
        return MemoryShared()
    from queue_manager.jobs.shared_state_valkey import ValkeyShared

    connection = fleet.connection
    return ValkeyShared(connection.redis, connection.prefix, connection.lease)


WallClock = Callable[[], int]
