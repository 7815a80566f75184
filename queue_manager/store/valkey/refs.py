"""The Ref window a join sends: the Refs of the ticket numbers about to be minted, computed in Python.

A Ref is BLAKE2b of the room, generation and ticket number (``engine/ticket.make_ref``), which Lua
cannot compute; so a join sends the Refs of the next few numbers (from the last ``next`` a reply
told), fixed-width and concatenated, and the script cuts out the one it mints. A script that finds
the window behind (others minted meanwhile) answers ``refs`` with the current number, and the window
doubles (up to ``REF_WINDOW_MAX``). Concurrent joins send overlapping windows: each Ref is derived
once and kept in a run per room, and the encoded window is reused while the number does not move.
"""

from __future__ import annotations

from typing import Any

from queue_manager.engine.ticket import make_ref

REF_WINDOW_MIN = 4
REF_WINDOW_MAX = 256
REF_RUN_KEEP = 256  # Refs below the hint kept before the run is trimmed
REF_RUN_ROOMS = 1_000  # rooms with a run of Refs kept (beyond: all dropped, derived again as needed)


class RefWindows:
    def __init__(self) -> None:
        # room -> (gen, next ticket number) the last reply told; the runner sets it on every reply
        self.next_hint: dict[str, tuple[int, int]] = {}
        self._window: dict[str, int] = {}
        self._runs: dict[str, tuple[int, int, list[str]]] = {}  # room -> (gen, first n, Refs from it)
        self._sent: dict[str, tuple[tuple[int, int, int], tuple[str, str]]] = {}  # the last window sent

    def note(self, room_id: str, reply: dict[str, Any]) -> None:
        """Keep the generation and next ticket number a reply tells."""
        if reply.get("gen") is not None and reply.get("next") is not None:
            self.next_hint[room_id] = (int(reply["gen"]), int(reply["next"]))

    def missed(self, room_id: str, reply: dict[str, Any]) -> None:
        """A script found the window behind (a ``refs`` reply): widen it, start from the number told."""
        if room_id in self.next_hint:  # a miss: others minted meanwhile, widen the window
            self._window[room_id] = min(REF_WINDOW_MAX, 2 * self._window.get(room_id, REF_WINDOW_MIN))
        self.next_hint[room_id] = (int(reply["gen"]), int(reply["next"]))

    def forget(self, room_id: str) -> None:
        """The room was deleted or replaced: its numbering starts again."""
        self.next_hint.pop(room_id, None)

    def window(self, room_id: str, need: int = 1) -> tuple[str, str]:
        """The window's two header arguments: ``<gen>:<first n>`` and the Refs concatenated ('' and '':
        no number known yet, the script answers ``refs`` with it); at least ``need`` Refs (a call that
        may mint as many numbers)."""
        hint = self.next_hint.get(room_id)
        if hint is None:
            return "", ""
        gen, first = hint
        size = max(need, self._window.get(room_id, REF_WINDOW_MIN))
        memo = self._sent.get(room_id)
        if memo is not None and memo[0] == (gen, first, size):
            return memo[1]
        run = self._runs.get(room_id)
        if run is None or run[0] != gen or first < run[1] or first > run[1] + len(run[2]):
            if len(self._runs) >= REF_RUN_ROOMS:  # room ids come from requests: keep the caches bounded
                self._runs.clear()
                self._sent.clear()
            run = self._runs[room_id] = (gen, first, [])
        _, base, refs = run
        have = base + len(refs)
        if have < first + size:
            refs.extend(make_ref(room_id, gen, n) for n in range(have, first + size))
        if first - base > REF_RUN_KEEP:  # drop the Refs of numbers already minted
            del refs[: first - base]
            run = self._runs[room_id] = (gen, first, refs)
            base = first
        # fixed-width Refs concatenated: the script cuts out the one it mints instead of decoding JSON
        out = f"{gen}:{first}", "".join(refs[first - base : first - base + size])
        self._sent[room_id] = ((gen, first, size), out)
        return out
