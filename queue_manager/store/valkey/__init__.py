"""The Valkey store (STORE=valkey): the live line in Valkey, every change one atomic Lua script.

It answers exactly what MemoryStore (the Python engine) answers — views, door checks, room
summaries, look-ups, errors and events — for every instance of a fleet at once. The Python engine
(``queue_manager/engine/room.py`` and the operations beside it) is the reference; ``lua/prelude.lua``
ports it function by function, in integer milliseconds and integer credit units.

Data model (every key in ``keys.py``; a room's keys share the hash tag ``{<room>}``)
-----------------------------------------------------------------------------------
* ``st`` (hash): the generation's scalars — gen, config version ``cv``, next ticket number,
  credit, last tick (mono ms), event ``seq``, line sequence, counters, and the config fields the
  rules read (``c_rate``, ``c_maxc`` …). ``cfg`` (string): the whole config as JSON.
* ``t`` (hash n -> JSON ticket record) and ``line`` (zset n -> line sequence): ``ZRANK`` is the
  position in O(log n), ``ZRANGE 0 0`` the head.
* ``ps`` / ``ss`` / ``sl`` / ``bn`` (sets): passes, sessions, slot-holding passes, bounced holders.
* ``hp`` / ``hs`` / ``he`` (zsets): the pass, slot and session deadline heaps — the same lazy heaps
  the engine keeps (member ``<n:012>:<deadline>``), swept with ``ZRANGEBYSCORE … LIMIT``.
* ``pi`` / ``ppi`` (hashes): places per address (queueMaxPerIp / preQueueMaxPerIp).
* ``fin`` (hash) + ``fo`` (zset, insertion order): finished tickets, the last 50,000.
* ``refs`` (hash Ref -> numbers) for look-ups; ``aref`` every Ref of tickets 1..50,000 of the
  generation, renamed into an archive slot (``arch<gen % 3>``) when the room is deleted, so
  ``previous_generation`` look-ups work for the last three generations.
* ``pq`` (hash) + ``pqo`` (zset): the pre-queue in join order; ``drawn`` (handle -> ticket);
  ``ph`` (zset): purged handles.
* ``jt`` / ``pt`` (zsets by mono ms): joins and promotions of the last minute; ``ab`` (hash
  second -> count): arrivals in bypass (joins and door checks), per second of the last minute;
  ``rst``: rule stats.
* ``meta`` (hash, survives deletes): the last generation, the config version counter, which
  generation each archive slot holds. ``fence`` (string): the room is being rebuilt — every script
  refuses (StoreUnavailable). Globally: ``rooms`` (zset, creation order) and ``rooms:seq``.

Round trips
-----------
join, status, check, door_replay (an admitted visitor's ``/api/check``), eject, purge, flush, lookup,
get_room, a room's tick: one EVALSHA each. room_policy and room_exists (asked on every request)
answer from this process's copy of the room's config while a script confirmed it within
``config_fresh_sec`` (2 s; every reply carries the config version, and the config itself when it
changed), else one small read. Extra calls
only when a script asks: the first call after another instance changed the room's config (``cfg``),
the draw at the open instant (``draw``: the permutation is computed in Python and applied by a
second call only if the pre-queue is unchanged), the first join of a room in this process (``refs``:
Ref codes are BLAKE2b, computed in Python for the next ticket numbers), and more than ``sweep_max``
deadlines falling due at once (``again``). list_rooms and tick: the registry read plus one pipeline.

Time comes only from the store's clock (``now_wall_ms``/``now_mono_ms`` arguments; scripts never read
the server clock): ``clock.SharedClock`` in production, a FakeClock in tests.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from queue_manager.store.valkey.clock import SharedClock
    from queue_manager.store.valkey.store import Journal, ValkeyStore

__all__ = ["Journal", "SharedClock", "ValkeyStore"]

# The package's names load on first use: the fleet's helpers (``keys``, ``breaker``) are imported by
# modules a memory server also loads, and must not bring the Valkey client with them.
_LAZY = {"Journal": "store", "SharedClock": "clock", "ValkeyStore": "store"}


if not TYPE_CHECKING:  # mypy reads the names from the imports above, and still checks each use

    def __getattr__(name: str) -> Any:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
        globals()[name] = value
        return value
