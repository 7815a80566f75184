"""The pre-queue's draw on Valkey: the seed a room change commits to, and the draw computed from it.

A change that schedules a drop (or moves it) draws a seed and publishes its commitment; the script
keeps both. At the open instant the script answers ``draw`` with the pre-queue's entries (a large
one: its first page, the rest read by the caller that claimed it, ``runner.py``) and the committed seed;
the order is computed here (qm-draw-v1, ``engine/draw.py``), with the Refs of the numbers it mints, and
a second call applies it if the pre-queue did not change meanwhile. A large draw is first put in place
in parts (``lua/draw_stage.lua``), then applied in parts.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from queue_manager.engine import draw as draw_rules
from queue_manager.engine.model import RoomConfig
from queue_manager.engine.randomness import RandomSource
from queue_manager.engine.ticket import make_ref
from queue_manager.store.valkey.arguments import to_json


@dataclass(slots=True)
class DrawPlan:
    """A computed draw: its version, the record the script keeps (as sent), the order with its Refs, and
    the seed it publishes when none was committed (``s``, ``c``)."""

    ver: str
    record: str
    order: list[str]
    refs: list[str]
    seed: dict[str, str]

    def args(self) -> tuple[str, str, str]:
        """The draw as the script's draw arguments, all in the call that applies it (a small draw)."""
        return self.ver, self.record, to_json({"o": self.order, "r": self.refs, **self.seed})

    def staged_args(self) -> tuple[str, str, str]:
        """The draw arguments once ``draw_stage.lua`` has put the order, the Refs and the record in place."""
        return self.ver, "", to_json({"n": len(self.order), **self.seed})

    def parts(self, size: int) -> Iterator[tuple[int, str, list[str], list[str]]]:
        """The staging parts: (offset, a piece of the record, handles, Refs), ``size`` entries each."""
        count = len(self.order)
        pieces = max(1, -(-count // size))
        step = -(-len(self.record) // pieces)
        for i in range(pieces):
            lo = i * size
            yield lo, self.record[i * step : (i + 1) * step], self.order[lo : lo + size], self.refs[lo : lo + size]


def draw_plan(rng: RandomSource, room_id: str, reply: dict[str, Any]) -> DrawPlan:
    """The draw itself, in Python (qm-draw-v1 of the committed seed, engine/draw.py): the record the
    script keeps and the order with its Refs that it applies. A drop without a committed seed (scheduled
    by an older build) is drawn from a fresh one, published with the draw (drop.draw_seed)."""
    handles, groups = draw_rules.freeze((str(h), str(ident)) for h, ident in reply.get("entries") or [])
    doc: dict[str, Any] = {}
    committed = reply.get("seed")
    if isinstance(committed, str) and committed:
        seed = bytes.fromhex(committed)
    else:
        seed = rng.draw_seed()
        doc.update(seed=seed.hex(), com=draw_rules.commitment(seed))
    order = draw_rules.draw_order(seed, handles, groups)
    published = {"s": doc["seed"], "c": doc["com"]} if "seed" in doc else {}
    doc.update(order=order, handles=handles, groups=groups)
    gen, first = int(reply["gen"]), int(reply["next"])
    refs = [make_ref(room_id, gen, first + i) for i in range(len(order))]
    # the record is kept as sent: the script never decodes it (its handles and groups double the order)
    return DrawPlan(str(reply["ver"]), to_json(doc), order, refs, published)


def commits(opens_before: int | None, cfg: RoomConfig) -> bool:
    """The change schedules a drop or moves it to another instant: it commits a new seed (Engine._commit)."""
    return cfg.opens_at_ms is not None and cfg.opens_at_ms != opens_before


class OneSeed:
    """The seed of one room change, drawn from ``rng`` the first time it is needed (never when the
    change commits none), the same on every attempt of the change's script."""

    __slots__ = ("_rng", "_seed")

    def __init__(self, rng: RandomSource) -> None:
        self._rng = rng
        self._seed: bytes | None = None

    def get(self) -> bytes:
        if self._seed is None:
            self._seed = self._rng.draw_seed()
        return self._seed

    def args(self, commit: bool) -> list[str]:
        """The seed and its commitment as a script's arguments ('' when the change commits none)."""
        return [self.get().hex(), draw_rules.commitment(self.get())] if commit else ["", ""]

    def data(self, commit: bool) -> dict[str, str]:
        """What the room change's event carries of the seed (``seed``, when it committed one)."""
        return {"seed": self.get().hex()} if commit else {}
