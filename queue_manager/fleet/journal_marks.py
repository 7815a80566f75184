"""Journal marks: how far each room's events journal was seen, kept in Valkey, to catch a journal
that went backwards (PostgreSQL restored from a backup under a Valkey that still holds newer state).

Every event is minted in Valkey first and committed to PostgreSQL after, so Valkey ahead of the
journal is normal for the commits in flight, and cannot by itself tell an old journal from a slow
commit. The marks can: ``<prefix>journal:marks`` holds, per room, the furthest ``(gen, seq)`` any
instance read from the journal (raised, never lowered, by one small script). A journal only grows,
so a room whose journal now reads behind its mark (or does not know the room at all) lost committed
events: the database was restored from an older copy under this Valkey. Such a room is *ahead of the
journal*: it is reported, never rebuilt from the older journal, and it is written to
``<prefix>journal:ahead`` so it stays reported even after new commits carry the journal past the old
mark (they leave a gap in it). It stays there until the room is deleted and created again (a new
generation) or the prefix is flushed. The way out is the restore procedure's: a new
``VALKEY_PREFIX``, or flushing the prefix (the marks go with it), after which every room is rebuilt
from the restored journal.

The marks are read BEFORE the journal: a mark written from a later read of the journal can then
never be compared with an earlier one.

Example::

    marks = JournalMarks(redis, "qm:")
    seen, flagged = await marks.read()                 # first
    positions = await journal.positions()              # then the journal
    ahead = JournalMarks.ahead(seen, flagged, positions)  # rooms whose journal went backwards
    await marks.flag({r: a for r, a in ahead.items() if r not in flagged})
    await marks.raise_to({r: p for r, p in positions.items() if r not in ahead})
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from queue_manager.store.valkey.errors import translate
from queue_manager.store.valkey.keys import journal_ahead_key, journal_marks_key

if TYPE_CHECKING:
    from redis.asyncio import Redis

Position = tuple[int, int]  # (gen, seq)
Ahead = tuple[Position, Position | None]  # (the mark, the journal's position when found: None, unknown)

# ARGV: room, gen, seq, room, gen, seq, ...: each mark set to the larger of itself and the new position
_RAISE = """
for i = 1, #ARGV, 3 do
  local old = redis.call('HGET', KEYS[1], ARGV[i])
  local gen, seq = tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local higher = true
  if old then
    local og, os = string.match(old, '^(%d+):(%d+)$')
    og, os = tonumber(og), tonumber(os)
    higher = gen > og or (gen == og and seq > os)
  end
  if higher then redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1] .. ':' .. ARGV[i + 2]) end
end
return 1
"""


def _text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def _numbers(text: str) -> list[int] | None:
    parts = text.split(":")
    return [int(p) for p in parts] if all(p.isdigit() for p in parts) else None


class JournalMarks:
    """The marks of one Valkey prefix (see the module docstring)."""

    def __init__(self, redis: Redis, prefix: str) -> None:
        self.redis = redis
        self.key = journal_marks_key(prefix)
        self.ahead_key = journal_ahead_key(prefix)

    async def read(self) -> tuple[dict[str, Position], dict[str, Ahead]]:
        """(room -> the furthest (gen, seq) its journal was seen holding, the rooms already found ahead)."""
        with translate():
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.hgetall(self.key)
                pipe.hgetall(self.ahead_key)
                raw_marks, raw_ahead = await pipe.execute()
        marks: dict[str, Position] = {}
        for room, value in raw_marks.items():
            n = _numbers(_text(value))
            if n is not None and len(n) == 2:
                marks[_text(room)] = (n[0], n[1])
        flagged: dict[str, Ahead] = {}
        for room, value in raw_ahead.items():
            mark_text, _, now_text = _text(value).partition("/")
            m, j = _numbers(mark_text), _numbers(now_text) if now_text else None
            if m is not None and len(m) == 2:
                flagged[_text(room)] = ((m[0], m[1]), (j[0], j[1]) if j is not None and len(j) == 2 else None)
        return marks, flagged

    async def raise_to(self, positions: dict[str, Position]) -> None:
        """Raise each room's mark to ``positions`` where that is further (never lowers one)."""
        if not positions:
            return
        args: list[str | int] = []
        for room, (gen, seq) in sorted(positions.items()):
            args += [room, gen, seq]
        with translate():
            await self.redis.eval(_RAISE, 1, self.key, *args)

    async def flag(self, rooms: dict[str, Ahead]) -> None:
        """Keep ``rooms`` reported as ahead of their journal (see the module docstring)."""
        if not rooms:
            return
        mapping: dict[Any, Any] = {
            room: f"{mark[0]}:{mark[1]}/" + ("" if now is None else f"{now[0]}:{now[1]}")
            for room, (mark, now) in rooms.items()
        }
        with translate():
            await self.redis.hset(self.ahead_key, mapping=mapping)

    @staticmethod
    def ahead(
        marks: dict[str, Position], flagged: dict[str, Ahead], positions: dict[str, Position]
    ) -> dict[str, Ahead]:
        """room -> (its mark, the journal's position when found behind it) for every room whose journal
        reads behind what it was seen holding, or was found so before and has not been created again."""
        out: dict[str, Ahead] = {}
        for room, (mark, found) in flagged.items():
            now = positions.get(room)
            if now is None or now[0] <= mark[0]:
                out[room] = (mark, found)
        for room, mark in marks.items():
            now = positions.get(room)
            if room not in out and (now is None or now < mark):
                out[room] = (mark, now)
        return out
