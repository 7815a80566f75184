"""The composition root: every part of a running server is built here, once, and started and stopped here.

:class:`Server` is the ASGI application uvicorn runs. It builds the store (memory, or Valkey with the
fleet's lease and the PostgreSQL journal), the shared access records, the :class:`~.http.context.Context`
every route receives, the queue's app (``routes/app.py``), the inline proxy wrapped around it
(``inline/front.py``) and the ticker; it owns their lifespan. Nothing below imports this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
from typing import TYPE_CHECKING, Any

from queue_manager.background import Job
from queue_manager.clock import SystemClock
from queue_manager.config import ConfigRefusal, Settings
from queue_manager.context import Context
from queue_manager.http.wire import Receive, Scope, Send
from queue_manager.inline.component import Inline, QueueSide
from queue_manager.inline.front import InlineFront
from queue_manager.jobs import webhook
from queue_manager.jobs.alert_frame import Autopilot, shared_for
from queue_manager.jobs.turn_mail import TurnMail
from queue_manager.journal.describe import describe
from queue_manager.routes.app import App
from queue_manager.routes.health import local_counters, local_exposition
from queue_manager.routes.pages import branding
from queue_manager.routes.visitor import api as visitor
from queue_manager.routes.visitor import door
from queue_manager.services.peers import PeerListener, Peers
from queue_manager.sidestores.history.base import WarehouseRefused
from queue_manager.sidestores.mailbook.base import AddressBook
from queue_manager.sidestores.mailbook.memory import MemoryAddressBook
from queue_manager.store.base import JournalCommitFailed, Store, StoreUnavailable
from queue_manager.web import connectors

if TYPE_CHECKING:
    from queue_manager.fleet.backend import Backend
    from queue_manager.journal.database import Database
    from queue_manager.journal.runs import InstanceRuns
    from queue_manager.sidestores.timeline.pg import TimelineNotes

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


def create_store(settings: Settings, clock: SystemClock) -> tuple[Store, Backend | None, Database | None]:
    """The store ``STORE`` names; on Valkey also the fleet backend (lease, journal, hints) that runs it and
    the one PostgreSQL pool the journal and the shared access records use."""
    if settings.store == "memory":
        from queue_manager.store.memory import MemoryStore

        return MemoryStore(clock), None, None
    from queue_manager.fleet.backend import Backend as ValkeyBackend
    from queue_manager.journal.database import Database as PgDatabase

    database = PgDatabase.from_settings(settings)
    backend = ValkeyBackend(settings, database)
    return backend.store, backend, database


class Server:
    def __init__(
        self,
        settings: Settings,
        store: Store | None = None,
        clock: SystemClock | None = None,
        *,
        peers: Peers | None = None,
    ) -> None:
        self.clock = clock or SystemClock()
        self.settings = settings
        self.backend: Backend | None = None
        self.database: Database | None = None
        self.started_ms = self.clock.wall_ms()
        self.runs: InstanceRuns | None = None  # this run's row in instance_runs (a fixed QM_INSTANCE_ID on pg)
        # how the stop ended, as the stop line says it: None until the lifespan's stop wrote that line
        # (a stop cut short never does), then whether it was clean (the exit status follows it)
        self.stopped_clean: bool | None = None
        self._mark_run = Job("qm-run-mark", self._mark_started_later)
        self.timeline: TimelineNotes | None = None
        if store is None:
            store, self.backend, self.database = create_store(settings, self.clock)
        ctx = self.ctx = Context.build(settings, store, self.clock)
        ctx.backend = self.backend
        ctx.peers = peers
        # WORKERS>1: this worker's own metrics, for the sibling that answers a scrape on the shared port
        self.peer_listener = None if peers is None else PeerListener(peers, lambda: local_exposition(ctx))
        if self.backend is not None:  # what this instance writes for the fleet view
            self.backend.counters.source = lambda: local_counters(ctx)
        if self.backend is not None and self.database is not None:  # access records shared by the fleet
            from queue_manager.access.records.pg import SharedAccessStore

            shared_access = SharedAccessStore(
                self.database,
                self.backend.store.redis,
                self.backend.fleet_prefix,
                hints=self.backend.hints,
                resync_ms=settings.resync_ms,
            )
            # audit rows follow the journal into the disk spool while it spools
            shared_access.spool_audit = self.backend.journal.maintenance_spool.take_audit
            ctx.access.store = shared_access
            access = ctx.access

            async def audit_gap(action: str, room_id: str, detail: dict[str, Any]) -> None:
                await access.audit(None, action, target=room_id, room_id=room_id, **detail)

            # the events the leader commits from a room's outbox, in the audit trail under the system actor
            self.backend.gaps.audit = audit_gap
            from queue_manager.sidestores.timeline.pg import TimelineNotes as PgTimeline

            # the chart's marks: written to PostgreSQL about a second after each, read back by every instance
            self.timeline = PgTimeline(self.database, self.clock)
            ctx.series.sink = self.timeline
            ctx.timeline = self.timeline
            from queue_manager.sidestores.history.pg import PgWarehouse
            from queue_manager.sidestores.history.valkey import SharedRefusals
            from queue_manager.sidestores.history.writer import HourlyHistory

            # the reports' rows in PostgreSQL, written by the leader only from the fleet's counters
            lease = self.backend.lease
            ctx.history = HourlyHistory(
                PgWarehouse(self.database, self.clock.wall_ms),
                SharedRefusals(self.backend.store.redis, self.backend.fleet_prefix),
                self.clock.wall_ms,
                retain_days=settings.history_retain_days,
                leads=lambda: lease.leader,
            )
            from queue_manager.sidestores.maintenance.valkey import ValkeyAdmissionMaintenance

            # admission maintenance: the fleet's flag in Valkey, announced by a hint, re-read every tick
            ctx.pop = ValkeyAdmissionMaintenance(
                store,
                self.backend.store.redis,
                self.backend.fleet_prefix,
                hints=self.backend.hints,
                database=self.database,
                instance_id=settings.instance_id,
            )
            from queue_manager.sidestores.maintenance.pg import PgJournalMaintenance

            # journal maintenance: this instance's spool, the flag mirrored in PostgreSQL and announced by a hint
            ctx.maintenance = PgJournalMaintenance(self.backend.journal, hints=self.backend.hints)
            broadcaster = ctx.broadcaster
            # POST /internal/api/notify on another instance: wake this one's live streams of that room
            self.backend.hints.on("wake", lambda hint: broadcaster.notify({str(hint.get("room"))}))
            from queue_manager.access.authfail.valkey import SharedAuthFailures

            ctx.access.failures = SharedAuthFailures(  # the fleet's wrong-key budget; this process's if Valkey is down
                self.backend.store.redis,
                self.backend.fleet_prefix,
                settings.admin_auth_fail_per_min,
                self.backend.clock,
                local=ctx.access.failures,
                breaker=self.backend.store.breaker,
                hints=self.backend.hints,  # authlock: a lockout reaches every instance at once
                max_keys=settings.rate_limit_max_keys,
            )
        self.app = App(ctx)
        queue_side = QueueSide(
            door_check=door.door_check,
            waiting_page=visitor.waiting_page,
            origin_down_page=branding.origin_down_page,
        )
        self.inline = Inline(ctx, queue_side)
        ctx.inline = self.inline
        self.front = InlineFront(self.app, self.inline)
        self.front.lifespan = self.lifespan
        self.ticker = Job("qm-ticker", self._ticker)
        refusal = settings_refusal(settings)
        if refusal is not None:
            raise refusal
        self.autopilot = Autopilot(ctx, shared_for(ctx, self.backend), self.backend)
        ctx.alerts = self.autopilot
        if self.backend is not None:  # revoked edge passes, for the whole fleet
            from queue_manager.sidestores.revocations.valkey import ValkeyRevocations

            ctx.revocations = ValkeyRevocations(self.backend.store.redis, self.backend.fleet_prefix, self.clock)
        self.turn_mail: TurnMail | None = None
        if settings.turn_emails:  # addresses in this process or in Valkey, sent by the leader
            ctx.addresses = self._address_book()
            self.turn_mail = TurnMail(ctx, ctx.addresses, self.autopilot.shared.leadership, self.backend)
            ctx.turn_mail = self.turn_mail

    def _address_book(self) -> AddressBook:
        if self.backend is None:
            return MemoryAddressBook(self.clock)
        from queue_manager.sidestores.mailbook.valkey import ValkeyAddressBook

        return ValkeyAddressBook(self.backend.store.redis, self.backend.fleet_prefix, self.clock)

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
        if self.backend is not None:
            if self.database is not None:
                await self.database.open()
            try:
                await self.backend.start()
            except ConfigRefusal as refusal:
                print(refusal.line, file=sys.stderr, flush=True)
                raise
            await ctx.pop.load()
        else:
            await ctx.store.start()
        await self._start_history()
        await self._build_connectors()
        self.ticker.start()
        if self.timeline is not None:
            self.timeline.start()
        await self.inline.start()
        self.autopilot.start()
        if self.turn_mail is not None:
            self.turn_mail.start()
        if self.peer_listener is not None:
            await self.peer_listener.start()
        ctx.ready = True
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
                if self.backend is not None:
                    await asyncio.wait_for(self.backend.stop(), 3.0)
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
        ctx.shutting_down = True
        ctx.ready = False
        ctx.broadcaster.close_all()
        ctx.admin_streams.close_all()

    async def shutdown(self) -> None:
        self.begin_stop()
        if self.peer_listener is not None:  # the siblings' scrapes go without this worker from now on
            await self.peer_listener.stop()
        await self.autopilot.stop()
        if self.turn_mail is not None:
            await self.turn_mail.stop()
        await self.inline.stop()
        await self.ticker.stop()
        await self._last_sample()
        await self.ctx.history.stop()  # the open hour folded in, before the lease is handed back
        if self.timeline is not None:  # the marks still held are written before the pool closes
            await self.timeline.stop()
        if self.backend is not None:
            await self.backend.stop()  # the lease handed back, the events journal's last commit
            await self._end_run(self.backend.journal.unjournaled_at_stop())
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
            error = self.backend.journal.last_error if self.backend is not None else None
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
                await ctx.pop.refresh()  # admission maintenance set on another instance (its hint may be lost)
                await ctx.store.tick()
                now_ms = self.clock.wall_ms()
                sampled = await ctx.series.feed(ctx.store, now_ms)
                if sampled is not None:  # the hourly history's write runs on its own, never holding the tick
                    ctx.history.offer(sampled, ctx.series.last_waits, now_ms, ctx.series.last_lumps)
                if self.backend is not None:
                    self.backend.note_store_result(True)
            except JournalCommitFailed as exc:
                # Valkey answered (its failure would have been raised instead): only the journal failed,
                # which health reports as the journal's (storage), never as Valkey down
                if self.backend is not None:
                    self.backend.note_store_result(True)
                log.warning("tick: events journal unavailable: %s", exc)
            except StoreUnavailable as exc:
                if self.backend is not None:
                    self.backend.note_store_result(False)
                log.warning("tick: store unavailable: %s", exc)
            except Exception:
                log.exception("tick failed")
            step = self.clock.check_step()
            if step is not None:
                ctx.clock_incidents.append({"at": self.clock.wall_ms(), "stepMs": step})
                print(
                    f"WARNING: the wall clock stepped by {step} ms; tickets issued around it may be refused",
                    file=sys.stderr,
                    flush=True,
                )
            if loop.time() - next_at > 5.0:
                next_at = loop.time()
