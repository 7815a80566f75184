"""A drop's pre-queue over several hash slots: the names of a room's pre-queue shards and which one a
visitor belongs to.

A room with ``preQueueShards`` N > 1 takes the sign-ups of its scheduled drop in N places: its own
pre-queue (shard 0) and N - 1 hidden rooms ``<room>~<k>.<s>`` (shard k), each in its own hash slot, so on a
cluster the sign-ups of one drop are spread over several masters instead of one core. A shard is a room
like any other to the journal, the outbox, checkpoints and rebuilds; its config is the room's and its
scripts know it for a shard (``c_pqsh`` 0): it only ever holds pre-queue entries, never draws, and
answers ``moved`` for anything that is not an entry it holds while its pre-queue is open. The draw
merges the shards into the room first (``shard_merge.py``).

A visitor's shard follows from what they present: a new sign-up goes to the shard of their address (so
``preQueueMaxPerIp`` is counted in one place), and is given a handle that names the same shard; a handle
presented later goes to its shard. Shard 0 is the room itself.
"""

from __future__ import annotations

import zlib

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from queue_manager.engine.randomness import RandomSource

#: between a room's id and its shard's number in a shard's id (never in a room id: ROOM_ID_RE)
MARK = "~"
#: salts tried for a shard's id before the first one is taken whatever its slot
SALTS_TRIED = 4096


def is_shard(room_id: str) -> bool:
    return MARK in room_id


def parent(room_id: str) -> str:
    """The room a shard belongs to (a room's own id for a room)."""
    return room_id.split(MARK, 1)[0]


def slot_of(room_id: str) -> int:
    """The hash slot of the room's keys (their tag is the room's id, keys.room_key)."""
    return int(key_slot(room_id.encode()))


def shard_id(room_id: str, k: int, count: int) -> str:
    """Shard ``k`` (1 .. count - 1) of a room with ``count`` shards: ``<room>~<k>.<salt>``, the smallest salt
    whose slot lies in the k-th of the ``count`` equal ranges of slots the room's own slot does not lie in,
    so on a cluster whose slots are split evenly between ``count`` masters each shard has a master of its
    own. Every instance computes the same ids."""
    if count < 2 or not 1 <= k < count:
        raise ValueError(f"shard {k} of {count}")
    own = slot_of(room_id) * count // REDIS_CLUSTER_HASH_SLOTS
    ranges = [r for r in range(count) if r != own]
    want = ranges[k - 1]
    first = f"{room_id}{MARK}{k}.0"
    for salt in range(SALTS_TRIED):
        candidate = f"{room_id}{MARK}{k}.{salt}"
        if slot_of(candidate) * count // REDIS_CLUSTER_HASH_SLOTS == want:
            return candidate
    return first


def shard_ids(room_id: str, count: int) -> list[str]:
    """The hidden shards of a room with ``count`` shards (shard 0, the room itself, not among them)."""
    return [shard_id(room_id, k, count) for k in range(1, count)]


def _spread(value: str, count: int) -> int:
    return zlib.crc32(value.encode()) % count


def shard_of_handle(handle: str, count: int) -> int:
    """The shard a pre-queue handle was given in (0: the room itself)."""
    return _spread(handle, count)


def shard_of_ident(ident: str, count: int) -> int:
    """The shard a new sign-up from address ``ident`` goes to."""
    return _spread(ident, count)


def handle_in(rng: RandomSource, k: int, count: int) -> str:
    """A fresh pre-queue handle that names shard ``k`` (about ``count`` draws on average)."""
    while True:
        handle = rng.token_hex(8)
        if shard_of_handle(handle, count) == k:
            return handle
