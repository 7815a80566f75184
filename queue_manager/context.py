"""Everything a route needs, built once at start-up from the store's parts and handed down, never changed.

The :class:`Context` is frozen: what changes while the process runs lives in the objects it holds (the run's
state, the verified-ticket cache, the counters, the attached inline proxy and jobs), each with its own
methods. The composition root (``server.py``) builds it once from the parts ``assembly/`` chose.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import orjson

from queue_manager import __version__
from queue_manager.access.protection import Protection
from queue_manager.access.service import READ_ONLY_SIGN_INS_PER_MIN, Access
from queue_manager.assembly.parts import Parts, StatusNow
from queue_manager.clock import SystemClock
from queue_manager.config import Settings
from queue_manager.edgepass import PassSigner
from queue_manager.engine.view import VisitorView
from queue_manager.engine.visitor import Presented
from queue_manager.metrics import Counters
from queue_manager.services.access_gate import AccessGate
from queue_manager.services.attached import Attached
from queue_manager.services.crawlers import CrawlerCheck
from queue_manager.services.edge_secret import EdgeGate
from queue_manager.services.identity import IdentityResolver
from queue_manager.services.peers import Peers
from queue_manager.services.proxywatch import ProxyWatch
from queue_manager.services.ratelimit import Budget
from queue_manager.services.room_changes import RoomChanges
from queue_manager.services.run_state import RunState
from queue_manager.services.sse import AdminStreams, Broadcaster
from queue_manager.services.ticket_bursts import TicketBursts
from queue_manager.sidestores.entrybook.base import EntryBook
from queue_manager.sidestores.entrycodes.base import EntryCodes
from queue_manager.sidestores.entrykeys.base import EntryKeys
from queue_manager.sidestores.history.writer import HourlyHistory
from queue_manager.sidestores.mailbook.base import AddressBook
from queue_manager.sidestores.maintenance.base import AdmissionMaintenance, JournalMaintenance
from queue_manager.sidestores.revocations.base import RevocationList
from queue_manager.sidestores.timeline.base import SharedTimeline
from queue_manager.sidestores.timeline.series import SeriesRecorder
from queue_manager.store.base import Store
from queue_manager.tokens import TokenError, TokenSigner

if TYPE_CHECKING:
    from queue_manager.fleet.parts import FleetParts

TICKET_CACHE_MAX = 100_000


def _budgets(settings: Settings, clock: SystemClock) -> dict[str, Budget]:
    keys = settings.rate_limit_max_keys
    return {
        "join": Budget(settings.join_limit_per_min, keys, clock),
        "check": Budget(settings.check_limit_per_min, keys, clock),
        # vouched checks are charged to the visitor named, in a map of their own
        "check_vouched": Budget(settings.check_limit_per_min, keys, clock),
        "waiting": Budget(settings.waiting_limit_per_min, keys, clock),
        # the console (/), /progress and /docs*: the same size, a separate bucket
        "pages": Budget(settings.waiting_limit_per_min, keys, clock),
        # turn-e-mail sign-ups and cancellations (POST/DELETE /api/notify)
        "notify": Budget(settings.notify_limit_per_min, keys, clock),
        # entry codes tried at a join: per address, and per room (the key is the room id)
        "code": Budget(settings.code_tries_per_min, keys, clock),
        "code_room": Budget(settings.code_tries_per_room_per_min, keys, clock),
        # GET /api/rooms/<id>/draw (a drop's proof can be large): the size of the waiting page's
        "draw": Budget(settings.waiting_limit_per_min, keys, clock),
        # console sign-ins by a key without the write grant (a viewer's), per key: each is an audit row
        "sign_in_read_only": Budget(READ_ONLY_SIGN_INS_PER_MIN, keys, clock),
    }


def _key_set(passes: PassSigner | None) -> tuple[bytes, bytes]:
    """The edge passes' JWK Set body and its ETag: the keys change only with the settings."""
    body = orjson.dumps(passes.jwks() if passes is not None else {"keys": []})
    return body, b'"' + hashlib.sha256(body).hexdigest()[:32].encode() + b'"'


@dataclass(frozen=True, slots=True, eq=False)
class Context:
    settings: Settings
    store: Store
    clock: SystemClock
    signer: TokenSigner
    identity: IdentityResolver
    broadcaster: Broadcaster
    counters: Counters
    started_ms: int
    started_mono: float
    budgets: dict[str, Budget]
    access: Access
    edge: EdgeGate
    protection: Protection
    proxywatch: ProxyWatch
    ticket_bursts: TicketBursts  # refused tickets per room: the warning on a burst
    admin_streams: AdminStreams
    series: SeriesRecorder  # the console's per-room chart data
    run: RunState  # ready, stopping, the clock's steps, and how to stop the process
    room_changes: (
        RoomChanges  # a room's settings changed (here, or on another instance): who derives from them hears it
    )
    attached: Attached  # the inline proxy in front, the alert frames and the turn-e-mail job
    fleet: FleetParts | None  # on STORE=valkey: the journal, the Valkey connection, the lease, recovery
    peers: Peers | None  # WORKERS>1: where this worker's siblings serve their own metrics
    timeline: SharedTimeline | None  # the marks every instance shares (None: this process's only)
    addresses: AddressBook | None  # turn-e-mail sign-ups (memory or Valkey, never PostgreSQL)
    passes: PassSigner | None  # PASS_SIGNING=ed25519: the edge passes' keys
    key_set: tuple[bytes, bytes]  # the edge passes' key set: its body and ETag
    revocations: RevocationList  # revoked edge passes (this process's, or Valkey's)
    entry_keys: EntryKeys  # the rooms' invitation keys, sealed (this process's, or PostgreSQL's)
    entry_codes: EntryCodes  # the rooms' entry codes, hashed (this process's, or PostgreSQL's)
    entry_book: EntryBook  # spent invitations, user keys' places, entry counts (this process's, or Valkey's)
    history: HourlyHistory  # the reports' hourly rows (this process's, or PostgreSQL's)
    admission: AdmissionMaintenance  # admission maintenance (this process's, or the fleet's on Valkey)
    #: journal maintenance: the disk spool (STORE=valkey), or a flag alone (STORE=memory)
    journal_maintenance: JournalMaintenance
    #: the store's status read without a coroutine, when it answers in this process (the memory store)
    status_now: StatusNow | None
    #: rooms' access rules applied to a request (bypass, queue, block), verified crawlers' verdicts kept
    access_gate: AccessGate
    pid: int = field(default_factory=os.getpid)
    version: str = __version__
    #: verified visitor tokens: token -> (room, presented, issued at)
    _ticket_cache: dict[str, tuple[str, Presented, int]] = field(default_factory=dict)
    #: each room's invitation keys, unsealed, by kid: room -> (read at, monotonic s; keys)
    entry_key_cache: dict[str, tuple[float, dict[str, str]]] = field(default_factory=dict)

    @classmethod
    def build(cls, settings: Settings, parts: Parts, clock: SystemClock, *, peers: Peers | None = None) -> Context:
        signer = TokenSigner(
            settings.secret,
            clock,
            previous=settings.secret_previous,
            sign_v2=settings.token_sign_v2,
            max_age_sec=settings.token_max_age_sec,
        )
        store = parts.store
        inline_steps = parts.status_now is not None  # the store's calls never suspend
        # a store over the network: a room's streams read their frames in batches
        broadcaster = Broadcaster(
            inline_steps=inline_steps, status_many=None if inline_steps else store.status_many, live=parts.live_reads
        )
        store.on_change(broadcaster.notify)
        started_ms = clock.wall_ms()
        series = SeriesRecorder(parts.timeline)
        series.watching_since_ms = started_ms
        started_mono = clock.mono()
        passes = (
            PassSigner(settings.secret, clock, previous=settings.secret_previous)
            if settings.pass_signing == "ed25519"
            else None
        )
        access = Access(settings, signer, clock, parts.access_records, parts.auth_failures)
        counters = Counters()
        crawlers = CrawlerCheck(
            clock.mono,
            resolver_address=settings.dns_resolver,
            timeout_ms=settings.crawler_dns_timeout_ms,
            cache_sec=settings.crawler_cache_sec,
        )
        access_gate = AccessGate(
            store, counters, crawlers, country_header=settings.country_header, edge=bool(settings.edge_secrets)
        )
        admin_streams = AdminStreams()
        access.on_revoke(admin_streams.revoke)
        return cls(
            settings=settings,
            store=store,
            clock=clock,
            signer=signer,
            identity=IdentityResolver(settings),
            broadcaster=broadcaster,
            counters=counters,
            started_ms=started_ms,
            started_mono=started_mono,
            budgets=_budgets(settings, clock),
            access=access,
            edge=EdgeGate(settings.edge_secrets),
            protection=Protection(
                clock,
                mode=settings.protection_mode,
                block_at=settings.protection_block_at,
                allow_ips=settings.protection_allow_ips,
            ),
            proxywatch=ProxyWatch(settings, clock),
            ticket_bursts=TicketBursts(clock),
            admin_streams=admin_streams,
            series=series,
            run=RunState(),
            room_changes=RoomChanges(),
            attached=Attached(),
            fleet=parts.fleet,
            peers=peers,
            timeline=parts.timeline,
            addresses=parts.addresses,
            passes=passes,
            key_set=_key_set(passes),
            revocations=parts.revocations,
            entry_keys=parts.entry_keys,
            entry_book=parts.entry_book,
            entry_codes=parts.entry_codes,
            history=parts.history,
            admission=parts.admission,
            journal_maintenance=parts.journal_maintenance,
            status_now=parts.status_now,
            access_gate=access_gate,
        )

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
