"""Everything a route needs, built once at start-up and handed down."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from queue_manager import __version__
from queue_manager.access.protection import Protection
from queue_manager.access.records.memory import MemoryAccessStore
from queue_manager.access.service import READ_ONLY_SIGN_INS_PER_MIN, Access
from queue_manager.clock import SystemClock
from queue_manager.config import Settings
from queue_manager.edgepass import PassSigner
from queue_manager.engine.model import ClientId
from queue_manager.engine.room import Presented
from queue_manager.engine.view import VisitorView
from queue_manager.metrics import Counters
from queue_manager.services.edge_secret import EdgeGate
from queue_manager.services.identity import IdentityResolver
from queue_manager.services.peers import Peers
from queue_manager.services.proxywatch import ProxyWatch
from queue_manager.services.ratelimit import Budget
from queue_manager.services.sse import AdminStreams, Broadcaster
from queue_manager.services.ticket_bursts import TicketBursts
from queue_manager.sidestores.history.hourly import HourlyHistory, MemoryRefusals, MemoryWarehouse
from queue_manager.sidestores.mailbook.memory import AddressBook
from queue_manager.sidestores.maintenance.admission import PopMaintenance
from queue_manager.sidestores.maintenance.journal import JournalMaintenance
from queue_manager.sidestores.revocations.memory import MemoryRevocations, RevocationList
from queue_manager.sidestores.timeline.series import SeriesRecorder
from queue_manager.store.base import Store
from queue_manager.store.memory import MemoryStore
from queue_manager.tokens import TokenError, TokenSigner

if TYPE_CHECKING:
    from queue_manager.fleet.backend import Backend

TICKET_CACHE_MAX = 100_000


class HostsView(Protocol):
    def __bool__(self) -> bool: ...  # any inline room at all

    def lookup(self, host: bytes | None) -> object | None: ...  # the inline room this Host fronts, if any


class OriginWatch(Protocol):
    def failing(self) -> list[str]: ...


class InlineStatus(Protocol):
    """What the queue's own routes read of the inline proxy (health, readiness, which hosts it fronts), and
    the room change they tell it of."""

    @property
    def index(self) -> HostsView: ...

    @property
    def probe(self) -> OriginWatch: ...

    def at_ceiling(self) -> bool: ...

    def health(self, counters: Counters | None = None) -> dict[str, object]: ...

    def console_host(self, host: bytes | None) -> bool: ...  # does the console answer there while rooms are inline

    async def rooms_changed(self) -> None: ...  # a room saved here: in the host index before the save answers


class AlertsView(Protocol):
    """What the queue's routes read of the alert frames and the leader's jobs (``jobs/alert_frame.py``)."""

    def view(self, *, full: bool) -> dict[str, Any]: ...

    async def test(self) -> dict[str, Any]: ...

    def badges(self) -> dict[str, dict[str, Any]]: ...


class TurnMailView(Protocol):
    """What health reads of the leader's turn-e-mail job (``jobs/turn_mail.py``)."""

    async def health(self) -> dict[str, Any]: ...


class TimelineView(Protocol):
    """The chart's marks kept in PostgreSQL for the fleet (``sidestores/timeline/pg.py``), with SIDESTORE=pg."""

    async def read(self, room_id: str, since_s: int) -> list[dict[str, Any]]: ...

    def stats(self) -> dict[str, int]: ...


@dataclass
class Context:
    settings: Settings
    store: Store
    clock: SystemClock
    signer: TokenSigner
    identity: IdentityResolver
    broadcaster: Broadcaster
    counters: Counters = field(default_factory=Counters)
    started_ms: int = 0
    started_mono: float = 0.0
    shutting_down: bool = False
    ready: bool = False
    clock_incidents: list[dict[str, Any]] = field(default_factory=list)
    budgets: dict[str, Budget] = field(default_factory=dict)
    access: Access = field(init=False)
    edge: EdgeGate = field(init=False)
    protection: Protection = field(init=False)
    proxywatch: ProxyWatch = field(init=False)
    ticket_bursts: TicketBursts = field(init=False)  # refused tickets per room: the warning on a burst
    admin_streams: AdminStreams = field(default_factory=lambda: AdminStreams())
    series: SeriesRecorder = field(default_factory=SeriesRecorder)  # the console's per-room chart data
    pid: int = field(default_factory=os.getpid)
    # ends the process through the same path SIGTERM takes (set by the CLI around the server)
    request_stop: Callable[[], None] | None = None
    backend: Backend | None = None  # on STORE=valkey: the lease, the journal, the Valkey state
    inline: InlineStatus | None = None  # the inline proxy in front, when the server runs one
    peers: Peers | None = None  # WORKERS>1: where this worker's siblings serve their own metrics
    alerts: AlertsView | None = None  # the alert frames and the leader's jobs
    timeline: TimelineView | None = None  # the marks every instance shares (None: this process's only)
    addresses: AddressBook | None = None  # turn-e-mail sign-ups (memory or Valkey, never PostgreSQL)
    turn_mail: TurnMailView | None = None  # the job that sends them
    passes: PassSigner | None = None  # PASS_SIGNING=ed25519: the edge passes' keys
    revocations: RevocationList = field(init=False)  # revoked edge passes (this process's, or Valkey's)
    jwks: tuple[bytes, bytes] | None = None  # the key set's body and ETag, rendered on first use
    history: HourlyHistory = field(init=False)  # the reports' hourly rows (this process's, or PostgreSQL's)
    pop: PopMaintenance = field(init=False)  # admission maintenance (this process's, or the fleet's on Valkey)
    #: journal maintenance: the disk spool (STORE=valkey), or a flag alone (STORE=memory)
    maintenance: JournalMaintenance = field(default_factory=JournalMaintenance)
    #: the store's status read without a coroutine, when it answers in this process (the memory store)
    status_now: Callable[[str, ClientId, Presented | None], VisitorView] | None = None
    _ticket_cache: dict[str, tuple[str, Presented, int]] = field(default_factory=dict)
    version: str = __version__

    @classmethod
    def build(cls, settings: Settings, store: Store, clock: SystemClock) -> Context:
        signer = TokenSigner(
            settings.secret,
            clock,
            previous=settings.secret_previous,
            sign_v2=settings.token_sign_v2,
            max_age_sec=settings.token_max_age_sec,
        )
        ctx = cls(settings, store, clock, signer, IdentityResolver(settings), Broadcaster())
        ctx.started_ms = clock.wall_ms()
        ctx.series.watching_since_ms = ctx.started_ms
        ctx.started_mono = clock.mono()
        if settings.pass_signing == "ed25519":
            ctx.passes = PassSigner(settings.secret, clock, previous=settings.secret_previous)
        ctx.revocations = MemoryRevocations(clock)
        keys = settings.rate_limit_max_keys
        ctx.budgets = {
            "join": Budget(settings.join_limit_per_min, keys, clock),
            "check": Budget(settings.check_limit_per_min, keys, clock),
            # vouched checks are charged to the visitor named, in a map of their own
            "check_vouched": Budget(settings.check_limit_per_min, keys, clock),
            "waiting": Budget(settings.waiting_limit_per_min, keys, clock),
            # the console (/), /progress and /docs*: the same size, a separate bucket
            "pages": Budget(settings.waiting_limit_per_min, keys, clock),
            # turn-e-mail sign-ups and cancellations (POST/DELETE /api/notify)
            "notify": Budget(settings.notify_limit_per_min, keys, clock),
            # GET /api/rooms/<id>/draw (a drop's proof can be large): the size of the waiting page's
            "draw": Budget(settings.waiting_limit_per_min, keys, clock),
            # console sign-ins by a key without the write grant (a viewer's), per key: each is an audit row
            "sign_in_read_only": Budget(READ_ONLY_SIGN_INS_PER_MIN, keys, clock),
        }
        store.on_change(ctx.broadcaster.notify)
        if isinstance(store, MemoryStore):  # its calls never suspend
            ctx.broadcaster.inline_steps = True
            ctx.status_now = store.status_now
        else:  # a store over the network: a room's streams read their frames in batches
            ctx.broadcaster.status_many = store.status_many
        ctx.pop = PopMaintenance(store)
        ctx.history = HourlyHistory(
            MemoryWarehouse(),
            MemoryRefusals(),
            clock.wall_ms,
            retain_days=settings.history_retain_days,
            counters_from_boot=True,
        )
        ctx.access = Access(settings, signer, clock, MemoryAccessStore())
        ctx.edge = EdgeGate(settings.edge_secrets)
        ctx.protection = Protection(
            clock,
            mode=settings.protection_mode,
            block_at=settings.protection_block_at,
            allow_ips=settings.protection_allow_ips,
        )
        ctx.proxywatch = ProxyWatch(settings, clock)
        ctx.ticket_bursts = TicketBursts(clock)
        ctx.access.on_revoke(ctx.admin_streams.revoke)
        return ctx

    # ------------------------------------------------------------------ tokens

    def read_ticket(self, room_id: str, token: str | None) -> tuple[Presented | None, int | None]:
        """Verify a visitor token for ``room_id``; a refused one is counted and treated as absent.

        Verified tokens are remembered (bounded), so a replayed door check costs a dictionary look-up
        plus the age checks, which run on every use.
        """
        if not token:
            return None, None
        hit = self._ticket_cache.get(token)
        if hit is not None:
            room, presented, iat = hit
            now = self.clock.wall_ms()
            age_limit = self.settings.token_max_age_sec * 1000
            if room == room_id and iat - now <= 60_000 and now - iat <= age_limit:
                return presented, iat
            del self._ticket_cache[token]
        result = self._verify_ticket(room_id, token)
        if result[0] is not None:
            if len(self._ticket_cache) >= TICKET_CACHE_MAX:
                self._ticket_cache.clear()
            self._ticket_cache[token] = (room_id, result[0], result[1] or 0)
        return result

    def _verify_ticket(self, room_id: str, token: str) -> tuple[Presented | None, int | None]:
        try:
            payload = self.signer.verify(token, "visitor")
        except TokenError as err:
            self._refused(room_id, err.reason)
            return None, None
        kind, gen = payload.get("t"), payload.get("g")
        if payload.get("r") != room_id or not isinstance(gen, int) or isinstance(gen, bool):
            self._refused(room_id, "wrong_room")
            return None, None
        iat = payload.get("iat")
        if kind == "tk" and isinstance(payload.get("n"), int) and not isinstance(payload.get("n"), bool):
            return Presented(gen=gen, n=payload["n"]), iat
        if kind == "pq" and isinstance(payload.get("h"), str):
            return Presented(gen=gen, handle=payload["h"]), iat
        self._refused(room_id, "malformed")
        return None, None

    def _refused(self, room_id: str, reason: str) -> None:
        self.counters.reject_token(reason)
        self.ticket_bursts.note(room_id, reason)

    def sign_ticket(self, view: VisitorView) -> str | None:
        if view.ticket is not None:
            return self.signer.sign({"t": "tk", "r": view.room_id, "g": view.gen, "n": view.ticket}, "visitor")
        if view.handle is not None:
            return self.signer.sign({"t": "pq", "r": view.room_id, "g": view.gen, "h": view.handle}, "visitor")
        return None

    def refresh_due_ms(self, view: VisitorView, iat_ms: int) -> int:
        """When a stream standing for this place must be re-signed: the window plus a fixed per-place jitter."""
        window = self.settings.token_refresh_after_ms
        place = f"{view.room_id}:{view.gen}:{view.ticket if view.ticket is not None else view.handle}"
        spread = max(1, window // 10)
        jitter = int.from_bytes(hashlib.blake2b(place.encode(), digest_size=8).digest(), "big") % spread
        return iat_ms + window + jitter

    def uptime(self) -> float:
        return time.monotonic() - self.started_mono
