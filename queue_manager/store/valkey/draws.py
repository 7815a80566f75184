"""The pre-queue's draw on Valkey: the seed a room change commits to, and the draw computed from it.

A change that schedules a drop (or moves it) draws a seed and publishes its commitment; the script
keeps both. At the open instant the script answers ``draw`` with the pre-queue's entries (a large
one: its first page, the rest read by the caller that claimed it, ``runner.py``) and the committed seed;
the order is computed here (qm-draw-v1, ``engine/draw.py``), with the Refs of the numbers it mints, and
a second call applies it if the pre-queue did not change meanwhile (a large draw in parts).
"""

from __future__ import annotations

from typing import Any

from queue_manager.engine import draw as draw_rules
from queue_manager.engine.model import RoomConfig
from queue_manager.engine.randomness import RandomSource
from queue_manager.engine.ticket import make_ref
from queue_manager.store.valkey.arguments import to_json


def draw_args(rng: RandomSource, room_id: str, reply: dict[str, Any]) -> tuple[str, str, str]:
    """The draw itself, in Python (qm-draw-v1 of the committed seed, engine/draw.py), as the script's
    draw arguments: version, the record it keeps, and the order with its Refs that it applies. A drop
    without a committed seed (scheduled by an older build) is drawn from a fresh one, published with the
    draw (drop.draw_seed)."""
    handles, groups = draw_rules.freeze((str(h), str(ident)) for h, ident in reply.get("entries") or [])
    doc: dict[str, Any] = {}
    committed = reply.get("seed")
    if isinstance(committed, str) and committed:
        seed = bytes.fromhex(committed)
    else:
        seed = rng.draw_seed()
        doc.update(seed=seed.hex(), com=draw_rules.commitment(seed))
    order = draw_rules.draw_order(seed, handles, groups)
    doc.update(order=order, handles=handles, groups=groups)
    gen, first = int(reply["gen"]), int(reply["next"])
    refs = [make_ref(room_id, gen, first + i) for i in range(len(order))]
    # the record (kept as sent) and what the script applies (o, r, s, c): it never decodes the record,
    # whose handles and groups double what a large draw sends (docs/decisions.md, drawn in parts)
    apply: dict[str, Any] = {"o": order, "r": refs}
    if "seed" in doc:
        apply.update(s=doc["seed"], c=doc["com"])
    return str(reply["ver"]), to_json(doc), to_json(apply)


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
