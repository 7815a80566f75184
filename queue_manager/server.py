"""The composition root: every part of a running server is built here, once, and started and stopped here.

:class:`Server` is the ASGI application uvicorn runs. It builds the store (memory, or Valkey with the
fleet's lease and the PostgreSQL journal), the shared access records, the :class:`~.http.context.Context`
every route receives, the queue's app (``http/app.py``), the inline proxy wrapped around it
(``inline/front.py``) and the ticker; it owns their lifespan. Nothing below imports this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from typing import TYPE_CHECKING

from queue_manager.background import Job
from queue_manager.clock import SystemClock
from queue_manager.config import ConfigRefusal, Settings
from queue_manager.http import door, visitor
from queue_manager.http.app import App
from queue_manager.http.context import Context
from queue_manager.http.health import local_counters
from queue_manager.http.wire import Receive, Scope, Send
from queue_manager.inline.component import Inline, QueueSide
from queue_manager.inline.front import InlineFront
from queue_manager.jobs import webhook
from queue_manager.jobs.autopilot import Autopilot, shared_for
from queue_manager.store.base import Store, StoreUnavailable

if TYPE_CHECKING:
    from queue_manager.fleet.backend import Backend
    from queue_manager.journal.database import Database

log = logging.getLogger("queue_manager")


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
    def __init__(self, settings: Settings, store: Store | None = None, clock: SystemClock | None = None) -> None:
        self.clock = clock or SystemClock()
        self.settings = settings
        self.backend: Backend | None = None
        self.database: Database | None = None
        if store is None:
            store, self.backend, self.database = create_store(settings, self.clock)
        ctx = self.ctx = Context.build(settings, store, self.clock)
        ctx.backend = self.backend
        if self.backend is not None:  # what this instance writes for the fleet view
            self.backend.counters.source = lambda: local_counters(ctx)
        if self.backend is not None and self.database is not None:  # access records shared by the fleet
            from queue_manager.access.shared import SharedAccessStore

            ctx.access.store = SharedAccessStore(
                self.database,
                self.backend.store.redis,
                settings.valkey_prefix,
                hints=self.backend.hints,
                resync_ms=settings.resync_ms,
            )
            from queue_manager.access.authfail import SharedAuthFailures

            ctx.access.failures = SharedAuthFailures(  # the fleet's wrong-key budget; this process's if Valkey is down
                self.backend.store.redis,
                settings.valkey_prefix,
                settings.admin_auth_fail_per_min,
                self.backend.clock,
                local=ctx.access.failures,
                breaker=self.backend.store.breaker,
                hints=self.backend.hints,  # authlock: a lockout reaches every instance at once
                max_keys=settings.rate_limit_max_keys,
            )
        self.app = App(ctx)
        self.inline = Inline(ctx, QueueSide(door_check=door.door_check, waiting_page=visitor.waiting_page))
        ctx.inline = self.inline
        self.front = InlineFront(self.app, self.inline)
        self.front.lifespan = self.lifespan
        self.ticker = Job("qm-ticker", self._ticker)
        refusal = webhook.refusal(settings)
        if refusal is not None:
            raise refusal
        self.autopilot = Autopilot(ctx, shared_for(ctx, self.backend), self.backend)
        ctx.alerts = self.autopilot

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
                print(f"queue-manager: refusing to start: {refusal.message}", file=sys.stderr, flush=True)
                raise
        else:
            await ctx.store.start()
        self.ticker.start()
        await self.inline.start()
        self.autopilot.start()
        ctx.ready = True
        # STORE=memory keeps nothing across a restart, so whether the last run stopped cleanly is unknown
        await ctx.access.audit(
            None, "server.start", target=self.settings.instance_id, previousRunClean=None, store=ctx.store.kind
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
        await self.ctx.access.audit(None, "server.stop", target=self.settings.instance_id, clean=True)
        await self.autopilot.stop()
        await self.inline.stop()
        await self.ticker.stop()
        if self.backend is not None:
            await self.backend.stop()
            if self.database is not None:
                with contextlib.suppress(Exception):
                    await self.database.close()
        else:
            await self.ctx.store.close()

    async def _ticker(self) -> None:
        """Once a second: the store's tick (outflow, expiries), the console's series, the clock's steps."""
        ctx = self.ctx
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            next_at += 1.0
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            try:
                await ctx.store.tick()
                await ctx.series.feed(ctx.store, self.clock.wall_ms())
                if self.backend is not None:
                    self.backend.note_store_result(True)
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
