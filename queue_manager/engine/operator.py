"""What an operator does to the people of a room: eject one visitor, empty the line, flush everyone inside.

Each brings the room's clocks up to date, then makes its change through one of the room's
transitions (``eject_ticket``/``forget_finished``, ``empty_line``, ``release_all``), which emit the
events a rebuild replays. The room itself, its settings and its generation are the ``Engine``'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from queue_manager.engine.room import Room


def eject(room: Room, n: int) -> bool:
    """Revoke ticket ``n``'s pass, drop any session and send the visitor to the back of the line; a
    finished ticket is forgotten instead. False: no such ticket."""
    room.advance()
    t = room.tickets.get(n)
    if t is None:
        return room.forget_finished(n)
    room.eject_ticket(t)
    return True


def purge(room: Room) -> int:
    """Empty the line and the pre-queue; passes, sessions and the room itself survive. Returns how many places went."""
    room.advance()
    return room.empty_line()


def flush(room: Room) -> int:
    """Release every admitted visitor's pass and session at once; the line and the room survive.
    Returns how many tickets were released."""
    room.advance()
    return room.release_all()
