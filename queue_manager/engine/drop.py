"""A drop's draw in a live room: when the pre-queue is drawn into the line, with which seed, in which order.

A room scheduled to open at ``opensAt`` gathers a pre-queue; at that instant (or when the drop is
cancelled with people waiting) the whole pre-queue is drawn at once, in the order qm-draw-v1 gives
for the drop's committed seed (``engine/draw.py``, the algorithm's reference). The draw itself is a
transition of the room (``Room.apply_draw``), so a rebuild from the journal replays it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from queue_manager.engine import draw as draw_rules
from queue_manager.engine.ticket import PreEntry

if TYPE_CHECKING:
    from queue_manager.engine.room import Room


def maybe_draw(room: Room, now_ms: int) -> None:
    """Draw the pre-queue if the doors are open at ``now_ms`` (wall): a cancelled drop (opensAt null)
    with people waiting opens now."""
    opens = room.cfg.opens_at_ms
    if not room.prequeue or (opens is not None and now_ms < opens):
        return
    draw(room)


def draw_seed(room: Room) -> tuple[bytes, bool]:
    """The seed the next draw uses: the committed one, else (a drop scheduled before seeds were
    committed) a fresh one, published with the draw. The flag says which: True for a fresh one."""
    record = room.draw_record
    if record is not None and record.drawn is None:
        return record.seed, False
    return room.rng.draw_seed(), True


def draw(room: Room) -> None:
    """Draw the pre-queue into the line now, in the order qm-draw-v1 gives for the drop's seed."""
    seed, fresh = draw_seed(room)
    room.apply_draw(draw_order(room.prequeue.values(), seed), seed=seed if fresh else None)


def draw_order(entries: Iterable[PreEntry], seed: bytes) -> list[str]:
    """The round-robin draw: an identity's k-th entry is drawn behind every identity's (k-1)-th.

    The order is qm-draw-v1 of ``seed`` and the frozen pre-queue (``engine/draw.py``).
    """
    handles, groups = draw_rules.freeze((e.handle, e.ident) for e in entries)
    return draw_rules.draw_order(seed, handles, groups)
