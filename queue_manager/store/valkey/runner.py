"""Running a room's script to its end: the instant, the header every script reads first, and the
calls again that a reply asks for.

Replies that ask for another call: ``cfg`` (this process's config copy is older than the room's;
strict scripts change nothing then), ``draw`` (the pre-queue is due to be drawn), ``refs`` (the Refs
of the ticket numbers about to be minted), ``again`` (the sweep's budget ran out) and ``more`` (the
tick's promotion budget ran out). Every call of one operation uses the same instant.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import queue_manager.engine.engine as engine_module
import queue_manager.engine.room as room_module
from queue_manager.clock import Clock
from queue_manager.engine.events import Event
from queue_manager.engine.randomness import RandomSource
from queue_manager.store.base import StoreUnavailable
from queue_manager.store.valkey.calls import Reply, ScriptCalls
from queue_manager.store.valkey.clock import SharedClock
from queue_manager.store.valkey.configs import ConfigCopies, ConfigCopy
from queue_manager.store.valkey.draws import DrawPlan, draw_plan
from queue_manager.store.valkey.errors import translate
from queue_manager.store.valkey.refs import RefWindows

ArgsFn = Callable[[ConfigCopy | None], list[str]]

MAX_ATTEMPTS = 50  # draws, config refreshes, Ref windows, sweep budgets: each costs one more call
# Pre-queue entries one script call puts in line (40–70 µs of Valkey each): a larger draw is applied
# in parts, so Valkey serves every other room and client between them (lua/prelude.lua draw_step).
DRAW_CHUNK = 1000
# Entries of a large draw one draw_stage.lua call puts in place (their handles, Refs and a piece of the
# record: about 20 ms of Valkey), so the call that applies the draw carries none of it.
DRAW_STAGE = 20_000
DRAW_WAIT_SEC = 0.02  # between two asks while another caller reads a large pre-queue for the draw
DRAW_WAIT_MAX_SEC = 60.0  # past it the operation is answered as unavailable (the draw goes on)


def events_of(room_id: str, reply: Reply) -> list[Event]:
    """The events a script's reply carries (every change a script makes comes back as its events)."""
    raw = reply.get("ev") or []
    gen = int(reply.get("gen") or 0)
    return [Event(typ, room_id, gen, ts, data if isinstance(data, dict) else {}, seq=seq) for typ, seq, ts, data in raw]


class RoomRunner:
    """The room scripts of one store: ``calls`` reaches Valkey, ``configs`` and ``refs`` are what this
    process keeps between calls. ``sweep_max``: deadlines one call may process (more: the script is
    called again); ``promote_max``: promotions one tick call may make; ``held``: admission
    maintenance (every script is told); ``writer``: the instance that commits the events (kept with
    them in the outbox); ``full_records``: ticket records stored with every field (``TICKET_RECORDS=full``);
    ``draw_chunk``: pre-queue entries one call puts in line (a larger draw is applied in parts, each
    call answering ``parts`` until the last); ``rng``: where a draw without a committed seed draws one."""

    def __init__(
        self,
        calls: ScriptCalls,
        clock: Clock,
        rng: RandomSource,
        *,
        sweep_max: int,
        promote_max: int,
        writer: str,
        full_records: bool = False,
        draw_chunk: int = DRAW_CHUNK,
    ) -> None:
        self.calls = calls
        self.clock = clock
        self.rng = rng
        self.sweep_max = sweep_max
        self.promote_max = promote_max
        self.writer = writer
        self.full_records = full_records
        self.draw_chunk = draw_chunk
        self.held = False
        # a drop's draw of a room whose pre-queue took sign-ups in shards waits for this (shard_merge.py)
        self.merge_shards: Callable[[str, tuple[int, int]], Awaitable[None]] | None = None
        self.configs = ConfigCopies()
        self.refs = RefWindows()

    async def now(self) -> tuple[int, int]:
        """The instant an operation happens at (every script call of one operation uses it)."""
        if isinstance(self.clock, SharedClock) and not self.clock.anchored:
            # a process that booted while Valkey was down anchors on first contact
            with translate(None, self.calls.breaker):
                await self.clock.anchor(self.calls.redis)
        return self.clock.wall_ms(), self.clock.mono_ms()

    def header(
        self,
        now: tuple[int, int],
        want_cv: str,
        draw: tuple[str, str, str] = ("", "", ""),
        refs: tuple[str, str] = ("", ""),
    ) -> list[str]:
        return [
            str(now[0]),
            str(now[1]),
            want_cv,
            str(room_module.FINISHED_KEEP),
            str(engine_module.ARCHIVE_TICKETS),
            str(self.sweep_max),
            *draw,
            *refs,
            str(self.promote_max),
            "1" if self.held else "0",
            self.writer,
            "1" if self.full_records else "0",
            str(self.draw_chunk),
        ]

    async def once(
        self, name: str, room_id: str, args: Sequence[str] = (), now: tuple[int, int] | None = None
    ) -> Reply:
        """One call of script ``name``, whatever the room's config version (now, unless ``now`` is given)."""
        if now is None:
            now = await self.now()
        return await self.calls.eval(name, room_id, [*self.header(now, "*"), *args])

    async def run(
        self,
        name: str,
        room_id: str,
        now: tuple[int, int],
        args: ArgsFn,
        *,
        cv: str = "loose",
        refs: bool = False,
        refs_need: int = 1,
        first: Reply | None = None,
    ) -> tuple[Reply, list[Event]]:
        """Call a room script until it has done its work; every call uses the same instant.

        ``args(copy)`` builds the script's own arguments on the config copy of the call; ``cv``:
        ``loose`` (the script answers on any version, telling the new config), ``strict`` (it changes
        nothing on an older copy) or ``any`` (no version sent). ``refs``: send the Ref window, of at
        least ``refs_need`` Refs.
        ``first``: a reply already had (a pipeline's), handled as the first call's.
        """
        events: list[Event] = []
        draw = ("", "", "")
        configs = self.configs
        next_hint = self.refs.next_hint
        attempts = 0
        waited_until = time.monotonic() + DRAW_WAIT_MAX_SEC
        merged = False
        while attempts < MAX_ATTEMPTS:
            cache = configs.get(room_id)
            if first is not None:
                reply, first = first, None
            else:
                want = "*" if cv == "any" else (str(cache.cv) if cache is not None else "0")
                header = self.header(now, want, draw, self.refs.window(room_id, refs_need) if refs else ("", ""))
                reply = await self.calls.eval(name, room_id, [*header, *args(cache)])
            if isinstance(reply.get("cfg"), str):  # the room's config changed: this reply carries it
                configs.absorb(room_id, reply)
            # the next ticket number, for the Ref window (RefWindows.note, written out: every call passes here)
            if reply.get("gen") is not None and reply.get("next") is not None:
                next_hint[room_id] = (int(reply["gen"]), int(reply["next"]))
            events.extend(events_of(room_id, reply))
            kind = reply["k"]
            if kind == "parts":  # a part of a large draw or purge went in: progress, never counted as contention
                draw = ("", "", "")  # applied: the next calls need not carry it
                continue
            if kind == "drawwait":  # another caller is reading a large pre-queue for its draw
                if time.monotonic() > waited_until:
                    raise StoreUnavailable(f"room {room_id!r}: its drop's draw is taking long, try again")
                await asyncio.sleep(DRAW_WAIT_SEC)
                now = await self.now()  # a later instant: this call changed nothing
                continue
            attempts += 1
            if kind == "draw":
                if reply.get("shards") and self.merge_shards is not None and not merged:
                    # the drop took sign-ups in shards: this caller holds the claim and merges them first
                    await self.merge_shards(room_id, now)
                    merged = True
                    draw = (str(reply["claim"]), "", "")
                    continue
                if reply.get("paged"):
                    pages = await self._draw_pages(room_id, now, reply)
                    if pages is None:  # the pre-queue changed while it was read: ask again, as the claimer
                        draw = (str(reply["claim"]), "", "")
                        continue
                    reply["entries"] = pages
                plan = draw_plan(self.rng, room_id, reply)
                if not reply.get("paged"):
                    draw = plan.args()
                elif await self._draw_stage(room_id, now, str(reply["claim"]), plan):
                    draw = plan.staged_args()
                else:  # the claim or the pre-queue moved while it was put in place: ask again, as the claimer
                    draw = (str(reply["claim"]), "", "")
            elif kind == "refs":
                self.refs.missed(room_id, reply)
            elif kind not in ("cfg", "again", "more"):
                if cache is not None and cv != "any" and cache is configs.get(room_id):
                    cache.confirmed = time.monotonic()  # the script compared versions: still current
                return reply, events
        raise StoreUnavailable(f"room {room_id!r}: too much contention, try again")

    async def _draw_pages(self, room_id: str, now: tuple[int, int], first: Reply) -> list[Any] | None:
        """A large pre-queue, page by page (draw_page.lua) after the first page the claim answered;
        None when it changed meanwhile (its version moved)."""
        entries: list[Any] = list(first.get("entries") or [])
        while len(entries) < int(first["count"]):
            page = await self.calls.eval(
                "draw_page", room_id, [*self.header(now, "*"), str(len(entries)), str(self.draw_chunk)]
            )
            got = page.get("entries") or []
            if page.get("ver") != first["ver"] or not got:
                return None
            entries.extend(got)
        return entries

    async def _draw_stage(self, room_id: str, now: tuple[int, int], claim: str, plan: DrawPlan) -> bool:
        """A large draw put in place part by part (draw_stage.lua) for the call that applies it; False when
        a part was refused (the claim lapsed, or the pre-queue changed)."""
        for offset, piece, handles, refs in plan.parts(DRAW_STAGE):
            reply = await self.calls.eval(
                "draw_stage",
                room_id,
                [*self.header(now, "*"), plan.ver, claim, str(offset), piece, str(len(handles)), *handles, *refs],
            )
            if reply["k"] != "staged":
                return False
        return True

    async def read_config(self, room_id: str, rule_stats: bool = False) -> tuple[ConfigCopy | None, Reply]:
        """The room's config (None: no such room), confirmed or brought by one small call."""
        cache = self.configs.get(room_id)
        want = str(cache.cv) if cache is not None else "0"
        reply = await self.calls.eval(
            "cfg", room_id, [*self.header(await self.now(), want), "1" if rule_stats else "0"]
        )
        if reply["k"] == "none":
            self.configs.pop(room_id, None)
            return None, reply
        if isinstance(reply.get("cfg"), str):
            self.configs.absorb(room_id, reply)
            self.refs.note(room_id, reply)
        current = self.configs[room_id]
        current.confirmed = time.monotonic()
        return current, reply

    def forget(self, room_id: str) -> None:
        """The room was deleted or replaced: nothing kept of it is current."""
        self.configs.pop(room_id, None)
        self.refs.forget(room_id)
