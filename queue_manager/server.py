"""The composition root: every part of a running server is built here, once, and started and stopped here.

:class:`Server` is the ASGI application uvicorn runs. It takes the parts the store brings
(``assembly/``: memory, or Valkey with the fleet's parts and the PostgreSQL journal), builds from them the
frozen :class:`~.context.Context` every route receives, then the queue's app (``routes/app.py``), the
inline proxy wrapped around it (``inline/front.py``), the leader's jobs and the ticker; it owns their
lifespan. Nothing below imports this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
from typing import TYPE_CHECKING, Any

from queue_manager.assembly.build import memory_parts, parts_for
from queue_manager.background import Job
from queue_manager.clock import SystemClock
from queue_manager.config import ConfigRefusal, Settings
from queue_manager.context import Context
from queue_manager.http.wire import Receive, Scope, Send
from queue_manager.inline.component import Inline, QueueSide
from queue_manager.inline.front import InlineFront
from queue_manager.jobs import webhook
from queue_manager.jobs.alert_frame import Autopilot, shared_for
from queue_manager.jobs.room_events import EventKeeper
from queue_manager.jobs.turn_mail import TurnMail
from queue_manager.journal.describe import describe
from queue_manager.routes.app import App
from queue_manager.routes.health import local_counters, local_exposition
from queue_manager.routes.pages import blocked, branding, waiting
from queue_manager.routes.visitor import door, revoke
from queue_manager.services.peers import PeerListener, Peers
from queue_manager.sidestores.history.base import WarehouseRefused
from queue_manager.store.base import JournalCommitFailed, StoreUnavailable
from queue_manager.store.memory import MemoryStore
from queue_manager.web import connectors

if TYPE_CHECKING:
    from queue_manager.fleet.parts import FleetParts
    from queue_manager.journal.database import Database
    from queue_manager.journal.runs import InstanceRuns

log = logging.getLogger("queue_manager")

#: The stop line's words when the events journal's last commit did not land (the Operations Guide's).
STORAGE_FAILING = "WITH STORAGE FAILING"
#: How often a run whose start PostgreSQL did not take tries again to record it.
MARK_RUN_RETRY_SEC = 5.0


def settings_refusal(settings: Settings) -> ConfigRefusal | None:
    """What :class:`Server` refuses to be built with, judged from the settings alone before anything is
    connected to: an alert webhook on a private or internal address (its name is resolved). ``qm config``
    reports it too; the refusals only a connection finds (Valkey's, PostgreSQL's) come at start-up."""
    return webhook.refusal(settings)


class Server:
    def __init__(
        self,
        settings: Settings,
        store: MemoryStore | None = None,
        clock: SystemClock | None = None,
        *,
        peers: Peers | None = None,
    ) -> None:
        """``store``: a memory store to serve from (tests, in-process benchmarks); otherwise the one ``STORE``
        names, with its parts (``assembly/``)."""
        self.clock = clock or SystemClock()
        self.settings = settings
        self.started_ms = self.clock.wall_ms()
        self.runs: InstanceRuns | None = None  # this run's row in instance_runs (a fixed QM_INSTANCE_ID on pg)
        # how the stop ended, as the stop line says it: None until the lifespan's stop wrote that line
        # (a stop cut short never does), then whether it was clean (the exit status follows it)
        self.stopped_clean: bool | None = None
        self._mark_run = Job("qm-run-mark", self._mark_started_later)
        parts = memory_parts(settings, self.clock, store) if store is not None else parts_for(settings, self.clock)
        self.fleet: FleetParts | None = parts.fleet
        self.database: Database | None = parts.fleet.database if parts.fleet is not None else None
        self.timeline = parts.timeline
        ctx = self.ctx = Context.build(settings, parts, self.clock, peers=peers)
        # WORKERS>1: this worker's own metrics, for the sibling that answers a scrape on the shared port
        self.peer_listener = None if peers is None else PeerListener(peers, lambda: local_exposition(ctx))
        if self.fleet is not None:
            self._wire_fleet(self.fleet)
        self.app = App(ctx)
        queue_side = QueueSide(
            door_check=door.door_check,
            waiting_page=waiting.waiting_page,
            origin_down_page=branding.origin_down_page,
            revoke_session=revoke.inline_revoke,
            blocked_page=blocked.blocked_for,
        )
        self.inline = Inline(ctx, queue_side)
        self.front = InlineFront(self.app, self.inline)
        self.front.lifespan = self.lifespan
        self.ticker = Job("qm-ticker", self._ticker)
        refusal = settings_refusal(settings)
        if refusal is not None:
            raise refusal
        self.autopilot = Autopilot(ctx, shared_for(ctx, self.fleet), self.fleet)
        self.room_events = EventKeeper(ctx, self.autopilot.shared.leadership, self.fleet)
        self.turn_mail: TurnMail | None = None
        if ctx.addresses is not None:  # TURN_EMAILS: addresses in this process or in Valkey, sent by the leader
            self.turn_mail = TurnMail(ctx, ctx.addresses, self.autopilot.shared.leadership, self.fleet)
        ctx.attached.attach(inline=self.inline, alerts=self.autopilot, turn_mail=self.turn_mail)

    def _wire_fleet(self, fleet: FleetParts) -> None:
        """What the fleet's parts read of this process, once the context exists."""
        ctx = self.ctx
        fleet.counters.source = lambda: local_counters(ctx)  # what this instance writes for the fleet view
        access = ctx.access

        async def audit_gap(action: str, room_id: str, detail: dict[str, Any]) -> None:
            await access.audit(None, action, target=room_id, room_id=room_id, **detail)

        # the events the leader commits from a room's outbox, in the audit trail under the system actor
        fleet.gaps.audit = audit_gap
        broadcaster = ctx.broadcaster
        # POST /internal/api/notify on another instance: wake this one's live streams of that room
        fleet.connection.hints.on("wake", lambda hint: broadcaster.notify({str(hint.get("room"))}))
        # another instance created, changed or deleted rooms: announced here too (the inline host index)
        ctx.room_changes.follow(fleet.connection.hints)

    @property
    def asgi(self) -> InlineFront:
        """The ASGI application uvicorn runs: the inline front, with this server's lifespan."""
        return self.front

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The same application, for a caller holding the server (tests, in-process benchmarks)."""
        await self.front(scope, receive, send)

    # ------------------------------------------------------------------ lifespan

    async def lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.startup()
                except Exception as exc:  # pragma: no cover - reported to the server
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def startup(self) -> None:
        ctx = self.ctx
        if self.fleet is not None:
            from queue_manager.fleet import boot as fleet_boot

            await self.fleet.database.open()
            try:
                await fleet_boot.start(self.fleet)
            except ConfigRefusal as refusal:
                print(refusal.line, file=sys.stderr, flush=True)
                raise
            await ctx.admission.load()
        else:
            await ctx.store.start()
        await self._start_history()
        await self._build_connectors()
        self.ticker.start()
        if self.timeline is not None:
            self.timeline.start()
        await self.inline.start()
        self.autopilot.start()
        self.room_events.start()
        if self.turn_mail is not None:
            self.turn_mail.start()
        if self.peer_listener is not None:
            await self.peer_listener.start()
        ctx.run.started()
        previous = await self._begin_run()
        await self._audit_line("server.start", previous | {"store": ctx.store.kind})

    async def _build_connectors(self) -> None:
        """Build the connectors' downloads now (off the event loop), so a broken source is reported at start
        and the first download is served from memory; a failure is printed, never a refusal to start."""
        try:
            await asyncio.to_thread(connectors.built)
        except Exception as exc:
            print(f"queue-manager: the connectors could not be built: {describe(exc)}", file=sys.stderr, flush=True)

    async def _start_history(self) -> None:
        """Read the hourly history once before serving: PostgreSQL answering that it cannot be read refuses
        the boot (starting would write over rows it never read); PostgreSQL unreachable boots degraded, like
        the events journal, since every write reads the rows it changes first."""
        try:
            await self.ctx.history.start()
        except WarehouseRefused as exc:
            print(
                f"[history] the hourly history (history_hourly) cannot be read: {exc}. Refusing to start rather "
                "than write over it: grant this role SELECT, INSERT, UPDATE and DELETE on the table, or repair it.",
                file=sys.stderr,
                flush=True,
            )
            with contextlib.suppress(Exception):  # best effort and bounded: the process is exiting
                if self.fleet is not None:
                    from queue_manager.fleet import boot as fleet_boot

                    await asyncio.wait_for(fleet_boot.stop(self.fleet), 3.0)
                if self.database is not None:
                    await asyncio.wait_for(self.database.close(), 2.0)
            raise
        except Exception as exc:
            print(
                f"[history] PostgreSQL unreachable at boot ({describe(exc)}); the hourly history is written "
                "once it answers",
                file=sys.stderr,
                flush=True,
            )
            await self.ctx.history.start_degraded()

    async def _begin_run(self) -> dict[str, Any]:
        """``previousRunClean`` for the start line: how the previous run of this QM_INSTANCE_ID ended
        (true, false, or null with ``previousRun`` saying why it is not known); records this run."""
        if self.database is None:
            return {"previousRunClean": None, "previousRun": "unknown: STORE=memory keeps nothing across a restart"}
        if self.settings.instance_id_per_boot:
            return {"previousRunClean": None, "previousRun": "unknown: QM_INSTANCE_ID is new on each boot"}
        from queue_manager.journal.runs import InstanceRuns

        self.runs = InstanceRuns(self.database)
        try:
            clean = await self.runs.begin(self.settings.instance_id, self.started_ms)
        except Exception as exc:
            print(
                f"queue-manager: whether the previous run stopped cleanly is unknown: PostgreSQL: {describe(exc)}",
                file=sys.stderr,
                flush=True,
            )
            self._mark_run.start()  # this run is recorded once PostgreSQL answers, so a kill is still seen
            return {"previousRunClean": None, "previousRun": f"unknown: PostgreSQL unreachable ({describe(exc)})"}
        if clean is None:
            return {"previousRunClean": None, "previousRun": "none: the first run of this QM_INSTANCE_ID"}
        return {
            "previousRunClean": clean,
            "previousRun": "stopped cleanly" if clean else "no clean stop (killed, or stopped with storage failing)",
        }

    async def _mark_started_later(self) -> None:
        """Record this run (started, no stop yet) as soon as PostgreSQL answers."""
        assert self.runs is not None
        while True:
            await asyncio.sleep(MARK_RUN_RETRY_SEC)
            try:
                await self.runs.mark_started(self.settings.instance_id, self.started_ms)
            except Exception:
                continue
            return

    async def _audit_line(self, action: str, detail: dict[str, Any]) -> None:
        """The start or stop line in the audit trail, best effort: a line PostgreSQL cannot take is
        printed on stderr instead of stopping the start or the stop."""
        try:
            await self.ctx.access.audit(None, action, target=self.settings.instance_id, **detail)
        except Exception as exc:
            line = " ".join(f"{k}={json.dumps(v)}" for k, v in detail.items())
            print(
                f"queue-manager: {action} {line} (not in the audit trail: {describe(exc)})",
                file=sys.stderr,
                flush=True,
            )

    def begin_stop(self) -> None:
        """Not ready from this instant; live streams are told to end."""
        ctx = self.ctx
        ctx.run.stopping()
        ctx.broadcaster.close_all()
        ctx.admin_streams.close_all()

    async def shutdown(self) -> None:
        self.begin_stop()
        if self.peer_listener is not None:  # the siblings' scrapes go without this worker from now on
            await self.peer_listener.stop()
        await self.autopilot.stop()
        await self.room_events.stop()
        if self.turn_mail is not None:
            await self.turn_mail.stop()
        await self.inline.stop()
        await self.ticker.stop()
        await self._last_sample()
        await self.ctx.history.stop()  # the open hour folded in, before the lease is handed back
        if self.timeline is not None:  # the marks still held are written before the pool closes
            await self.timeline.stop()
        if self.fleet is not None:
            from queue_manager.fleet import boot as fleet_boot

            await fleet_boot.stop(self.fleet)  # the lease handed back, the events journal's last commit
            await self._end_run(self.fleet.journal.unjournaled_at_stop())
            if self.database is not None:
                with contextlib.suppress(Exception):
                    await self.database.close()
        else:
            await self._end_run(None)
            await self.ctx.store.close()

    async def _last_sample(self) -> None:
        """One more sample of every room at the stop, so the open hour is folded in as it stands now."""
        ctx = self.ctx
        try:
            summaries, waits = await asyncio.wait_for(ctx.series.read(ctx.store), 2.0)
        except Exception:  # the store is away: the hour keeps its last sample
            return
        now_ms = self.clock.wall_ms()
        ctx.series.sample(summaries, now_ms, waits)
        ctx.history.offer(summaries, ctx.series.last_waits, now_ms, ctx.series.last_lumps)

    async def _end_run(self, unjournaled: int | None) -> None:
        """The stop line, once the journal's last commit is made and while the pool is still open:
        ``clean`` only when that commit landed (``unjournaled`` None); else WITH STORAGE FAILING, also
        on stderr since PostgreSQL may refuse the audit row too. Then this run is marked stopped."""
        await self._mark_run.stop()  # the stop below records the run in any case
        clean = unjournaled is None
        self.stopped_clean = clean
        detail: dict[str, Any] = {"clean": clean}
        if not clean:
            error = self.fleet.journal.last_error if self.fleet is not None else None
            detail |= {"storage": STORAGE_FAILING, "unjournaled": unjournaled, "lastError": error}
            print(
                f"queue-manager: shutdown {STORAGE_FAILING}: {unjournaled} events since the last good commit are "
                f"not in the events journal (last error: {error})",
                file=sys.stderr,
                flush=True,
            )
        await self._audit_line("server.stop", detail)
        if self.runs is None or self.database is None:
            return
        try:
            await self.runs.end(self.settings.instance_id, self.started_ms, self.clock.wall_ms(), clean=clean)
        except Exception as exc:  # the next start then says this run did not stop cleanly
            print(
                f"queue-manager: this stop could not be recorded as {'clean' if clean else 'unclean'}: "
                f"PostgreSQL: {describe(exc)}",
                file=sys.stderr,
                flush=True,
            )

    async def _ticker(self) -> None:
        """Once a second: the store's tick (outflow, expiries), the console's series, the clock's steps."""
        ctx = self.ctx
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            next_at += 1.0
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            try:
                await ctx.admission.refresh()  # admission maintenance set on another instance (its hint may be lost)
                await ctx.store.tick()
                now_ms = self.clock.wall_ms()
                sampled = await ctx.series.feed(ctx.store, now_ms)
                if sampled is not None:  # the hourly history's write runs on its own, never holding the tick
                    ctx.history.offer(sampled, ctx.series.last_waits, now_ms, ctx.series.last_lumps)
                if self.fleet is not None:
                    self.fleet.connection.note_store_result(True)
            except JournalCommitFailed as exc:
                # Valkey answered (its failure would have been raised instead): only the journal failed,
                # which health reports as the journal's (storage), never as Valkey down
                if self.fleet is not None:
                    self.fleet.connection.note_store_result(True)
                log.warning("tick: events journal unavailable: %s", exc)
            except StoreUnavailable as exc:
                if self.fleet is not None:
                    self.fleet.connection.note_store_result(False)
                log.warning("tick: store unavailable: %s", exc)
            except Exception:
                log.exception("tick failed")
            step = self.clock.check_step()
            if step is not None:
                ctx.run.clock_stepped(self.clock.wall_ms(), step)
                print(
                    f"WARNING: the wall clock stepped by {step} ms; tickets issued around it may be refused",
                    file=sys.stderr,
                    flush=True,
                )
            if loop.time() - next_at > 5.0:
                next_at = loop.time()
