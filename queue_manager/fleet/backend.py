"""STORE=valkey + SIDESTORE=pg wiring: the Valkey store, the PostgreSQL journal, the leader lease.

Boot follows the guide: three kinds of connect error refuse to start (credentials Valkey refuses, a
host name that does not resolve, a TLS certificate that does not verify), each named without the
URL; so does a PostgreSQL certificate that does not verify (PG_CA_FILE); every other error boots
degraded and keeps reconnecting. ``valkeyEverConnected`` turns true at
the first contact and stays true.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from redis import exceptions as rx

from queue_manager.background import Job, stop_all, stop_if_cancelled
from queue_manager.config import ConfigRefusal, Settings
from queue_manager.engine.events import Event
from queue_manager.engine.replay import ReplayDeleted, ReplayFenced, replay
from queue_manager.engine.snapshot import dump
from queue_manager.fleet.counters import FleetCounters
from queue_manager.fleet.gapwatch import GapWatch, VoidRefused, outbox_row
from queue_manager.fleet.hints import Hints
from queue_manager.fleet.journal_marks import Ahead, JournalMarks
from queue_manager.fleet.leader import LeaderLease
from queue_manager.fleet.storage_watch import StorageWatch
from queue_manager.journal.database import Database, is_tls_verify_failure
from queue_manager.journal.gaps import JournalGaps
from queue_manager.journal.pg import PgJournal
from queue_manager.store.base import StoreUnavailable
from queue_manager.store.valkey import ValkeyStore
from queue_manager.store.valkey.clock import SharedClock
from queue_manager.store.valkey.heads import LiveHead, live_heads
from queue_manager.store.valkey.keys import fleet_prefix, room_key

log = logging.getLogger("queue_manager.backend")


def _refusal(exc: BaseException) -> ConfigRefusal | None:
    """The three connect errors that must stop the boot (named without printing the URL)."""
    chain: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and len(chain) < 8:
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    for e in chain:
        text = str(e)
        if isinstance(e, rx.AuthenticationError) or any(
            word in text for word in ("WRONGPASS", "NOAUTH", "NOPERM", "invalid password", "invalid username")
        ):
            return ConfigRefusal(
                "VALKEY_URL",
                "Valkey refused the credentials in VALKEY_URL (WRONGPASS/NOAUTH/ACL). "
                "Fix the user or password in VALKEY_URL.",
            )
        if isinstance(e, socket.gaierror) or "Name or service not known" in text or "ENOTFOUND" in text:
            return ConfigRefusal(
                "VALKEY_URL", "The host name in VALKEY_URL does not resolve (ENOTFOUND). Check the host in VALKEY_URL."
            )
        if isinstance(e, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in text:
            return ConfigRefusal(
                "VALKEY_URL",
                "Valkey's TLS certificate does not verify. Fix the certificate or the CA this server trusts.",
            )
    return None


def _pg_tls_refusal(settings: Settings) -> ConfigRefusal:
    """PostgreSQL's certificate does not verify: named by the setting that chose the trust anchor."""
    if settings.pg_ca_file:
        return ConfigRefusal(
            "PG_CA_FILE",
            "PostgreSQL's TLS certificate does not verify against the CA in PG_CA_FILE (or does not name the "
            "host in DATABASE_URL). Point PG_CA_FILE at the CA that signed the server's certificate.",
        )
    return ConfigRefusal(
        "DATABASE_URL",
        "PostgreSQL's TLS certificate does not verify against the system trust store (sslmode in DATABASE_URL). "
        "Set PG_CA_FILE to the CA that signed the server's certificate.",
    )


# how long a seq may be missing from the journal before the leader commits it from the outbox (or RESYNC_MS x 2)
COMMIT_DEADLINE_MS = 10_000


class Backend:
    def __init__(self, settings: Settings, database: Database) -> None:
        assert settings.valkey_url and settings.database_url
        self.settings = settings
        self.clock = SharedClock()
        spool = Path(settings.spool_dir) if settings.spool_dir else None
        # the instance's one PostgreSQL pool, shared by the journal and the access records; its owner (the
        # composition root) opens it before start() and closes it after stop()
        self.database = database
        self.journal = PgJournal(
            self.database,
            instance_id=settings.instance_id,
            spool_dir=spool,
            max_batch=settings.journal_max_batch,
            spool_on_failure=settings.spool_on_failure,
        )
        self.store = ValkeyStore(
            with_timeouts(settings.valkey_url),
            settings.valkey_prefix,
            self.clock,
            journal=_RoomWatch(self),
            writer=settings.instance_id,
        )
        # the fleet's own keys: one hash tag on a cluster (keys.fleet_prefix), the rooms spread by theirs
        self.fleet_prefix = fleet_prefix(settings.valkey_prefix, self.store.cluster)
        # an answer from Valkey to either ends the store's fast answers at once (breaker.py)
        heard = self.store.breaker.heard
        self.lease = LeaderLease(
            self.store.redis, self.fleet_prefix, settings.instance_id, settings.leader_lease_ms, reached=heard
        )
        self.hints = Hints(
            self.store.redis, self.fleet_prefix, settings.instance_id, enabled=settings.ctl_hints, reached=heard
        )
        self.storage = StorageWatch(
            self.journal,
            self.store.redis,
            self.fleet_prefix,
            settings.instance_id,
            settings.alert_every_ms,
            self.journal.clock,
            report_every_ms=settings.resync_ms,
        )
        # each instance's counters in Valkey every 5 s: health and the console show the fleet's sum
        self.counters = FleetCounters(
            self.store.redis,
            self.fleet_prefix,
            settings.instance_id,
            self.journal.clock,
            down=lambda: self.store.breaker.down,
        )
        self.valkey_ever_connected = False
        self.valkey_up = False
        self._reconnect = Job("qm-valkey-reconnect", self._keep_trying)
        self._reconciler = Job("qm-reconciler", self._reconcile_forever)
        self.known_rooms: set[str] = set()  # rooms the journal says exist (refreshed every RESYNC_MS)
        self.recovering: set[str] = set()
        self.rebuilt_total = 0
        self.rollbacks_total = 0  # rooms found behind the journal (Valkey restored from an older copy)
        self.logos_lost_total = 0  # room changes rebuilt whose logo reference matched no logo held
        self.checkpoints_saved = 0
        self.last_checkpoint: dict[str, Any] | None = None
        self.last_rebuild: dict[str, Any] | None = None
        self._reconcile_now = asyncio.Event()
        self._rereads: set[asyncio.Task[None]] = set()
        self.unrebuildable: dict[str, str] = {}  # room -> why its journal could not be replayed (fence kind)
        # rooms whose journal reads behind what it was seen holding: PostgreSQL restored under a newer Valkey
        self.marks = JournalMarks(self.store.redis, self.fleet_prefix)
        self.ahead: dict[str, Ahead] = {}
        self.live_ahead: dict[str, LiveHead] = {}  # their Valkey state, and their journal, as last read
        self.journal_ahead: dict[str, tuple[int, int] | None] = {}
        self.journal.on_conflict = self._on_conflict
        # the journal's gaps closed from the rooms' outboxes (the leader), reported to every instance
        self.gaps = GapWatch(
            self.store.redis,
            settings.valkey_prefix,
            self.fleet_prefix,
            JournalGaps(self.database),
            self.journal.clock,
            deadline_ms=max(COMMIT_DEADLINE_MS, 2 * settings.resync_ms),
            publish_ms=3 * max(500, settings.resync_ms),
        )

    async def start(self) -> None:
        try:
            await self.journal.start(require=False)  # degraded when PostgreSQL is down; refused on TLS
        except StoreUnavailable as exc:
            if is_tls_verify_failure(exc):
                raise _pg_tls_refusal(self.settings) from None
            raise
        try:
            await self.store.start()
            self.valkey_ever_connected = self.valkey_up = True
        except StoreUnavailable as exc:
            refusal = _refusal(exc)
            if refusal is not None:
                raise refusal from None
            print(
                f"valkey: unreachable at boot ({_first_words(exc)}); starting degraded and reconnecting",
                file=sys.stderr,
                flush=True,
            )
            self._reconnect.start()
        self.lease.start()
        self.hints.on("rooms", self._rooms_hint)
        self.hints.start()
        self.storage.start()
        self.counters.start()
        self._reconciler.start()

    async def _reconcile_forever(self) -> None:
        interval = max(0.5, self.settings.resync_ms / 1000)
        while True:
            # each step reads or writes PostgreSQL: a driver can take the stop's cancel for its own and
            # return (or raise something else), so every step is followed by a look at whether to stop
            try:
                await self.reconcile()
            except Exception as exc:
                stop_if_cancelled()
                log.warning("reconcile: %s", _first_words(exc))
            stop_if_cancelled()
            try:  # every room's config copy re-read (what gates requests while Valkey is down)
                await self.store.list_rooms()
            except Exception as exc:
                log.warning("room configs: %s", _first_words(exc))
            with contextlib.suppress(Exception):  # Valkey unreachable: nobody reads us as ok meanwhile
                await self.storage.report()
            # journal maintenance set on another instance whose announcement this one missed
            await self.journal.refresh_maintenance()
            stop_if_cancelled()
            if self.lease.leader:
                try:
                    await self.checkpoint_round()
                except Exception as exc:
                    stop_if_cancelled()
                    log.warning("checkpoints: %s", _first_words(exc))
                stop_if_cancelled()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._reconcile_now.wait(), interval)
            self._reconcile_now.clear()

    def rooms_committed(self, created: set[str], deleted: set[str]) -> None:
        """Room creations and deletions this instance journaled: known at once (a room created a moment
        before Valkey lost it answers 503 while it is rebuilt, never no_room)."""
        self.known_rooms |= created
        self.known_rooms -= deleted

    def _rooms_hint(self, hint: dict[str, Any]) -> None:
        created, deleted, changed = (hint.get(k) for k in ("created", "deleted", "changed"))
        fresh = {str(r) for r in created} if isinstance(created, list) else set()
        self.rooms_committed(fresh, {str(r) for r in deleted} if isinstance(deleted, list) else set())
        # re-read the config that gates the room's requests now (onBackendDown, protection), not within RESYNC_MS
        for room_id in sorted(fresh | ({str(r) for r in changed} if isinstance(changed, list) else set())):
            if len(self._rereads) < 100:
                task = asyncio.create_task(self._reread_config(room_id))
                self._rereads.add(task)
                task.add_done_callback(self._rereads.discard)

    async def _reread_config(self, room_id: str) -> None:
        with contextlib.suppress(Exception):  # best effort: the RESYNC_MS re-read repairs it
            await self.store.get_room(room_id)

    async def checkpoint_round(self) -> list[tuple[str, int]]:
        """The leader's checkpoints (every RESYNC_MS): each room with CHECKPOINT_EVERY_EVENTS events since its
        newest checkpoint, or whose oldest event after it is CHECKPOINT_EVERY_MS old, gets a new one, folded
        from PostgreSQL alone. A rebuild then replays that checkpoint and a bounded tail."""
        saved = await self.journal.checkpoint_due(
            self.settings.checkpoint_every_events, self.settings.checkpoint_every_ms
        )
        for room_id, seq in saved:
            self.checkpoints_saved += 1
            self.last_checkpoint = {"roomId": room_id, "seq": seq, "at": self.journal.clock.wall_ms()}
        return saved

    async def _on_conflict(self, rooms: set[tuple[str, int]]) -> None:
        """The journal refused events whose seq it already holds: those rooms' Valkey state is behind
        it. Fence them before their callers are answered (so no compensation runs on the old state),
        and rebuild now rather than at the next RESYNC_MS."""
        for room_id, _gen in sorted(rooms):
            self.recovering.add(room_id)
            try:
                await self.store.fence(room_id)
            finally:
                self.recovering.discard(room_id)
        self._reconcile_now.set()

    async def reconcile(self) -> list[str]:
        """Rooms whose Valkey state is lost (flushed), rolled back (restored from an older copy: its seq
        is behind the journal's) or fenced: rebuild them from the latest checkpoint plus the events after
        it, and load them into Valkey atomically. A rolled-back room is fenced first, so it answers 503
        storage_unavailable instead of serving (and minting on) the old state meanwhile.

        The journal is read before Valkey: whatever the journal holds was in Valkey before, so a
        Valkey seq below it can only be a rollback, never a commit racing this check.

        The other way round, a room whose journal reads behind the furthest it was seen holding
        (journal_marks.py: PostgreSQL restored from an older copy under this Valkey) is reported in
        ``ahead`` and never rebuilt from that older journal. The marks are read before the journal."""
        marks, flagged = await self.marks.read()
        positions = await self.journal.positions()
        heads = {room: (gen, seq) for room, (gen, seq, deleted) in positions.items() if not deleted}
        ahead = JournalMarks.ahead(marks, flagged, {room: (g, s) for room, (g, s, _) in positions.items()})
        new = {room: a for room, a in ahead.items() if room not in flagged}
        if new:
            log.error(
                "rooms ahead of the events journal (PostgreSQL restored under a Valkey that holds newer state?), "
                "not rebuilt from it: %s",
                ", ".join(sorted(new)),
            )
            await self.marks.flag(new)
        self.ahead = ahead
        await self.marks.raise_to({room: pos for room, pos in heads.items() if room not in ahead})
        self.known_rooms = set(heads)
        self.unrebuildable = {room: kind for room, kind in self.unrebuildable.items() if room in heads}
        live = await live_heads(self.store.redis, self.settings.valkey_prefix, set(heads) | set(ahead))
        self.live_ahead = {room: live[room] for room in ahead}
        self.journal_ahead = {
            room: (positions[room][0], positions[room][1]) if room in positions else None for room in ahead
        }
        try:
            if self.lease.leader:
                watched = {room: head for room, head in heads.items() if room not in ahead}
                await self.gaps.round(watched, live, maintenance=self.journal.maintenance)
            else:
                await self.gaps.refresh()
        except Exception as exc:  # tried again next round
            stop_if_cancelled()
            log.warning("journal gaps: %s", _first_words(exc))
        rebuilt = []
        held: dict[str, int] | None = None  # read once, when a room needs a rebuild
        for room_id, (gen, seq) in sorted(heads.items()):
            if room_id in ahead:  # never replace Valkey's newer state with the older journal's
                continue
            why = live[room_id].behind(gen, seq)
            if why is None:
                continue
            if held is None:
                held = await self.storage.spool_held()
            if held:
                # spooled events are not in the journal yet: a rebuild now would drop them. The room stays
                # fenced (503, never no_room) until every spool has drained, then it is rebuilt in full.
                if self.unrebuildable.get(room_id) != "spool_pending":
                    log.warning(
                        "rebuild of %s (%s) waits: the spools of %s hold events the journal has not yet",
                        room_id,
                        why,
                        ", ".join(sorted(held)),
                    )
                self.unrebuildable[room_id] = "spool_pending"
                await self.store.fence(room_id)
                continue
            self.recovering.add(room_id)
            try:
                if why.startswith("rolled back"):
                    log.warning("room %s: Valkey state %s: fenced until rebuilt", room_id, why)
                    await self.store.fence(room_id)
                    self.rollbacks_total += 1
                base = await self.journal.latest_snapshot(room_id, gen)
                events = await self.journal.read_events(room_id, gen, int(base["seq"]) if base else 0)
                try:
                    room = replay(events, self.clock, base, lost_logo=self._lost_logo)
                except ReplayDeleted:
                    continue
                except ReplayFenced as fenced:
                    # the room stays fenced (503 everywhere, never no_room) until a build that can read its
                    # journal rebuilds it; a gap may be a commit still in flight: retried every RESYNC_MS
                    if room_id not in self.unrebuildable:
                        log.warning("rebuild of %s fenced (%s): %s", room_id, fenced.kind, fenced.reason)
                    self.unrebuildable[room_id] = fenced.kind
                    await self.store.fence(room_id)
                    continue
                self.unrebuildable.pop(room_id, None)
                await self.store.import_room(dump(room))
                rebuilt.append(room_id)
                self.rebuilt_total += 1
                start = int(base["seq"]) if base else 0
                self.last_rebuild = {
                    "roomId": room_id,
                    "generation": gen,
                    "why": why,
                    "fromCheckpointSeq": start,
                    "events": len(events),
                    "seq": room.event_seq,
                }
                log.warning(
                    "room %s rebuilt from the journal (%s; generation %d: checkpoint seq %d + %d events)",
                    room_id,
                    why,
                    gen,
                    start,
                    len(events),
                )
            finally:
                self.recovering.discard(room_id)
        return rebuilt

    async def void(self, room_id: str, seqs: list[int], by: str) -> dict[str, Any]:
        """Close seqs of ``room_id``'s current generation that nobody can recover with ``seq.void`` events,
        then rebuild the room from the journal (so the live line holds nothing the journal does not).

        Refused (``VoidRefused``) unless every seq is missing from the journal, within what was minted, not
        in Valkey's outbox (the leader commits those itself), no spool holds events the journal lacks and
        journal maintenance is off: a void must never stand where a writer could still commit."""
        if self.journal.maintenance:
            raise VoidRefused(
                409, "journal_maintenance", "Journal maintenance is on: the spools hold the journal's writes."
            )
        positions = await self.journal.positions()
        if room_id not in positions or positions[room_id][2]:
            raise VoidRefused(404, "no_room", f"The journal holds no room {room_id!r}.")
        gen, top, _ = positions[room_id]
        live = (await live_heads(self.store.redis, self.settings.valkey_prefix, [room_id]))[room_id]
        minted = max(top, live.seq if live.gen == gen else 0)
        beyond = [s for s in seqs if s > minted]
        if beyond:
            raise VoidRefused(
                409, "not_missing", f"Seqs {beyond} were never minted (the newest is {minted}).", seqs=beyond
            )
        held = await self.gaps.gaps.present(room_id, gen, min(seqs) - 1, max(seqs))
        if held & set(seqs):
            there = sorted(held & set(seqs))
            raise VoidRefused(409, "not_missing", f"The journal holds seqs {there}: they are no gap.", seqs=there)
        outbox = room_key(self.settings.valkey_prefix, room_id, "ob")
        in_outbox: list[int] = []
        for seq in seqs:
            members: list[Any] = await self.store.redis.zrangebyscore(outbox, seq, seq)
            for member in members:
                if outbox_row(room_id, member)[0] == gen:
                    in_outbox.append(seq)
        if in_outbox:
            raise VoidRefused(
                409,
                "in_outbox",
                f"Valkey's outbox holds seqs {in_outbox}: the leader commits them to the journal itself.",
                seqs=in_outbox,
            )
        spools = await self.storage.spool_held()
        if spools:
            raise VoidRefused(
                409,
                "spool_pending",
                f"The spools of {', '.join(sorted(spools))} hold events the journal does not have yet: one of them "
                "may be a missing seq. Let them drain first.",
                instances=sorted(spools),
            )
        now = self.journal.clock.wall_ms()
        rows = [
            JournalGaps.void_row(room_id, gen, seq, now, self.settings.instance_id, {"by": by}) for seq in sorted(seqs)
        ]
        _, collided = await self.gaps.gaps.complete(rows)
        landed = sorted(key[2] for key in collided)  # a writer's commit came first: that event stands
        voided = [s for s in sorted(seqs) if s not in landed]
        self.gaps.voided_total += len(voided)
        log.warning("journal: room %s generation %d: seqs %s voided by %s", room_id, gen, voided, by)
        # rebuilt from the journal now: the live state loses whatever the voided events had done
        self.unrebuildable.pop(room_id, None)
        with contextlib.suppress(Exception):
            await self.store.fence(room_id)
        self._reconcile_now.set()
        return {"roomId": room_id, "generation": gen, "voided": voided, "committedMeanwhile": landed}

    def _lost_logo(self, room_id: str, gen: int, seq: int) -> None:
        """A rebuild met a logo reference that matched no logo the room held (a journal cut that no
        checkpoint covers): the room is rebuilt without its logo, logged and counted."""
        self.logos_lost_total += 1
        log.warning(
            "rebuild of %s: the room change at generation %d seq %d names a logo the journal does not hold; "
            "the room is rebuilt without a logo (upload it again)",
            room_id,
            gen,
            seq,
        )

    async def mark_journal(self) -> None:
        """Raise the journal marks to the journal's positions now (the rooms found ahead keep theirs)."""
        heads = await self.journal.heads()
        await self.marks.raise_to({room: pos for room, pos in heads.items() if room not in self.ahead})

    def ahead_report(self) -> dict[str, dict[str, Any]]:
        """room -> where its Valkey state, its journal mark and its journal stand (lists of [gen, seq])."""
        out: dict[str, dict[str, Any]] = {}
        for room, (mark, found) in sorted(self.ahead.items()):
            live, now = self.live_ahead.get(room), self.journal_ahead.get(room)
            out[room] = {
                "valkey": [live.gen, live.seq] if live is not None and live.gen is not None else None,
                "journalSeen": list(mark),  # the furthest the journal was seen holding before
                "journal": list(now) if now is not None else None,  # the journal now (None: room unknown)
                "journalWhenFound": list(found) if found is not None else None,
            }
        return out

    async def _keep_trying(self) -> None:
        delay = 1.0
        while True:
            await asyncio.sleep(delay)
            try:
                await self.store.start()
            except StoreUnavailable:
                delay = min(30.0, delay * 2)
                continue
            self.valkey_ever_connected = self.valkey_up = True
            log.warning("valkey: connected")
            return

    async def stop(self) -> None:
        await stop_all(self._reconciler, self._reconnect)
        with contextlib.suppress(Exception):  # the journal as this instance leaves it (best effort)
            await self.mark_journal()
        await self.lease.stop()
        await self.hints.stop()
        await self.storage.stop()
        await self.counters.stop()
        with contextlib.suppress(Exception):
            await self.store.close()
        with contextlib.suppress(Exception):
            await self.journal.close()

    def recovering_rooms(self) -> set[str]:
        return self.recovering | set(self.unrebuildable) | self.store.fenced_recently(30.0)

    def note_store_result(self, ok: bool) -> None:
        self.valkey_up = ok
        if ok:
            self.valkey_ever_connected = True

    def health(self, *, full: bool) -> dict[str, Any]:
        out: dict[str, Any] = {
            "store": "valkey",
            # down also while the store answers at once after a failure (breaker.py)
            "valkey": "up" if self.valkey_up and not self.store.breaker.down else "down",
            "valkeyEverConnected": self.valkey_ever_connected,
            # marked here, or answered as fenced by Valkey in the last 30 s (the guide's /healthz)
            "recoveringRooms": len(self.recovering_rooms()),
            # PostgreSQL restored under a Valkey that holds newer state (journal_marks.py): reported, not rebuilt
            "roomsAheadOfJournal": len(self.ahead),
            # rooms whose journal misses seqs past the commit deadline (gapwatch.py, the leader's report)
            "journalGapRooms": len(self.gaps.fleet),
            "ok": self.valkey_up and not self.store.breaker.down,
        }
        if full:
            out["maxmemoryPolicy"] = self.store.maxmemory_policy
            out["recovering"] = sorted(self.recovering_rooms())
            out["aheadOfJournal"] = self.ahead_report()
            out["recovery"] = {
                "rebuilt": self.rebuilt_total,
                "rollbacks": self.rollbacks_total,
                "logosLost": self.logos_lost_total,
                "conflicts": self.journal.conflicts,
                "lastRebuild": self.last_rebuild,
                "unrebuildable": dict(sorted(self.unrebuildable.items())),
                "checkpointsSaved": self.checkpoints_saved,
                "lastCheckpoint": self.last_checkpoint,
                "rolledForward": self.gaps.rolled_forward_total,
                "voided": self.gaps.voided_total,
            }
            out["journalGaps"] = self.gaps.fleet
            out["hints"] = self.hints.health()
        return out


COMMAND_TIMEOUT_SEC = 2.0  # a Valkey command (or connect) that takes longer counts as Valkey unreachable


def with_timeouts(url: str) -> str:
    """``url`` with redis-py's socket timeouts unless it sets its own: without them a Valkey that stops
    answering (a black-holed network) holds each request until TCP gives up."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    names = {k for k, _ in query}
    for name in ("socket_timeout", "socket_connect_timeout"):
        if name not in names:
            query.append((name, str(COMMAND_TIMEOUT_SEC)))
    return urlunsplit(parts._replace(query=urlencode(query)))


class _RoomWatch:
    """The journal as the store sees it: commits, then tells the backend (and, by a hint, the other
    instances) which rooms were created or deleted."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    async def commit(self, events: list[Event]) -> None:
        await self.backend.journal.commit(events)
        created: set[str] = set()
        deleted: set[str] = set()
        changed: set[str] = set()
        for e in events:  # in order: the last of a create and a delete of one room wins
            if e.type == "room.create":
                created.add(e.room)
                deleted.discard(e.room)
            elif e.type == "room.delete":
                deleted.add(e.room)
                created.discard(e.room)
            elif e.type in ("room.update", "room.schedule"):
                changed.add(e.room)
        if created or deleted or changed:
            self.backend.rooms_committed(created, deleted)
            await self.backend.hints.publish(
                "rooms", created=sorted(created), deleted=sorted(deleted), changed=sorted(changed - deleted)
            )


def _first_words(exc: BaseException) -> str:
    return " ".join(str(exc).split()[:8]) or type(exc).__name__
