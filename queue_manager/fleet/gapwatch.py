"""No gap outlives a crash: the leader completes the journal from the rooms' outboxes in Valkey.

Every room script mints its events with the room's next ``seq`` and keeps each one in the room's outbox
(``ob``: the exact row its writer will commit, writer included). The writer commits them to PostgreSQL and
only then answers. An instance killed between the two (an OOM kill, a node lost, a reply lost with a
Valkey cut) leaves seqs the journal never gets. Every ``RESYNC_MS`` the leader:

1. finds, for each live room, where its journal stops being contiguous (a count and a maximum above a
   watermark, one statement for every room; a range read only when a count says something is missing),
   plus the seqs Valkey has minted above the journal's newest;
2. waits ``deadline_ms`` from when it first saw a seq missing (a live writer commits in milliseconds; this
   only avoids writing what its writer is about to), then commits the missing events from the outbox with
   the commit's own statement (``ON CONFLICT DO NOTHING``). The row is the one the writer would have
   written, so whichever lands first, the journal holds the same event; a late commit of the writer, or a
   spool drained later, finds an identical row and is a re-send. Nothing is ever dropped or undone, so no
   lease or fence is needed for safety: the roll-forward can race anything;
3. trims each outbox up to where its journal is contiguous;
4. publishes what stays open past the deadline (``jgaps``): seqs it could not commit (PostgreSQL failing)
   and seqs the outbox does not hold (lost with Valkey, or minted by a build without an outbox). Health,
   ``/healthz``, the metrics and the alert read it on every instance.

While journal maintenance holds the journal's writes in the spools, nothing is rolled forward or reported.
A seq nobody holds is closed by an operator (``POST /api/admin/rooms/<room>/journal/void``: a ``seq.void``
event, then the room is rebuilt from the journal). docs/adr/0007-no-gap-outlives-a-crash.md has the rule.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from queue_manager.clock import Clock
from queue_manager.engine.events import EVENT_LOG_VERSION
from queue_manager.journal.gaps import JournalGaps
from queue_manager.journal.rows import Row, event_row
from queue_manager.store.valkey.keys import journal_gaps_key, room_key

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from queue_manager.store.valkey.heads import LiveHead

log = logging.getLogger("queue_manager.fleet")

TAIL_MAX = 10_000  # seqs above the journal's newest looked at per room and round
SHOWN_MAX = 50  # missing seqs named per room in the report

Audit = Callable[[str, str, dict[str, Any]], Awaitable[None]]


class VoidRefused(Exception):
    """A void the fleet will not write: ``code`` for the API's answer, ``status`` its HTTP status."""

    def __init__(self, status: int, code: str, message: str, **detail: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.detail = status, code, message, detail


@dataclass(slots=True)
class Gap:
    """One room generation's seqs missing from the journal past the deadline."""

    room: str
    gen: int
    missing: list[int]  # ascending, every one of them
    since: int  # wall ms the oldest was first seen missing
    unrecoverable: list[int] = field(default_factory=list)  # not in the outbox either

    def as_json(self) -> dict[str, Any]:
        return {
            "generation": self.gen,
            "missing": len(self.missing),
            "seqs": self.missing[:SHOWN_MAX],
            "unrecoverable": self.unrecoverable[:SHOWN_MAX],
            "unrecoverableCount": len(self.unrecoverable),
            "since": self.since,
        }


def outbox_row(room: str, raw: bytes | str) -> tuple[int, Row]:
    """An outbox member -> (gen, the journal row its writer commits)."""
    gen, typ, seq, ts, data, writer = orjson.loads(raw)
    event = {
        "type": typ,
        "room": room,
        "gen": int(gen),
        "seq": int(seq),
        "ts": int(ts),
        "lv": EVENT_LOG_VERSION,
        "data": data if isinstance(data, dict) else {},
        "instance": writer or "",
    }
    return int(gen), event_row(event, str(writer or ""))


class GapWatch:
    """The leader's roll-forward of seqs that never reached the journal (see the module docstring)."""

    def __init__(
        self,
        redis: Redis,
        room_prefix: str,
        fleet_prefix: str,
        gaps: JournalGaps,
        clock: Clock,
        *,
        deadline_ms: int,
        publish_ms: int,
    ) -> None:
        self.redis = redis
        self.room_prefix = room_prefix
        self.key = journal_gaps_key(fleet_prefix)
        self.gaps = gaps
        self.clock = clock
        self.deadline_ms = deadline_ms
        self.publish_ms = publish_ms
        self.audit: Audit | None = None  # set by the composition root: the audit trail, system actor
        self.low: dict[tuple[str, int], int] = {}  # room generation -> its journal is contiguous up to here
        self.seen: dict[tuple[str, int], dict[int, int]] = {}  # room generation -> missing seq -> first seen
        self.open: dict[str, Gap] = {}  # this leader's view, published
        self.fleet: dict[str, dict[str, Any]] = {}  # the published view as every instance reads it
        self.rolled_forward_total = 0
        self.voided_total = 0
        self.rounds = 0

    # ------------------------------------------------------------------ the leader's round

    async def round(
        self, heads: Mapping[str, tuple[int, int]], live: Mapping[str, LiveHead], *, maintenance: bool
    ) -> None:
        """One pass over every room the journal knows (``heads``: room -> (gen, newest seq journaled))."""
        self.rounds += 1
        if maintenance:  # the spools hold the journal's writes meanwhile: nothing is missing, only held
            self.open, self.seen = {}, {}
            await self.publish()
            return
        rooms: list[tuple[str, int, int | None]] = []
        for room, (gen, _top) in sorted(heads.items()):
            head = live.get(room)
            if head is None or head.fenced:
                continue
            if head.gen == gen:
                rooms.append((room, gen, head.seq))
            elif head.gen is None and head.meta_gen >= gen:  # deleted here: its room.delete may be in the outbox
                rooms.append((room, gen, None))
        spans = await self.gaps.spans([(room, gen, self.low.get((room, gen), 0)) for room, gen, _ in rooms])
        now = self.clock.wall_ms()
        open_: dict[str, Gap] = {}
        for room, gen, live_seq in rooms:
            gap = await self._room(room, gen, live_seq, spans.get((room, gen)), now)
            if gap is not None:
                open_[room] = gap
        keep = {(room, gen) for room, gen, _ in rooms}
        self.low = {k: v for k, v in self.low.items() if k in keep}
        self.seen = {k: v for k, v in self.seen.items() if k in keep}
        self.open = open_
        await self.publish()

    async def _room(
        self, room: str, gen: int, live_seq: int | None, span: tuple[int, int] | None, now: int
    ) -> Gap | None:
        low = self.low.get((room, gen), 0)
        count, top = span if span is not None else (0, low)
        if count == top - low:
            inner: list[int] = []
            contiguous = top
        else:
            held = await self.gaps.present(room, gen, low, top)
            inner = [s for s in range(low + 1, top + 1) if s not in held]
            # none missing: the holes the count saw were filled by commits between the two reads
            contiguous = inner[0] - 1 if inner else top
        outbox = room_key(self.room_prefix, room, "ob")
        if live_seq is None:  # a room deleted here: what its outbox holds above the journal's newest
            above: list[Any] = await self.redis.zrangebyscore(outbox, f"({top}", "+inf", withscores=True)
            tail = [int(item[1]) for item in above]
        else:
            tail = list(range(top + 1, min(live_seq, top + TAIL_MAX) + 1))
        inner_set = set(inner)
        missing = inner + [s for s in tail if s not in inner_set]
        missing_set = set(missing)  # membership below is per seq seen: a list would make a round quadratic
        if contiguous > low:
            self.low[(room, gen)] = contiguous
            if live_seq is not None:  # the journal holds every event up to here: the outbox no longer needs them
                await self.redis.zremrangebyscore(outbox, "-inf", contiguous)
        seen = self.seen.setdefault((room, gen), {})
        for seq in list(seen):
            if seq not in missing_set:
                del seen[seq]
        for seq in missing:
            seen.setdefault(seq, now)
        due = sorted(s for s, first in seen.items() if now - first >= self.deadline_ms)
        if not due:
            return None
        rows, unrecoverable = await self._from_outbox(outbox, room, gen, due)
        if rows:
            done = await self._roll_forward(room, gen, rows)
            for seq in done:
                seen.pop(seq, None)
            due = [s for s in due if s not in done]
        if not due:
            return None
        return Gap(room, gen, due, min(seen[s] for s in due), [s for s in due if s in unrecoverable])

    async def _from_outbox(self, outbox: str, room: str, gen: int, due: list[int]) -> tuple[list[Row], set[int]]:
        """The rows the outbox holds for the due seqs of this generation, and the due seqs it does not hold."""
        found: dict[int, Row] = {}
        wanted = set(due)
        raw: list[Any] = await self.redis.zrangebyscore(outbox, due[0], due[-1])
        for member in raw:
            try:
                member_gen, row = outbox_row(room, member)
            except (ValueError, TypeError) as exc:
                log.warning("journal gaps: an unreadable outbox entry of %s: %s", room, exc)
                continue
            if member_gen == gen and row[2] in wanted:
                found[row[2]] = row
        return [found[s] for s in sorted(found)], wanted - set(found)

    async def _roll_forward(self, room: str, gen: int, rows: list[Row]) -> set[int]:
        """Commit the rows; returns the seqs the journal now holds (inserted, or already there identically)."""
        try:
            inserted, taken = await self.gaps.complete(rows)
        except Exception as exc:  # PostgreSQL failing: they stay open and are tried again next round
            log.warning("journal gaps: %s: %d events not rolled forward yet: %s", room, len(rows), exc)
            return set()
        seqs = [r[2] for r in rows]
        writers = sorted({r[7] for r in rows})
        if taken:  # the journal holds another event there: this Valkey state is behind it (a rollback)
            log.error(
                "journal gaps: %s generation %d: %d outbox events collide with journaled ones; left to the rebuild",
                room,
                gen,
                len(taken),
            )
        done = {r[2] for r in rows if (r[0], r[1], r[2]) not in taken}
        if inserted:
            self.rolled_forward_total += inserted
            log.warning(
                "journal gaps: %s generation %d: %d events minted by %s and never committed by it were committed "
                "from Valkey's outbox (seqs %s)",
                room,
                gen,
                inserted,
                ", ".join(writers),
                _ranges(seqs),
            )
            if self.audit is not None:
                try:
                    await self.audit(
                        "journal.roll_forward",
                        room,
                        {"generation": gen, "events": inserted, "seqs": _ranges(seqs), "writers": writers},
                    )
                except Exception as exc:  # the journal is complete either way
                    log.warning("journal gaps: audit: %s", exc)
        return done

    # ------------------------------------------------------------------ what every instance reads

    async def publish(self) -> None:
        doc = {room: gap.as_json() for room, gap in sorted(self.open.items())}
        self.fleet = doc
        await self.redis.set(self.key, orjson.dumps(doc), px=self.publish_ms)

    async def refresh(self) -> None:
        """Every instance: the leader's last report (none once it expires: a leader that is gone)."""
        raw = await self.redis.get(self.key)
        try:
            doc = orjson.loads(raw) if raw else {}
        except ValueError:
            doc = {}
        self.fleet = doc if isinstance(doc, dict) else {}

    def incidents(self, *, full: bool) -> list[str]:
        out = []
        for room, gap in sorted(self.fleet.items()):
            seqs = _ranges(gap.get("seqs") or [])
            lost = gap.get("unrecoverableCount") or 0
            if not full:
                out.append(f"events journal gap in room {room}")
                continue
            line = f"events journal gap: room {room} generation {gap.get('generation')} is missing seqs {seqs}"
            if lost:
                line += (
                    f"; {lost} of them are not in Valkey either: if no instance's spool holds them, close them "
                    f"with POST /api/admin/rooms/{room}/journal/void"
                )
            else:
                line += " (committing them from Valkey's outbox as soon as PostgreSQL takes them)"
            out.append(line)
        return out


def _ranges(seqs: list[int]) -> str:
    """[3, 4, 5, 9] -> '3-5, 9'."""
    parts: list[str] = []
    start = prev = None
    for s in sorted(seqs):
        if start is None:
            start = prev = s
        elif prev is not None and s == prev + 1:
            prev = s
        else:
            parts.append(f"{start}-{prev}" if start != prev else f"{start}")
            start = prev = s
    if start is not None:
        parts.append(f"{start}-{prev}" if start != prev else f"{start}")
    return ", ".join(parts)
